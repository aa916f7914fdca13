"""The package as a user installs it: a wheel of a fresh clone, installed without
extras into a clean venv and used from outside the checkout; then, in the same venv, with the
``train`` and ``tflite`` extras, the ``kt`` command from a folder outside the checkout.

Marked ``install`` (it creates a venv and installs TensorFlow into it); `.ci/run`
runs it after the default suite (``make test-install``).
"""

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hang_guard import HANG_TIMEOUT

pytestmark = [pytest.mark.install, pytest.mark.programs]

CHECKOUT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
# The extras' packages, which a core install must not pull (tensorboard: TF 2.21 no longer requires
# it).
NOT_IN_CORE = {
    "ctranslate2",
    "ai-edge-litert",
    "tensorflow-serving-api",
    "matplotlib",
    "tensorboard",
    "tensorflow-datasets",
    "sacrebleu",
    "tqdm",
}
SENTENCES = ["the big dog sees 3 red cats", "a boy sleeps", ""]


def _run(command, cwd, timeout=HANG_TIMEOUT):
    result = subprocess.run(
        command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, (command, result.stdout[-3000:], result.stderr[-5000:])
    return result


@dataclass(frozen=True)
class CleanInstall:
    """A venv holding only the wheel of a fresh clone (no extras), as ``clean_install`` made it."""

    python: Path  # the venv's interpreter
    wheel: Path  # the wheel built from the clone
    elsewhere: Path  # a folder outside the checkout, to run from
    core_packages: list[dict]  # `pip list` right after the core install


@pytest.fixture(scope="module")
def clean_install(tmp_path_factory):
    """A venv holding only the wheel of ``git clone CHECKOUT`` (no extras), its package list
    taken then, and a folder outside the checkout. The ``kt`` test adds the extras to this venv
    (installing TensorFlow once), so it comes last in this file."""
    root = tmp_path_factory.mktemp("clean_install")
    clone = root / "clone"
    _run(["git", "clone", "--quiet", str(CHECKOUT), str(clone)], cwd=root)
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    dist = root / "dist"
    wheel_command = ["-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist)]
    _run([str(python), *wheel_command, str(clone)], cwd=root)
    (wheel,) = dist.glob("keras_transformer_nmt-*.whl")
    _run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], cwd=root)
    listed = _run([str(python), "-m", "pip", "list", "--format=json"], cwd=root).stdout
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return CleanInstall(python, wheel, elsewhere, json.loads(listed))


def test_core_install_pulls_no_extra(clean_install):
    listed = clean_install.core_packages
    names = {package["name"].lower().replace("_", "-") for package in listed}
    assert "keras-transformer-nmt" in names and "tensorflow" in names and "tensorflow-text" in names
    assert not names & NOT_IN_CORE, sorted(names & NOT_IN_CORE)
    assert "keras-transformer" not in names  # the other project of that name


@pytest.fixture(scope="module")
def checkout_export(tiny_workdir, tmp_path_factory):
    """A SavedModel exported by the checkout's program from the checkout's demo workdir,
    and what the checkout's translators give for it."""
    out = tmp_path_factory.mktemp("checkout_export") / "demo"
    _run(
        [
            sys.executable,
            "-m",
            "export.saved_model",
            "--workdir",
            str(tiny_workdir),
            "--out",
            str(out),
            "--beam",
            "2",
        ],
        cwd=CHECKOUT,
    )
    import keras_transformer as kt

    expected = {
        "workdir": kt.Translator.from_workdir(tiny_workdir, beam_size=2).translate(SENTENCES),
        "saved_model": kt.Translator.from_saved_model(out).translate(SENTENCES),
    }
    return out, expected


def test_installed_library_trains_exports_and_translates_outside_the_checkout(
    clean_install, tiny_workdir, checkout_export
):
    python, elsewhere = clean_install.python, clean_install.elsewhere
    export_dir, expected = checkout_export
    script = textwrap.dedent(f"""
        import json, sys
        import keras_transformer as kt
        assert "site-packages" in kt.__file__, kt.__file__
        assert not any(m.split(".")[0] in ("training", "export", "programs") for m in sys.modules)
        sentences = {SENTENCES!r}
        result = {{
            "workdir": kt.Translator.from_workdir({str(tiny_workdir)!r},
            beam_size=2).translate(sentences),
            "saved_model": kt.Translator.from_saved_model({str(export_dir)!r}).translate(sentences),
        }}

        # A user's own notebook: data, tokenizer, model.fit, export, both translators.
        from keras_transformer.data import PairSource, demo_splits, make_dataset
        from keras_transformer.tokenization import train_tokenizers
        pairs = demo_splits(train=400, valid=10, test=10, seed=3)["train"]
        path, _ = train_tokenizers([s for s, _ in pairs], [t for _, t in pairs], "tokenizer",
        vocab_size=200,
                                   shared=True)
        tokenizer = kt.SubwordTokenizer.from_file(path)
        model = kt.Transformer(kt.TransformerConfig.from_preset("tiny",
        vocab_size=tokenizer.vocab_size,
                                                                d_model=32, d_ff=64, max_length=48))
        model.compile(optimizer=kt.paper_adam(d_model=32, warmup_steps=10),
                      loss=kt.MaskedLabelSmoothedCrossEntropy(0.1), metrics=[kt.MaskedAccuracy()])
        data = make_dataset(PairSource.from_pairs(pairs).dataset(), tokenizer, tokenizer,
        batch_size=32, max_src_length=32,
                            max_tgt_length=32, repeat=True, seed=0)
        history = model.fit(data, epochs=2, steps_per_epoch=8, verbose=0).history
        trained = kt.TrainedModel(model, tokenizer, tokenizer, max_src_length=32, max_tgt_length=32)
        version = kt.exporters.export_saved_model(trained, "exports/mine", beam_size=2)
        result["fit_loss"] = history["loss"]
        result["mine_in_process"] = kt.Translator.from_trained_model(trained,
        beam_size=2).translate(sentences)
        result["mine_saved_model"] = kt.Translator.from_saved_model(
            "exports/mine").translate(sentences)
        result["version"] = str(version)
        result["tflite_bytes"] = kt.exporters.export_tflite(trained, "mine.tflite").stat().st_size
        print(json.dumps(result))
    """)
    out = _run([str(python), "-c", script], cwd=elsewhere).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["workdir"] == expected["workdir"]
    assert result["saved_model"] == expected["saved_model"]
    assert result["fit_loss"][1] < result["fit_loss"][0]
    assert result["mine_saved_model"] == result["mine_in_process"]
    assert Path(result["version"]) == Path("exports/mine/1")
    assert (elsewhere / "exports" / "mine" / "1" / "saved_model.pb").is_file()
    assert result["tflite_bytes"] > 10_000
    assert all(isinstance(text, str) for text in result["mine_saved_model"])


# kt train's demo shrunk to seconds (as tests/test_training_program.py's MICRO).
KT_TRAIN_MICRO = [
    "data.synthetic={train: 300, valid: 20, test: 20, seed: 1}",
    "tokenizer.vocab_size=200",
    "model.d_model=32",
    "model.d_ff=64",
    "training.epochs=2",
    "training.steps_per_epoch=3",
    "training.steps_per_execution=1",
    "training.batch_tokens=256",
    "evaluation.max_sentences=4",
]
# What TensorFlow prints at start-up on a user's terminal (no TF_CPP_MIN_LOG_LEVEL set), which
# kt filters out, and what must never reach it.
TENSORFLOW_NOISE = re.compile(
    r"absl::InitializeLog|oneDNN custom operations|cuda drivers|cuInit|CUDA error|"
    r"cpu_feature_guard|Traceback"
)


def test_kt_command_from_the_wheel_outside_the_checkout(clean_install):
    """The wheel's ``kt`` command with the ``train`` and ``tflite`` extras, run from a folder
    outside the checkout with a user's environment: train the demo (the built-in YAML config,
    package data), export a SavedModel and a TFLite file, translate, score, and a usage error."""
    python = clean_install.python
    assert (
        "keras_transformer/training/configs/demo.yaml"
        in zipfile.ZipFile(clean_install.wheel).namelist()
    )
    extras = f"{clean_install.wheel}[train,tflite]"
    _run([str(python), "-m", "pip", "install", "--quiet", extras], cwd=clean_install.elsewhere)
    kt = python.parent / "kt"
    work = clean_install.elsewhere / "kt_user"
    work.mkdir()
    user_env = {key: value for key, value in ENV.items() if key != "TF_CPP_MIN_LOG_LEVEL"}

    def run_kt(*args: str, status: int = 0) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(kt), *args],
            cwd=work,
            env=user_env,
            capture_output=True,
            text=True,
            timeout=HANG_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == status, (args, result.stdout[-2000:], result.stderr[-4000:])
        assert not TENSORFLOW_NOISE.search(result.stderr), (args, result.stderr[-4000:])
        return result

    import keras_transformer

    assert run_kt("--version").stdout == f"kt {keras_transformer.__version__}\n"
    started = time.perf_counter()
    listing = run_kt("--help").stdout
    help_seconds = time.perf_counter() - started
    print(f"kt --help answered in {help_seconds:.2f} s")
    assert "export saved-model" in listing and "translate-corpus" in listing
    assert help_seconds < 10, help_seconds  # a hang guard; well under 1 s on 2 cores

    sets = [word for value in KT_TRAIN_MICRO for word in ("--set", value)]
    run_kt("train", "--config", "demo", "--workdir", "W", *sets)
    assert (work / "W" / "metrics.json").is_file()
    exported = run_kt("export", "saved-model", "--workdir", "W", "--out", "E", "--beam", "2")
    assert Path(exported.stdout.strip().splitlines()[-1]) == Path("E/1")
    run_kt("export", "tflite", "--workdir", "W", "--out", "demo.tflite")
    assert (work / "demo.tflite").stat().st_size > 10_000

    translated = run_kt("translate", "--model", "E/1", "the big dog sees 3 red cats").stdout
    assert len(translated.splitlines()) == 1
    n_best = run_kt("translate", "--model", "E/1", "--n-best", "2", "a boy sleeps").stdout
    assert n_best and all(
        re.fullmatch(r"0 \|\|\| .* \|\|\| -?[0-9.]+", line) for line in n_best.splitlines()
    ), n_best
    sampled = run_kt("translate", "--model", "E/1", "--sample", "--seed", "1", "a boy sleeps")
    assert len(sampled.stdout.splitlines()) == 1
    (work / "pair.src").write_text("the big dog sees 3 red cats\na boy sleeps\n")
    (work / "pair.tgt").write_text(translated + "\n")
    scores = run_kt("score", "--model", "E/1", "--src", "pair.src", "--tgt", "pair.tgt").stdout
    assert len(scores.split()) == 2 and all(float(score) <= 0 for score in scores.split())

    refused = run_kt("translate", "--model", "E/1", "--sample", "--top-p", "1.5", "hi", status=2)
    assert refused.stderr.startswith("kt translate: error: --top-p must be in (0, 1]")
    assert len(refused.stderr.splitlines()) == 1 and refused.stdout == ""
