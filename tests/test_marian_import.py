"""Pretrained Marian (OPUS-MT) checkpoints: import, compare with PyTorch, export, fine-tune.

A real checkpoint is made offline (tests/marian_checkpoint.py: transformers' MarianMTModel
and MarianTokenizer, trained briefly, ``save_pretrained``) and imported by the program
users run, ``python -m training.import_checkpoint marian DIR --workdir W``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hang_guard import HANG_TIMEOUT

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from marian_checkpoint import greedy_generate, torch_logits, write_marian_checkpoint  # noqa: E402

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
SENTENCES = 6  # test sentences: the first of the checkpoint's training pairs, and some new ones
MAX_NEW_TOKENS = 60


def _program(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=CHECKOUT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    if check:
        assert result.returncode == 0, result.stderr[-4000:]
    return result


def _in_process(module: str, *args: str, check: bool = True) -> tuple[int, str]:
    """``python -m module ARGS`` as its ``main(argv)`` in this process (TensorFlow is
    imported already; the import program's own run in a fresh process is the ``workdir``
    fixture's): ``(exit status, stderr)``. The logging the program sets up is undone."""
    import contextlib
    import importlib
    import io
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            status = importlib.import_module(module).main(list(args))
    except SystemExit as exit:
        status = exit.code
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    if check:
        assert status == 0, stderr.getvalue()[-4000:]
    return status, stderr.getvalue()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("marian") / "opus-mt-tiny"
    made = write_marian_checkpoint(directory)
    from keras_transformer.data import generate_pairs

    pairs = made["pairs"][:3] + generate_pairs(SENTENCES - 3, seed=99)
    return {
        "dir": directory,
        "vocab": made["vocab"],
        "pairs": pairs,
        "train_pairs": made["pairs"],
        "pad": len(made["vocab"]) - 1,
    }


@pytest.fixture(scope="module")
def workdir(checkpoint, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("imported") / "run"
    result = _program(
        "training.import_checkpoint", "marian", str(checkpoint["dir"]), "--workdir", str(path)
    )
    assert result.stdout.strip() == str(path)
    return path


@pytest.fixture(scope="module")
def hf(checkpoint) -> dict:
    """What transformers makes of the test sentences: ids, greedy ids and text."""
    from transformers import MarianTokenizer

    tokenizer = MarianTokenizer.from_pretrained(str(checkpoint["dir"]))
    sources = [source for source, _ in checkpoint["pairs"]]
    generated = greedy_generate(checkpoint["dir"], sources, MAX_NEW_TOKENS)
    assert sum(row[-1] == 0 for row in generated) >= SENTENCES - 1, (
        "the fixture's model should end with EOS"
    )
    return {
        "tokenizer": tokenizer,
        "sources": sources,
        "generated": generated,
        "texts": [tokenizer.decode(row, skip_special_tokens=True) for row in generated],
    }


@pytest.fixture(scope="module")
def trained(workdir):
    from keras_transformer import Workdir

    return Workdir(workdir).load()


def _padded(rows: list[list[int]], pad: int) -> np.ndarray:
    width = max(len(row) for row in rows)
    return np.array([row + [pad] * (width - len(row)) for row in rows], dtype=np.int32)


def _until_eos(row, eos: int = 0) -> list[int]:
    row = [int(i) for i in row]
    return row[: row.index(eos) + 1] if eos in row else row


def test_the_workdir_has_the_standard_layout_and_the_marian_options(workdir, checkpoint):
    from keras_transformer import Workdir

    run = Workdir(workdir).check()
    config = run.transformer_config()
    assert (config.pad_id, config.eos_id, config.unk_id, config.bos_id) == (
        checkpoint["pad"],
        0,
        1,
        checkpoint["pad"],
    )
    assert (config.activation, config.position_encoding, config.final_logits_bias) == (
        "swish",
        "halves",
        True,
    )
    assert (
        config.embedding_scale is None
        and config.layer_norm_epsilon == 1e-5
        and config.share_embeddings
    )
    assert config.src_vocab_size == config.tgt_vocab_size == len(checkpoint["vocab"])
    assert sorted(p.name for p in run.tokenizer_dir.iterdir()) == [
        "source.spm",
        "target.spm",
        "tokenizer_config.json",
        "vocab.json",
    ]
    assert json.loads(run.metrics_path.read_text())["imported"]["kind"] == "marian"


def test_tokenizer_ids_are_marians(trained, hf):
    from keras_transformer.data import encode_sources

    ours = encode_sources(trained.src_tokenizer, tf.constant(hf["sources"]), trained.max_src_length)
    assert ours.to_list() == hf["tokenizer"](hf["sources"])["input_ids"]


def test_teacher_forced_logits_equal_pytorchs_on_a_padded_batch(trained, checkpoint, hf):
    pad = checkpoint["pad"]
    sources = _padded(hf["tokenizer"](hf["sources"])["input_ids"], pad)
    labels = hf["tokenizer"](text_target=[t for _, t in checkpoint["pairs"]])["input_ids"]
    target_in = _padded([[pad] + row[:-1] for row in labels], pad)
    theirs = torch_logits(checkpoint["dir"], sources, target_in, pad)
    ours = trained.model((tf.constant(sources), tf.constant(target_in)), training=False).numpy()
    for row, label in enumerate(
        labels
    ):  # the positions that predict a label (not the padding after)
        np.testing.assert_allclose(
            ours[row, : len(label)], theirs[row, : len(label)], atol=1e-4, rtol=1e-4
        )


def test_greedy_ids_equal_generates(trained, hf):
    from keras_transformer.data import encode_sources
    from keras_transformer.decoding import Greedy, Limits, decode

    source_ids = encode_sources(
        trained.src_tokenizer, tf.constant(hf["sources"]), trained.max_src_length
    ).to_tensor(trained.model.config.pad_id)
    out = decode(trained.model, source_ids, Greedy(), Limits(max_length=MAX_NEW_TOKENS))  # greedy
    tokens = out.tokens[:, 0]
    assert [_until_eos(row) for row in tokens.numpy()] == hf["generated"]


@pytest.fixture(scope="module")
def saved_model(workdir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "opus"
    _in_process(
        "export.saved_model", "--workdir", str(workdir), "--out", str(out), "--version", "1"
    )
    return out / "1"


def test_the_saved_models_greedy_signature_gives_transformers_text(saved_model, hf):
    """Loaded in a fresh process with only tensorflow and tensorflow_text, as a server would."""
    script = (
        "import json, sys, tensorflow as tf, tensorflow_text\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "out = m.signatures['translate_greedy'](inputs=tf.constant(json.loads(sys.argv[2])))\n"
        "print(json.dumps([t.decode() for t in out['translations'].numpy()]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(saved_model), json.dumps(hf["sources"])],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "keras_transformer" not in result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == hf["texts"]


def test_the_saved_model_stores_each_weight_once(saved_model, trained):
    """TF Serving loads the tf.Variables behind the model, each once (not a second
    copy through the Keras model's own variables)."""
    stored = tf.train.list_variables(str(saved_model / "variables" / "variables"))
    weights = sum(
        int(np.prod(shape)) for name, shape in stored if name.startswith("model_variables/")
    )
    assert weights == sum(int(np.prod(variable.shape)) for variable in trained.model.variables)
    assert not [name for name, _ in stored if name.startswith("model/")]


@pytest.mark.slow  # a TFLite conversion; the SavedModel's ids are checked by default
def test_tflite_ids_equal_the_saved_models(workdir, saved_model, trained, hf, tmp_path):
    """The builtins-only TFLite translator gives generate's ids, and they read as the
    SavedModel's greedy translations."""
    from ai_edge_litert.interpreter import Interpreter

    from keras_transformer.data import encode_sources

    out = tmp_path / "opus.tflite"
    _program(
        "export.tflite",
        "--workdir",
        str(workdir),
        "--out",
        str(out),
        "--max-src-length",
        "40",
        "--max-tgt-length",
        str(MAX_NEW_TOKENS),
    )
    runner = Interpreter(model_content=out.read_bytes()).get_signature_runner()
    pad = trained.model.config.pad_id
    ids = (
        encode_sources(trained.src_tokenizer, tf.constant(hf["sources"]), 40).to_tensor(pad).numpy()
    )
    ids = np.pad(ids, [(0, 0), (0, 40 - ids.shape[1])], constant_values=pad)
    lite = [_until_eos(runner(source_ids=row[np.newaxis])["target_ids"][0]) for row in ids]
    assert lite == hf["generated"]
    served = tf.saved_model.load(str(saved_model)).signatures["translate_greedy"]
    texts = [t.decode() for t in served(inputs=tf.constant(hf["sources"]))["translations"].numpy()]
    assert [
        t.decode() for t in trained.tgt_tokenizer.detokenize(_padded(lite, pad)).numpy()
    ] == texts


def test_ctranslate2_greedy_ids_equal_generates(workdir, trained, hf, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    _in_process("export.ctranslate2", "--workdir", str(workdir), "--out", str(out))
    vocabulary = json.loads((out / "shared_vocabulary.json").read_text())
    source_pieces = [
        trained.src_tokenizer.pieces(row)
        for row in trained.src_tokenizer.tokenize(tf.constant(hf["sources"])).to_list()
    ]
    translator = ctranslate2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)
    results = translator.translate_batch(
        source_pieces, beam_size=1, max_decoding_length=MAX_NEW_TOKENS, min_decoding_length=0
    )
    ids = [[vocabulary.index(piece) for piece in r.hypotheses[0]] for r in results]
    assert [row + [0] for row in ids] == [
        row if row[-1] == 0 else row + [0] for row in hf["generated"]
    ]


def test_one_epoch_of_fit_lowers_the_loss(trained, checkpoint):
    import keras

    import keras_transformer as kt
    from keras_transformer.data import PairSource, make_dataset

    model = trained.model
    pairs = checkpoint["train_pairs"][:256]

    def data():
        return make_dataset(
            PairSource.from_pairs(pairs).dataset(),
            trained.src_tokenizer,
            trained.tgt_tokenizer,
            max_src_length=64,
            max_tgt_length=64,
            batch_size=32,
            shuffle_buffer=0,
        )

    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=kt.MaskedLabelSmoothedCrossEntropy(0.0, pad_id=model.config.pad_id),
    )
    before = model.evaluate(data(), verbose=0)
    model.fit(data(), epochs=1, verbose=0)
    after = model.evaluate(data(), verbose=0)
    assert after < before


@pytest.mark.slow  # a training program run; one fit epoch is checked by default
def test_fine_tuning_starts_from_the_imported_model(workdir, checkpoint, tmp_path):
    from keras_transformer import Workdir

    run = tmp_path / "tuned"
    _program(
        "training.train",
        "--config",
        "demo",
        "--workdir",
        str(run),
        "--set",
        f"model.init_from={workdir}",
        "--set",
        "data.synthetic={train: 400, valid: 8, test: 8, seed: 0}",
        "--set",
        "training.epochs=1",
        "--set",
        "training.steps_per_epoch=4",
        "--set",
        "training.steps_per_execution=2",
        "--set",
        "training.average_last=1",
        "--set",
        "training.batch_tokens=1024",
        "--set",
        "training.warmup_steps=100",
        "--set",
        "evaluation.max_sentences=4",
    )
    imported, tuned = Workdir(workdir), Workdir(run)
    assert tuned.transformer_config() == imported.transformer_config()
    for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json"):
        assert (tuned.tokenizer_dir / name).read_bytes() == (
            imported.tokenizer_dir / name
        ).read_bytes()
    # The demo pair is what the checkpoint learned: far below a new model's loss (ln V ≈ 5.6).
    first_loss = json.loads(tuned.metrics_path.read_text())["history"]["loss"][0]
    assert first_loss < 4.0
    assert tuned.config["model"]["init_from"] == str(workdir)


@pytest.mark.slow  # a second import
def test_a_pickle_is_read_only_when_allowed(checkpoint, workdir, tmp_path):
    import torch
    from safetensors.numpy import load_file

    from keras_transformer import Workdir

    pickled = tmp_path / "pickled"
    shutil.copytree(checkpoint["dir"], pickled)
    state = {
        name: torch.from_numpy(value)
        for name, value in load_file(str(pickled / "model.safetensors")).items()
    }
    torch.save(state, pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    refused = _program(
        "training.import_checkpoint",
        "marian",
        str(pickled),
        "--workdir",
        str(tmp_path / "w"),
        check=False,
    )
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "--allow-pickle" in refused.stderr and not (tmp_path / "w").exists()
    _program(
        "training.import_checkpoint",
        "marian",
        str(pickled),
        "--workdir",
        str(tmp_path / "w"),
        "--allow-pickle",
    )
    ours = Workdir(tmp_path / "w").load_model()
    for mine, theirs in zip(ours.weights, Workdir(workdir).load_model().weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


@pytest.mark.slow  # three program runs
def test_the_programs_take_the_imported_workdir(workdir, saved_model, checkpoint, hf, tmp_path):
    src, ref = tmp_path / "test.src", tmp_path / "test.tgt"
    src.write_text("\n".join(s for s, _ in checkpoint["pairs"]) + "\n")
    ref.write_text("\n".join(t for _, t in checkpoint["pairs"]) + "\n")
    _program(
        "training.evaluate",
        "--workdir",
        str(workdir),
        "--src",
        str(src),
        "--ref",
        str(ref),
        "--beam",
        "2",
        "--out",
        str(tmp_path / "eval.json"),
    )
    assert json.loads((tmp_path / "eval.json").read_text())["decoding"] == "beam2"
    _program(
        "training.tune_decoding",
        "--workdir",
        str(workdir),
        "--src",
        str(src),
        "--ref",
        str(ref),
        "--beams",
        "1",
        "2",
        "--alphas",
        "0.6",
    )
    translated = _program(
        "export.translate", "--model", str(saved_model), "--beam", "1", hf["sources"][0]
    )
    assert translated.stdout.strip() == hf["texts"][0]


def test_an_existing_workdir_is_kept_without_overwrite(checkpoint, workdir):
    before = sorted(p.name for p in workdir.iterdir())
    status, stderr = _in_process(
        "training.import_checkpoint",
        "marian",
        str(checkpoint["dir"]),
        "--workdir",
        str(workdir),
        check=False,
    )
    assert status == 2 and "--overwrite" in stderr
    assert sorted(p.name for p in workdir.iterdir()) == before


def test_separate_vocabularies_import(tmp_path):
    """A checkpoint with a source and a target vocabulary (and embedding matrix), pad = 2."""
    from keras_transformer.data import encode_sources
    from keras_transformer.decoding import Greedy, Limits, decode
    from keras_transformer.marian import import_marian

    made = write_marian_checkpoint(tmp_path / "separate", steps=150, separate_vocabs=True)
    trained = import_marian(tmp_path / "separate", tmp_path / "run").load()
    config = trained.model.config
    assert not config.share_embeddings and (config.pad_id, config.bos_id) == (
        made["pad"],
        made["pad"],
    )
    assert config.tgt_vocab_size == len(made["vocab"])
    from transformers import MarianTokenizer

    tokenizer = MarianTokenizer.from_pretrained(str(tmp_path / "separate"))
    pairs = made["pairs"][:4]
    sources = encode_sources(
        trained.src_tokenizer, tf.constant([s for s, _ in pairs]), trained.max_src_length
    )
    assert sources.to_list() == tokenizer([s for s, _ in pairs])["input_ids"]
    sources = sources.to_tensor(config.pad_id).numpy()
    labels = tokenizer(text_target=[t for _, t in pairs])["input_ids"]
    target_in = _padded([[config.pad_id] + row[:-1] for row in labels], config.pad_id)
    theirs = torch_logits(tmp_path / "separate", sources, target_in, config.pad_id)
    ours = trained.model((tf.constant(sources), tf.constant(target_in)), training=False).numpy()
    for row, label in enumerate(labels):
        np.testing.assert_allclose(
            ours[row, : len(label)], theirs[row, : len(label)], atol=1e-4, rtol=1e-4
        )
    generated = greedy_generate(tmp_path / "separate", [s for s, _ in pairs], MAX_NEW_TOKENS)
    out = decode(trained.model, sources, Greedy(), Limits(max_length=MAX_NEW_TOKENS))  # greedy
    tokens = out.tokens[:, 0]
    assert [_until_eos(row) for row in tokens.numpy()] == generated
    texts = [tokenizer.decode(row, skip_special_tokens=True) for row in generated]
    assert [t.decode() for t in trained.tgt_tokenizer.detokenize(tokens).numpy()] == texts
