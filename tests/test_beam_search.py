"""Beam search: k=1 is greedy, scores are the model's own log-probabilities,
beams are ranked by the length-penalised score, batching changes nothing."""

import numpy as np
import pytest
import tensorflow as tf
from decoders import all_beams, beam_of_one, greedy
from tiny_models import peaked_tiny_model

import keras_transformer as kt
from keras_transformer.decoding import KernelChoice, length_penalty

SOURCE = np.array([[5, 6, 7, 8, 3, 0], [9, 10, 3, 0, 0, 0], [11, 12, 13, 14, 15, 3]], np.int32)


@pytest.fixture(scope="module")
def model():
    return peaked_tiny_model(seed=11, kernel_scale=4.0, eos_bias=2.0)


def _length(row):
    row = list(row)
    return row.index(kt.EOS_ID) + 1 if kt.EOS_ID in row else len(row)


def teacher_forced_log_prob(model, source, tokens):
    length = _length(tokens)
    target_in = np.concatenate([[kt.BOS_ID], tokens[: length - 1]])[np.newaxis].astype(np.int32)
    log_probs = tf.nn.log_softmax(model((source[np.newaxis], target_in), training=False)).numpy()[0]
    return float(sum(log_probs[i, tokens[i]] for i in range(length)))


def test_beam_of_one_without_length_penalty_is_greedy(model):
    greedy_tokens, greedy_scores = greedy(model, SOURCE, max_length=12)
    beam = beam_of_one(model, SOURCE, alpha=0.0, max_length=12)
    width = greedy_tokens.shape[1]
    np.testing.assert_array_equal(beam.tokens.numpy()[:, 0, :width], greedy_tokens.numpy())
    np.testing.assert_allclose(beam.log_probs.numpy()[:, 0], greedy_scores.numpy(), rtol=1e-4)


def test_beam_of_one_with_min_length_is_greedy_with_min_length(model):
    # The search strikes EOS (before min_length), pad and BOS from its best few candidates
    # (here 5 of 30): what is left must be what striking them from the whole vocabulary gives.
    greedy_tokens, greedy_scores = greedy(model, SOURCE, max_length=12, min_length=6)
    beam = beam_of_one(model, SOURCE, alpha=0.0, max_length=12, min_length=6)
    width = greedy_tokens.shape[1]
    np.testing.assert_array_equal(beam.tokens.numpy()[:, 0, :width], greedy_tokens.numpy())
    np.testing.assert_allclose(beam.log_probs.numpy()[:, 0], greedy_scores.numpy(), rtol=1e-4)
    assert (greedy_tokens.numpy()[:, :6] != model.config.eos_id).all()


@pytest.mark.quick
def test_beam_scores_are_the_models_log_probabilities(model):
    out = tf.function(lambda s: all_beams(model, s, beam_size=4, alpha=0.6, max_length=12))(SOURCE)
    tokens, scores, log_probs = (x.numpy() for x in (out.tokens, out.scores, out.log_probs))
    assert tokens.shape[:2] == (3, 4)
    for b in range(3):
        ranked = np.nan_to_num(scores[b], neginf=-1e30)  # missing hypotheses (-inf) last
        assert np.all(np.diff(ranked) <= 1e-6), "beams are not sorted best first"
        for j in range(4):
            if np.isneginf(scores[b, j]):  # a missing hypothesis: pad tokens, -inf scores
                assert np.isneginf(log_probs[b, j]) and np.all(tokens[b, j] == kt.PAD_ID)
                continue
            rescored = teacher_forced_log_prob(model, SOURCE[b], tokens[b, j])
            np.testing.assert_allclose(log_probs[b, j], rescored, rtol=1e-4, atol=1e-4)
            expected = rescored / float(length_penalty(_length(tokens[b, j]), 0.6))
            np.testing.assert_allclose(scores[b, j], expected, rtol=1e-4, atol=1e-4)
    # Beam search finds at least as good a (penalised) hypothesis as greedy.
    greedy_tokens, greedy_lp = greedy(model, SOURCE, max_length=12)
    for b in range(3):
        greedy_length = _length(greedy_tokens.numpy()[b])
        greedy_score = greedy_lp.numpy()[b] / float(length_penalty(greedy_length, 0.6))
        assert scores[b, 0] >= greedy_score - 1e-4


def varied_sources(count: int, seed: int = 3) -> np.ndarray:
    """``count`` padded sources of 1-9 real tokens (EOS last): done at different steps."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((count, 10), np.int32)
    for row in rows:
        length = rng.integers(1, 10)
        row[:length] = rng.integers(4, 30, size=length)
        row[length] = kt.EOS_ID
    return rows


@pytest.mark.parametrize(
    "stopping", ["exact", pytest.param("heuristic", marks=pytest.mark.slow)]
)  # a search each
def test_sentence_alone_equals_sentence_in_batch(model, stopping):
    """Done sentences are removed from the batch in rounds; no one else's beams change."""
    sources = varied_sources(9)
    run = tf.function(  # traced once, for the batch and each sentence alone
        lambda s: all_beams(model, s, beam_size=3, alpha=1.0, stopping=stopping),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    batch = run(sources)
    for b in range(len(sources)):
        length = int((sources[b] != 0).sum())
        alone = run(sources[b : b + 1, :length])
        best = _length(alone.tokens.numpy()[0, 0])
        np.testing.assert_array_equal(
            alone.tokens.numpy()[0, 0, :best], batch.tokens.numpy()[b, 0, :best]
        )
        assert np.all(batch.tokens.numpy()[b, 0, best:] == kt.PAD_ID)
        np.testing.assert_allclose(
            alone.scores.numpy()[0], batch.scores.numpy()[b], rtol=1e-4, atol=1e-4
        )
        np.testing.assert_allclose(
            alone.log_probs.numpy()[0], batch.log_probs.numpy()[b], rtol=1e-4, atol=1e-4
        )


def test_heuristic_stopping_is_exact_without_length_penalty(model):
    exact = all_beams(model, varied_sources(6), beam_size=3, alpha=0.0, stopping="exact")
    heuristic = all_beams(model, varied_sources(6), beam_size=3, alpha=0.0, stopping="heuristic")
    np.testing.assert_array_equal(heuristic.tokens.numpy(), exact.tokens.numpy())
    np.testing.assert_allclose(heuristic.scores.numpy(), exact.scores.numpy(), rtol=1e-5)
    assert int(heuristic.steps) == int(exact.steps)


def test_heuristic_stopping_stops_sooner_and_the_exact_rule_scores_no_lower(model):
    bias = model.output_projection.bias
    saved = bias.numpy()
    try:
        bias.assign(
            saved + 5.0 * np.eye(30, dtype=np.float32)[kt.EOS_ID]
        )  # hypotheses end early and late
        exact_steps, heuristic_steps = [], []
        exact_search, heuristic_search = (  # each rule traced once, for sources of any length
            tf.function(
                lambda s, rule=rule: all_beams(model, s, beam_size=3, alpha=1.4, stopping=rule),
                input_signature=[tf.TensorSpec([None, None], tf.int32)],
            )
            for rule in ("exact", "heuristic")
        )
        for source in varied_sources(6):
            source = source[np.newaxis, : int((source != 0).sum())]
            exact, heuristic = exact_search(source), heuristic_search(source)
            exact_steps.append(int(exact.steps))
            heuristic_steps.append(int(heuristic.steps))
            assert float(exact.scores[0, 0]) >= float(heuristic.scores[0, 0]) - 1e-5
    finally:
        bias.assign(saved)
    # The exact bound waits until no live beam could win at the length limit.
    assert all(h <= e for h, e in zip(heuristic_steps, exact_steps))
    assert sum(h < e for h, e in zip(heuristic_steps, exact_steps)) >= 2, (
        heuristic_steps,
        exact_steps,
    )
    with pytest.raises(ValueError, match="stopping rule"):
        all_beams(model, varied_sources(2), stopping="never")


@pytest.mark.parametrize(
    "jit,stopping",
    [
        (False, "exact"),
        (False, "heuristic"),
        pytest.param(True, "heuristic", marks=pytest.mark.xla_cpu),
    ],
)
def test_static_shape_search_equals_the_growing_one(model, jit, stopping):
    """Fixed-size buffers (the XLA/TPU form) give the beams of the growing search.

    Done sentences keep their rows in the fixed buffers, where compaction removes them from the
    growing ones; the beams are compared padded to max_length."""
    dynamic = all_beams(model, SOURCE, beam_size=3, alpha=0.6, max_length=12, stopping=stopping)
    static = tf.function(
        lambda s: all_beams(
            model,
            s,
            beam_size=3,
            alpha=0.6,
            choice=KernelChoice(static_shapes=True),
            max_length=12,
            stopping=stopping,
        ),
        jit_compile=jit,
    )(SOURCE)
    width = dynamic.tokens.shape[2]
    assert static.tokens.shape == (3, 3, 12)
    np.testing.assert_array_equal(static.tokens.numpy()[:, :, :width], dynamic.tokens.numpy())
    assert np.all(static.tokens.numpy()[:, :, width:] == kt.PAD_ID)
    np.testing.assert_allclose(static.scores.numpy(), dynamic.scores.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        static.log_probs.numpy(), dynamic.log_probs.numpy(), rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match="max_length as a Python int"):
        all_beams(model, SOURCE, choice=KernelChoice(static_shapes=True))
