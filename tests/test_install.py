"""The package as a user installs it: a fresh clone, ``pip install`` without
extras, non-editable, into a clean venv, used from outside the checkout.

Marked ``install`` (it creates a venv and installs TensorFlow into it); `.ci/run`
runs it after the default suite (``make test-install``).
"""

import json
import os
import subprocess
import sys
import textwrap
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


@pytest.fixture(scope="module")
def clean_install(tmp_path_factory):
    """A venv holding only ``pip install CLONE`` (no extras), and a folder outside the checkout."""
    root = tmp_path_factory.mktemp("clean_install")
    clone = root / "clone"
    _run(["git", "clone", "--quiet", str(CHECKOUT), str(clone)], cwd=root)
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", str(clone)], cwd=root)
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return python, elsewhere


def test_core_install_pulls_no_extra(clean_install):
    python, elsewhere = clean_install
    listed = json.loads(
        _run([str(python), "-m", "pip", "list", "--format=json"], cwd=elsewhere).stdout
    )
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
    python, elsewhere = clean_install
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
