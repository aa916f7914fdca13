"""The config options that let the Transformer compute what a Marian (OPUS-MT)
model computes, each against explicit math: the halves position table, swish,
the embedding scale, the final logits bias, a decoder that starts from the pad
id, special ids anywhere in the vocabulary, and decoders that never emit pad
or BOS; with the paper's defaults unchanged."""

import json
import math

import keras
import numpy as np
import pytest
import reference
import tensorflow as tf
from decoders import all_beams, beam_of_one, greedy

import keras_transformer as kt
from keras_transformer.decoding import KernelChoice, never_emitted
from keras_transformer.layers import (
    PositionalEmbedding,
    padding_mask,
    sinusoidal_positions,
    target_padding_mask,
)

VOCAB = 40
SMALL = dict(
    vocab_size=VOCAB, num_layers=2, d_model=16, num_heads=2, d_ff=32, max_length=32, dropout=0.0
)
# OPUS-MT's layout: </s> = 0, <unk> = 1, <pad> = the last id, and the decoder starts from <pad>.
MARIAN_IDS = dict(eos_id=0, unk_id=1, pad_id=VOCAB - 1, bos_id=VOCAB - 1)
MARIAN = dict(
    share_embeddings=True,
    tie_embeddings=True,
    activation="swish",
    position_encoding="halves",
    embedding_scale=1.0,
    final_logits_bias=True,
    layer_norm_epsilon=1e-5,
    **MARIAN_IDS,
)


def config(**overrides):
    return kt.TransformerConfig.from_preset("tiny", **{**SMALL, **overrides})


def randomized(model, seed=0):
    """``model`` (built) with every weight moved off its initial value, biases
    and LayerNorm parameters included, so that a missing or misplaced one shows."""
    model.build()
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        value = variable.numpy()
        noise = rng.normal(0.0, 0.3 if value.ndim == 1 else 0.05, value.shape)
        variable.assign((value + noise).astype(value.dtype))
    return model


def marian_model(seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    return randomized(kt.Transformer(config(**{**MARIAN, **overrides})), seed)


def marian_batch(seed=0):
    """Sources ending with EOS (0) and teacher-forced targets starting from the
    pad id, padded with it (ids of real tokens: 2 .. VOCAB-2)."""
    pad, eos = MARIAN_IDS["pad_id"], MARIAN_IDS["eos_id"]
    rng = np.random.default_rng(seed)
    src = rng.integers(2, VOCAB - 1, size=(3, 7)).astype("int32")
    tgt = rng.integers(2, VOCAB - 1, size=(3, 6)).astype("int32")
    for row, length in zip(src, (7, 4, 2)):
        row[length - 1] = eos
        row[length:] = pad
    tgt[:, 0] = pad  # the start token
    tgt[1, 3:] = pad
    return src, tgt


def numpy_transformer(model, src, tgt):
    """The model's logits computed in NumPy from its weights (post-LN, shared
    and tied embeddings, no final norms) and its config's options, with
    ``reference``'s layers. The reference decoder masks only the future, so
    its start token is a real token whatever its id; its logits at real
    target positions are the model's (trailing padding only ever follows them)."""
    c = model.config
    assert c.share_embeddings and c.tie_embeddings and not c.norm_first
    embeddings = model.source_embedding.embeddings.numpy()
    scale = math.sqrt(c.d_model) if c.embedding_scale is None else c.embedding_scale
    table = (
        reference.marian_positional_table
        if c.position_encoding == "halves"
        else reference.positional_table
    )(c.max_length, c.d_model)

    def embed(ids):
        return embeddings[ids] * scale + table[: ids.shape[1]][np.newaxis]

    source_padding = src != c.pad_id
    memory = embed(src)
    for layer in model.encoder.layer_stack:
        memory = reference.encoder_layer(layer, memory, source_padding)
    hidden = embed(tgt)
    for layer in model.decoder.layer_stack:
        hidden = reference.decoder_layer(layer, hidden, memory, source_padding)
    logits = hidden @ embeddings.T
    if c.final_logits_bias:
        logits = logits + model.final_logits_bias.numpy()
    return logits


# --- the position table, the embedding scale, swish ---------------------------------------


@pytest.mark.parametrize("d_model", [8, 7, 64])
def test_halves_table_is_marians(d_model):
    halves = sinusoidal_positions(40, d_model, "halves").numpy()
    np.testing.assert_allclose(halves, reference.marian_positional_table(40, d_model), atol=1e-6)
    # The same angles as the paper's table, its columns reordered: sines, then cosines.
    paper = sinusoidal_positions(40, d_model).numpy()
    np.testing.assert_array_equal(halves, np.concatenate([paper[:, 0::2], paper[:, 1::2]], axis=1))
    np.testing.assert_array_equal(paper, sinusoidal_positions(40, d_model, "interleaved").numpy())


def test_unknown_position_encoding_lists_the_layouts():
    with pytest.raises(ValueError, match=r"use one of \('interleaved', 'halves'\)"):
        sinusoidal_positions(4, 8, "sin_cos")
    with pytest.raises(ValueError, match="interleaved"):
        PositionalEmbedding(10, 8, 4, position_encoding="t2t")
    with pytest.raises(ValueError, match="learned_positions=True learns the table"):
        PositionalEmbedding(10, 8, 4, learned_positions=True, position_encoding="halves")
    with pytest.raises(ValueError, match="embedding_scale must be a positive number"):
        PositionalEmbedding(10, 8, 4, embedding_scale=-1.0)


@pytest.mark.parametrize("embedding_scale", [None, 1.0, 2.5])
@pytest.mark.parametrize("position_encoding", ["interleaved", "halves"])
def test_embedding_is_scaled_token_row_plus_position(embedding_scale, position_encoding):
    layer = PositionalEmbedding(
        vocab_size=12,
        d_model=8,
        max_length=10,
        pad_id=11,
        position_encoding=position_encoding,
        embedding_scale=embedding_scale,
    )
    ids = np.array(
        [[11, 5, 6, 11], [3, 11, 11, 11]], np.int32
    )  # the pad id first, as a start token
    out = layer(ids, start_index=2).numpy()
    table = (
        reference.marian_positional_table
        if position_encoding == "halves"
        else reference.positional_table
    )(10, 8)
    scale = math.sqrt(8) if embedding_scale is None else embedding_scale
    # The pad id's row is used as it is (not zeroed), like every other row.
    expected = layer.embeddings.numpy()[ids] * scale + table[2:6][np.newaxis]
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert np.abs(layer.embeddings.numpy()[11]).sum() > 0
    assert layer.scale == scale


def test_embedding_scale_multiplies_the_token_embeddings_exactly():
    ids = np.array([[1, 2, 3]], np.int32)
    outputs = {}
    for scale in (1.0, 3.0):
        layer = PositionalEmbedding(8, 4, 8, embedding_scale=scale, embeddings_initializer="ones")
        outputs[scale] = layer(ids).numpy() - sinusoidal_positions(3, 4).numpy()
    np.testing.assert_allclose(outputs[3.0], 3.0 * outputs[1.0], rtol=1e-6)
    np.testing.assert_allclose(outputs[1.0], np.ones((1, 3, 4)), atol=1e-6)


def test_swish_feed_forward_is_x_times_sigmoid_x():
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    for name in ("swish", "silu"):
        layer = kt.layers.FeedForward(
            d_model=8, d_ff=16, activation=name, bias_initializer="random_normal"
        )
        out = layer(x).numpy()
        inner = x @ layer.inner_dense.kernel.numpy() + layer.inner_dense.bias.numpy()
        hidden = inner * (1.0 / (1.0 + np.exp(-inner)))
        expected = hidden @ layer.outer_dense.kernel.numpy() + layer.outer_dense.bias.numpy()
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


# --- the whole model against NumPy ------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(MARIAN, id="marian"),
        pytest.param(dict(share_embeddings=True, tie_embeddings=True), id="paper"),
    ],
)
def test_model_equals_the_numpy_transformer(options):
    """Every option at once (Marian's) and the paper's defaults, against NumPy:
    with the decoder starting from the pad id, position 0 is a real token."""
    keras.utils.set_random_seed(1)
    model = randomized(kt.Transformer(config(**options)), seed=1)
    src, tgt = marian_batch(1)
    if model.config.pad_id != MARIAN_IDS["pad_id"]:  # the paper's ids
        src = np.where(src == MARIAN_IDS["pad_id"], 0, np.where(src == 0, kt.EOS_ID, src))
        tgt = np.where(tgt == MARIAN_IDS["pad_id"], 0, tgt)
        tgt[:, 0] = kt.BOS_ID
    logits = model((src, tgt)).numpy()
    real = target_padding_mask(tgt, model.config).numpy()
    expected = numpy_transformer(model, src, tgt)
    np.testing.assert_allclose(logits[real], expected[real], rtol=1e-4, atol=1e-4)


def test_start_from_pad_counts_position_zero_as_a_real_token():
    c = config(**MARIAN)
    tgt = np.array([[39, 5, 39], [39, 39, 39]], np.int32)
    np.testing.assert_array_equal(
        target_padding_mask(tgt, c).numpy(), [[True, True, False], [True, False, False]]
    )
    paper = config()
    np.testing.assert_array_equal(
        target_padding_mask(np.array([[2, 0, 5]]), paper).numpy(),
        padding_mask(np.array([[2, 0, 5]]), 0).numpy(),
    )
    # With position 0 masked its self-attention has no key at all: the logits would differ.
    model = marian_model(2)
    src, tgt = marian_batch(2)
    memory = model.encode(src)
    states = model.decoder(
        model.target_embedding(tgt),
        memory,
        memory_padding_mask=padding_mask(src, 39),
        target_padding_mask=padding_mask(tgt, 39),
    )
    assert not np.allclose(
        model.logits(states).numpy()[:, 0], model((src, tgt)).numpy()[:, 0], atol=1e-3
    )


@pytest.mark.parametrize("fixed", [False, True])
def test_cached_decoding_from_the_pad_id_equals_the_full_pass(fixed):
    model = marian_model(3)
    src, tgt = marian_batch(3)
    full = model((src, tgt)).numpy()
    memory = model.encode(src)
    cache = model.initial_cache(memory, max_length=8 if fixed else None)
    source_padding = padding_mask(src, model.config.pad_id)
    kernel = model.output_kernel()
    steps = []
    for t in range(tgt.shape[1]):
        logits, cache = model.decode(
            tgt[:, t : t + 1],
            cache,
            source_padding,
            cache_index=t if fixed else None,
            output_kernel=kernel,
        )
        steps.append(logits.numpy())
    real = target_padding_mask(tgt, model.config).numpy()
    np.testing.assert_allclose(np.concatenate(steps, 1)[real], full[real], rtol=1e-4, atol=1e-5)


# --- the final logits bias --------------------------------------------------------------


@pytest.mark.parametrize("tied", [True, False])
def test_final_logits_bias_adds_exactly_to_every_logit(tied):
    model = marian_model(4, tie_embeddings=tied, share_embeddings=tied)
    assert model.final_logits_bias.shape == (VOCAB,) and model.final_logits_bias.dtype == "float32"
    assert model.final_logits_bias.trainable and model.final_logits_bias.path.endswith(
        "final_logits_bias"
    )
    src, tgt = marian_batch(4)
    bias = model.final_logits_bias.numpy()
    with_bias = model((src, tgt)).numpy()
    memory = model.encode(src)
    cache = model.initial_cache(memory)
    step, _ = model.decode(
        tgt[:, :1], cache, padding_mask(src, 39), output_kernel=model.output_kernel()
    )
    model.final_logits_bias.assign(np.zeros(VOCAB, np.float32))
    without = model((src, tgt)).numpy()
    step_without, _ = model.decode(
        tgt[:, :1],
        model.initial_cache(memory),
        padding_mask(src, 39),
        output_kernel=model.output_kernel(),
    )
    np.testing.assert_allclose(
        with_bias - without, np.broadcast_to(bias, with_bias.shape), atol=1e-5
    )
    np.testing.assert_allclose(
        step.numpy() - step_without.numpy(), np.broadcast_to(bias, step.shape), atol=1e-5
    )
    np.testing.assert_allclose(step.numpy()[:, 0], with_bias[:, 0], rtol=1e-5, atol=1e-5)


def test_no_final_logits_bias_by_default():
    model = kt.Transformer(config())
    model.build()
    assert model.final_logits_bias is None
    assert not [v for v in model.weights if "final_logits_bias" in v.path]


def test_final_logits_bias_is_float32_under_mixed_precision():
    model = kt.Transformer(config(**MARIAN), dtype="mixed_bfloat16")
    model.build()
    model.final_logits_bias.assign(np.linspace(-1, 1, VOCAB).astype(np.float32))
    src, tgt = marian_batch(5)
    logits = model((src, tgt))
    assert model.final_logits_bias.dtype == "float32" and logits.dtype == tf.float32


@pytest.mark.parametrize("tied", [True, False])
def test_fused_training_step_with_the_bias_equals_keras_step(tied):
    """The fused step takes the final bias (summed with an untied projection's
    own bias): loss, metrics and updated weights, the bias's among them, are
    those of Keras' step."""
    src, tgt = marian_batch(6)
    pad = MARIAN_IDS["pad_id"]
    out = np.concatenate([tgt[:, 1:], np.full((3, 1), MARIAN_IDS["eos_id"], "int32")], 1)
    out[1, 2] = MARIAN_IDS["eos_id"]
    out[1, 3:] = pad
    results = []
    for fused in (True, False):
        model = marian_model(6, tie_embeddings=tied, share_embeddings=tied)
        model.compile(
            optimizer=keras.optimizers.SGD(0.5),
            loss=kt.MaskedLabelSmoothedCrossEntropy(pad_id=pad),
            metrics=[kt.MaskedAccuracy(pad_id=pad)],
            fuse_output_and_loss=fused,
        )
        assert model.fuse_output_and_loss is fused
        history = model.fit((src, tgt), out, batch_size=3, epochs=3, verbose=0, shuffle=False)
        results.append((history.history, model.get_weights(), model.final_logits_bias.numpy()))
    (fused_history, fused_weights, fused_bias), (keras_history, keras_weights, keras_bias) = results
    assert np.abs(fused_bias - marian_model(6).final_logits_bias.numpy()).max() > 1e-3  # it trained
    np.testing.assert_allclose(fused_bias, keras_bias, rtol=1e-4, atol=1e-5)
    for name in ("loss", "masked_accuracy"):
        np.testing.assert_allclose(fused_history[name], keras_history[name], rtol=1e-5)
    for got, expected in zip(fused_weights, keras_weights):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


# --- decoders: special ids at the end of the vocabulary, never pad or BOS -----------------


def pad_loving_model(seed=7, **overrides):
    """A Marian-layout model whose final bias makes pad (and BOS, where it
    differs) the most likely token by far: a decoder that could emit them would."""
    model = marian_model(seed, **overrides)
    bias = np.zeros(VOCAB, np.float32)
    for token in never_emitted(model.config):
        bias[token] = 30.0
    bias[model.config.eos_id] = 1.0  # EOS now and then
    model.final_logits_bias.assign(bias)
    return model


def sources(model, count=4, seed=8):
    c = model.config
    rng = np.random.default_rng(seed)
    rows = np.full((count, 9), c.pad_id, np.int32)
    for row in rows:
        length = rng.integers(1, 9)
        row[:length] = rng.integers(2, VOCAB - 2, size=length)
        row[length] = c.eos_id
    return rows


def real_tokens(row, config):
    row = list(row)
    return row[: row.index(config.eos_id) + 1] if config.eos_id in row else row


def teacher_forced(model, source, tokens):
    """The model's summed log-probability of ``tokens`` (from ``bos_id``)."""
    c = model.config
    target_in = np.array([[c.bos_id] + tokens[:-1]], np.int32)
    source = source[source != c.pad_id][np.newaxis]
    log_probs = tf.nn.log_softmax(model((source, target_in))).numpy()[0]
    return float(sum(log_probs[i, token] for i, token in enumerate(tokens)))


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param(MARIAN_IDS, id="start_from_pad_at_the_end"),
        pytest.param(
            dict(eos_id=0, unk_id=1, pad_id=VOCAB - 1, bos_id=VOCAB - 2),
            id="bos_and_pad_at_the_end",
        ),
        pytest.param(dict(pad_id=0, unk_id=1, bos_id=2, eos_id=3), id="paper_ids"),
    ],
)
def test_greedy_and_beam_never_emit_pad_or_bos(ids):
    model = pad_loving_model(**ids)
    c = model.config
    src = sources(model)
    tokens, greedy_scores = greedy(model, src, max_length=10)
    static, static_scores = greedy(model, src, KernelChoice(static_shapes=True), max_length=10)
    beam = all_beams(model, src, beam_size=3, alpha=0.6, max_length=10)
    beam_one = beam_of_one(model, src, alpha=0.0, max_length=10)
    tokens, static = tokens.numpy(), static.numpy()
    np.testing.assert_array_equal(static[:, : tokens.shape[1]], tokens)
    np.testing.assert_array_equal(beam_one.tokens.numpy()[:, 0, : tokens.shape[1]], tokens)
    np.testing.assert_allclose(static_scores.numpy(), greedy_scores.numpy(), rtol=1e-5)
    for b, row in enumerate(tokens):
        tokens = real_tokens(row, c)
        assert not set(tokens) & {c.pad_id, c.bos_id}, row
        assert np.all(row[len(tokens) :] == c.pad_id)  # padded with pad_id after EOS
        # Scores are the model's own log-probabilities (the banned ids are not renormalised away).
        np.testing.assert_allclose(
            greedy_scores.numpy()[b], teacher_forced(model, src[b], tokens), rtol=1e-4, atol=1e-4
        )
    for b, hypotheses in enumerate(beam.tokens.numpy()):
        for j, row in enumerate(hypotheses):
            tokens = real_tokens(row, c)
            assert not set(tokens) & {c.pad_id, c.bos_id}, row
            assert np.all(row[len(tokens) :] == c.pad_id)
            np.testing.assert_allclose(
                beam.log_probs.numpy()[b, j],
                teacher_forced(model, src[b], tokens),
                rtol=1e-4,
                atol=1e-4,
            )
    # Without the ban, pad or BOS would have been chosen at the first step.
    memory = model.encode(src[:1])
    first, _ = model.decode(
        np.array([[c.bos_id]], np.int32),
        model.initial_cache(memory),
        padding_mask(src[:1], c.pad_id),
    )
    assert int(np.argmax(first.numpy()[0, 0])) in never_emitted(c)


def test_a_sentence_decodes_the_same_alone_and_in_a_batch_padded_with_the_last_id():
    model = marian_model(9)
    c = model.config
    src = sources(model, count=5, seed=9)
    batch_greedy, _ = greedy(model, src, max_length=8)
    batch_beam = all_beams(model, src, beam_size=2, max_length=8)
    for b in range(len(src)):
        alone = src[b : b + 1, : int((src[b] != c.pad_id).sum())]
        tokens, _ = greedy(model, alone, max_length=8)
        width = tokens.shape[1]
        np.testing.assert_array_equal(batch_greedy.numpy()[b, :width], tokens.numpy()[0])
        assert np.all(batch_greedy.numpy()[b, width:] == c.pad_id)
        beam = all_beams(model, alone, beam_size=2, max_length=8)
        width = beam.tokens.shape[2]
        np.testing.assert_array_equal(
            batch_beam.tokens.numpy()[b, :, :width], beam.tokens.numpy()[0]
        )


# --- config, saving, exporters ----------------------------------------------------------


def test_config_round_trips_and_old_configs_get_the_papers_defaults():
    c = config(**MARIAN)
    assert kt.TransformerConfig.from_dict(json.loads(c.to_json())) == c
    old = {
        k: v
        for k, v in config().to_dict().items()
        if k not in ("position_encoding", "embedding_scale", "final_logits_bias")
    }
    loaded = kt.TransformerConfig.from_dict(old)
    assert (loaded.position_encoding, loaded.embedding_scale, loaded.final_logits_bias) == (
        "interleaved",
        None,
        False,
    )
    assert loaded == config()


def test_saved_and_loaded_model_keeps_every_option(tmp_path):
    model = marian_model(10)
    src, tgt = marian_batch(10)
    path = tmp_path / "marian.keras"
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    assert loaded.config == model.config
    np.testing.assert_array_equal(loaded.final_logits_bias.numpy(), model.final_logits_bias.numpy())
    np.testing.assert_array_equal(loaded((src, tgt)).numpy(), model((src, tgt)).numpy())
    embedding = loaded.get_layer("source_embedding").get_config()
    assert (embedding["position_encoding"], embedding["embedding_scale"], embedding["pad_id"]) == (
        "halves",
        1.0,
        39,
    )


def test_tflite_translator_decodes_from_the_pad_id_like_greedy():
    """The builtins-only TFLite translator of a Marian-layout model (pad id at the
    end, decoder starting from it, every option on) returns our greedy ids."""
    pytest.importorskip("ai_edge_litert")
    from ai_edge_litert.interpreter import Interpreter

    from keras_transformer.exporters.tflite import convert

    model = pad_loving_model(11)
    src = sources(model, count=3, seed=11)
    flatbuffer = convert(model, max_src_length=src.shape[1], max_tgt_length=10)
    runner = Interpreter(model_content=flatbuffer).get_signature_runner()
    ours, _ = greedy(model, src, KernelChoice(static_shapes=True), max_length=10)
    theirs = np.concatenate([runner(source_ids=row[np.newaxis])["target_ids"] for row in src])
    np.testing.assert_array_equal(theirs, ours.numpy())


class _Pieces:
    """A stand-in tokenizer: piece ``i`` names id ``i``, with OPUS-MT's special pieces."""

    def __init__(self, config):
        self.vocab_size = config.tgt_vocab_size
        self.names = {config.eos_id: "</s>", config.unk_id: "<unk>", config.pad_id: "<pad>"}
        if config.bos_id != config.pad_id:
            self.names[config.bos_id] = "<s>"

    def piece(self, i):
        return self.names.get(i, f"p{i}")


@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_ctranslate2_equals_our_model_with_every_option(tmp_path, monkeypatch, scale):
    """The CTranslate2 conversion of a Marian-layout model (swish, halves table,
    the embedding scale, the final bias as the projection's bias, the decoder
    starting from the pad piece): its teacher-forced log-probabilities are
    ours, and with the pad piece suppressed its greedy search is ours."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    import keras_transformer.exporters.ctranslate2 as ct2_export

    model = marian_model(12, embedding_scale=scale)
    c = model.config
    tokenizer = _Pieces(c)
    # The vocabulary of a tokenizer whose reserved pieces sit at OPUS-MT's ids (the
    # tokenizer side's `vocabulary` checks the paper's layout).
    monkeypatch.setattr(
        ct2_export, "vocabulary", lambda tok, size: [tok.piece(i) for i in range(size)]
    )
    out = tmp_path / "ct2"
    ct2_export.KerasTransformerConverter(model, tokenizer, tokenizer).convert(str(out))
    ct2_config = json.loads((out / "config.json").read_text())
    assert ct2_config["decoder_start_token"] == "<pad>" and ct2_config["eos_token"] == "</s>"

    src = sources(model, count=4, seed=12)
    source_pieces = [
        [tokenizer.piece(i) for i in real_tokens(row, c)[:-1]] for row in src
    ]  # CT2 adds </s>
    translator = ctranslate2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)
    ours, our_scores = greedy(model, src, max_length=12)
    results = translator.translate_batch(
        source_pieces,
        beam_size=1,
        max_decoding_length=12,
        min_decoding_length=0,
        length_penalty=0,
        return_scores=True,
        suppress_sequences=[["<pad>"]],
    )
    for b, (row, result) in enumerate(zip(ours.numpy(), results)):
        tokens = real_tokens(row, c)
        assert result.hypotheses[0] == [tokenizer.piece(i) for i in tokens if i != c.eos_id]
        # Ours is the model's log-probability of the tokens; CTranslate2 renormalises each step
        # over the tokens it does not suppress: log p(y) - log(1 - p(pad)).
        target_in = np.array([[c.bos_id] + tokens[:-1]], np.int32)
        log_probs = (
            tf.nn.log_softmax(model((src[b : b + 1], target_in))).numpy()[0].astype(np.float64)
        )
        steps = np.arange(len(tokens))
        np.testing.assert_allclose(
            our_scores.numpy()[b], log_probs[steps, tokens].sum(), rtol=1e-5, atol=1e-4
        )
        renormalised = log_probs[steps, tokens] - np.log1p(-np.exp(log_probs[steps, c.pad_id]))
        np.testing.assert_allclose(result.scores[0], renormalised.sum(), rtol=1e-5, atol=1e-3)
    # Teacher-forced: every token's log-probability, from the pad start token, through both stacks.
    targets = [
        [tokenizer.piece(i) for i in real_tokens(row, c) if i != c.eos_id] for row in ours.numpy()
    ]
    for b, result in enumerate(translator.score_batch(source_pieces, targets)):
        tokens = [i for i in real_tokens(ours.numpy()[b], c) if i != c.eos_id] + [c.eos_id]
        target_in = np.array([[c.bos_id] + tokens[:-1]], np.int32)
        log_probs = tf.nn.log_softmax(model((src[b : b + 1], target_in))).numpy()[0]
        np.testing.assert_allclose(
            result.log_probs, log_probs[np.arange(len(tokens)), tokens], atol=1e-4
        )
