"""The command-line programs: the ``kt`` command and its subcommands, one-line errors with
exit status 2 for bad invocations (refused before TensorFlow is imported), --help before
TensorFlow is imported, the checkout's ``python -m training.*`` / ``export.*`` shims, and
the import boundary (training/ and export/ are programs over the library and do not import
each other)."""

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
    "export.web": "kt export web",
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
    "export.web",
    "export.client",
    "benchmarks.distill_report",
]
# What a user's shell has: no TF_CPP_MIN_LOG_LEVEL, so TensorFlow's start-up notices would show.
USER_ENV = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}

MISSING = "/nonexistent/keras-transformer"
# kt's arguments (python -m keras_transformer.cli.main ARGS, as the installed `kt ARGS`), each
# refused before TensorFlow is imported: one line, exit status 2.
BAD_INVOCATIONS = {
    "no command": [],
    "unknown command": ["trian", "--config", "demo", "--workdir", "W"],
    "an option instead of a command": ["--config", "demo"],
    "--version with arguments": ["--version", "train"],
    "export with no format": ["export"],
    "export to an unknown format": ["export", "onnx", "--workdir", "W", "--out", "O"],
    "unknown config": ["train", "--config", "no_such_config", "--workdir", "W"],
    "unknown --set key": [
        "train",
        "--config",
        "demo",
        "--workdir",
        "W",
        "--set",
        "training.no_such_key=1",
    ],
    "unknown data.prepare": [
        "train",
        "--config",
        "demo",
        "--workdir",
        "W",
        "--set",
        "data.prepare=maybe",
    ],
    "prepare a missing corpus": [
        "prepare",
        "--config",
        "base",
        "--workdir",
        "W",
        "--set",
        f"data.dir={MISSING}",
    ],
    "prepare with no data.dir": ["prepare", "--config", "base", "--workdir", "W"],
    "steps not a multiple of steps_per_execution": [
        "train",
        "--config",
        "demo",
        "--workdir",
        "W",
        "--set",
        "training.max_steps=10",
    ],
    "evaluate a missing workdir": [
        "evaluate",
        "--workdir",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
    ],
    "evaluate a .tflite without its workdir": [
        "evaluate",
        "--tflite",
        f"{MISSING}.tflite",
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
    ],
    "evaluate a .tflite with a beam": [
        "evaluate",
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
        "evaluate",
        "--tflite",
        f"{MISSING}.tflite",
        "--workdir",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
    ],
    "evaluate with no model": ["evaluate", "--src", "s.src", "--ref", "s.tgt"],
    "evaluate two sources with one output": [
        "evaluate",
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
        "evaluate",
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
        "evaluate",
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
        "evaluate",
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
        "evaluate",
        "--workdir",
        MISSING,
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
    ],
    "export a missing workdir": ["export", "saved-model", "--workdir", MISSING, "--out", "O"],
    "translate with a missing model": ["translate", "--model", MISSING, "hello"],
    "translate with no token budget": [
        "translate",
        "--model",
        MISSING,
        "--batch-tokens",
        "0",
        "hello",
    ],
    "translate a window of no lines": ["translate", "--model", MISSING, "--window", "-1"],
    "an n-best list of no translation": [
        "translate",
        "--model",
        MISSING,
        "--n-best",
        "0",
        "hello",
    ],
    "a sampling flag without --sample": [
        "translate",
        "--model",
        MISSING,
        "--top-k",
        "3",
        "hello",
    ],
    "an n-best list of samples": [
        "translate",
        "--model",
        MISSING,
        "--sample",
        "--n-best",
        "2",
        "hello",
    ],
    "prefixes from a missing file": [
        "translate",
        "--model",
        MISSING,
        "--prefix",
        f"{MISSING}.txt",
        "hello",
    ],
    "score with a missing model": [
        "score",
        "--model",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--tgt",
        f"{MISSING}.tgt",
    ],
    "score with no model": ["score", "--src", "s.src", "--tgt", "s.tgt"],
    "translate a corpus with a missing model": [
        "translate-corpus",
        "--model",
        MISSING,
        "--src",
        "s.src",
        "--out",
        "O",
    ],
    "translate a missing corpus": [
        "translate-corpus",
        "--workdir",
        ".",
        "--src",
        f"{MISSING}.src",
        "--out",
        "O",
    ],
    "translate a corpus into a missing folder": [
        "translate-corpus",
        "--workdir",
        ".",
        "--src",
        "pyproject.toml",
        "--out",
        f"{MISSING}/out.txt",
    ],
    "translate a corpus into a folder": [
        "translate-corpus",
        "--workdir",
        ".",
        "--src",
        "pyproject.toml",
        "--out",
        "tests",
    ],
    "translate a corpus with no model": ["translate-corpus", "--src", "s", "--out", "O"],
    "a corpus's n-best list of samples": [
        "translate-corpus",
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
        "translate-corpus",
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
        "translate-corpus",
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
        "translate-corpus",
        "--workdir",
        ".",
        "--src",
        "pyproject.toml",
        "--out",
        "O",
        "--beam",
        "0",
    ],
    "tflite from a missing workdir": [
        "export",
        "tflite",
        "--workdir",
        MISSING,
        "--out",
        "m.tflite",
    ],
    "tflite to int8 twice": [
        "export",
        "tflite",
        "--workdir",
        MISSING,
        "--out",
        "m.tflite",
        "--quantize",
        "dynamic",
        "--int8-out",
        "m.int8.tflite",
    ],
    "web from a missing workdir": ["export", "web", "--workdir", MISSING, "--out", "O"],
    "web from a missing .tflite": [
        "export",
        "web",
        "--workdir",
        ".",
        "--out",
        "O",
        "--tflite",
        f"{MISSING}.tflite",
    ],
    "web of a given .tflite quantized again": [
        "export",
        "web",
        "--workdir",
        ".",
        "--out",
        "O",
        "--tflite",
        "pyproject.toml",
        "--quantize",
        "dynamic",
    ],
    "web with a beam of none": ["export", "web", "--workdir", ".", "--out", "O", "--beam", "0"],
    "web with a negative length penalty": [
        "export",
        "web",
        "--workdir",
        ".",
        "--out",
        "O",
        "--alpha",
        "-1",
    ],
    "web into a file": ["export", "web", "--workdir", ".", "--out", "pyproject.toml"],
    "web with a length penalty and no beam": [
        "export",
        "web",
        "--workdir",
        ".",
        "--out",
        "O",
        "--alpha",
        "1.0",
    ],
    "ctranslate2 from a missing workdir": [
        "export",
        "ctranslate2",
        "--workdir",
        MISSING,
        "--out",
        "O",
    ],
    "client with no server": [
        "client",
        "--rest",
        "http://127.0.0.1:9",
        "--model",
        "demo",
        "hello",
    ],
    "unknown option": ["export", "saved-model", "--wrokdir", "W", "--out", "O"],
    "a nucleus above 1": ["translate", "--model", MISSING, "--sample", "--top-p", "1.5", "hi"],
    "a negative top-k": ["translate", "--model", MISSING, "--sample", "--top-k", "-1", "hi"],
    "a temperature of 0": ["translate", "--model", MISSING, "--sample", "--temperature", "0"],
    "translate with a beam of none": ["translate", "--model", MISSING, "--beam", "0", "hi"],
    "an attention plot of stdin": ["translate", "--model", MISSING, "--plot-attention", "a.png"],
    "a corpus's negative length penalty": [
        "translate-corpus",
        "--workdir",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--out",
        "O",
        "--alpha",
        "-1",
    ],
    "a corpus's nucleus of 0": [
        "translate-corpus",
        "--workdir",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--out",
        "O",
        "--sample",
        "--top-p",
        "0",
    ],
    "export with a beam of none": [
        "export",
        "saved-model",
        "--workdir",
        MISSING,
        "--out",
        "O",
        "--beam",
        "0",
    ],
    "export with a negative length penalty": [
        "export",
        "saved-model",
        "--workdir",
        MISSING,
        "--out",
        "O",
        "--alpha",
        "-1",
    ],
    "export as version 0": [
        "export",
        "saved-model",
        "--workdir",
        MISSING,
        "--out",
        "O",
        "--version",
        "0",
    ],
    "export in 0 decoding parts": [
        "export",
        "saved-model",
        "--workdir",
        MISSING,
        "--out",
        "O",
        "--decode-parts",
        "0",
    ],
    "tflite of sources of no token": [
        "export",
        "tflite",
        "--workdir",
        MISSING,
        "--out",
        "m.tflite",
        "--max-src-length",
        "0",
    ],
    "tflite with a beam of none": [
        "export",
        "tflite",
        "--workdir",
        MISSING,
        "--out",
        "m.tflite",
        "--beam",
        "0",
    ],
    "tflite with a negative length penalty": [
        "export",
        "tflite",
        "--workdir",
        MISSING,
        "--out",
        "m.tflite",
        "--beam",
        "4",
        "--alpha",
        "-0.5",
    ],
    "tflite with an infinite length penalty": [
        "export",
        "tflite",
        "--workdir",
        MISSING,
        "--out",
        "m.tflite",
        "--beam",
        "4",
        "--alpha",
        "inf",
    ],
    "tflite with a length penalty and no beam": [
        "export",
        "tflite",
        "--workdir",
        MISSING,
        "--out",
        "m.tflite",
        "--alpha",
        "0.6",
    ],
    "evaluate with a negative length penalty": [
        "evaluate",
        "--workdir",
        MISSING,
        "--src",
        f"{MISSING}.src",
        "--ref",
        f"{MISSING}.tgt",
        "--beam",
        "4",
        "--alpha",
        "-1",
    ],
    "tune with a negative length penalty": [
        "tune-decoding",
        "--workdir",
        MISSING,
        "--src",
        "v.src",
        "--ref",
        "v.tgt",
        "--alphas",
        "0.6",
        "-1",
    ],
    "tune in batches of none": [
        "tune-decoding",
        "--workdir",
        MISSING,
        "--src",
        "v.src",
        "--ref",
        "v.tgt",
        "--batch-size",
        "0",
    ],
    "a client that waits no time": [
        "client",
        "--rest",
        "http://127.0.0.1:9",
        "--model",
        "demo",
        "--timeout",
        "0",
        "hi",
    ],
    "tune on a missing validation file": [
        "tune-decoding",
        "--workdir",
        MISSING,
        "--src",
        "v.src",
        "--ref",
        "v.tgt",
    ],
}
# What some of those errors say: the flag and its range, or the choices.
BAD_INVOCATION_MESSAGES = {
    "no command": "give a command: train, prepare,",
    "unknown command": "unknown command 'trian': did you mean 'train'?",
    "an option instead of a command": "unrecognized arguments: --config",
    "export with no format": "kt export needs a format: saved-model, tflite, ctranslate2, web",
    "web from a missing workdir": "workdir /nonexistent/keras-transformer does not exist",
    "web from a missing .tflite": "write one with kt export tflite",
    "web of a given .tflite quantized again": "--quantize applies when exporting the model",
    "web with a beam of none": "--beam must be >= 1",
    "web with a negative length penalty": "--alpha must be a finite number >= 0",
    "web into a file": "is a file; give the folder",
    "web with a length penalty and no beam": "give --beam N as well",
    "export to an unknown format": "unknown export format 'onnx'",
    "a nucleus above 1": "--top-p must be in (0, 1]",
    "a negative top-k": "--top-k must be >= 0",
    "a temperature of 0": "--temperature must be a finite number above 0",
    "translate with a beam of none": "--beam must be >= 1",
    "a corpus's negative length penalty": "--alpha must be a finite number >= 0",
    "a corpus's nucleus of 0": "--top-p must be in (0, 1]",
    "export with a beam of none": "--beam must be >= 1",
    "export with a negative length penalty": "--alpha must be a finite number >= 0",
    "export as version 0": "--version must be >= 1",
    "export in 0 decoding parts": "--decode-parts must be >= 1",
    "tflite of sources of no token": "--max-src-length must be >= 1",
    "tflite with a beam of none": "--beam must be >= 1",
    "tflite with a negative length penalty": "--alpha must be a finite number >= 0",
    "tflite with an infinite length penalty": "--alpha must be a finite number >= 0",
    "tflite with a length penalty and no beam": "--alpha is the beam search's length penalty",
    "evaluate with a negative length penalty": "--alpha must be a finite number >= 0",
    "tune with a negative length penalty": "--alphas must be a finite number >= 0",
    "tune in batches of none": "--batch-size must be >= 1",
    "a client that waits no time": "--timeout must be a finite number of seconds above 0",
}
# Runs kt's dispatcher in this interpreter as the installed `kt` runs it, then says on the
# last line of stdout whether TensorFlow was imported.
KT_PROBE = (
    "import sys\n"
    "from keras_transformer.cli.main import main\n"
    "try:\n"
    "    status = main(sys.argv[1:])\n"
    "except SystemExit as exit:\n"
    "    status = exit.code\n"
    "print('tensorflow imported:', 'tensorflow' in sys.modules)\n"
    "sys.exit(status)\n"
)


def _kt(args, cwd=None, timeout=HANG_TIMEOUT):
    """``kt ARGS`` in a subprocess with a user's environment (``KT_PROBE``)."""
    return subprocess.run(
        [sys.executable, "-c", KT_PROBE, *args],
        cwd=CHECKOUT if cwd is None else cwd,
        env=USER_ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _kt_prog(args) -> str:
    """The program name a usage error of ``kt ARGS`` starts with."""
    known = {*KT_COMMANDS.values()}
    for words in (2, 1):
        prog = " ".join(["kt", *args[:words]])
        if prog in known:
            return prog
    return "kt"


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


def _assert_kt_error(result, args):
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"{_kt_prog(args)}: error: "), lines[0]


@pytest.mark.parametrize("name", BAD_INVOCATIONS)
def test_bad_invocations_print_one_line_and_exit_2_before_tensorflow(name):
    args = BAD_INVOCATIONS[name]
    result = _kt(args)
    _assert_kt_error(result, args)
    assert BAD_INVOCATION_MESSAGES.get(name, "") in result.stderr
    assert result.stdout.splitlines()[-1] == "tensorflow imported: False"
    assert not (CHECKOUT / "W").exists() and not (CHECKOUT / "O").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["training.train", "--config", "no_such_config", "--workdir", "W"],
        ["export.translate", "--model", MISSING, "--sample", "--top-p", "1.5", "hello"],
        ["benchmarks.distill_report", "--run", MISSING, "--teacher", MISSING],
    ],
    ids=["training shim", "export shim", "benchmark"],
)
def test_checkout_programs_print_one_line_and_exit_2(args):
    """The checkout's ``python -m training.*`` / ``export.*`` shims run kt's programs."""
    result = _program(args, cwd=None)
    _assert_one_line_error(result, args[0])
    assert not (CHECKOUT / "W").exists()


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
        "use one of ['base', 'big', 'demo', 'multi30k', 'student', 'tatoeba', 'wmt14_ende']"
        in _kt(BAD_INVOCATIONS["unknown config"]).stderr
    )
    assert (
        "training.no_such_key: unknown key; the keys are max_src_length"
        in _kt(BAD_INVOCATIONS["unknown --set key"]).stderr
    )
    assert (
        "cannot reach TF Serving at http://127.0.0.1:9"
        in _kt(BAD_INVOCATIONS["client with no server"]).stderr
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


# Every kt subcommand, as its words after `kt`.
KT_SUBCOMMANDS = [prog.split()[1:] for prog in KT_COMMANDS.values() if prog.startswith("kt ")]


def test_kt_help_of_every_command_answers_without_tensorflow():
    """``kt --help``, ``kt export --help`` and each ``kt COMMAND --help``, in one process:
    each prints its usage, exits 0, and none imports TensorFlow, Keras or the model."""
    code = (
        "import contextlib, io, sys\n"
        "from keras_transformer.cli.main import main\n"
        f"for args in {[[], ['export'], *KT_SUBCOMMANDS]!r}:\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        try:\n"
        "            status = main([*args, '--help'])\n"
        "        except SystemExit as exit:\n"
        "            status = exit.code\n"
        "    assert status in (0, None), (args, status)\n"
        "    print(repr(out.getvalue().splitlines()[0]))\n"
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
    assert result.stderr == ""
    *firsts, imported = result.stdout.strip().splitlines()
    assert imported == "imported: []"
    progs = ["kt [--version]", "kt export FORMAT", *(" ".join(["kt", *w]) for w in KT_SUBCOMMANDS)]
    assert len(firsts) == len(progs), firsts
    for first, prog in zip(firsts, progs):
        assert first.strip("'\"").startswith(f"usage: {prog} "), (first, prog)


def test_kt_help_lists_every_command_with_one_line(capsys):
    from keras_transformer.cli.main import main

    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    for words in KT_SUBCOMMANDS:
        (line,) = [
            line for line in listing.splitlines() if line.startswith(f"  {' '.join(words)}  ")
        ]
        assert len(line.split()) > len(words) + 2, line  # the name, then what it does
    assert main(["export", "--help"]) == 0
    formats = capsys.readouterr().out
    assert all(f"  {name}  " in formats for name in ("saved-model", "tflite", "ctranslate2", "web"))


def test_kt_version_is_the_packages(capsys):
    import keras_transformer
    from keras_transformer.cli.main import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"kt {keras_transformer.__version__}\n"


def test_kt_commands_run_the_programs_of_their_names():
    """Each subcommand's module is the program whose PROG is ``kt SUBCOMMAND``."""
    import importlib

    from keras_transformer.cli.main import COMMANDS, EXPORTS

    progs = {
        **{f"kt {name}": module for name, (module, _) in COMMANDS.items() if module},
        **{f"kt export {name}": module for name, (module, _) in EXPORTS.items()},
    }
    assert sorted(progs) == sorted(prog for prog in KT_COMMANDS.values() if prog.startswith("kt"))
    for prog, module in progs.items():
        program = importlib.import_module(f"keras_transformer.cli.{module}")
        assert program.PROG == prog and callable(program.main)


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


def test_ctranslate2_program_knows_ctranslate2s_weight_types():
    ctranslate2 = pytest.importorskip("ctranslate2")
    from keras_transformer.cli.export_ctranslate2 import QUANTIZATIONS

    assert set(QUANTIZATIONS) == set(ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES)


def test_tensorflow_logs_default_to_warnings_and_a_users_level_is_kept(monkeypatch):
    from keras_transformer.cli import common as programs

    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    programs.quiet_tensorflow()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"
    assert not programs._tensorflow_notices_shown()
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")  # the user asks for everything
    programs.quiet_tensorflow()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0" and programs._tensorflow_notices_shown()


def test_tensorflow_start_up_notices_are_filtered_but_real_output_kept(capfd):
    from keras_transformer.cli import common as programs

    with programs._stderr_filtered(programs._IMPORT_NOTICES):
        os.write(2, b"I0000 port.cc:153] oneDNN custom operations are on. You may see...\n")
        os.write(2, b"E0000 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\n")
        os.write(2, b"a real warning\n")
    captured = capfd.readouterr()
    assert captured.err == "a real warning\n"
