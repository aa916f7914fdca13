"""CTranslate2 export (``python -m export.ctranslate2``): the converted model
reproduces our greedy decoding token for token and our teacher-forced
log-probabilities, for the trained post-LN tied model and for random-weight
pre-LN (GELU, learned positions) and untied (separate vocabularies, a model
wider than its tokenizer) variants; the int8 model computes the int8
arithmetic of this CPU's CTranslate2 backend (``int8_reference``), which is
within the quantization error of float32 where the products are exact; an
existing output directory is never overwritten without ``--force``."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml
from hang_guard import HANG_TIMEOUT

ctranslate2 = pytest.importorskip("ctranslate2")

import int8_reference  # noqa: E402
from examples import modules_with_examples, run_examples  # noqa: E402

import keras_transformer.cli.export_ctranslate2 as ct2_program  # noqa: E402
import keras_transformer.exporters.ctranslate2 as ct2_export  # noqa: E402
from keras_transformer import Transformer, TransformerConfig  # noqa: E402
from keras_transformer.data import encode_sources, target_ids  # noqa: E402
from keras_transformer.decoding import Greedy, Limits, decode  # noqa: E402
from keras_transformer.tokenization import train_sentencepiece  # noqa: E402
from keras_transformer.training.corpora import load_corpus  # noqa: E402
from keras_transformer.workdir import Workdir  # noqa: E402

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
MAX_DECODING_LENGTH = 40
THRESHOLD_INT8_AGREEMENT = 0.75
# int8 tolerances, from the error model in int8_reference (measured on the three cases):
# CTranslate2's
# int8 model differs from the emulation of its backend's arithmetic by <= 0.002 nats on average and
# <= 0.044 at most (rounding ties), from the other arithmetic by 0.13-0.19 on average.
EMULATION_MEAN, EMULATION_MAX = 0.01, 0.15
# Exact int8 arithmetic against float32: 0.007-0.011 on average, <= 0.048 at most.
QUANTIZATION_MEAN, QUANTIZATION_MAX = 0.05, 0.2
EOS_ID = 3

# Random-weight variants of the trained workdir: config overrides, and whether
# the variant gets its own source/target SentencePiece models.
VARIANTS = {
    "post_ln_tied_trained": None,
    "pre_ln_gelu_learned_positions_random": dict(
        model={"norm_first": True, "activation": "gelu", "learned_positions": True},
        separate_vocab=False,
    ),
    "untied_separate_vocab_random": dict(
        model={"tie_embeddings": False, "share_embeddings": False}, separate_vocab=True
    ),
}


@pytest.fixture(scope="module")
def workdir(tiny_workdir):
    return tiny_workdir


@pytest.fixture(scope="module")
def test_pairs(workdir):
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    pairs = load_corpus(config["data"])["test"]
    assert len(pairs) == 20
    return pairs


def _randomized_workdir(
    base: Path, dest: Path, model_overrides: dict, separate_vocab: bool
) -> Path:
    """A workdir like ``base`` with another architecture and seeded random
    weights: every bias and LayerNorm scale/offset moved off its initial 0/1
    so that a weight mapped to the wrong place (or dropped) shows."""
    config = yaml.safe_load((base / "config.yaml").read_text())
    loaded = Workdir(base).load()
    base_model, src_tok, tgt_tok = loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer
    model_options = {**base_model.config.to_dict(), **model_overrides}
    (dest / "tokenizer").mkdir(parents=True)
    if separate_vocab:
        pairs = load_corpus(config["data"])["train"]
        train_sentencepiece([s for s, _ in pairs], dest / "tokenizer" / "spm_src", 300)
        train_sentencepiece([t for _, t in pairs], dest / "tokenizer" / "spm_tgt", 200)
        config["tokenizer"]["shared"] = False
        src_tok, tgt_tok = _tokenizers(dest / "tokenizer", shared=False)
        # The model may be wider than its tokenizer: the extra ids need filler pieces.
        model_options.update(
            src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size + 5
        )
    else:
        shutil.copytree(base / "tokenizer", dest / "tokenizer", dirs_exist_ok=True)
    config["model"].update(model_overrides)
    keras.utils.set_random_seed(0)  # module fixtures run before conftest's per-test seeding
    model = Transformer(TransformerConfig.from_dict(model_options))
    model.build()
    rng = np.random.default_rng(0)
    for variable in model.weights:
        value = variable.numpy()
        noise = rng.normal(0.0, 0.2 if value.ndim == 1 else 0.02, value.shape)
        variable.assign((value + noise).astype(value.dtype))
    model.save(dest / "model.keras")
    (dest / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def _tokenizers(directory: Path, shared: bool):
    from keras_transformer.tokenization import SubwordTokenizer, tokenizer_paths

    return tuple(SubwordTokenizer.from_file(p) for p in tokenizer_paths(directory, shared))


@pytest.fixture(scope="module", params=list(VARIANTS))
def case(request, workdir, test_pairs, tmp_path_factory):
    """Workdir, its float32 CTranslate2 conversion, the loaded model, tokenizers
    and config, and our greedy output for the test sentences."""
    variant = VARIANTS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    if variant is None:
        source = workdir
        out = root / "ct2"
        # The trained model goes through the real command line.
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "export.ctranslate2",
                "--workdir",
                str(source),
                "--out",
                str(out),
            ],
            cwd=CHECKOUT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=HANG_TIMEOUT,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        assert result.stdout.strip() == str(out)
    else:
        source = _randomized_workdir(
            workdir, root / "run", variant["model"], variant["separate_vocab"]
        )
        out = ct2_export.export_ctranslate2(source, root / "ct2")
    trained = Workdir(source).load()
    model, src_tok, tgt_tok = trained.model, trained.src_tokenizer, trained.tgt_tokenizer
    config = Workdir(source).config
    case = dict(
        name=request.param,
        workdir=source,
        out=out,
        model=model,
        src_tok=src_tok,
        tgt_tok=tgt_tok,
        config=config,
    )
    case["greedy"] = _ours(case, [s for s, _ in test_pairs])  # once per case: the slow part
    return case


def _target_vocabulary(out: Path) -> list[str]:
    name = (
        "shared_vocabulary.json"
        if (out / "shared_vocabulary.json").exists()
        else "target_vocabulary.json"
    )
    return json.loads((out / name).read_text())


def _ours(case, sources):
    """Our greedy tokens (as pieces, EOS and after dropped), their scores as
    CTranslate2 computes them (see ``_translate``), and the source pieces
    CTranslate2 gets (without the trailing </s>: it adds it)."""
    model = case["model"]
    source_ids = encode_sources(
        case["src_tok"], tf.constant(sources), case["config"]["training"]["max_src_length"]
    ).to_tensor()
    out = decode(model, source_ids, Greedy(), Limits(max_length=MAX_DECODING_LENGTH))
    tokens, scores = out.tokens[:, 0], out.log_probs[:, 0]
    vocabulary = _target_vocabulary(case["out"])
    hypotheses = []
    for row in tokens.numpy().tolist():
        row = row[: row.index(EOS_ID)] if EOS_ID in row else row
        hypotheses.append([vocabulary[i] for i in row])
    source_pieces = _source_pieces(case["src_tok"], source_ids)
    # Our decoder never emits pad or BOS and scores the model's own log-probabilities;
    # CTranslate2, told to suppress them, renormalises each step over the other tokens:
    # its score adds -log(1 - p(pad) - p(BOS)) for every decoded token.
    c = model.config
    target_in = np.concatenate(
        [np.full((len(sources), 1), c.bos_id), tokens.numpy()[:, :-1]], axis=1
    )
    log_probs = tf.nn.log_softmax(
        model((source_ids, target_in.astype(np.int32)), training=False)
    ).numpy()
    banned = np.exp(log_probs[..., [c.pad_id, c.bos_id]].astype(np.float64)).sum(axis=-1)
    lengths = np.array(
        [list(row).index(EOS_ID) + 1 if EOS_ID in row else len(row) for row in tokens.numpy()]
    )
    decoded = np.arange(tokens.shape[1])[np.newaxis, :] < lengths[:, np.newaxis]
    renormalised = scores.numpy() - np.where(decoded, np.log1p(-banned), 0.0).sum(axis=1)
    return hypotheses, renormalised, source_pieces


# The pieces our decoders never emit (decoding.never_emitted): CTranslate2 is told.
SUPPRESSED = [["<pad>"], ["<s>"]]


def _source_pieces(src_tok, source_ids) -> list[list[str]]:
    """The pieces CTranslate2 gets for our ``[batch, src_len]`` source ids: each
    row up to its EOS, without it (the converted model adds it, ``add_source_eos``)."""
    pieces = []
    for row in np.asarray(source_ids).tolist():
        assert EOS_ID in row
        pieces.append(src_tok.pieces(row[: row.index(EOS_ID)]))
    return pieces


def _ct2_translator(out: Path):
    return ctranslate2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)


def _translate_batch(translator, source_pieces, **options):
    """CTranslate2's ``translate_batch`` with the options that make its scores
    plain sums of log-probabilities, ``options`` on top."""
    # min_decoding_length=0: CTranslate2's default (1) masks EOS at the first step, which
    # our decoders do not (and that renormalises the step's log-probabilities).
    # length_penalty=0: scores are plain sums of token log-probabilities, like ours (at any
    # other value CTranslate2 divides them by length ** length_penalty).
    defaults = dict(min_decoding_length=0, length_penalty=0, return_scores=True)
    return translator.translate_batch(source_pieces, **{**defaults, **options})


def _translate(out: Path, source_pieces):
    # suppress_sequences: pad and BOS, which our decoders never emit (CTranslate2 would
    # otherwise emit them; it renormalises each step's log-probabilities without them).
    results = _translate_batch(
        _ct2_translator(out),
        source_pieces,
        beam_size=1,
        max_decoding_length=MAX_DECODING_LENGTH,
        suppress_sequences=SUPPRESSED,
    )
    return [r.hypotheses[0] for r in results], [r.scores[0] for r in results]


def _score_batch(translator, source_pieces, target_pieces) -> list[np.ndarray]:
    """CTranslate2's log-probability of each target piece, then of the </s> it
    appends (``score_batch`` scores it: an empty target gets one, EOS's)."""
    results = translator.score_batch(source_pieces, target_pieces)
    for result, target in zip(results, target_pieces):
        assert result.tokens == list(target) + ["</s>"]
    return [np.array(result.log_probs) for result in results]


def _teacher_forced(out: Path, case, pairs):
    """CTranslate2's log-probabilities of each reference token (then </s>)."""
    src_tok, tgt_tok = case["src_tok"], case["tgt_tok"]
    sources = src_tok.tokenize(tf.constant([s for s, _ in pairs])).numpy()
    targets = tgt_tok.tokenize(tf.constant([t for _, t in pairs])).numpy()
    return _score_batch(
        _ct2_translator(out),
        [src_tok.pieces(row) for row in sources],
        [tgt_tok.pieces(row) for row in targets],
    )


def test_import_resolves_to_the_installed_package():
    package_dir = Path(ct2_export.ctranslate2.__file__).resolve().parent
    assert package_dir.name == "ctranslate2" and package_dir.parent.name == "site-packages"
    assert hasattr(ct2_export.ctranslate2, "Translator")


def test_layout_and_config(case):
    out, model_config = case["out"], case["model"].config
    names = {p.name for p in out.iterdir()}
    assert {"model.bin", "config.json"} <= names
    if case["config"]["tokenizer"].get("shared", True):
        assert {"shared_vocabulary.json", "spm_shared.model"} <= names
    else:
        assert {
            "source_vocabulary.json",
            "target_vocabulary.json",
            "spm_src.model",
            "spm_tgt.model",
        } <= names
        target = json.loads((out / "target_vocabulary.json").read_text())
        assert len(target) == model_config.tgt_vocab_size == case["tgt_tok"].vocab_size + 5
        assert target[-1] == f"<unused_{model_config.tgt_vocab_size - 1}>"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "staging left behind"
    config = json.loads((out / "config.json").read_text())
    assert config["layer_norm_epsilon"] == pytest.approx(model_config.layer_norm_epsilon)
    assert (
        config["unk_token"],
        config["bos_token"],
        config["eos_token"],
        config["decoder_start_token"],
    ) == ("<unk>", "<s>", "</s>", "<s>")
    assert config["add_source_eos"] is True and config["add_source_bos"] is False
    vocabulary = _target_vocabulary(out)
    assert vocabulary[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert vocabulary[: case["tgt_tok"].vocab_size] == case["tgt_tok"].pieces(
        range(case["tgt_tok"].vocab_size)
    )


def test_greedy_matches_token_for_token(case):
    ours, our_scores, source_pieces = case["greedy"]
    theirs, their_scores = _translate(case["out"], source_pieces)
    mismatches = [(i, a, b) for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert not mismatches, mismatches[:3]
    # Sums of the chosen tokens' log-probabilities (EOS included when emitted).
    np.testing.assert_allclose(their_scores, our_scores, rtol=1e-5, atol=1e-3)


def test_teacher_forced_log_probs_match(case, test_pairs):
    """Every reference token's log-probability, through both stacks at every position."""
    ours = _our_teacher_forced(case["model"], case, test_pairs)
    for their_log_probs, our_log_probs in zip(_teacher_forced(case["out"], case, test_pairs), ours):
        np.testing.assert_allclose(their_log_probs, our_log_probs, atol=1e-4)


@pytest.fixture(scope="module")
def int8_case(case, test_pairs):
    """The case converted to int8 by the command line, with teacher-forced
    log-probabilities from CTranslate2 (int8 and float32), from our model in
    float32, and from our model under each emulated int8 arithmetic."""
    out = case["out"].parent / "ct2_int8"
    assert (
        ct2_program.main(
            ["--workdir", str(case["workdir"]), "--out", str(out), "--quantization", "int8"]
        )
        == 0
    )
    arithmetic, reason = int8_reference.ctranslate2_arithmetic(out)
    model = case["model"]
    emulated = {}
    for name in int8_reference.ARITHMETICS:
        with int8_reference.emulated_int8(model, name):
            emulated[name] = _our_teacher_forced(model, case, test_pairs)
    return dict(
        out=out,
        arithmetic=arithmetic,
        reason=reason,
        emulated=emulated,
        ours=_our_teacher_forced(model, case, test_pairs),
        int8=_teacher_forced(out, case, test_pairs),
        float32=_teacher_forced(case["out"], case, test_pairs),
    )


def _our_teacher_forced(model, case, pairs):
    """Our model's log-probabilities of each reference token (then </s>)."""
    source_ids = encode_sources(case["src_tok"], tf.constant([s for s, _ in pairs])).to_tensor()
    target_in, target_out = target_ids(case["tgt_tok"].tokenize(tf.constant([t for _, t in pairs])))
    log_probs = tf.nn.log_softmax(
        model((source_ids, target_in.to_tensor()), training=False)
    ).numpy()
    return [log_probs[i, np.arange(len(row)), row] for i, row in enumerate(target_out.numpy())]


def _summary(errors: np.ndarray) -> str:
    return f"mean {errors.mean():.4f} max {errors.max():.4f}"


def test_int8_equals_the_int8_arithmetic_of_this_cpu(case, int8_case, capsys):
    """CTranslate2's int8 model computes what int8 weights and activations give
    in the arithmetic of this CPU's int8 backend: a weight in the wrong place,
    a wrong scale or a dropped layer would not (see the next test)."""
    assert (int8_case["out"] / "model.bin").stat().st_size < 0.5 * (
        case["out"] / "model.bin"
    ).stat().st_size
    arithmetic = int8_case["arithmetic"]
    other = next(name for name in int8_reference.ARITHMETICS if name != arithmetic)
    errors = int8_reference.absolute_differences(
        int8_case["int8"], int8_case["emulated"][arithmetic]
    )
    with capsys.disabled():
        against_other = int8_reference.absolute_differences(
            int8_case["int8"], int8_case["emulated"][other]
        )
        against_float = int8_reference.absolute_differences(int8_case["int8"], int8_case["float32"])
        print(
            f"\n[{case['name']}] {int8_case['reason']}. CTranslate2 int8 against emulated "
            f"{arithmetic} int8: {_summary(errors)}; against emulated {other} int8: "
            f"{_summary(against_other)}; against float32: {_summary(against_float)}"
        )
    assert errors.mean() < EMULATION_MEAN and errors.max() < EMULATION_MAX, (
        arithmetic,
        _summary(errors),
    )


def test_exact_int8_arithmetic_moves_log_probs_little(int8_case):
    """On every CPU: int8 weights and activations with exact int32 sums move
    each log-probability by the quantization error only."""
    errors = int8_reference.absolute_differences(int8_case["emulated"]["exact"], int8_case["ours"])
    assert errors.mean() < QUANTIZATION_MEAN and errors.max() < QUANTIZATION_MAX, _summary(errors)


def test_int8_mostly_agrees_with_float32(case, int8_case, test_pairs):
    """Where CTranslate2's int8 products are exact (Intel MKL, or VNNI), its
    int8 model is within the quantization error of the float32 one."""
    if int8_case["arithmetic"] != "exact":
        pytest.skip(
            int8_case["reason"] + ": the int8 model is within the saturating arithmetic's error "
            "of float32, not the quantization error (checked against its emulation above)"
        )
    errors = int8_reference.absolute_differences(int8_case["int8"], int8_case["float32"])
    assert errors.mean() < QUANTIZATION_MEAN and errors.max() < QUANTIZATION_MAX, _summary(errors)
    if case["name"] == "post_ln_tied_trained":
        # Untrained (random-weight) variants have near-tied logits: int8 may flip them.
        ours, _, source_pieces = case["greedy"]
        theirs, _ = _translate(int8_case["out"], source_pieces)
        assert sum(a == b for a, b in zip(ours, theirs)) / len(ours) >= THRESHOLD_INT8_AGREEMENT


@pytest.fixture(scope="module")
def correct_int8(workdir, test_pairs, tmp_path_factory):
    """The trained model converted to int8 without a converter's fault, the
    emulation of its int8 arithmetic on this CPU, and the distance between them."""
    trained = Workdir(workdir).load()
    model, src_tok, tgt_tok = trained.model, trained.src_tokenizer, trained.tgt_tokenizer
    case = dict(src_tok=src_tok, tgt_tok=tgt_tok)
    out = tmp_path_factory.mktemp("correct_int8") / "int8"
    ct2_export.KerasTransformerConverter(model, src_tok, tgt_tok).convert(
        str(out), quantization="int8"
    )
    arithmetic, _ = int8_reference.ctranslate2_arithmetic(out)
    with int8_reference.emulated_int8(model, arithmetic):
        expected = _our_teacher_forced(model, case, test_pairs)
    errors = int8_reference.absolute_differences(_teacher_forced(out, case, test_pairs), expected)
    return dict(case=case, expected=expected, errors=errors)


@pytest.mark.parametrize("corruption", ["kernel_scaled_by_2", "square_kernel_transposed"])
def test_int8_tolerance_rejects_a_wrong_scale_or_a_transposed_kernel(
    workdir, test_pairs, tmp_path, corruption, correct_int8, capsys
):
    """The tolerance above is not loose: an int8 model converted with one
    layer's kernel at twice its scale, or one square kernel transposed, is
    far outside it against the emulation of the correct model."""
    correct, case, expected = correct_int8["errors"], correct_int8["case"], correct_int8["expected"]
    assert correct.mean() < EMULATION_MEAN and correct.max() < EMULATION_MAX
    trained = Workdir(workdir).load()
    model, src_tok, tgt_tok = trained.model, trained.src_tokenizer, trained.tgt_tokenizer
    if corruption == "kernel_scaled_by_2":
        kernel = model.decoder.layer_stack[-1].feed_forward.outer_dense.kernel
        kernel.assign(2.0 * kernel)
    else:
        kernel = model.encoder.layer_stack[0].self_attention.value_dense.kernel
        kernel.assign(tf.transpose(kernel))
    wrong = tmp_path / "wrong_int8"
    ct2_export.KerasTransformerConverter(model, src_tok, tgt_tok).convert(
        str(wrong), quantization="int8"
    )
    errors = int8_reference.absolute_differences(_teacher_forced(wrong, case, test_pairs), expected)
    with capsys.disabled():
        print(
            f"\n[{corruption}] int8 against the emulation of the correct model: {_summary(errors)} "
            f"(correct model: {_summary(correct)})"
        )
    assert errors.mean() > 5 * EMULATION_MEAN and errors.max() > EMULATION_MAX


def test_the_docstring_examples_that_start_from_the_demo_workdir_run(workdir, tmp_path):
    """The library's examples built on ``Workdir("runs/demo")`` (the converter's among
    them), with the trained tiny workdir as runs/demo (tests/test_doctests.py runs the rest)."""
    names = [name for name, needs_demo in modules_with_examples().items() if needs_demo]
    assert "keras_transformer.exporters.ctranslate2" in names
    for name in names:
        directory = tmp_path / name
        directory.mkdir()
        result = run_examples(name, directory, demo_workdir=workdir)
        assert result.attempted > 0 and result.failed == 0, (
            f"{name}: {result.failed} of {result.attempted} failed"
        )
    assert (
        tmp_path / "keras_transformer.exporters.ctranslate2" / "demo-ct2" / "model.bin"
    ).exists()


def test_refuses_to_overwrite_without_force(workdir, tmp_path):
    out = tmp_path / "existing"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    with pytest.raises(SystemExit) as exit_info:
        ct2_program.main(["--workdir", str(workdir), "--out", str(out)])
    assert exit_info.value.code == 2
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    with pytest.raises(FileExistsError, match="force"):
        ct2_export.export_ctranslate2(workdir, out)
    # --force replaces it with a complete model and leaves no staging dirs.
    assert ct2_program.main(["--workdir", str(workdir), "--out", str(out), "--force"]) == 0
    assert {"model.bin", "config.json", "shared_vocabulary.json"} <= {p.name for p in out.iterdir()}
    assert not (out / "keep.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["existing"]


def test_missing_workdir_is_an_error(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        ct2_program.main(["--workdir", str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == []
