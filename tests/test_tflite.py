"""TFLite export: builtin ops only, and the LiteRT interpreter gives the same
ids as our greedy decoder (float) or differs only at near-ties (dynamic-range int8);
a beam-search file gives the library's beam search, with the same signature."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hang_guard import HANG_TIMEOUT
from tflite_ops import op_names

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
MAX_SRC, MAX_TGT = 32, 24
BEAM, ALPHA = 4, 0.6
SENTENCES = [
    "the big dog sees 3 red cats",
    "a boy sleeps",
    "the teacher gave a book to the farmer",
    "yesterday the hungry children visited the tiny birds",
    "today the horse sells the students",
]


@pytest.fixture(scope="module")
def trained(tiny_workdir):
    path = tiny_workdir
    from keras_transformer import Workdir

    loaded = Workdir(path).load()
    model, src_tok = loaded.model, loaded.src_tokenizer
    from keras_transformer.data import encode_sources

    ids = encode_sources(src_tok, tf.constant(SENTENCES), MAX_SRC).to_tensor(
        shape=[len(SENTENCES), MAX_SRC]
    )
    return path, model, tf.cast(ids, tf.int32).numpy()


def _run(flatbuffer: bytes, ids: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=flatbuffer)
    runner = interpreter.get_signature_runner()
    return np.concatenate([runner(source_ids=row[np.newaxis])["target_ids"] for row in ids])


def _reference(model, ids):
    from keras_transformer.decoding import Greedy, KernelChoice, Limits, decode

    out = decode(
        model, ids, Greedy(), Limits(max_length=MAX_TGT), choice=KernelChoice(static_shapes=True)
    )
    return out.tokens[:, 0].numpy()


@pytest.fixture(scope="module")
def float_model(trained):
    from keras_transformer.exporters.tflite import convert

    _, model, _ = trained
    return convert(model, MAX_SRC, MAX_TGT)


def test_builtin_ops_only(float_model):
    builtins, customs = op_names(float_model)
    assert not customs, f"custom/Flex ops: {customs}"
    assert "WHILE" in builtins


def test_litert_interpreter_matches_our_greedy_decoder(trained, float_model):
    _, model, ids = trained
    np.testing.assert_array_equal(_run(float_model, ids), _reference(model, ids))


def test_litert_interpreter_matches_the_saved_models_greedy_ids(trained, float_model, tmp_path):
    from keras_transformer.exporters import export_saved_model

    path, _, ids = trained
    exported = export_saved_model(path, tmp_path / "exports", beam_size=1)
    served = tf.saved_model.load(str(exported)).signatures["translate_ids"](
        source_ids=tf.constant(ids)
    )
    served_ids = served["target_ids"].numpy()
    lite = _run(float_model, ids)
    for row_lite, row_served in zip(lite, served_ids):
        stop = min(list(row_served).index(3) + 1 if 3 in row_served else len(row_served), MAX_TGT)
        np.testing.assert_array_equal(row_lite[:stop], row_served[:stop])


def test_litert_translator_reads_text_as_the_translator_and_times_the_model(
    trained, float_model, tmp_path
):
    """``LiteRTTranslator``: the file's ids for the sentences as ``encode_sources`` gives them,
    detokenized as ``Translator`` does; a blank sentence is ``""``; the interpreter's time."""
    from keras_transformer import Workdir
    from keras_transformer.exporters import LiteRTTranslator

    path, model, ids = trained
    file = tmp_path / "model.tflite"
    file.write_bytes(float_model)
    translator = LiteRTTranslator.from_workdir(file, path)
    assert (translator.max_src_length, translator.num_threads) == (MAX_SRC, 1)
    assert translator.size_bytes == len(float_model)
    np.testing.assert_array_equal(translator.encode(SENTENCES), ids)
    result = translator.run([*SENTENCES, " \t "])
    want = _reference(model, ids)
    np.testing.assert_array_equal(result.target_ids[: len(SENTENCES)], want)
    _, tgt_tokenizer = Workdir(path).load_tokenizers()
    texts = [text.decode() for text in tgt_tokenizer.detokenize(want).numpy()]
    assert result.texts == [*texts, ""]
    assert result.seconds > 0 and result.ms_per_sentence == pytest.approx(1000 * result.seconds / 6)
    assert translator.translate(SENTENCES[:2]) == texts[:2]


def test_litert_translator_refuses_what_it_cannot_run(trained, tmp_path):
    from keras_transformer import Workdir
    from keras_transformer.exporters import LiteRTTranslator

    path, _, _ = trained
    src, tgt = Workdir(path).load_tokenizers()
    with pytest.raises(ValueError, match="No .tflite file"):
        LiteRTTranslator(tmp_path / "missing.tflite", src, tgt)
    (tmp_path / "some.tflite").write_bytes(b"")
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        LiteRTTranslator(tmp_path / "some.tflite", src, tgt, num_threads=0)

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.int32, name="x")])
        def double(self, x):
            return {"y": 2 * x}

    module = Doubler()
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.double.get_concrete_function()], module
    )
    (tmp_path / "other.tflite").write_bytes(converter.convert())
    with pytest.raises(ValueError, match="not a translator of export_tflite"):
        LiteRTTranslator(tmp_path / "other.tflite", src, tgt)


def test_dynamic_range_quantization_differs_only_at_near_ties(trained, float_model):
    from keras_transformer.exporters.tflite import convert

    _, model, ids = trained
    quantized = convert(model, MAX_SRC, MAX_TGT, quantize="dynamic")
    assert not op_names(quantized)[1]
    assert len(quantized) < 0.5 * len(float_model)
    # The fixture's model is trained for 60 steps: its next-token distributions
    # are flat, so int8 rounding may flip near-ties and whole greedy outputs
    # differ from float32 (2 of 5 agreed after the last training-step change,
    # 3+ before). What quantization must not do is pick a token the float
    # model finds clearly worse: at each sentence's first divergence, the
    # float model's log-probability of the int8 choice is within 0.05 nats of
    # its own choice (measured: ≤ 0.01 with AVX-512, 0.0097 on an AVX2-only CPU, where 4 of 5
    # agreed: LiteRT's int8 kernels widen to 16 bits before multiplying, so nothing saturates).
    import keras_transformer as kt

    float_ids, int8_ids = _reference(model, ids), _run(quantized, ids)
    for source, want, got in zip(ids, float_ids, int8_ids):
        differ = np.flatnonzero(want != got)
        if not differ.size:
            continue
        t = differ[0]
        prefix = np.concatenate([[kt.BOS_ID], want[:t]])[np.newaxis].astype("int32")
        log_probs = tf.nn.log_softmax(
            model((source[np.newaxis], prefix), training=False)[0, -1]
        ).numpy()
        assert log_probs[want[t]] - log_probs[got[t]] <= 0.05, (
            t,
            want[t],
            got[t],
            log_probs[want[t]],
            log_probs[got[t]],
        )


def test_bf16_trained_workdir_exports_a_float32_graph_by_the_cli(trained, tmp_path):
    """A workdir trained under mixed_bfloat16 loads as float32 by default (bf16 ops are not
    TFLite builtins), with the same weights; ``precision=None`` keeps the training policy.
    ``python -m export.tflite`` converts that workdir (one conversion serves both claims):
    the file, written without a staging folder left behind, gives our float32 greedy ids."""
    import shutil

    from keras_transformer import Workdir, with_precision

    path, model, ids = trained
    bf16_workdir = tmp_path / "bf16"
    shutil.copytree(
        path, bf16_workdir, ignore=shutil.ignore_patterns("model.keras", "export*", "*.tflite")
    )
    bf16_model = with_precision(model, "bf16")
    assert bf16_model.dtype_policy.name == "mixed_bfloat16"
    bf16_model.save(bf16_workdir / "model.keras")

    kept = Workdir(bf16_workdir).load_model(precision=None)
    assert kept.dtype_policy.name == "mixed_bfloat16"
    loaded = Workdir(bf16_workdir).load_model()
    assert loaded.dtype_policy.name == "float32"
    for ours, theirs in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
    with pytest.raises(ValueError, match="precision 'fp8'"):
        with_precision(model, "fp8")

    out = tmp_path / "model.tflite"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "export.tflite",
            "--workdir",
            str(bf16_workdir),
            "--out",
            str(out),
            "--max-src-length",
            str(MAX_SRC),
            "--max-tgt-length",
            str(MAX_TGT),
        ],
        cwd=CHECKOUT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert out.stat().st_size > 0 and not list(tmp_path.glob(".staging-*"))
    np.testing.assert_array_equal(_run(out.read_bytes(), ids), _reference(model, ids))


@pytest.fixture(scope="module")
def held_out(trained):
    """The tiny workdir's test sources (``tests/conftest.py``'s synthetic split), as ids."""
    from keras_transformer import Workdir
    from keras_transformer.data import demo_splits, encode_sources

    path, _, _ = trained
    sources = [source for source, _ in demo_splits(train=2000, valid=20, test=20, seed=1)["test"]]
    src_tokenizer, _ = Workdir(path).load_tokenizers()
    ids = encode_sources(src_tokenizer, tf.constant(sources), MAX_SRC)
    return sources, tf.cast(ids.to_tensor(shape=[len(sources), MAX_SRC]), tf.int32).numpy()


@pytest.fixture(scope="module")
def beam_model(trained):
    from keras_transformer.exporters.tflite import convert, tflite_search

    _, model, _ = trained
    return convert(model, MAX_SRC, MAX_TGT, search=tflite_search(beam=BEAM, alpha=ALPHA))


def _library_beam(model, ids, **choice):
    """The library's best beam hypothesis a sentence, padded to ``MAX_TGT`` ids."""
    from keras_transformer.decoding import Beam, KernelChoice, Limits, decode

    out = decode(
        model, ids, Beam(BEAM, ALPHA), Limits(max_length=MAX_TGT), choice=KernelChoice(**choice)
    )
    tokens = out.tokens[:, 0].numpy()
    return np.pad(tokens, [[0, 0], [0, MAX_TGT - tokens.shape[1]]])


def test_beam_file_is_the_librarys_beam_search_with_builtin_ops_only(trained, held_out, beam_model):
    """Beam 4 in LiteRT: the ids of the library's beam search, sentence for sentence, with a
    growing cache (the SavedModel's and ``Translator``'s decoder) and with static shapes;
    builtin ops only, the greedy file's signature, and the search in the file's metadata."""
    from ai_edge_litert.interpreter import Interpreter

    from keras_transformer.exporters.tflite import read_search_metadata

    _, model, _ = trained
    _, ids = held_out
    builtins, customs = op_names(beam_model)
    assert not customs, f"custom/Flex ops: {customs}"
    assert {"WHILE", "TOPK_V2"} <= builtins
    # log-probabilities by logsumexp: LiteRT's LOG_SOFTMAX kernel is several times slower
    assert "LOG_SOFTMAX" not in builtins
    signatures = Interpreter(model_content=beam_model).get_signature_list()
    assert signatures == {"serving_default": {"inputs": ["source_ids"], "outputs": ["target_ids"]}}
    lite = _run(beam_model, ids)
    assert lite.shape == (len(ids), MAX_TGT)
    np.testing.assert_array_equal(lite, _library_beam(model, ids))
    np.testing.assert_array_equal(lite, _library_beam(model, ids, static_shapes=True))
    search = read_search_metadata(beam_model)
    assert search == {"beam": BEAM, "alpha": ALPHA, "stopping": "heuristic"}


def test_beam_file_gives_the_saved_models_beam_ids(trained, held_out, beam_model, tmp_path):
    """The SavedModel of the same beam and alpha (``translate_ids``) gives the file's ids, EOS
    included, on the held-out sentences."""
    from keras_transformer.exporters import export_saved_model

    path, model, _ = trained
    _, ids = held_out
    exported = export_saved_model(path, tmp_path / "exports", beam_size=BEAM, alpha=ALPHA)
    served = tf.saved_model.load(str(exported)).signatures["translate_ids"](
        source_ids=tf.constant(ids)
    )
    lite = _run(beam_model, ids)
    eos = model.config.eos_id
    for row_lite, row_served in zip(lite, served["target_ids"].numpy()):
        assert eos in row_lite and eos in row_served
        stop = list(row_served).index(eos) + 1
        np.testing.assert_array_equal(row_lite[:stop], row_served[:stop])


def test_greedy_file_records_no_search(float_model):
    """A greedy file is what it was before beam search came: no metadata of ours."""
    from keras_transformer.exporters.tflite import read_search_metadata

    assert read_search_metadata(float_model) is None


def test_beam_file_translates_as_the_translator_beam_search(
    trained, held_out, beam_model, tmp_path
):
    """``LiteRTTranslator`` runs a beam file unchanged: the texts of ``Translator``'s beam 4,
    and the search it reads from the file."""
    from keras_transformer import Translator
    from keras_transformer.exporters import LiteRTTranslator

    path, model, _ = trained
    sources, _ = held_out
    file = tmp_path / "beam.tflite"
    file.write_bytes(beam_model)
    lite = LiteRTTranslator.from_workdir(file, path)
    assert (lite.beam, lite.alpha, lite.decoding) == (BEAM, ALPHA, "beam4")
    reference = Translator(
        model,
        lite.src_tokenizer,
        lite.tgt_tokenizer,
        beam_size=BEAM,
        alpha=ALPHA,
        max_length=MAX_TGT,
        max_src_length=MAX_SRC,
    )
    assert lite.translate(sources) == reference.translate(sources)


def test_int8_beam_file_converts_and_runs(trained, held_out, beam_model):
    """``quantize="dynamic"`` with a beam: builtins only, smaller, and each output a
    hypothesis that ends with EOS within the width."""
    from keras_transformer.exporters.tflite import convert, tflite_search

    _, model, _ = trained
    _, ids = held_out
    quantized = convert(
        model, MAX_SRC, MAX_TGT, quantize="dynamic", search=tflite_search(beam=BEAM)
    )
    assert not op_names(quantized)[1]
    assert len(quantized) < 0.5 * len(beam_model)
    out = _run(quantized, ids[:4])
    eos = model.config.eos_id
    for row in out:
        assert eos in row, row
        end = list(row).index(eos)
        assert row[0] != eos and not (row[end + 1 :] != model.config.pad_id).any(), row


def test_search_of_a_file(capsys):
    """``beam`` and ``alpha``: greedy by default and at 1, the SavedModel's alpha by default,
    refused out of range or alpha alone; the CLI's help names that default."""
    from keras_transformer.cli import export_tflite as program
    from keras_transformer.decoding import Beam, Greedy
    from keras_transformer.exporters.tflite import tflite_search

    assert tflite_search() == Greedy() == tflite_search(beam=1)
    assert tflite_search(beam=3) == Beam(3, Beam().alpha)
    assert tflite_search(beam=2, alpha=1.2) == Beam(2, 1.2)
    with pytest.raises(ValueError, match="give beam=N as well"):
        tflite_search(alpha=0.6)
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        tflite_search(beam=0)
    with pytest.raises(ValueError, match="alpha must be a finite number"):
        tflite_search(beam=2, alpha=float("nan"))
    with pytest.raises(SystemExit):
        program.parse_args(["--help"])
    assert f"(default: {Beam().alpha}, as kt export" in " ".join(capsys.readouterr().out.split())


def test_cli_writes_a_beam_file(trained, held_out, tmp_path):
    """``kt export tflite --beam 2``: a file of that beam search."""
    from keras_transformer.cli.export_tflite import main
    from keras_transformer.exporters.tflite import read_search_metadata

    path, model, _ = trained
    _, ids = held_out
    out = tmp_path / "beam2.tflite"
    argv = ["--workdir", str(path), "--out", str(out), "--beam", "2", "--alpha", "1.0"]
    argv += ["--max-src-length", str(MAX_SRC), "--max-tgt-length", str(MAX_TGT)]
    assert main(argv) == 0
    flatbuffer = out.read_bytes()
    assert read_search_metadata(flatbuffer) == {"beam": 2, "alpha": 1.0, "stopping": "heuristic"}
    from keras_transformer.decoding import Beam, Limits, decode

    want = decode(model, ids[:4], Beam(2, 1.0), Limits(max_length=MAX_TGT)).tokens[:, 0].numpy()
    want = np.pad(want, [[0, 0], [0, MAX_TGT - want.shape[1]]])
    np.testing.assert_array_equal(_run(flatbuffer, ids[:4]), want)
