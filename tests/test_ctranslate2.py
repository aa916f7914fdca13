"""CTranslate2 export (``python -m export.ctranslate2``): the converted model
reproduces our greedy decoding token for token and our teacher-forced
log-probabilities, for the trained post-LN tied model and for random-weight
pre-LN (GELU, learned positions) and untied (separate vocabularies, a model
wider than its tokenizer) variants; int8 weights mostly agree; an existing
output directory is never overwritten without ``--force``."""

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

ctranslate2 = pytest.importorskip("ctranslate2")

from keras_transformer import Transformer, TransformerConfig  # noqa: E402
from keras_transformer.data import encode_sources, target_ids  # noqa: E402
from keras_transformer.decoding import greedy_decode  # noqa: E402
from keras_transformer.tokenization import train_sentencepiece  # noqa: E402
from training.corpus import load_corpus  # noqa: E402
from training.evaluate import load_workdir  # noqa: E402

import export.ctranslate2 as ct2_export  # noqa: E402

CHECKOUT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
MAX_DECODING_LENGTH = 40
THRESHOLD_INT8_AGREEMENT = 0.75
EOS_ID = 3

# Random-weight variants of the trained workdir: config overrides, and whether
# the variant gets its own source/target SentencePiece models.
VARIANTS = {
    "post_ln_tied_trained": None,
    "pre_ln_gelu_learned_positions_random": dict(
        model={"norm_first": True, "activation": "gelu", "learned_positions": True}, separate_vocab=False),
    "untied_separate_vocab_random": dict(
        model={"tie_embeddings": False, "share_embeddings": False}, separate_vocab=True),
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


def _randomized_workdir(base: Path, dest: Path, model_overrides: dict, separate_vocab: bool) -> Path:
    """A workdir like ``base`` with another architecture and seeded random
    weights: every bias and LayerNorm scale/offset moved off its initial 0/1
    so that a weight mapped to the wrong place (or dropped) shows."""
    config = yaml.safe_load((base / "config.yaml").read_text())
    base_model, src_tok, tgt_tok, _ = load_workdir(base)
    model_options = {**base_model.config.to_dict(), **model_overrides}
    (dest / "tokenizer").mkdir(parents=True)
    if separate_vocab:
        pairs = load_corpus(config["data"])["train"]
        train_sentencepiece([s for s, _ in pairs], dest / "tokenizer" / "spm_src", 300)
        train_sentencepiece([t for _, t in pairs], dest / "tokenizer" / "spm_tgt", 200)
        config["tokenizer"]["shared"] = False
        src_tok, tgt_tok = _tokenizers(dest / "tokenizer", shared=False)
        # The model may be wider than its tokenizer: the extra ids need filler pieces.
        model_options.update(src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size + 5)
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
        result = subprocess.run([sys.executable, "-m", "export.ctranslate2", "--workdir", str(source),
                                 "--out", str(out)], cwd=CHECKOUT, env=ENV, capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-4000:]
        assert result.stdout.strip() == str(out)
    else:
        source = _randomized_workdir(workdir, root / "run", variant["model"], variant["separate_vocab"])
        out = ct2_export.convert_workdir(source, root / "ct2")
    model, src_tok, tgt_tok, config = load_workdir(source)
    case = dict(name=request.param, workdir=source, out=out, model=model, src_tok=src_tok,
                tgt_tok=tgt_tok, config=config)
    case["greedy"] = _ours(case, [s for s, _ in test_pairs])  # once per case: the slow part
    return case


def _target_vocabulary(out: Path) -> list[str]:
    name = "shared_vocabulary.json" if (out / "shared_vocabulary.json").exists() else "target_vocabulary.json"
    return json.loads((out / name).read_text())


def _ours(case, sources):
    """Our greedy tokens (as pieces, EOS and after dropped), their scores, and
    the source pieces CTranslate2 gets (without the trailing </s>: it adds it)."""
    source_ids = encode_sources(case["src_tok"], tf.constant(sources),
                                case["config"]["training"]["max_src_length"]).to_tensor()
    tokens, scores = greedy_decode(case["model"], source_ids, max_length=MAX_DECODING_LENGTH)
    vocabulary = _target_vocabulary(case["out"])
    hypotheses = []
    for row in tokens.numpy().tolist():
        row = row[: row.index(EOS_ID)] if EOS_ID in row else row
        hypotheses.append([vocabulary[i] for i in row])
    source_pieces = []
    for row in source_ids.numpy().tolist():
        assert EOS_ID in row
        source_pieces.append(case["src_tok"].pieces(row[: row.index(EOS_ID)]))
    return hypotheses, scores.numpy(), source_pieces


def _translate(out: Path, source_pieces):
    translator = ctranslate2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)
    # min_decoding_length=0: CTranslate2's default (1) masks EOS at the first step, which
    # our greedy decoder does not (and that renormalises the step's log-probabilities).
    # length_penalty=0: scores are plain sums of token log-probabilities, like ours.
    results = translator.translate_batch(source_pieces, beam_size=1, max_decoding_length=MAX_DECODING_LENGTH,
                                         min_decoding_length=0, length_penalty=0, return_scores=True)
    return [r.hypotheses[0] for r in results], [r.scores[0] for r in results]


def _teacher_forced(out: Path, case, pairs):
    """CTranslate2's log-probabilities of each reference token (then </s>)."""
    src_tok, tgt_tok = case["src_tok"], case["tgt_tok"]
    sources = src_tok.tokenize(tf.constant([s for s, _ in pairs])).numpy()
    targets = tgt_tok.tokenize(tf.constant([t for _, t in pairs])).numpy()
    translator = ctranslate2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)
    results = translator.score_batch([src_tok.pieces(row) for row in sources],
                                     [tgt_tok.pieces(row) for row in targets])
    for result, target in zip(results, targets):
        assert result.tokens == tgt_tok.pieces(target) + ["</s>"]
    return [np.array(result.log_probs) for result in results]


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
        assert {"source_vocabulary.json", "target_vocabulary.json", "spm_src.model", "spm_tgt.model"} <= names
        target = json.loads((out / "target_vocabulary.json").read_text())
        assert len(target) == model_config.tgt_vocab_size == case["tgt_tok"].vocab_size + 5
        assert target[-1] == f"<unused_{model_config.tgt_vocab_size - 1}>"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "staging left behind"
    config = json.loads((out / "config.json").read_text())
    assert config["layer_norm_epsilon"] == pytest.approx(model_config.layer_norm_epsilon)
    assert (config["unk_token"], config["bos_token"], config["eos_token"], config["decoder_start_token"]) == (
        "<unk>", "<s>", "</s>", "<s>")
    assert config["add_source_eos"] is True and config["add_source_bos"] is False
    vocabulary = _target_vocabulary(out)
    assert vocabulary[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert vocabulary[: case["tgt_tok"].vocab_size] == case["tgt_tok"].pieces(range(case["tgt_tok"].vocab_size))


def test_greedy_matches_token_for_token(case):
    ours, our_scores, source_pieces = case["greedy"]
    theirs, their_scores = _translate(case["out"], source_pieces)
    mismatches = [(i, a, b) for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert not mismatches, mismatches[:3]
    # Sums of the chosen tokens' log-probabilities (EOS included when emitted).
    np.testing.assert_allclose(their_scores, our_scores, rtol=1e-5, atol=1e-3)


def test_teacher_forced_log_probs_match(case, test_pairs):
    """Every reference token's log-probability, through both stacks at every position."""
    src_tok, tgt_tok, model = case["src_tok"], case["tgt_tok"], case["model"]
    source_ids = encode_sources(src_tok, tf.constant([s for s, _ in test_pairs])).to_tensor()
    target_in, target_out = target_ids(tgt_tok.tokenize(tf.constant([t for _, t in test_pairs])))
    log_probs = tf.nn.log_softmax(model((source_ids, target_in.to_tensor()), training=False)).numpy()
    theirs = _teacher_forced(case["out"], case, test_pairs)
    for i, their_log_probs in enumerate(theirs):
        labels = target_out[i].numpy()
        np.testing.assert_allclose(their_log_probs, log_probs[i, np.arange(len(labels)), labels], atol=1e-4)


def test_int8_converts_and_mostly_agrees(case, test_pairs, capsys):
    out = case["out"].parent / "ct2_int8"
    assert ct2_export.main(["--workdir", str(case["workdir"]), "--out", str(out), "--quantization", "int8"]) == 0
    assert (out / "model.bin").stat().st_size < 0.5 * (case["out"] / "model.bin").stat().st_size
    ours, _, source_pieces = case["greedy"]
    theirs, _ = _translate(out, source_pieces)
    rate = sum(a == b for a, b in zip(ours, theirs)) / len(ours)
    # int8 weights move each log-probability a little; float32 ones are exact (above).
    errors = np.concatenate([np.abs(a - b) for a, b in zip(_teacher_forced(out, case, test_pairs),
                                                           _teacher_forced(case["out"], case, test_pairs))])
    with capsys.disabled():
        print(f"\n[{case['name']}] int8: greedy sentences identical to float32 {rate:.2f} "
              f"({len(ours)} sentences); teacher-forced |d log p| mean {errors.mean():.4f} "
              f"max {errors.max():.4f}")
    assert errors.mean() < 0.05 and errors.max() < 0.5
    if case["name"] == "post_ln_tied_trained":
        # Untrained (random-weight) variants have near-tied logits: int8 may flip them.
        assert rate >= THRESHOLD_INT8_AGREEMENT


def test_refuses_to_overwrite_without_force(workdir, tmp_path):
    out = tmp_path / "existing"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    assert ct2_export.main(["--workdir", str(workdir), "--out", str(out)]) == 1
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    with pytest.raises(FileExistsError, match="--force"):
        ct2_export.convert_workdir(workdir, out)
    # --force replaces it with a complete model and leaves no staging dirs.
    assert ct2_export.main(["--workdir", str(workdir), "--out", str(out), "--force"]) == 0
    assert {"model.bin", "config.json", "shared_vocabulary.json"} <= {p.name for p in out.iterdir()}
    assert not (out / "keep.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["existing"]


def test_missing_workdir_is_an_error(tmp_path):
    assert ct2_export.main(["--workdir", str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == []
