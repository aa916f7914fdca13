"""Greedy decoding: the cached loop equals full recomputation, static and
dynamic shapes agree, EOS stops rows, scores are the model's log-probs."""

import numpy as np
import pytest
import tensorflow as tf
from decoders import all_beams, greedy
from tiny_models import peaked_tiny_model

import keras_transformer as kt
from keras_transformer import kernels
from keras_transformer.decoding import (
    Beam,
    ConstantSteps,
    DecodeOutput,
    KernelChoice,
    Limits,
    decode,
    score_targets,
)


@pytest.fixture(scope="module")
def model():
    return peaked_tiny_model(seed=7, kernel_scale=8.0)


SOURCE = np.array([[5, 6, 7, 8, 3, 0], [9, 10, 3, 0, 0, 0], [11, 12, 13, 14, 15, 3]], np.int32)


STATIC = KernelChoice(static_shapes=True)


def full_recompute_greedy(model, source, steps):
    out = np.full((source.shape[0], 1), kt.BOS_ID, np.int32)
    for _ in range(steps):
        logits = model((source, out), training=False).numpy()[:, -1]
        out = np.concatenate([out, logits.argmax(-1)[:, None].astype(np.int32)], 1)
    return out[:, 1:]


@pytest.mark.quick
def test_cached_greedy_equals_full_recompute(model):
    tokens, _ = tf.function(lambda s: greedy(model, s, max_length=10))(SOURCE)
    expected = full_recompute_greedy(model, SOURCE, 10)
    tokens = tokens.numpy()
    assert len(set(tokens.ravel())) > 1 and len({tuple(r) for r in tokens}) == 3, (
        "degenerate test model"
    )
    for row, ref in zip(tokens, expected):
        stop = list(ref).index(kt.EOS_ID) + 1 if kt.EOS_ID in ref else len(ref)
        np.testing.assert_array_equal(row[:stop], ref[:stop])
        assert np.all(row[stop:] == kt.PAD_ID)


@pytest.mark.xla_cpu
def test_static_shape_greedy_matches_dynamic_under_xla(model):
    dynamic, dynamic_scores = tf.function(lambda s: greedy(model, s, max_length=10))(SOURCE)
    static, static_scores = tf.function(
        lambda s: greedy(model, s, STATIC, max_length=10), jit_compile=True
    )(SOURCE)
    width = dynamic.shape[1]
    np.testing.assert_array_equal(static.numpy()[:, :width], dynamic.numpy())
    assert np.all(static.numpy()[:, width:] == kt.PAD_ID)
    np.testing.assert_allclose(static_scores.numpy(), dynamic_scores.numpy(), rtol=1e-4)


def teacher_forced(model, tokens):
    """The model's log-probabilities ``[3, len, vocab]`` with ``tokens`` fed back
    as targets, and which positions are real (up to EOS; after it, padding)."""
    target_in = np.concatenate([np.full((3, 1), kt.BOS_ID, np.int32), tokens[:, :-1]], 1)
    log_probs = tf.nn.log_softmax(model((SOURCE, target_in), training=False)).numpy()
    real = np.ones_like(tokens, bool)
    for i, row in enumerate(tokens):
        if kt.EOS_ID in row:
            real[i, list(row).index(kt.EOS_ID) + 1 :] = False
    return log_probs, real


def test_scores_are_teacher_forced_log_probabilities(model):
    tokens, scores = greedy(model, SOURCE, max_length=6)
    tokens = tokens.numpy()
    log_probs, real = teacher_forced(model, tokens)
    picked = np.take_along_axis(log_probs, tokens[..., None], -1)[..., 0]
    np.testing.assert_allclose(scores.numpy(), (picked * real).sum(1), rtol=1e-4, atol=1e-4)


def test_greedy_chooses_past_banned_top_logits_and_scores_by_log_probabilities():
    """Greedy chooses from the logits with pad and BOS banned and scores the
    chosen tokens by their log-probabilities: where pad and BOS have the top
    logits, it takes the best other token, as the argmax of the banned
    log-probabilities would."""
    model = peaked_tiny_model(seed=11, kernel_scale=4.0)
    bias = model.output_projection.bias
    bias.assign(
        bias + 40.0 * np.eye(bias.shape[0], dtype=np.float32)[[kt.PAD_ID, kt.BOS_ID]].sum(0)
    )
    for constant_steps in (None, ConstantSteps(model)):
        tokens, scores = tf.function(
            lambda s: greedy(model, s, KernelChoice(constant_steps=constant_steps), max_length=6)
        )(SOURCE)
        tokens = tokens.numpy()
        log_probs, real = teacher_forced(model, tokens)
        assert (log_probs.argmax(-1) <= kt.BOS_ID).all(), "pad or BOS should have the top logits"
        allowed = log_probs.copy()
        allowed[..., [kt.PAD_ID, kt.BOS_ID]] = -np.inf
        np.testing.assert_array_equal(
            np.where(real, tokens, -1), np.where(real, allowed.argmax(-1), -1)
        )
        picked = np.take_along_axis(log_probs, tokens[..., None], -1)[..., 0]
        np.testing.assert_allclose(scores.numpy(), (picked * real).sum(1), rtol=1e-4, atol=1e-4)


def test_decoding_stops_when_every_row_has_emitted_eos(model):
    bias = model.output_projection.bias
    saved = bias.numpy()
    try:
        bias.assign(saved + 100.0 * np.eye(30, dtype=np.float32)[kt.EOS_ID])
        tokens, _ = greedy(model, SOURCE, max_length=20)
        np.testing.assert_array_equal(tokens.numpy(), [[kt.EOS_ID]] * 3)
    finally:
        bias.assign(saved)


def test_default_length_is_source_plus_fifty_capped_by_positions(model):
    """Per sentence: a sentence's limit does not depend on the batch's padding."""
    from keras_transformer.decoding import decode_lengths

    source = np.zeros([2, 40], np.int32)
    source[0, :7] = 5
    source[1, :] = 5
    np.testing.assert_array_equal(decode_lengths(model, source).numpy(), [57, 64])
    np.testing.assert_array_equal(decode_lengths(model, source, max_length=10).numpy(), [10, 10])
    with pytest.raises(ValueError, match="max_length"):
        greedy(model, SOURCE, STATIC)


def test_min_length_forces_the_output_length(model):
    bias = model.output_projection.bias
    saved = bias.numpy()
    try:
        bias.assign(
            saved + 100.0 * np.eye(30, dtype=np.float32)[kt.EOS_ID]
        )  # EOS would win at once
        tokens, _ = greedy(model, SOURCE, max_length=16, min_length=16)
        assert tokens.shape == (3, 16) and not np.any(tokens.numpy() == kt.EOS_ID)
        static, _ = greedy(model, SOURCE, STATIC, max_length=16, min_length=5)
        np.testing.assert_array_equal(static.numpy()[:, 5], [kt.EOS_ID] * 3)
        beams = all_beams(model, SOURCE, beam_size=2, max_length=12, min_length=12)
        assert beams.tokens.shape[2] == 12 and not np.any(beams.tokens.numpy() == kt.EOS_ID)
    finally:
        bias.assign(saved)


def test_unfinished_sentence_decodes_the_same_alone_and_in_a_padded_batch(model):
    bias = model.output_projection.bias
    saved = bias.numpy()
    try:
        bias.assign(
            saved - 100.0 * np.eye(30, dtype=np.float32)[kt.EOS_ID]
        )  # never ends: hits its limit
        short = SOURCE[1:2, :3]  # 3 real tokens: limit 53
        batch_tokens, _ = greedy(model, SOURCE)  # longest row has 6 tokens: 56 steps
        alone, _ = greedy(model, short)
        assert alone.shape[1] == 53
        np.testing.assert_array_equal(batch_tokens.numpy()[1, :53], alone.numpy()[0])
        assert np.all(batch_tokens.numpy()[1, 53:] == kt.PAD_ID)
        beams = all_beams(model, SOURCE, beam_size=2)
        beams_alone = all_beams(model, short, beam_size=2)
        np.testing.assert_array_equal(
            beams.tokens.numpy()[1, 0, :53], beams_alone.tokens.numpy()[0, 0]
        )
        np.testing.assert_allclose(
            beams.scores.numpy()[1, 0], beams_alone.scores.numpy()[0, 0], rtol=1e-4
        )
    finally:
        bias.assign(saved)


@pytest.mark.xla_cpu
@pytest.mark.parametrize("beam", [1, 2])
def test_static_buffer_keeps_per_sentence_limits_under_xla(model, beam):
    """buffer_length: fixed shapes for XLA, yet each row still stops at its own
    source length + extra_length, so outputs equal the dynamic decoder's."""
    search, limits = Beam(size=beam), Limits(extra_length=5)  # the best hypothesis a sentence
    bias = model.output_projection.bias
    saved = bias.numpy()
    try:
        bias.assign(
            saved - 100.0 * np.eye(30, dtype=np.float32)[kt.EOS_ID]
        )  # rows run to their limits
        dynamic = decode(model, SOURCE, search, limits)
        dynamic_tokens, dynamic_scores = dynamic.tokens[:, 0], dynamic.scores[:, 0]
        buffer = KernelChoice(static_shapes=True, buffer_length=16)
        static = tf.function(
            lambda s: decode(model, s, search, limits, choice=buffer), jit_compile=True
        )
        out = static(SOURCE)
        tokens, scores = out.tokens[:, 0], out.scores[:, 0]
        assert tokens.shape == (3, 16)
        width = dynamic_tokens.shape[1]  # 11: the longest row has 6 source tokens
        np.testing.assert_array_equal(tokens.numpy()[:, :width], dynamic_tokens.numpy())
        assert np.all(tokens.numpy()[:, width:] == kt.PAD_ID)
        assert np.all(tokens.numpy()[1, 8:] == kt.PAD_ID)  # 3 source tokens + 5
        np.testing.assert_allclose(scores.numpy(), dynamic_scores.numpy(), rtol=1e-4, atol=1e-4)
    finally:
        bias.assign(saved)
    with pytest.raises(ValueError, match="not both"):
        greedy(model, SOURCE, KernelChoice(static_shapes=True, buffer_length=16), max_length=8)
    with pytest.raises(ValueError, match="static_shapes=True"):
        greedy(model, SOURCE, KernelChoice(buffer_length=16))


def test_compaction_removes_finished_rows_without_changing_the_others(model):
    """Compaction removes finished rows in rounds (dynamic shapes: a batch of
    more than ``kernels.SMALL_BATCH_ROWS`` rows); each sentence decodes as it does
    alone and as in the fixed-shape decoder, where every row keeps its place
    to the end."""
    rng = np.random.default_rng(5)
    sources = np.zeros((kernels.SMALL_BATCH_ROWS + 8, 9), np.int32)
    for row in sources:
        length = rng.integers(1, 8)
        row[:length] = rng.integers(4, 30, size=length)
        row[length] = kt.EOS_ID
    bias = model.output_projection.bias
    saved = bias.numpy()
    try:
        bias.assign(saved + 9.0 * np.eye(30, dtype=np.float32)[kt.EOS_ID])  # some rows end with EOS
        tokens, scores = tf.function(lambda s: greedy(model, s, extra_length=12))(sources)
        tokens, scores = tokens.numpy(), scores.numpy()
        limits = (sources != 0).sum(axis=1) + 12  # the others at their own length limits
        lengths = [
            int(np.argmax(row == kt.EOS_ID)) + 1 if kt.EOS_ID in row[:limit] else int(limit)
            for row, limit in zip(tokens, limits)
        ]
        assert len(set(lengths)) > 3, lengths  # several rounds of departures
        fixed, fixed_scores = greedy(
            model, sources, KernelChoice(static_shapes=True, buffer_length=32), extra_length=12
        )
        np.testing.assert_array_equal(fixed.numpy()[:, : tokens.shape[1]], tokens)
        np.testing.assert_allclose(fixed_scores.numpy(), scores, rtol=1e-5, atol=1e-5)
        for b in (0, 5, 11, len(sources) - 1):
            real = int((sources[b] != 0).sum())
            alone, alone_score = greedy(model, sources[b : b + 1, :real], extra_length=12)
            np.testing.assert_array_equal(alone.numpy()[0, : lengths[b]], tokens[b, : lengths[b]])
            assert np.all(tokens[b, lengths[b] :] == kt.PAD_ID)
            np.testing.assert_allclose(alone_score.numpy()[0], scores[b], rtol=1e-5, atol=1e-5)
    finally:
        bias.assign(saved)


def test_the_tied_output_kernel_read_once_gives_the_same_logits():
    import keras

    keras.utils.set_random_seed(3)
    config = kt.TransformerConfig.from_preset("tiny", vocab_size=30, dropout=0.0, max_length=64)
    tied = kt.Transformer(config)
    tied.build()
    assert tied.output_projection is None and tied.output_kernel().shape == (config.d_model, 30)
    cache = tied.initial_cache(tied.encode(SOURCE, training=False))
    padding = tf.not_equal(SOURCE, kt.PAD_ID)
    bos = tf.fill([3, 1], kt.BOS_ID)
    once, _ = tied.decode(bos, cache, padding, training=False, output_kernel=tied.output_kernel())
    every_step, _ = tied.decode(bos, cache, padding, training=False)
    np.testing.assert_allclose(once.numpy(), every_step.numpy(), rtol=1e-5, atol=1e-5)
    untied = kt.Transformer(
        kt.TransformerConfig.from_preset("tiny", vocab_size=30, tie_embeddings=False)
    )
    assert untied.output_kernel() is None  # its own Dense layer projects


def test_banned_tokens_take_the_masked_value_and_the_others_keep_theirs():
    """``ban_tokens`` by a minimum with a constant cap (a static vocabulary)
    gives a select's values exactly, as the dynamic-vocabulary path does."""
    from keras_transformer.decoding import ban_tokens
    from keras_transformer.layers import masked_score_value

    rng = np.random.default_rng(3)
    log_probs = tf.nn.log_softmax(tf.constant(rng.normal(0, 30, (5, 12)).astype(np.float32)))
    expected = log_probs.numpy().copy()
    expected[:, [0, 2]] = masked_score_value(tf.float32)
    np.testing.assert_array_equal(ban_tokens(log_probs, [0, 2]).numpy(), expected)
    dynamic = tf.function(
        lambda x: ban_tokens(x, [0, 2]), input_signature=[tf.TensorSpec([None, None], tf.float32)]
    )
    np.testing.assert_array_equal(dynamic(log_probs).numpy(), expected)


def test_decode_in_parts_deals_sorted_sentences_and_restores_their_order():
    """``decode_in_parts``: from ``PARTS_MIN_ROWS`` decoding rows (sentences ×
    beams) on, each part decodes every ``parts``-th sentence by source
    length, cut to its own longest source; the outputs come back in the
    batch's order, padded to one width. A probe decoder shows each row which
    part it was in (its part's rows and width)."""
    from keras_transformer.decoding import PARTS_MIN_ROWS, DecodeOutput, decode_in_parts

    pad = kt.PAD_ID
    ids = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[ids])
    def probe(source_ids):  # tokens: [rows in the part, width of its sources, the source...]
        rows, width = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
        info = tf.stack([tf.fill([rows], rows), tf.fill([rows], width)], axis=1)
        tokens = tf.concat([info, source_ids], axis=1)[:, tf.newaxis, :]  # one hypothesis a row
        scores = tf.cast(tf.reduce_sum(source_ids, axis=1), tf.float32)[:, tf.newaxis]
        return DecodeOutput(tokens, scores, scores, tf.constant(0))

    lengths = [
        5,
        1,
        4,
        2,
        3,
        6,
        2,
        4,
        1,
    ]  # 9 sentences of 1 to 6 tokens (the last EOS), padded to 8
    source = np.zeros([9, 8], np.int32)
    for i, n in enumerate(lengths):
        source[i, :n] = np.arange(10 + i, 10 + i + n)
        source[i, n - 1] = kt.EOS_ID
    assert PARTS_MIN_ROWS <= 9

    @tf.function
    def in_parts(source_ids, parts, beam):  # the tokens and scores of the one hypothesis
        out = decode_in_parts(probe, source_ids, pad, parts, beam)
        return out.tokens[:, 0], out.scores[:, 0]

    tokens, scores = in_parts(tf.constant(source), 2, 1)
    tokens = tokens.numpy()
    np.testing.assert_array_equal(scores.numpy(), source.sum(axis=1))  # each row's own, in order
    order = np.argsort(lengths, kind="stable")
    for part, width in ((order[0::2], 6), (order[1::2], 5)):  # shortest first, dealt in turn
        np.testing.assert_array_equal(tokens[part, 0], len(part))
        np.testing.assert_array_equal(tokens[part, 1], width)
    assert tokens.shape == (9, 2 + 6)
    for row, n in zip(range(9), lengths):
        np.testing.assert_array_equal(tokens[row, 2 : 2 + n], source[row, :n])
        assert np.all(tokens[row, 2 + n :] == pad)
    three, _ = in_parts(tf.constant(source), 3, 1)
    assert sorted(set(three.numpy()[:, 0])) == [3]
    # Fewer rows than PARTS_MIN_ROWS, or fewer sentences than parts: the batch whole.
    for rows, parts, beam in ((PARTS_MIN_ROWS - 1, 2, 1), (1, 2, 8), (3, 4, 4)):
        whole, _ = in_parts(tf.constant(source[:rows]), parts, beam)
        np.testing.assert_array_equal(whole.numpy()[:, :2], [[rows, 8]] * rows)
    beams, _ = in_parts(
        tf.constant(source[:2]), 2, PARTS_MIN_ROWS // 2
    )  # 2 sentences of as many beams: parts
    np.testing.assert_array_equal(beams.numpy()[:, 0], [1, 1])
    assert decode_in_parts(probe, tf.constant(source), pad, parts=1).tokens.shape == (
        9,
        1,
        10,
    )  # whole, uncut
    with pytest.raises(ValueError, match="parts must be >= 1"):
        decode_in_parts(probe, source, pad, parts=0)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_batch_in_parts_decodes_as_the_batch_whole(model, beam):
    """Greedy and beam search of a batch in two parts: the tokens and scores of the batch whole."""
    from keras_transformer.decoding import decode_in_parts

    rng = np.random.default_rng(beam)
    source = np.zeros([11, 9], np.int32)
    for row in source:
        n = rng.integers(2, 10)
        row[: n - 1] = rng.integers(4, 30, n - 1)
        row[n - 1] = kt.EOS_ID
    search, limits = Beam(size=beam), Limits(extra_length=4)  # the best hypothesis a sentence
    whole = tf.function(
        lambda s: decode(model, s, search, limits),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    out = tf.function(lambda s: decode_in_parts(whole, s, kt.PAD_ID, beam_size=beam))(source)
    expected = whole(source)
    assert out.tokens.shape == expected.tokens.shape
    np.testing.assert_array_equal(out.tokens.numpy(), expected.tokens.numpy())
    for field in ("scores", "log_probs"):
        np.testing.assert_allclose(
            getattr(out, field).numpy(),
            getattr(expected, field).numpy(),
            rtol=1e-5,
            atol=1e-6,
        )


class _Letters:
    """A target tokenizer for the n-best lists: id i >= 4 detokenizes to i - 3 letters "a",
    and each letter tokenizes back to id 4, so a text can take more ids than its hypothesis."""

    def detokenize(self, ids):
        letters = np.where(np.asarray(ids) >= 4, np.asarray(ids) - 3, 0)
        return tf.constant(["a" * int(row.sum()) for row in letters])

    def tokenize(self, texts):
        letters = tf.strings.unicode_split(texts, "UTF-8")
        return tf.ragged.map_flat_values(lambda chars: tf.fill(tf.shape(chars), 4), letters)


def test_n_best_texts_score_what_fits_and_keep_the_search_score_of_what_does_not():
    """A text whose ids differ from its hypothesis' is scored by ``score_targets``; one whose
    ids are longer than the model's positions keeps the search's score instead of failing."""
    from keras_transformer.translation.text import n_best_texts

    config = kt.TransformerConfig.from_preset("tiny", num_layers=1, max_length=6)
    model = kt.Transformer(config)
    model.build()
    eos = config.eos_id
    source = tf.constant([[5, 6, eos]])
    # "aaaaaa" (7 ids with EOS: too long), "aa" (3 ids, not the hypothesis'), "a" (the same)
    tokens = tf.constant([[[9, eos], [5, eos], [4, eos]]], tf.int32)
    searched = tf.constant([[-1.0, -2.0, -3.0]])
    out = DecodeOutput(tokens, searched, searched, tf.constant(2))
    texts, log_probs = n_best_texts(model, _Letters(), source, out, 3)
    assert texts.numpy().tolist() == [[b"aaaaaa", b"aa", b"a"]]
    scored = score_targets(model, source, tf.constant([[4, 4, eos]]))
    np.testing.assert_allclose(log_probs.numpy(), [[-1.0, float(scored[0]), -3.0]], rtol=1e-6)
