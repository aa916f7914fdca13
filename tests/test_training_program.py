"""The training program: configs, strategies, and an end-to-end micro run."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hang_guard import HANG_TIMEOUT
from loopback import run_workers

from keras_transformer import Workdir
from keras_transformer.hardware import cpu_record
from keras_transformer.training.run_config import (
    RunConfig,
    apply_override,
    config_path,
    load_config,
)
from keras_transformer.training.strategy import make_strategy

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
MICRO = [
    "--set",
    "data.synthetic={train: 300, valid: 20, test: 20, seed: 1}",
    "--set",
    "tokenizer.vocab_size=200",
    "--set",
    "model.d_model=32",
    "--set",
    "model.d_ff=64",
    "--set",
    "training.epochs=2",
    "--set",
    "training.steps_per_epoch=3",
    "--set",
    "training.steps_per_execution=1",
    "--set",
    "training.batch_tokens=256",
]


def test_configs_load_and_overrides_are_typed(tmp_path):
    config = load_config(
        "demo",
        [
            "training.epochs=3",
            "training.jit=true",
            "model.norm_first=true",
            "training.label_smoothing=0.2",
        ],
    )
    assert config.training.epochs == 3 and config.training.jit is True
    assert config.model.overrides["norm_first"] is True
    assert config.training.label_smoothing == 0.2
    Workdir(tmp_path).save_config(config.to_dict())
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == config.to_dict()
    assert config_path(str(tmp_path / "config.yaml")) == tmp_path / "config.yaml"
    assert load_config(str(tmp_path / "config.yaml")) == config  # a saved config reads back


@pytest.mark.parametrize(
    "override, message",
    [
        ("training.epocs=3", r"training.epocs: unknown key; did you mean training.epochs\?"),
        ("nosuch.key=1", "nosuch: unknown section; the sections are data, tokenizer"),
        ("training.epochs", "section.key=value"),
        ("model.d_modle=3", r"model.d_modle: unknown key; did you mean model.d_model\?"),
        ("data.synthetic.train.x=1", "data.synthetic.train is not a mapping"),
    ],
)
def test_bad_overrides_say_what_is_wrong(override, message):
    values = load_config("demo").to_dict()
    with pytest.raises(ValueError, match=message):
        apply_override(values, override)


def test_the_run_config_and_the_model_config_load_without_tensorflow():
    """The model section is checked against TransformerConfig's own fields, before
    TensorFlow is imported: neither module imports it."""
    code = (
        "import sys\n"
        "from keras_transformer.training.run_config import MODEL_KEYS, load_config\n"
        "load_config('demo', ['model.activation=gelu'])\n"
        "assert 'd_model' in MODEL_KEYS and 'position_encoding' in MODEL_KEYS\n"
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_TIMEOUT
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_an_old_config_yaml_reads_back(tmp_path):
    """A workdir's config.yaml from before the typed config (plain dicts, keys added since
    missing, data.sources as written) reads back, and Workdir still reads it as a mapping."""
    old = {
        "data": {"kind": "synthetic", "synthetic": {"train": 30, "valid": 3, "test": 3}},
        "tokenizer": {"vocab_size": 200, "shared": True},
        "model": {"preset": "tiny", "d_model": 32, "num_layers": 1},
        "training": {"max_src_length": 24, "max_tgt_length": 24, "epochs": 1, "verbose": 0},
        "evaluation": {"max_sentences": 4},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    config = RunConfig.from_dict(Workdir(tmp_path).config)
    assert config.training.patience == 3 and config.training.epochs == 1  # a default, as saved
    assert config.model.preset == "tiny" and config.model.options() == {
        "d_model": 32,
        "num_layers": 1,
    }
    assert config.model.to_dict() == old["model"]
    assert config.to_dict()["data"]["synthetic"] == old["data"]["synthetic"]
    assert Workdir(tmp_path).shared_vocabulary is True
    several = {
        **old,
        "data": {"sources": [{"dir": "a", "weight": 2}, {"dir": "b", "tag": "<bt>"}]},
    }
    sources = RunConfig.from_dict(several).data.sources
    assert [(s.name, s.weight, s.tag) for s in sources] == [("a", 2.0, None), ("b", 1.0, "<bt>")]
    assert RunConfig.from_dict(RunConfig.from_dict(several).to_dict()).data.sources == sources


def test_every_config_resolves_every_schema_key_and_each_can_be_set():
    """The schema names every key once, with its default: each shipped config
    resolves to all of them, and ``--set`` reaches each key with every config."""
    import dataclasses

    from keras_transformer.tokenization import DEFAULT_MAX_SENTENCES
    from keras_transformer.training.run_config import SECTIONS, section_defaults

    assert section_defaults("tokenizer")["max_sentences"] == DEFAULT_MAX_SENTENCES
    for name in sorted(path.stem for path in Path(config_path("demo")).parent.glob("*.yaml")):
        saved = load_config(name).to_dict()
        for section, schema in SECTIONS.items():
            assert set(saved[section]) == {field.name for field in dataclasses.fields(schema)}, (
                name,
                section,
            )
    base = load_config("base", ["training.shuffle_buffer=5", "evaluation.max_sentences=null"])
    assert base.training.shuffle_buffer == 5 and base.evaluation.max_sentences is None


def test_a_config_file_gets_the_defaults_and_its_mistakes_named(tmp_path):
    from keras_transformer.training.run_config import section_defaults

    path = tmp_path / "mine.yaml"
    path.write_text(
        "data: {kind: text, dir: corpus}\ntraining: {max_src_length: 50, max_tgt_length: 60}\n"
    )
    config = load_config(str(path), ["training.jit=true"])
    assert config.to_dict()["training"] == {
        **section_defaults("training"),
        "max_src_length": 50,
        "max_tgt_length": 60,
        "jit": True,
    }
    assert config.to_dict()["tokenizer"] == section_defaults("tokenizer")
    assert config.to_dict()["model"] == {}
    for text, message in [
        (
            "training: {max_src_length: 5, max_tgt_length: 5, epocs: 3}",
            rf"training.epocs: unknown key; did you mean training.epochs\? \({path}\)",
        ),
        ("training: {max_src_length: 5}", "training.max_tgt_length is required"),
        (
            "training: {max_src_length: 5, max_tgt_length: 5, jit: 'yes'}",
            "training.jit='yes': expected true or false",
        ),
        (
            "training: {max_src_length: 5, max_tgt_length: 5, cache: 3}",
            "expected auto, true or false or a string",
        ),
        ("trainer: {}", r"trainer: unknown section; did you mean training\?"),
    ]:
        path.write_text(text + "\n")
        with pytest.raises(ValueError, match=message):
            load_config(str(path))
    with pytest.raises(
        ValueError,
        match=r"training.mixed_precision='fp8': expected auto, fp32, bf16 or fp16 "
        r"\(--set training.mixed_precision=fp8\)",
    ):
        load_config("demo", ["training.mixed_precision=fp8"])


# kt train in a fresh process that fails if TensorFlow was imported: a config's mistakes and
# --print-config need none.
WITHOUT_TENSORFLOW = """
import sys
from keras_transformer.cli import train
try:
    status = train.main(sys.argv[1:])
except SystemExit as exit:
    status = exit.code
assert "tensorflow" not in sys.modules, "TensorFlow was imported"
sys.exit(status)
"""


def _train_without_tensorflow(*args):
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW, *args],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )


@pytest.mark.parametrize(
    "override, error",
    [
        (
            "training.patiance=3",
            "training.patiance: unknown key; did you mean training.patience? "
            "(--set training.patiance=3)",
        ),
        (
            "training.patience=abc",
            "training.patience='abc': expected an integer (--set training.patience=abc)",
        ),
    ],
)
def test_a_bad_key_or_value_is_one_line_and_status_2(tmp_path, override, error):
    workdir = tmp_path / "run"
    result = _train_without_tensorflow(
        "--config", "demo", "--workdir", str(workdir), "--set", override
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"kt train: error: {error}"]
    assert not workdir.exists()


def test_print_config_reads_back_through_load_config(tmp_path):
    overrides = [
        "training.epochs=5",
        "model.d_model=32",
        "data.sources=[{dir: corpora/a, weight: 1}, {dir: corpora/b, weight: 2, tag: '<bt>'}]",
    ]
    arguments = [item for override in overrides for item in ("--set", override)]
    result = _train_without_tensorflow(
        "--config", "demo", *arguments, "--mixed-precision", "bf16", "--print-config"
    )
    assert result.returncode == 0, result.stderr
    path = tmp_path / "printed.yaml"
    path.write_text(result.stdout)
    printed = load_config(str(path))
    expected = load_config("demo", [*overrides, "training.mixed_precision=bf16"])
    assert printed == expected and printed.data.sources[1].tag == "<bt>"
    assert list(yaml.safe_load(result.stdout)) == [
        "data",
        "tokenizer",
        "model",
        "training",
        "evaluation",
    ]


def test_a_relative_data_dir_is_the_current_folders_then_the_checkouts(tmp_path, monkeypatch):
    from keras_transformer.training import run_config

    (tmp_path / "mine").mkdir()
    monkeypatch.chdir(tmp_path)
    assert run_config.resolve_path("mine") == Path("mine")
    assert run_config.resolve_path(tmp_path / "x") == tmp_path / "x"
    checkout = Path(__file__).resolve().parents[1]
    assert run_config.CHECKOUT == checkout  # the tests run from a source checkout
    assert run_config.resolve_path("training/configs") == checkout / "training" / "configs"
    assert run_config.resolve_path("nowhere") == Path("nowhere")  # an error names it


def test_unknown_config_lists_the_known_ones():
    with pytest.raises(ValueError, match="demo"):
        config_path("nonexistent")


def test_strategy_names_are_checked(monkeypatch):
    with pytest.raises(ValueError, match="choose one of"):
        make_strategy("horovod")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG"):
        make_strategy("multi_worker")
    assert make_strategy("default").num_replicas_in_sync == 1


def _run(args, timeout=HANG_TIMEOUT):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, *args],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-4000:])
    return result


def test_train_then_evaluate_end_to_end(resumed_fit_run, tmp_path):
    """A finished run (the micro run that ``resumed_fit_run`` trains, kills and resumes) holds
    everything a user goes on with: the config, model, tokenizer, metrics with validation BLEU
    after each epoch and the test scores of the average of the last 2 epochs and of the last
    epoch, the learning curves; then ``training.evaluate`` (greedy and beam 3) and
    ``training.tune_decoding`` score that workdir."""
    trained_workdir, resumed_at, trained = resumed_fit_run
    assert (
        "ran out of data" not in trained.stderr
    )  # Keras' warning for a validation set of unknown length
    workdir = tmp_path / "run"  # evaluate and tune_decoding write into the workdir
    shutil.copytree(trained_workdir, workdir)
    for name in (
        "config.yaml",
        "model_config.json",
        "model.keras",
        "metrics.json",
        "tokenizer/spm_shared.model",
    ):
        assert (workdir / name).exists(), name
    metrics = json.loads((workdir / "metrics.json").read_text())
    epochs = 3  # those before the kill too: the history spans the whole run
    assert len(metrics["history"]["loss"]) == epochs
    assert 0.0 <= metrics["test"]["exact_match"] <= 1.0 and "bleu" in metrics["test"]
    assert len(metrics["history"]["val_bleu"]) == epochs  # validation BLEU after each epoch
    assert metrics["averaged_checkpoints"] == ["epoch_0002.npz", "epoch_0003.npz"]
    assert "bleu" in metrics["test_last_checkpoint"]
    assert not (workdir / "backup").exists() or not any((workdir / "backup").iterdir())
    assert (workdir / "learning_curves.png").stat().st_size > 0
    assert metrics["cpu"] == cpu_record()  # its seconds are this CPU's

    from keras_transformer.data import demo_splits, write_parallel_files

    pairs = demo_splits(train=300, valid=20, test=20, seed=1)["test"]
    write_parallel_files(pairs, tmp_path, "test")
    sources = ["--src", str(tmp_path / "test.src"), "--ref", str(tmp_path / "test.tgt")]
    # The programs in this process (training.evaluate as a command: test_export.py's and the
    # multi30k-tatoeba recipe's runs): greedy into the workdir's eval.json, then the beam
    # search's own JSON.
    _in_process("training.evaluate", ["--workdir", str(workdir), *sources])
    scores = json.loads((workdir / "eval.json").read_text())
    assert scores["sentences"] == 20 and scores["decoding"] == "greedy" and scores["cpu"]["model"]
    beam = ["--beam", "3", "--out", str(tmp_path / "beam.json")]
    _in_process("training.evaluate", ["--workdir", str(workdir), *sources, *beam])
    assert json.loads((tmp_path / "beam.json").read_text())["decoding"] == "beam3"

    _in_process(
        "training.tune_decoding",
        ["--workdir", str(workdir), *sources, "--beams", "1", "2", "--alphas", "0.6", "1.0"],
    )
    grid = json.loads((workdir / "decoding_grid.json").read_text())
    assert [(row["beam"], row["alpha"]) for row in grid["grid"]].count((1, 0.0)) == 1 and len(
        grid["grid"]
    ) == 3
    assert grid["best"] == grid["grid"][0] and grid["best"]["bleu"] == max(
        row["bleu"] for row in grid["grid"]
    )


# two trainings; bf16 and XLA steps: test_precision.py, test_model.py's test_fit_with_xla
@pytest.mark.slow
def test_mixed_precision_and_xla_switches(tmp_path):
    workdir = tmp_path / "bf16"
    _run(
        [
            "-m",
            "training.train",
            "--config",
            "demo",
            "--workdir",
            str(workdir),
            *MICRO,
            "--mixed-precision",
            "bf16",
            "--jit",
            "--set",
            "training.static_shapes=true",
            "--set",
            "training.max_src_length=48",
            "--set",
            "training.max_tgt_length=48",
        ]
    )
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    assert config["training"]["mixed_precision"] == "bf16" and config["training"]["jit"] is True
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert all(value == value for value in metrics["history"]["loss"])  # finite, not NaN


MIRRORED_SCRIPT = """
import json
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import keras_transformer as kt
from keras_transformer.training.loop import StepPlan, custom_fit, evaluator, fit_in_steps
from keras_transformer.training.workers import PerWorkerInput, pad_batches_for_replicas
from keras_transformer.training.strategy import make_strategy
from keras_transformer.training.trainer import keras_steps_per_execution

mirrored = make_strategy("mirrored")
plan = StepPlan(steps_per_epoch=2, epochs=1, accumulate_steps=2)
out = {"replicas": mirrored.num_replicas_in_sync,
       "keras_steps_per_execution": keras_steps_per_execution(StepPlan(steps_per_epoch=4, epochs=1,
                                                                       steps_per_execution=2),
                                                                       mirrored, "fit")}
rng = np.random.default_rng(0)
ids = lambda *shape: rng.integers(3, 40, size=shape).astype("int32")

def model_under(strategy, accumulate):
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", vocab_size=40, d_model=16,
        d_ff=32,
                                                                num_layers=1, dropout=0.0))
        model.build()
        # epsilon 1: Adam's first steps are not sign(gradient), which rounding could flip.
        model.compile(optimizer=kt.paper_adam(kt.TransformerSchedule(16, 5), epsilon=1.0,
                                              gradient_accumulation_steps=accumulate),
                      loss=kt.MaskedLabelSmoothedCrossEntropy(0.1), metrics=[kt.MaskedAccuracy()],
                      steps_per_execution=1 if accumulate is None else
                      keras_steps_per_execution(plan, strategy, "fit"))
    return model

# Validation batches of 5, 3 and 1 sentences, some padding, about half the tokens right.
single = model_under(tf.distribute.get_strategy(), None)
def batch(rows, length):
    inputs = ids(rows, length + 1), ids(rows, length)
    predicted = np.argmax(single(inputs).numpy(), -1).astype("int32")
    tgt = np.where(rng.random((rows, length)) < 0.5, predicted, ids(rows, length))
    tgt[0, length - 2:] = 0
    return inputs, tgt
batches = [batch(5, 6), batch(3, 4), batch(1, 7)]
valid = tf.data.Dataset.from_tensors(batches[0])
for extra in batches[1:]:
    valid = valid.concatenate(tf.data.Dataset.from_tensors(extra))
out["untrained_accuracy"] = single.evaluate(valid, return_dict=True, verbose=0)["masked_accuracy"]

# Two updates: batches of 8 sentences on one device, or 2 micro-batches of 4 split over the
# 2 replicas by fit and by the custom loop (rows all as long: the same tokens in each share),
# each validating at its epoch end.
src, tgt_in, tgt_out = ids(16, 6), ids(16, 5), ids(16, 5)
train = lambda size: tf.data.Dataset.from_tensor_slices(((src, tgt_in), tgt_out)).batch(size)
single.fit(train(8), verbose=0)
out["one_device"] = single.evaluate(valid, return_dict=True, verbose=0)
by_loop = model_under(mirrored, 2)
out["custom_history"] = custom_fit(by_loop, mirrored, train(4).repeat(), plan,
validation_data=valid)
# fit killed after its second update (its backup: the first; its model: the two updates of a run
# not interrupted) and resumed to validate at the epoch end: the backup holds the input's
# position, with the micro-batches Keras read ahead (the iterator it builds the model with
# included).
import logging, os, tempfile
from keras_transformer.training.backup import TrainingBackup
resumes = []
class Resumes(logging.Handler):
    def emit(self, record):
        resumes.append(record.getMessage())
logging.getLogger("training").addHandler(Resumes())
logging.getLogger("training").setLevel(logging.INFO)
class Killed(keras.callbacks.Callback):  # before StepBackup: no backup at the second update
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) == 2:
            raise RuntimeError("killed")
backup = TrainingBackup(os.path.join(tempfile.mkdtemp(), "backup"))
halves = StepPlan(steps_per_epoch=2, epochs=1, accumulate_steps=2, backup_every_steps=1)
by_halves = []
for kill in ([Killed()], []):
    by_halves.append(model_under(mirrored, 2))
    try:
        out["fit_history"] = fit_in_steps(
            by_halves[-1], lambda: pad_batches_for_replicas(train(4).repeat(), 2), halves,
            validation_data=pad_batches_for_replicas(valid, 2), backup=backup, callbacks=kill,
            verbose=0)
    except RuntimeError:
        out["killed"] = out.get("killed", 0) + 1
    saved = os.path.isfile(backup.directory / "input" / "position.json")
    out.setdefault("saved_input", []).append(saved)
out["resumed"] = [message for message in resumes if message.startswith("resumed")]
killed, by_fit = by_halves
# A worker's own batches (its part of the text or its shard files), split between its replicas:
# here the one worker.
by_worker = model_under(mirrored, 2)
out["worker_history"] = custom_fit(by_worker, mirrored, PerWorkerInput(train(4).repeat()), plan,
                                   validation_data=valid)
out["steps"] = [int(model.optimizer.iterations)
                for model in (single, killed, by_fit, by_loop, by_worker)]
out["weight_gaps"] = [max(float(np.abs(a - b).max()) for a, b in zip(single.get_weights(),
model.get_weights()))
                      for model in (killed, by_fit, by_loop, by_worker)]
out["keras_evaluate"] = by_fit.evaluate(pad_batches_for_replicas(valid, 2), return_dict=True,
verbose=0)
out["custom_evaluate"] = evaluator(by_loop, mirrored)(valid)
print("RESULT" + json.dumps(out))
"""


def test_two_replicas_validate_exactly_and_accumulate_in_both_loops():
    """MirroredStrategy over 2 logical CPUs. Two accumulated micro-batches
    split over the replicas, by ``fit_in_steps`` and by ``custom_fit`` (from
    global batches, and from a ``PerWorkerInput`` of a worker's own), make
    the updates of one big batch on one device, and each loop's validation
    on batches of 5, 3 and 1 sentences (padded to split evenly) gives one
    device's exact loss and accuracy, as do Keras' ``evaluate`` and the
    custom loop's ``evaluator``. The ``fit_in_steps`` run is killed after
    its second update (its backup: the first) and resumed from its input
    position: the killed model's weights (two updates uninterrupted) and the
    resumed one's are the same, and the resumed run validates at the epoch
    end. (The training program with replicas, custom loop, validation loss
    and BLEU: the multi-worker test.)"""
    result = _run(["-c", MIRRORED_SCRIPT])
    out = json.loads(result.stdout.split("RESULT", 1)[1])
    assert out["replicas"] == 2 and out["keras_steps_per_execution"] == 1
    assert out["steps"] == [2, 2, 2, 2, 2]
    assert out["killed"] == 1 and out["saved_input"] == [True, True]
    assert len(out["resumed"]) == 1 and "continues at its saved position" in out["resumed"][0]
    assert max(out["weight_gaps"]) < 1e-5, out["weight_gaps"]  # float32 sums in other orders
    assert 0.3 < out["untrained_accuracy"] < 0.9
    expected = out["one_device"]
    histories = ("fit_history", "custom_history", "worker_history")
    for history in (out[name] for name in histories):
        assert history["val_loss"] == [pytest.approx(expected["loss"], rel=1e-5)]
        assert history["val_masked_accuracy"] == [
            pytest.approx(expected["masked_accuracy"], rel=1e-5)
        ]
    for scores in (out["keras_evaluate"], out["custom_evaluate"]):
        assert scores["loss"] == pytest.approx(expected["loss"], rel=1e-5)
        assert scores["masked_accuracy"] == pytest.approx(expected["masked_accuracy"], rel=1e-5)


def test_static_batch_sizes_are_rounded_to_the_replicas():
    from keras_transformer.training.batches import batching_for_replicas

    config = load_config("demo", ["training.batch_tokens=null", "training.batch_size=7"])
    assert batching_for_replicas(config.training, 2).batch_size == 6
    assert batching_for_replicas(config.training, 8).batch_size == 8  # at least one row each
    assert config.training.batch_size == 7  # the saved config is the one asked for
    static = load_config(
        "demo", ["training.static_shapes=true", "training.batch_tokens=650"]
    )  # 10 rows of 65
    assert batching_for_replicas(static.training, 4).batch_tokens == 8 * 65
    demo = load_config("demo").training
    assert batching_for_replicas(demo, 4) == demo  # buckets: padded instead


def _train_command(workdir, *extra):
    return [
        sys.executable,
        "-m",
        "training.train",
        "--config",
        "demo",
        "--workdir",
        str(workdir),
        *MICRO,
        *extra,
    ]


@pytest.mark.slow  # two processes; the replicas' math: the two-replicas test
def test_multi_worker_training_on_loopback_ends_with_identical_weights(tmp_path):
    """Two workers on 127.0.0.1 (the custom loop, 2 replicas), each preparing
    the shards on its first run and reading its own files of them: identical
    weights and metrics, validation loss and BLEU at each epoch end."""
    import keras
    import numpy as np

    import keras_transformer  # noqa: F401

    outputs = run_workers(
        lambda index: _train_command(
            tmp_path / "run",
            "--strategy",
            "multi_worker",
            "--set",
            "evaluation.max_sentences=4",
            "--set",
            "evaluation.bleu_sentences=3",
            "--set",
            "data.prepare=true",
            "--set",
            "data.examples_per_shard=75",
        ),
        CHECKOUT,
    )
    # Each worker's pipeline reads its own files of the (identical) preparations: disjoint, all of
    # them.
    manifest = json.loads((tmp_path / "run" / "prepared" / "manifest.json").read_text())
    other_manifest = json.loads(
        (tmp_path / "run" / "worker_1" / "prepared" / "manifest.json").read_text()
    )
    assert (manifest["shards"], manifest["fingerprint"]) == (
        other_manifest["shards"],
        other_manifest["fingerprint"],
    )
    files = [shard["file"] for shard in manifest["shards"]]
    read = []
    for index, output in enumerate(outputs):
        line = next(
            line for line in output.splitlines() if f"input pipeline {index + 1} of 2 reads" in line
        )
        read.append(line.split(": ")[-1].split(", "))
    assert len(files) >= 3 and sorted(read[0] + read[1]) == sorted(files)
    assert not set(read[0]) & set(read[1])
    chief, other = tmp_path / "run", tmp_path / "run" / "worker_1"
    chief_metrics = json.loads((chief / "metrics.json").read_text())
    other_metrics = json.loads((other / "metrics.json").read_text())
    assert chief_metrics["optimizer_steps"] == other_metrics["optimizer_steps"] == 6
    assert chief_metrics["history"]["loss"] == other_metrics["history"]["loss"]  # global metrics
    # Validation with 2 replicas: loss and BLEU after each epoch, the same on both workers.
    assert (
        len(chief_metrics["history"]["val_loss"]) == len(chief_metrics["history"]["val_bleu"]) == 2
    )
    assert chief_metrics["history"]["val_loss"] == other_metrics["history"]["val_loss"]
    chief_weights = keras.models.load_model(chief / "model.keras").get_weights()
    other_weights = keras.models.load_model(other / "model.keras").get_weights()
    for a, b in zip(chief_weights, other_weights):
        np.testing.assert_array_equal(a, b)


# ``python -m training.train`` with its arguments, killed (SIGKILL) as soon as its first
# backup is written: no clean-up runs, and no race between the kill and the training.
KILLED_AFTER_A_BACKUP = """
import os, signal, sys
from keras_transformer.training import backup
from keras_transformer.cli import train
save = backup.TrainingBackup.save
def save_then_die(self, *args, **kwargs):
    save(self, *args, **kwargs)
    if kwargs["step"] >= int(os.environ.get("KILL_AT_STEP", "0")):
        os.kill(os.getpid(), signal.SIGKILL)
backup.TrainingBackup.save = save_then_die
sys.exit(train.main(sys.argv[1:]))
"""


def _in_process(module, args):
    """``python -m MODULE ARGS`` run by its ``main`` in this process (TensorFlow is imported
    already): its ``(stdout, stderr)``, the status asserted 0; its Python warnings, every
    one, are in its stderr, as a process would print them. The logging it sets up is undone
    (this also serves module-scoped fixtures, outside the conftest's clean-up)."""
    import contextlib
    import importlib
    import io
    import logging
    import warnings

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with (
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            warnings.catch_warnings(record=True) as caught,
        ):
            warnings.simplefilter("always")
            status = importlib.import_module(module).main(list(args))
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    for warning in caught:
        stderr.write(
            warnings.formatwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
        )
    assert status == 0, (module, stdout.getvalue()[-2000:], stderr.getvalue()[-4000:])
    return stdout.getvalue(), stderr.getvalue()


def _killed_and_resumed(workdir, loop):
    """The micro run in ``loop`` (3 epochs of 4 steps, a backup every 2 steps, validation
    BLEU after each epoch, the last 2 epochs averaged), killed (SIGKILL, a process of its own)
    once its backup of step 6 is written (mid-epoch, an epoch done), then run again to its end
    (the same arguments, by the program's ``main`` in this process): (the backup's step, the
    second run's stdout and stderr)."""
    import signal
    import types

    command = _train_command(
        workdir,
        "--set",
        f"training.loop={loop}",
        "--set",
        "training.epochs=3",
        "--set",
        "training.steps_per_epoch=4",
        "--set",
        "training.backup_every_steps=2",
        "--set",
        "training.average_last=2",
        "--set",
        "evaluation.max_sentences=4",
        "--set",
        "evaluation.bleu_sentences=5",
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    backup = workdir / "backup" / "training_metadata.json"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_A_BACKUP, *command[3:]],
        cwd=CHECKOUT,
        env={**env, "KILL_AT_STEP": "6"},
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert killed.returncode == -signal.SIGKILL, (killed.stdout[-2000:], killed.stderr[-4000:])
    assert backup.exists(), "no backup written before the kill"
    assert not (workdir / "metrics.json").exists(), "the run finished before it was killed"
    resumed_at = json.loads(backup.read_text())["step"]
    stdout, stderr = _in_process("training.train", command[3:])
    return resumed_at, types.SimpleNamespace(stdout=stdout, stderr=stderr)


@pytest.fixture(scope="module")
def resumed_fit_run(tmp_path_factory):
    """``(workdir, the backup's step, the resumed run's result)`` of the micro run with
    ``fit``, killed and resumed (``_killed_and_resumed``): the kill-and-resume test and the
    end-to-end test read the one run. Tests must not modify the workdir."""
    workdir = tmp_path_factory.mktemp("resumed_fit") / "run"
    return (workdir, *_killed_and_resumed(workdir, "fit"))


@pytest.mark.parametrize(
    "loop", ["fit", pytest.param("custom", marks=pytest.mark.slow)]
)  # a training each
def test_killed_run_resumes_where_it_stopped(request, tmp_path, loop):
    """Killed after its first backup, the run resumes at the backup's step (``fit``: in the
    epoch of that step, its input at the saved position), trains only the epochs from there
    and ends as an uninterrupted run would, its backup gone."""
    if loop == "fit":
        workdir, resumed_at, result = request.getfixturevalue("resumed_fit_run")
    else:
        workdir = tmp_path / "run"
        resumed_at, result = _killed_and_resumed(workdir, loop)
    assert f"at step {resumed_at}" in result.stderr  # the programs log to stderr
    if loop == "fit":  # the custom loop's own iterator: the exactness test
        assert "the input continues at its saved position" in result.stderr
        first_epoch = next(line for line in result.stdout.splitlines() if line.startswith("Epoch "))
        assert first_epoch == f"Epoch {resumed_at // 4 + 1}/3", (
            first_epoch
        )  # the epoch of the backup's step
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["optimizer_steps"] == 12
    # The history spans the epochs before the kill too (the interrupted one counted once).
    assert resumed_at == 6
    assert {name: len(values) for name, values in metrics["history"].items()} == {
        name: 3 for name in metrics["history"]
    }
    assert not (workdir / "backup").exists()


def _tiny_model(**optimizer_options):
    import keras

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(
        optimizer=kt.paper_adam(kt.TransformerSchedule(4, warmup_steps=3), **optimizer_options),
        loss="mse",
        steps_per_execution=optimizer_options.get("gradient_accumulation_steps") or 1,
    )
    return model


def test_backup_killed_while_written_still_restores(tmp_path):
    """A kill during a save must leave the previous backup whole and loadable
    (Keras' own BackupAndRestore overwrites latest.weights.h5 in place; CI once
    hit a truncated one)."""
    import numpy as np

    from keras_transformer.training.backup import TrainingBackup
    from keras_transformer.training.loop import optimizer_step
    from keras_transformer.training.steps import BackupError

    x, y = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")
    model = _tiny_model()
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    backup = TrainingBackup(tmp_path / "backup")
    backup.save(model, step=2, epoch=1)
    saved = [w.copy() for w in model.get_weights()]

    class Killed(BaseException):
        pass

    def dies_halfway(filepath, overwrite=True):
        Path(filepath).write_bytes(b"\x89HDF\r\n\x1a\n truncated")
        raise Killed

    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # the weights move on
    model.save_weights = dies_halfway
    with pytest.raises(Killed):
        backup.save(model, step=4, epoch=2)
    assert json.loads((tmp_path / "backup" / "training_metadata.json").read_text())["step"] == 2

    resumed = _tiny_model()
    assert backup.restore(resumed)["step"] == 2 == optimizer_step(resumed)
    for restored, expected in zip(resumed.get_weights(), saved):
        np.testing.assert_array_equal(restored, expected)
    backup.save(resumed, step=2, epoch=1)  # the next save clears what the kill left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "backup.previous"]
    with pytest.raises(BackupError, match="accumulate_steps=1"):
        backup.restore(_tiny_model(gradient_accumulation_steps=2), accumulate_steps=2)


def test_step_plan_counts_updates_and_ends_short_epochs():
    from keras_transformer.training.loop import StepPlan
    from keras_transformer.training.run_config import TrainingSection

    def section(**options):
        return TrainingSection(max_src_length=8, max_tgt_length=8, **options)

    plan = StepPlan.from_options(
        section(steps_per_epoch=4, epochs=5, max_steps=10, backup_every_steps=3)
    )
    assert (plan.total, plan.epochs_in_total) == (10, 3)  # the first bound reached ends the run
    assert [step for step in range(1, 11) if plan.is_epoch_end(step)] == [4, 8, 10]
    assert [step for step in range(1, 11) if plan.backs_up_at(step)] == [3, 6, 9, 10]
    assert StepPlan(steps_per_epoch=4, epochs=2, max_steps=100).total == 8
    epochs_only = StepPlan.from_options(section(steps_per_epoch=4, epochs=2))
    assert [step for step in range(1, 9) if epochs_only.backs_up_at(step)] == [4, 8]
    for options, message in [
        ({"steps_per_epoch": 4, "epochs": None}, "epochs or training.max_steps"),
        ({"steps_per_epoch": 4, "max_steps": 10, "steps_per_execution": 4}, "max_steps=10"),
        ({"steps_per_epoch": 4, "epochs": 1, "accumulate_steps": 0}, "accumulate_steps"),
    ]:
        with pytest.raises(ValueError, match=message):
            StepPlan.from_options(section(**options))
    with pytest.raises(ValueError, match="training.backup_every_steps='often': expected epoch"):
        load_config("demo", ["training.backup_every_steps=often"])


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_resumed_run_uses_the_batches_an_uninterrupted_run_would(tmp_path, loop):
    """Killed during step 8 of 10 (two micro-batches a step, backups every 3
    steps, epochs of 4), the resumed run starts at step 6 mid-epoch, trains on
    exactly the micro-batches the uninterrupted run used after step 6 (each
    batch's fingerprint recorded), and ends at its step, learning rate and
    weights."""
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.training.backup import TrainingBackup
    from keras_transformer.training.loop import StepPlan, custom_fit, fit_in_steps, optimizer_step

    plan = StepPlan(steps_per_epoch=4, max_steps=10, accumulate_steps=2, backup_every_steps=3)

    def train(backup_dir, seen, kill_at=None):
        class Fingerprinting(keras.Sequential):
            def train_step(self, data):
                def record(fingerprint):
                    seen.append(round(float(fingerprint), 4))
                    if len(seen) == kill_at:
                        raise RuntimeError("killed")

                tf.py_function(record, [tf.reduce_sum(data[0] * [1.0, 10.0, 100.0])], [])
                return super().train_step(data)

        keras.utils.set_random_seed(0)
        model = Fingerprinting([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(
            optimizer=kt.paper_adam(
                kt.TransformerSchedule(4, warmup_steps=3), gradient_accumulation_steps=2
            ),
            loss="mse",
            steps_per_execution=plan.steps_per_execution * plan.accumulate_steps,
        )

        def data():  # reshuffled on each pass, as make_dataset's are
            rows = (
                tf.data.Dataset.range(1000)
                .map(lambda i: tf.cast(i, tf.float32))
                .map(lambda i: tf.stack([tf.sin(i), tf.cos(0.7 * i), 1.0]))
            )
            return (
                rows.shuffle(64, seed=5)
                .repeat()
                .batch(2)
                .map(lambda x: (x, tf.reduce_sum(x, 1, keepdims=True)))
            )

        backup = TrainingBackup(backup_dir)
        if loop == "fit":
            history = fit_in_steps(model, data, plan, backup=backup, verbose=0)
        else:
            history = custom_fit(model, tf.distribute.get_strategy(), data(), plan, backup=backup)
        return model, history

    full_seen, resumed_seen = [], []
    full, full_history = train(tmp_path / "uninterrupted", full_seen)
    with pytest.raises(tf.errors.OpError, match="killed"):
        train(tmp_path / "killed", [], kill_at=15)
    assert json.loads((tmp_path / "killed" / "training_metadata.json").read_text())["step"] == 6
    # The input's position is in the backup: the resumed run reads none of the batches before.
    position = "input/position.json" if loop == "fit" else "iterator/state.index"
    assert (tmp_path / "killed" / position).is_file()
    resumed, resumed_history = train(tmp_path / "killed", resumed_seen)

    assert len(full_seen) == 20 and len(set(full_seen)) > 15
    assert resumed_seen == full_seen[12:]
    assert optimizer_step(resumed) == optimizer_step(full) == 10
    assert float(resumed.optimizer.learning_rate) == float(full.optimizer.learning_rate)
    for got, expected in zip(resumed.get_weights(), full.get_weights()):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    # Epochs of 4, 4 and 2 steps; resumed: the rest of epoch 2, then epoch 3 as in the full run.
    assert len(full_history["loss"]) == 3 and len(resumed_history["loss"]) == 2
    assert resumed_history["loss"][-1] == pytest.approx(full_history["loss"][-1], rel=1e-5)


def test_a_resumed_fit_reads_no_line_before_its_position_at_10_or_90_percent(tmp_path):
    """Resumed at 10% and at 90% of a pass over a text corpus (streamed, tokenized,
    shuffled and batched by length by ``make_dataset``, not cached), ``fit`` reads no
    line that the batches trained before its backup came from (they all lie before the
    position it continues at), and as few lines, wherever it resumes, before its first
    update: a few batches' worth, what the pipeline reads ahead. Resumed from the same
    backup without the position (as written before positions were saved), it reads the
    corpus from its first line again."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.data import PairSource, make_dataset
    from keras_transformer.training.backup import TrainingBackup
    from keras_transformer.training.loop import StepPlan, fit_in_steps, optimizer_step

    lines, rows = 20_000, 125  # a pass: 160 batches of 125 sentences

    def sentence(i):
        return " ".join(f"w{(7 * i + k) % 101}" for k in range(3 + i % 9))

    for side in ("src", "tgt"):
        text = "".join(sentence(i) + "\n" for i in range(lines))
        (tmp_path / f"train.{side}").write_text(text, encoding="utf-8")
    corpus = PairSource.from_text_files(tmp_path / "train.src", tmp_path / "train.tgt")

    class Words:  # a tokenizer without a model: hashed words
        pad_id, bos_id, eos_id = 0, 1, 2

        def tokenize(self, texts):
            return tf.strings.to_hash_bucket_fast(tf.strings.split(texts), 50) + 3

    def data(read, first):
        """The batches; ``read`` counts the lines the pipeline reads, ``first`` is the first
        of them: its number in the text read twice over (1-based; the enumeration's count is
        part of the input's position)."""

        def counted(index, pair):
            number = index + 1
            first_read = tf.cond(tf.equal(read, 0), lambda: number, lambda: first.read_value())
            with tf.control_dependencies([first.assign(first_read)]):
                with tf.control_dependencies([read.assign_add(1)]):
                    return tf.identity(pair[0]), tf.identity(pair[1])

        batches = make_dataset(
            corpus.dataset().repeat(2).enumerate().map(counted),
            Words(),
            Words(),
            batch_size=rows,
            max_src_length=16,
            max_tgt_length=16,
            shuffle_buffer=1000,
            seed=1,
            cache=False,
            repeat=True,
        )

        def numbers(inputs, tgt_out):  # what the model learns does not matter here
            sums = [
                tf.reduce_sum(tf.cast(ids, tf.float32), 1) / 100.0 for ids in (*inputs, tgt_out)
            ]
            return tf.stack([sums[0], sums[1], tf.ones_like(sums[0])], 1), sums[2][:, None]

        options = tf.data.Options()  # the counters are not part of the input's position
        options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
        return batches.map(numbers).with_options(options)

    class Stop(keras.callbacks.Callback):  # before StepBackup: no backup at the step it stops
        def __init__(self, step, counters):
            super().__init__()
            self.step, self.counters, self.read = step, counters, None

        def on_train_batch_end(self, batch, logs=None):
            if optimizer_step(self.model) >= self.step:
                self.read = tuple(int(counter.numpy()) for counter in self.counters)
                raise RuntimeError("stopped")

    def train(backup_dir, stop_at):
        """Train (resuming from ``backup_dir``) until update ``stop_at``: (the lines
        read, the first of them)."""
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(
            optimizer=kt.paper_adam(kt.TransformerSchedule(4, warmup_steps=3)),
            loss="mse",
            steps_per_execution=8,
        )
        plan = StepPlan(
            steps_per_epoch=8, max_steps=800, steps_per_execution=8, backup_every_steps=16
        )
        # This run's own counters: an earlier run's pipeline may still be filling its buffers.
        counters = tf.Variable(0, dtype=tf.int64), tf.Variable(0, dtype=tf.int64)
        stop = Stop(stop_at, counters)
        with pytest.raises(RuntimeError, match="stopped"):
            fit_in_steps(
                model,
                lambda: data(*counters),
                plan,
                backup=TrainingBackup(backup_dir),
                callbacks=[stop],
                verbose=0,
            )
        return stop.read

    def after_resume(step):
        """The lines read from the start of a run resumed at ``step`` to its first update."""
        backup = tmp_path / f"at_{step}"
        train(backup, step + 8)  # killed after the backup at ``step``
        assert json.loads((backup / "training_metadata.json").read_text())["step"] == step
        return train(backup, step + 1)

    counts = {}
    for step in (16, 144):  # 4,000 and 36,000 sentences trained: 10% and 90% of a pass
        counts[step], first_line = after_resume(step)
        # The lines of the trained sentences all lie before the first one the resumed run
        # reads, if it reads any before its first update (its buffers were saved full).
        assert counts[step] == first_line == 0 or first_line > step * rows, (step, first_line)
        # A few batches' worth at most, what tf.data reads ahead: at 90% as at 10%.
        assert counts[step] < 0.15 * lines, (step, counts[step])

    # The same backup without the input's position: the lines before it are read again.
    backup = tmp_path / "at_144"
    metadata = json.loads((backup / "training_metadata.json").read_text())
    metadata["files"] = {
        name: record for name, record in metadata["files"].items() if not name.startswith("input/")
    }
    (backup / "training_metadata.json").write_text(json.dumps(metadata))
    shutil.rmtree(backup / "input")
    shutil.rmtree(tmp_path / "at_144.previous")
    count, first_line = train(backup, 145)
    assert first_line == 1 and count > 144 * rows


def test_average_weights_is_the_elementwise_mean(tmp_path):
    import io

    import numpy as np

    from keras_transformer.training.snapshots import average_weights

    rng = np.random.default_rng(0)
    sets = [
        [rng.normal(size=(3, 4)).astype("float32"), rng.normal(size=5).astype("float32")]
        for _ in range(3)
    ]
    paths = []
    for i, weights in enumerate(sets):
        buffer = io.BytesIO()
        np.savez(buffer, *weights)
        paths.append(tmp_path / f"epoch_{i}.npz")
        paths[-1].write_bytes(buffer.getvalue())
    averaged = average_weights(paths)
    for j in range(2):
        np.testing.assert_allclose(averaged[j], np.mean([w[j] for w in sets], axis=0), rtol=1e-6)
    with pytest.raises(ValueError, match="No checkpoints"):
        average_weights([])


def test_time_budget_stops_before_an_epoch_that_would_not_fit(monkeypatch):
    from keras_transformer.training import callbacks

    clock = [1000.0]
    monkeypatch.setattr(callbacks.time, "time", lambda: clock[0])
    budget = callbacks.TimeBudget(minutes=10)  # 600 s
    budget.set_model(type("FakeModel", (), {"stop_training": False})())
    stops = []
    for epoch in range(6):
        clock[0] += 200 if epoch == 0 else 150  # first epoch slower (tracing)
        logs = {}
        budget.on_epoch_end(epoch, logs)
        stops.append(budget.model.stop_training)
        if budget.model.stop_training:
            break
    # ends at 200, 350 and 500 s: a fourth 150 s epoch would end at 650 > 600.
    assert stops == [False, False, True] and logs["epoch_seconds"] == 150
    with pytest.raises(ValueError, match="max_minutes"):
        callbacks.TimeBudget(0)


def test_time_budget_counts_the_time_before_a_restart(monkeypatch, tmp_path):
    """``training.max_minutes`` is the run's whole training time: a backup records the
    seconds used (and those of the epoch under way), and the resumed run's budget goes
    on from there, the time between the backup and the kill (made again) not counted."""
    from keras_transformer.training import callbacks
    from keras_transformer.training.backup import TrainingBackup

    clock = [1000.0]
    monkeypatch.setattr(callbacks.time, "time", lambda: clock[0])
    model = _tiny_model()
    first = callbacks.TimeBudget(minutes=10)  # 600 s
    first.set_model(model)
    backup = TrainingBackup(tmp_path / "backup")
    backup.track("time_budget", first)
    clock[0] += 200
    first.on_epoch_end(0, {})  # an epoch of 200 s
    clock[0] += 150
    backup.save(model, step=0, epoch=1)  # 150 s into the second epoch (the step: its optimizer's)
    assert backup.metadata()["state"]["time_budget"] == {"seconds": 350, "epoch_seconds": 150}

    clock[0] += 1000  # killed, restarted much later
    resumed = callbacks.TimeBudget(minutes=10)
    resumed.set_model(model)
    backup.track("time_budget", resumed)
    clock[0] += 5  # the restart's own setup counts
    backup.restore(_tiny_model())
    clock[0] += 50  # the rest of the second epoch: 150 + 5 + 50 s
    logs = {}
    resumed.on_epoch_end(1, logs)
    # 405 s used: another epoch of 205 s would end at 610 > 600.
    assert logs["epoch_seconds"] == 205 and model.stop_training
    fresh = callbacks.TimeBudget(minutes=10)
    fresh.set_state(None)  # a backup from before the time was recorded: the clock starts now
    assert fresh.get_state() == {"seconds": 0, "epoch_seconds": 0}


def test_without_a_budget_the_time_is_counted_across_restarts(monkeypatch):
    """``max_minutes: null``: nothing stops, and ``seconds`` (``metrics.json``'s
    ``train_seconds``) still goes on from the time a backup recorded."""
    from keras_transformer.training import callbacks

    clock = [1000.0]
    monkeypatch.setattr(callbacks.time, "time", lambda: clock[0])
    counter = callbacks.TimeBudget(None)
    counter.set_model(type("FakeModel", (), {"stop_training": False})())
    counter.set_state({"seconds": 3000.0, "epoch_seconds": 100.0})  # the backup's
    clock[0] += 40
    logs = {}
    counter.on_epoch_end(7, logs)
    assert logs["epoch_seconds"] == 140 and not counter.model.stop_training
    assert counter.seconds() == 3040


def test_custom_loop_honours_stop_training():
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_transformer.training.loop import StepPlan, custom_fit

    class StopAfterSecondEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = epoch == 1

    strategy = tf.distribute.get_strategy()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    data = tf.data.Dataset.from_tensor_slices(
        (np.ones((8, 3), "float32"), np.ones((8, 1), "float32"))
    )
    history = custom_fit(
        model,
        strategy,
        data.batch(2).repeat(),
        StepPlan(steps_per_epoch=2, epochs=5),
        callbacks=[StopAfterSecondEpoch()],
    )
    assert len(history["loss"]) == 2 and int(model.optimizer.iterations.numpy()) == 4


def test_learning_curve_plot(tmp_path):
    from keras_transformer.training.curves import plot_learning_curves

    history = {"loss": [5.0, 4.0, 3.5], "val_loss": [4.5, 3.9, 3.7], "val_bleu": [10.0, 20.0, 25.0]}
    path = plot_learning_curves(history, tmp_path / "curves.png", title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    with pytest.raises(ValueError, match="loss"):
        plot_learning_curves({}, tmp_path / "none.png")


def test_training_split_is_shuffled_whole_by_default(tmp_path):
    """A corpus stored in length order (Tatoeba's is) must not reach the model short-first."""
    import itertools

    from keras_transformer.data import PairSource
    from keras_transformer.training.batches import datasets
    from keras_transformer.training.build import build_tokenizers
    from keras_transformer.training.corpora import load_corpus

    config = load_config(
        "demo",
        [
            "data.synthetic={train: 600, valid: 10, test: 10, seed: 1}",
            "tokenizer.vocab_size=200",
            "training.batch_tokens=256",
            "training.shuffle_buffer=null",
        ],
    )
    corpus = load_corpus(config.data)
    corpus["train"] = PairSource.from_pairs(sorted(corpus["train"], key=lambda pair: len(pair[0])))
    src_tok, tgt_tok = build_tokenizers(config, corpus, tmp_path)

    def longest_source_in_first_batches(shuffle_buffer):
        options = config.replace("training", shuffle_buffer=shuffle_buffer).training
        train, _ = datasets(options, corpus, src_tok, tgt_tok)
        return max(
            int((src.numpy() != 0).sum(axis=1).max()) for (src, _), _ in itertools.islice(train, 4)
        )

    whole = longest_source_in_first_batches(None)
    window = longest_source_in_first_batches(8)
    lengths = sorted(
        len(src_tok.tokenize([s]).flat_values) + 1 for s, _ in corpus["train"]
    )  # + EOS
    # A small window yields the shortest pairs first; the whole split reaches the long tail at once.
    assert whole >= lengths[3 * len(lengths) // 4] and whole > 1.5 * window, (
        window,
        whole,
        lengths[::60],
    )


def test_corpus_from_tsv_and_text_files(tmp_path):
    import gzip

    from keras_transformer.data import PairSource
    from keras_transformer.training.corpora import load_corpus

    (tmp_path / "train.tsv").write_text(
        "ein Haus\ta house\nzwei\ttwo\n\tempty source\n", encoding="utf-8"
    )
    (tmp_path / "valid.tsv").write_text("drei\tthree\n", encoding="utf-8")
    corpus = load_corpus(
        {"kind": "tsv", "tsv": {"train": "train.tsv", "valid": "valid.tsv"}}, base_dir=tmp_path
    )
    assert isinstance(corpus["train"], PairSource)  # streamed; valid/test are lists
    assert (
        list(corpus["train"]) == [("ein Haus", "a house"), ("zwei", "two")]
        and len(corpus["train"]) == 2
    )
    assert corpus["valid"] == [("drei", "three")] and corpus["test"] == []
    (tmp_path / "train.src").write_text("ein  Haus \n", encoding="utf-8")
    (tmp_path / "train.tgt").write_text("a house\n", encoding="utf-8")
    corpus = load_corpus({"kind": "text", "dir": str(tmp_path)})
    assert list(corpus["train"]) == [("ein Haus", "a house")] and corpus["valid"] == []
    packed = tmp_path / "gz"
    packed.mkdir()
    for name, text in (
        ("train.src.gz", "eins\nzwei\n"),
        ("train.tgt.gz", "one\ntwo\n"),
        ("test.src.gz", "drei\n"),
        ("test.tgt.gz", "three\n"),
    ):
        (packed / name).write_bytes(gzip.compress(text.encode()))
    corpus = load_corpus({"kind": "text", "dir": str(packed)})
    assert list(corpus["train"]) == [("eins", "one"), ("zwei", "two")] and corpus["test"] == [
        ("drei", "three")
    ]
    (packed / "train.tgt.gz").write_bytes(gzip.compress(b"one\n"))
    with pytest.raises(ValueError, match="not aligned"):
        load_corpus({"kind": "text", "dir": str(packed)})
    with pytest.raises(ValueError, match="data.kind must be one of"):
        load_corpus({"kind": "csv"})
    with pytest.raises(ValueError, match="data.tsv.train"):
        load_corpus({"kind": "tsv"})


def test_corpus_from_tfds_offline():
    import tensorflow_datasets as tfds

    from keras_transformer.training.corpora import load_corpus

    with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
        corpus = load_corpus(
            {
                "kind": "tfds",
                "tfds": {
                    "name": "ted_hrlr_translate/pt_to_en",
                    "train": "train",
                    "valid": "validation",
                    "test": None,
                },
            }
        )
    assert 0 < len(corpus["train"]) <= 6 and corpus["test"] == []
    assert all(isinstance(s, str) and isinstance(t, str) for s, t in corpus["train"])


def test_large_training_splits_are_neither_cached_nor_shuffled_whole():
    from keras_transformer.training.batches import IN_MEMORY_PAIRS, training_input
    from keras_transformer.training.run_config import TrainingSection

    def options(**values):
        return TrainingSection(max_src_length=8, max_tgt_length=8, **values)

    small, large = IN_MEMORY_PAIRS, IN_MEMORY_PAIRS + 1
    assert training_input(options(cache="auto", shuffle_buffer=None), small) == {
        "cache": True,
        "shuffle_buffer": small,
    }
    assert training_input(options(shuffle_buffer=50), large) == {
        "cache": False,
        "shuffle_buffer": 50,
    }
    assert training_input(options(cache="/tmp/x", shuffle_buffer=5), large)["cache"] == "/tmp/x"
    assert training_input(options(cache=False, shuffle_buffer=None), 10)["cache"] is False
    with pytest.raises(
        ValueError, match=r"training.shuffle_buffer=null .* 1,000,001 pairs.*shuffle_buffer=200000"
    ):
        training_input(options(shuffle_buffer=None), large)
    with pytest.raises(ValueError, match="training.cache=3: expected auto, true or false"):
        load_config("demo", ["training.cache=3"])
    for name in ("demo", "multi30k", "base", "big", "wmt14_ende"):  # every key can be --set
        config = load_config(
            name,
            ["training.shuffle_buffer=7", "training.cache=false", "tokenizer.max_sentences=null"],
        )
        assert config.training.shuffle_buffer == 7 and config.tokenizer.max_sentences is None
    assert load_config("base").training.shuffle_buffer == load_config("big").training.shuffle_buffer


def test_text_corpus_streams_into_tokenizers_and_batches(tmp_path, monkeypatch):
    """A text corpus goes from files to batches without a list of its pairs: tokenizers from
    the stream (the same model as from the in-memory pairs), batches from dataset()."""
    from keras_transformer.data import (
        PairSource,
        demo_splits,
        make_dataset,
        write_parallel_files,
    )
    from keras_transformer.tokenization import train_sentencepiece
    from keras_transformer.training import batches
    from keras_transformer.training.build import build_tokenizers
    from keras_transformer.training.corpora import load_corpus

    splits = demo_splits(train=300, valid=10, test=0, seed=2)
    for split in ("train", "valid"):
        write_parallel_files(splits[split], tmp_path / "data", split)
    config = load_config(
        "demo",
        [
            f"data={{kind: text, dir: {tmp_path / 'data'}}}",
            "tokenizer.vocab_size=200",
            "training.batch_tokens=256",
            "training.shuffle_buffer=32",
        ],
    )
    corpus = load_corpus(config.data)
    src_tok, tgt_tok = build_tokenizers(config, corpus, tmp_path / "run")
    text = PairSource.from_text_files(
        tmp_path / "data" / "train.src", tmp_path / "data" / "train.tgt"
    ).read()
    unlimited = train_sentencepiece(
        text.sources + text.targets, tmp_path / "old" / "spm", vocab_size=200
    )
    assert src_tok.model_bytes == unlimited.read_bytes()  # the sample is the whole (small) corpus
    monkeypatch.setattr(batches, "IN_MEMORY_PAIRS", 100)  # 300 pairs are now "large": no cache
    calls = []

    def recorded(pairs, *args, **options):
        calls.append(options)
        return make_dataset(pairs, *args, **options)

    monkeypatch.setattr(batches, "make_dataset", recorded)
    train, valid = batches.datasets(config.training, corpus, src_tok, tgt_tok)
    assert (calls[0]["cache"], calls[0]["shuffle_buffer"]) == (False, 32)
    sentences = sum(int(src.shape[0]) for (src, _), _ in train.take(100))
    assert sentences > 300  # repeats: more than one pass over the files
    assert valid is not None and corpus["valid"] == [(s, t) for s, t in splits["valid"]]
    unbounded = config.replace("training", shuffle_buffer=None).training
    with pytest.raises(ValueError, match="set a bound"):
        batches.datasets(unbounded, corpus, src_tok, tgt_tok)


@pytest.mark.parametrize("name", ["demo", "multi30k", "student", "base", "big", "wmt14_ende"])
def test_shipped_configs_build_valid_models(name):
    import keras_transformer as kt

    config = load_config(name)
    kt.TransformerConfig.from_preset(
        config.model.preset, vocab_size=config.tokenizer.vocab_size, **config.model.options()
    )
    from keras_transformer.training.steps import StepPlan

    plan = StepPlan.from_options(config.training)  # the step counts fit together
    assert plan.total >= plan.steps_per_epoch


@pytest.mark.slow  # a training; the choice itself: test_hardware.py
def test_auto_precision_says_what_it_picked_and_why(tmp_path):
    from keras_transformer.hardware import has_bf16_units

    workdir = tmp_path / "auto"
    result = _run(
        [
            "-m",
            "training.train",
            "--config",
            "demo",
            "--workdir",
            str(workdir),
            *MICRO,
            "--set",
            "training.epochs=1",
            "--mixed-precision",
            "auto",
        ]
    )
    expected = "bf16" if has_bf16_units() else "fp32"  # no GPU or TPU on the test machines
    assert f"mixed precision: {expected} (no GPU or TPU; the CPU has" in result.stderr
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["precision"]["config"] == "auto" and metrics["precision"]["used"] == expected
    assert Workdir(workdir).precision == expected


@pytest.mark.slow  # two trainings of the demo task
def test_fp16_scales_the_loss_and_the_demo_task_learns_as_fp32_does(tmp_path):
    """What a Colab T4 user gets (auto picks fp16 there): Keras' dynamic loss
    scaling, no step with a NaN loss, and a model that learns the demo pair as
    the same run in float32 does."""
    runs = {}
    for precision in ("fp16", "fp32"):
        workdir = tmp_path / precision
        _run(
            [
                "-m",
                "training.train",
                "--config",
                "demo",
                "--workdir",
                str(workdir),
                *MICRO,
                "--mixed-precision",
                precision,
                "--set",
                "training.epochs=3",
                "--set",
                "training.steps_per_epoch=30",
                "--set",
                "training.steps_per_execution=15",
                "--set",
                "training.warmup_steps=30",
                "--set",
                "evaluation.max_sentences=5",
            ]
        )
        runs[precision] = json.loads((workdir / "metrics.json").read_text())
    fp16, fp32 = runs["fp16"], runs["fp32"]
    assert fp16["precision"]["used"] == "fp16" and "loss_scale" not in fp32
    # Scaled: the dynamic scale starts at 2^15 and moves by factors of two.
    assert fp16["loss_scale"] > 1 and math.log2(fp16["loss_scale"]).is_integer()
    assert fp16["optimizer_steps"] >= 80  # of 90: at most the first steps' overflows skipped
    losses, accuracy = fp16["history"]["loss"], fp16["history"]["masked_accuracy"]
    assert all(
        math.isfinite(loss) for loss in losses
    )  # an epoch's mean: every step in it was finite
    assert losses == sorted(losses, reverse=True) and accuracy[-1] > accuracy[0] + 0.01, (
        losses,
        accuracy,
    )
    assert abs(losses[-1] - fp32["history"]["loss"][-1]) < 0.03 * fp32["history"]["loss"][-1], (
        losses,
        fp32["history"]["loss"],
    )
