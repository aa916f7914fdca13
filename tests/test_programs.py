"""The command-line programs: one-line errors with exit status 2 for bad
invocations, --help before TensorFlow is imported, and the import boundary
(training/ and export/ are programs over the library and do not import each other)."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hang_guard import HANG_TIMEOUT

pytestmark = pytest.mark.programs

# python -m MODULE (the checkout's shims) -> the kt command it runs.
KT_COMMANDS = {
    "training.train": "kt train",
    "training.prepare": "kt prepare",
    "training.evaluate": "kt evaluate",
    "training.tune_decoding": "kt tune-decoding",
    "training.import_checkpoint": "kt import-checkpoint",
    "export.saved_model": "kt export saved-model",
    "export.tflite": "kt export tflite",
    "export.ctranslate2": "kt export ctranslate2",
    "export.translate_corpus": "kt translate-corpus",
    "export.translate": "kt translate",
    "export.score": "kt score",
    "export.client": "kt client",
    "benchmarks.distill_report": "python -m benchmarks.distill_report",
}

CHECKOUT = Path(__file__).resolve().parent.parent
PROGRAMS = [
    "training.train",
    "training.prepare",
    "training.evaluate",
    "training.tune_decoding",
    "export.saved_model",
    "export.translate",
    "export.score",
    "export.translate_corpus",
    "export.tflite",
    "export.ctranslate2",
    "export.client",
    "benchmarks.distill_report",
]
# What a user's shell has: no TF_CPP_MIN_LOG_LEVEL, so TensorFlow's start-up notices would show.
USER_ENV = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}

MISSING = "/nonexistent/keras-transformer"
BAD_INVOCATIONS = {
    "unknown config": ["training.train", "--config", "no_such_config", "--workdir", "W"],
    "unknown --set key": [
        "training.train",
        "--config",
        "demo",
        "--workdir",
        "W",
        "--set",
        "training.no_such_key=1",
    ],
    "unknown data.prepare": [
        "training.train",
        "--config",
        "demo",
        "--workdir",
        "W",
        "--set",
        "data.prepare=maybe",
    ],
    "prepare a missing corpus": [
        "training.prepare",
        "--config",
        "base",
        "--workdir",
        "W",
        "--set",
        f"data.dir={MISSING}",
    ],
    "prepare with no data.dir": ["training.prepare", "--config", "base", "--workdir", "W"],
    "steps not a multiple of steps_per_execution": [
        "training.train",
        "--config",
        "demo",
        "--workdir",
        "W",
        "--set",
        "training.max_steps=10",
    ],
    "evaluate a missing workdir": [
        "training.evaluate",
        "--workdir",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
    ],
    "evaluate a .tflite without its workdir": [
        "training.evaluate",
        "--tflite",
        f"{MISSING}.tflite",
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
    ],
    "evaluate a .tflite with a beam": [
        "training.evaluate",
        "--tflite",
        f"{MISSING}.tflite",
        "--workdir",
        MISSING,
        "--beam",
        "4",
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
    ],
    "evaluate a missing .tflite": [
        "training.evaluate",
        "--tflite",
        f"{MISSING}.tflite",
        "--workdir",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
    ],
    "evaluate with no model": ["training.evaluate", "--src", "s.src", "--ref", "s.tgt"],
    "evaluate two sources with one output": [
        "training.evaluate",
        "--workdir",
        MISSING,
        "--src",
        "a.src",
        "b.src",
        "--ref",
        "a.tgt",
        "b.tgt",
        "--out",
        "a.json",
    ],
    "evaluate a .tflite greedy twice": [
        "training.evaluate",
        "--tflite",
        f"{MISSING}.tflite",
        "--workdir",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
        "--greedy-out",
        "g.json",
    ],
    "evaluate two .tflite files into one output": [
        "training.evaluate",
        "--tflite",
        f"{MISSING}.tflite",
        f"{MISSING}.int8.tflite",
        "--workdir",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
        "--out",
        "a.json",
    ],
    "evaluate two .tflite files with three workdirs": [
        "training.evaluate",
        "--tflite",
        f"{MISSING}.tflite",
        f"{MISSING}.int8.tflite",
        "--workdir",
        MISSING,
        MISSING,
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
        "--out",
        "a.json",
        "b.json",
    ],
    "evaluate two workdirs": [
        "training.evaluate",
        "--workdir",
        MISSING,
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
    ],
    "report a missing distillation run": [
        "benchmarks.distill_report",
        "--run",
        MISSING,
        "--teacher",
        MISSING,
    ],
    "export a missing workdir": ["export.saved_model", "--workdir", MISSING, "--out", "O"],
    "translate with a missing model": ["export.translate", "--model", MISSING, "hello"],
    "translate with no token budget": [
        "export.translate",
        "--model",
        MISSING,
        "--batch-tokens",
        "0",
        "hello",
    ],
    "translate a window of no lines": ["export.translate", "--model", MISSING, "--window", "-1"],
    "an n-best list of no translation": [
        "export.translate",
        "--model",
        MISSING,
        "--n-best",
        "0",
        "hello",
    ],
    "a sampling flag without --sample": [
        "export.translate",
        "--model",
        MISSING,
        "--top-k",
        "3",
        "hello",
    ],
    "an n-best list of samples": [
        "export.translate",
        "--model",
        MISSING,
        "--sample",
        "--n-best",
        "2",
        "hello",
    ],
    "prefixes from a missing file": [
        "export.translate",
        "--model",
        MISSING,
        "--prefix",
        f"{MISSING}.txt",
        "hello",
    ],
    "score with a missing model": [
        "export.score",
        "--model",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--tgt",
        f"{MISSING}.tgt",
    ],
    "score with no model": ["export.score", "--src", "s.src", "--tgt", "s.tgt"],
    "translate a corpus with a missing model": [
        "export.translate_corpus",
        "--model",
        MISSING,
        "--src",
        "s.src",
        "--out",
        "O",
    ],
    "translate a missing corpus": [
        "export.translate_corpus",
        "--workdir",
        ".",
        "--src",
        f"{MISSING}.src",
        "--out",
        "O",
    ],
    "translate a corpus into a missing folder": [
        "export.translate_corpus",
        "--workdir",
        ".",
        "--src",
        "pyproject.toml",
        "--out",
        f"{MISSING}/out.txt",
    ],
    "translate a corpus into a folder": [
        "export.translate_corpus",
        "--workdir",
        ".",
        "--src",
        "pyproject.toml",
        "--out",
        "tests",
    ],
    "translate a corpus with no model": ["export.translate_corpus", "--src", "s", "--out", "O"],
    "a corpus's n-best list of samples": [
        "export.translate_corpus",
        "--workdir",
        ".",
        "--src",
        "pyproject.toml",
        "--out",
        "O",
        "--n-best",
        "2",
        "--sample",
    ],
    "a corpus's sampling flag without --sample": [
        "export.translate_corpus",
        "--workdir",
        ".",
        "--src",
        "pyproject.toml",
        "--out",
        "O",
        "--temperature",
        "0.5",
    ],
    "an export's length penalty": [
        "export.translate_corpus",
        "--model",
        ".",
        "--src",
        "pyproject.toml",
        "--out",
        "O",
        "--alpha",
        "1.0",
    ],
    "a corpus translated by a beam of none": [
        "export.translate_corpus",
        "--workdir",
        ".",
        "--src",
        "pyproject.toml",
        "--out",
        "O",
        "--beam",
        "0",
    ],
    "tflite from a missing workdir": ["export.tflite", "--workdir", MISSING, "--out", "m.tflite"],
    "tflite to int8 twice": [
        "export.tflite",
        "--workdir",
        MISSING,
        "--out",
        "m.tflite",
        "--quantize",
        "dynamic",
        "--int8-out",
        "m.int8.tflite",
    ],
    "ctranslate2 from a missing workdir": [
        "export.ctranslate2",
        "--workdir",
        MISSING,
        "--out",
        "O",
    ],
    "client with no server": [
        "export.client",
        "--rest",
        "http://127.0.0.1:9",
        "--model",
        "demo",
        "hello",
    ],
    "unknown option": ["export.saved_model", "--wrokdir", "W", "--out", "O"],
    "tune on a missing validation file": [
        "training.tune_decoding",
        "--workdir",
        MISSING,
        "--src",
        "v.src",
        "--ref",
        "v.tgt",
    ],
}


def _program(args, cwd, timeout=HANG_TIMEOUT):
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=CHECKOUT if cwd is None else cwd,
        env=USER_ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _assert_one_line_error(result, program):
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"{KT_COMMANDS[program]}: error: "), lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args", BAD_INVOCATIONS.values(), ids=BAD_INVOCATIONS.keys())
def test_bad_invocations_print_one_line_and_exit_2(args, tmp_path):
    result = _program(args, cwd=None)
    _assert_one_line_error(result, args[0])
    assert not (CHECKOUT / "W").exists() and not (CHECKOUT / "O").exists()


def test_what_exists_but_is_not_a_run_or_an_export_is_one_line_too(tmp_path):
    """Past the existence checks, the library's own checks (Workdir.check, saved_model_version)
    answer, after TensorFlow is imported, still as one line."""
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.yaml").write_text("tokenizer: {shared: true}\n")
    result = _program(
        ["export.saved_model", "--workdir", str(unfinished), "--out", str(tmp_path / "O")],
        cwd=None,
        timeout=HANG_TIMEOUT,
    )
    _assert_one_line_error(result, "export.saved_model")
    assert "holds no finished training run" in result.stderr and not (tmp_path / "O").exists()
    result = _program(
        ["export.translate", "--model", str(tmp_path), "hello"], cwd=None, timeout=HANG_TIMEOUT
    )
    _assert_one_line_error(result, "export.translate")
    assert "No SavedModel at" in result.stderr


def test_errors_name_the_problem():
    assert (
        "use one of ['base', 'big', 'demo', 'multi30k', 'student', 'wmt14_ende']"
        in _program(BAD_INVOCATIONS["unknown config"], None).stderr
    )
    assert (
        "training.no_such_key: unknown key; the keys are max_src_length"
        in _program(BAD_INVOCATIONS["unknown --set key"], None).stderr
    )
    assert (
        "cannot reach TF Serving at http://127.0.0.1:9"
        in _program(BAD_INVOCATIONS["client with no server"], None).stderr
    )


def test_strategy_tpu_without_tpu_support_is_one_line(tmp_path):
    import importlib.util

    if importlib.util.find_spec("libtpu") is not None:
        pytest.skip("this TensorFlow has libtpu: the TPU is looked for, not refused")
    result = _program(
        [
            "training.train",
            "--config",
            "demo",
            "--workdir",
            str(tmp_path / "w"),
            "--strategy",
            "tpu",
        ],
        cwd=None,
        timeout=HANG_TIMEOUT,
    )
    _assert_one_line_error(result, "training.train")
    assert "has no TPU support" in result.stderr


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_answers_before_tensorflow_is_imported(program):
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{program!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_module({program!r}, run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code in (0, None), exit.code\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'keras_transformer.model') if m in "
        "sys.modules)\n"
        "print('imported:', heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=CHECKOUT,
        env=USER_ENV,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage: " + KT_COMMANDS[program] in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "imported: []"


def _imports(path: Path, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


# The one benchmark of the training program's own machinery: resuming ``fit`` from a backup.
BOUNDARY_EXCEPTIONS = {"benchmarks/resume_time.py": {"training"}}


@pytest.mark.parametrize(
    "package, forbidden, top_level_only",
    [
        ("export", {"training"}, False),
        ("training", {"export"}, False),
        ("keras_transformer", {"training", "export", "benchmarks"}, False),
        ("benchmarks", {"training", "export"}, False),  # benchmarks measure the library
        # The programs import TensorFlow and Keras only inside import_library() or main().
        ("keras_transformer/cli", {"tensorflow", "keras"}, True),
    ],
)
def test_import_boundaries(package, forbidden, top_level_only):
    offenders = {}
    for path in (CHECKOUT / package).rglob("*.py"):
        found = _imports(path, top_level_only) & forbidden
        found -= BOUNDARY_EXCEPTIONS.get(str(path.relative_to(CHECKOUT)), set())
        if found:
            offenders[str(path.relative_to(CHECKOUT))] = sorted(found)
    assert not offenders, offenders


def test_program_precision_names_are_the_librarys():
    import keras_transformer as kt
    from keras_transformer.cli.common import PRECISION_NAMES

    assert tuple(sorted(kt.PRECISIONS)) == PRECISION_NAMES


def test_ctranslate2_program_knows_ctranslate2s_weight_types():
    ctranslate2 = pytest.importorskip("ctranslate2")
    from keras_transformer.cli.export_ctranslate2 import QUANTIZATIONS

    assert set(QUANTIZATIONS) == set(ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES)


def test_tensorflow_start_up_notices_are_filtered_but_real_output_kept(capfd):
    from keras_transformer.cli import common as programs

    with programs._stderr_filtered(programs._IMPORT_NOTICES):
        os.write(2, b"I0000 port.cc:153] oneDNN custom operations are on. You may see...\n")
        os.write(2, b"a real warning\n")
    captured = capfd.readouterr()
    assert captured.err == "a real warning\n"
