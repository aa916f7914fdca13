"""``make distill`` end to end on tiny models: the real Makefile target, with a tiny teacher, a
tiny corpus of the demo's language pair and a tiny student; its targets are the teacher's own
beam translations, both students are trained and exported, the int8 student runs on stock
LiteRT, the report has every field, and a re-run does nothing again."""

import json
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from make_targets import make, python_bin
from tflite_ops import op_names

from keras_transformer.data import demo_splits, write_parallel_files
from keras_transformer.training.run_config import load_config

pytestmark = pytest.mark.programs

# student.yaml shrunk: the model, the budget (2 updates, one epoch, no averaging) and the
# evaluation during training (none); the rest is the recipe's.
TINY_STUDENT = {
    "model": {
        "d_model": 32,
        "num_heads": 2,
        "d_ff": 64,
        "num_encoder_layers": 2,
        "num_decoder_layers": 1,
        "max_length": 64,
    },
    "tokenizer": {"vocab_size": 200},
    "training": {
        "mixed_precision": "fp32",
        "batch_tokens": 256,
        "shuffle_buffer": 100,
        "max_src_length": 32,
        "max_tgt_length": 31,
        "warmup_steps": 4,
        "epochs": None,
        "max_steps": 2,
        "steps_per_epoch": 2,
        "steps_per_execution": 1,
        "average_last": 1,
    },
    "evaluation": {"bleu_sentences": 0, "max_sentences": 0},
}
REPORT_ROWS = [
    "teacher.saved_model",
    "teacher",
    "student_ref",
    "student_ref.int8",
    "student_kd.int8",
]


def test_the_student_is_multi30ks_recipe_with_a_small_model_and_budget():
    student, teacher = load_config("student").to_dict(), load_config("multi30k").to_dict()
    for section in ("data", "tokenizer", "evaluation"):
        assert student[section] == teacher[section], section
    differ = {
        key for key in teacher["training"] if student["training"][key] != teacher["training"][key]
    }
    assert differ == {"max_steps", "max_minutes"}
    assert student["training"]["max_steps"] == 4800 and student["training"]["max_minutes"] is None
    model = student["model"]
    assert (model["d_model"], model["num_heads"], model["d_ff"]) == (128, 4, 512)
    assert (model["num_encoder_layers"], model["num_decoder_layers"]) == (6, 2)
    assert model["share_embeddings"] and model["tie_embeddings"]
    assert model["norm_first"] and model["dropout"] == 0.1


@pytest.fixture(scope="module")
def chain(tiny_workdir, tmp_path_factory):
    """The variables of a tiny ``make distill``, and what its first run printed."""
    root = tmp_path_factory.mktemp("distill")
    corpus = root / "corpus"
    splits = demo_splits(train=300, valid=20, test=12, seed=5)
    for split, pairs in splits.items():
        write_parallel_files(pairs, corpus, split)
    teacher = root / "teacher"
    shutil.copytree(tiny_workdir, teacher, ignore=shutil.ignore_patterns("export*", "*.tflite"))
    config = load_config("student").to_dict()
    for section, values in TINY_STUDENT.items():
        config[section].update(values)
    student = root / "student.yaml"
    student.write_text(yaml.safe_dump(config))
    bin_dir = python_bin(root / "bin")
    variables = [
        f"BIN={bin_dir}",
        f"M30K={corpus}",
        f"TEACHER={teacher}",
        f"DISTILL_RUN={root / 'run'}",
        f"STUDENT_CONFIG={student}",
        "STUDENT_STEPS=2",
        f"FLICKR2017={root / 'none'}",
    ]
    result = make("distill", *variables)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-4000:])
    return {"root": root, "run": root / "run", "teacher": teacher, "corpus": corpus}, variables


def test_the_distilled_targets_are_the_teachers_beam_translations(chain):
    paths, _ = chain
    from keras_transformer import Translator

    sources = (paths["corpus"] / "train.src").read_text(encoding="utf-8").splitlines()
    targets = (paths["run"] / "data" / "train.tgt").read_text(encoding="utf-8").splitlines()
    assert len(targets) == len(sources) == 300
    teacher = Translator.from_saved_model(paths["teacher"] / "export" / "1")
    assert teacher.beam_size == 4  # M30K_BEAM
    assert targets == teacher.translate(sources)
    for name in ("train.src", "valid.src", "valid.tgt", "test.src", "test.tgt"):
        data = paths["run"] / "data" / name
        assert data.read_bytes() == (paths["corpus"] / name).read_bytes(), name


def test_both_students_are_trained_and_the_int8_one_runs_on_builtins(chain):
    paths, _ = chain
    run = paths["run"]
    for name in ("student_ref", "student_kd"):
        metrics = json.loads((run / name / "metrics.json").read_text())
        assert metrics["optimizer_steps"] == 2, name
        assert (run / name / "model.keras").is_file()
    data_dirs = [
        yaml.safe_load((run / name / "config.yaml").read_text())["data"]["dir"]
        for name in ("student_ref", "student_kd")
    ]
    assert data_dirs == [str(paths["corpus"]), str(run / "data")]
    for name in ("student_ref.int8.tflite", "student_kd.int8.tflite", "student_ref.tflite"):
        builtins, customs = op_names((run / name).read_bytes())
        assert not customs and "WHILE" in builtins, name
    int8, float32 = (run / "student_ref.int8.tflite", run / "student_ref.tflite")
    assert int8.stat().st_size < float32.stat().st_size


def test_the_report_has_every_field(chain):
    paths, _ = chain
    report = json.loads((paths["run"] / "distill.json").read_text())
    assert report["test_sets"] == ["test"]  # no FLICKR2017 files
    assert list(report["models"]) == REPORT_ROWS
    teacher, student = report["models"]["teacher"], report["models"]["student_kd.int8"]
    assert report["models"]["teacher.saved_model"]["decoding"] == "beam4"
    for name, model in report["models"].items():
        assert model["parameters"] > 0, name
        result = model["sets"]["test"]
        assert 0 <= result["bleu"] <= 100 and result["sentences"] == 12, name
        if name != "teacher.saved_model":
            assert model["decoding"] == "greedy" and model["threads"] == 1, name
            assert model["file"] == str(paths["run"] / f"{name}.tflite"), name
            assert model["size_bytes"] == Path(model["file"]).stat().st_size, name
            assert result["ms_per_sentence"] > 0, name
    assert student["parameters"] < teacher["parameters"]
    goals = report["goals"]["test"]
    assert set(goals) == {"smaller", "faster", "bleu_below_teacher", "bleu_over_references"}
    assert goals["smaller"]["value"] == round(teacher["size_bytes"] / student["size_bytes"], 2)
    assert all(isinstance(goal["met"], bool) for goal in goals.values())
    training = report["training"]
    assert training["student_ref"]["seed"] == training["student_kd"]["seed"] == 0
    assert training["student_ref"]["max_steps"] == training["student_kd"]["max_steps"] == 2
    assert report["cpu"]["kind"] and report["timings_on_one_cpu"]
    table = (paths["run"] / "distill.md").read_text()
    assert "| distilled student | TFLite int8 | greedy |" in table and "not measured" not in table


def _outputs(*folders: Path) -> dict[Path, int]:
    """Each file and link below ``folders`` (the report's two files aside) and its mtime."""
    return {
        path: path.lstat().st_mtime_ns
        for folder in folders
        for path in folder.rglob("*")
        if not path.is_dir() and path.name not in ("distill.json", "distill.md")
    }


def test_a_rerun_does_no_work_again(chain):
    paths, variables = chain
    before = _outputs(paths["run"], paths["teacher"])
    result = make("distill", *variables)
    assert result.returncode == 0, result.stderr[-4000:]
    assert _outputs(paths["run"], paths["teacher"]) == before
    assert "| distilled student |" in result.stdout  # the report, written again


def _scored(plan: str) -> dict[str, tuple[str, str]]:
    """What each ``kt evaluate`` of ``make -n``'s ``plan`` scores: ``{--out file:
    (its --src, its --ref)}`` (several --tflite: each file's outs, one a --src, in turn)."""
    scored = {}
    for line in plan.replace("\\\n", " ").splitlines():
        words = shlex.split(line)
        starts = [
            index + 2
            for index, word in enumerate(words[:-1])
            if word.endswith("/kt") and words[index + 1] == "evaluate"
        ]
        if not starts:
            continue
        options: dict[str, list[str]] = {}
        for word in words[starts[0] :]:
            if word.startswith("--"):
                values = options.setdefault(word, [])
            else:
                values.append(word)
        sources, references = options["--src"], options["--ref"]
        for index, out in enumerate(options["--out"]):
            scored[out] = (sources[index % len(sources)], references[index % len(sources)])
    return scored


def test_a_flickr2017_set_is_scored_where_its_files_are(chain, tmp_path):
    paths, variables = chain
    flickr = tmp_path / "flickr"
    for suffix in (".src", ".tgt"):
        shutil.copy(paths["corpus"] / f"test{suffix}", flickr.with_suffix(suffix))
    sets = {"test": paths["corpus"] / "test", "flickr": flickr}
    scored = _scored(make("-n", "distill", *variables[:-1], f"FLICKR2017={flickr}").stdout)
    assert scored == {
        str(paths["run"] / "scores" / f"{name}.{test_set}.json"): (f"{path}.src", f"{path}.tgt")
        for name in REPORT_ROWS
        for test_set, path in sets.items()
    }
    scored = _scored(make("-n", "distill", *variables).stdout)
    assert set(scored) == {
        str(paths["run"] / "scores" / f"{name}.test.json") for name in REPORT_ROWS
    }
