"""The searches over hand-written logits: greedy decoding, beam search and sampling know
nothing of the model, so a table of logits drives them, and brute force over every
hypothesis is the reference.

The "model" is a Markov chain: the logits of step ``t`` depend on ``t`` and the last token
(``TABLE[t, last]``). Ids: 0 pad and 1 BOS (never emitted), 2 EOS, 3-6 words.
"""

import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import (
    NEG,
    Beam,
    DecodingSteps,
    Greedy,
    Limits,
    Sample,
    beam_search,
    greedy_search,
    length_penalty,
    sample_search,
)
from keras_transformer.decoding.sampling import filter_logits, sentence_keys

PAD, BOS, EOS = 0, 1, 2
VOCAB = 7
LIMIT = 4
WORDS = range(3, VOCAB)


def markov_table(seed: int) -> np.ndarray:
    """``[LIMIT, VOCAB, VOCAB]`` logits: step, last token → next token."""
    rng = np.random.default_rng(seed)
    return rng.normal(scale=2.0, size=(LIMIT, VOCAB, VOCAB)).astype(np.float32)


def markov_steps(table: np.ndarray, static_shapes: bool = False) -> DecodingSteps:
    """A ``DecodingSteps`` over ``table``; the cache is a row of zeros, gathered along."""
    logits = tf.constant(table)

    def step(token_ids, t, cache, source_padding):
        return tf.gather(logits[t], token_ids), cache

    return DecodingSteps(
        encode=lambda ids: tf.cast(ids, tf.float32),
        initial_cache=lambda memory: tf.zeros_like(memory[:, :1]),
        large_batch=step,
        bos_id=BOS,
        eos_id=EOS,
        pad_id=PAD,
        banned=(PAD, BOS),
        static_shapes=static_shapes,
    )


def log_softmax(x):
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def sequence_log_prob(table, tokens) -> float:
    """log p of ``tokens`` (ending with EOS or at the limit) under the chain."""
    last, total = BOS, 0.0
    for t, token in enumerate(tokens):
        total += log_softmax(table[t, last])[token]
        last = token
    return total


def all_hypotheses(limit: int, prefix=()):
    """Every complete hypothesis: words then EOS, or ``limit`` words (cut by the limit)."""
    for length in range(limit + 1):
        for words in itertools.product(WORDS, repeat=length):
            if tuple(words[: len(prefix)]) != tuple(prefix)[: len(words)] or len(words) < len(
                prefix
            ):
                continue
            if length < limit:
                yield (*words, EOS)
            else:
                yield words


def brute_force(table, k: int, alpha: float, limit: int = LIMIT, prefix=()):
    """The ``k`` best complete hypotheses by log-probability / length penalty."""
    scored = []
    for hypothesis in all_hypotheses(limit, prefix):
        log_prob = sequence_log_prob(table, hypothesis)
        penalty = ((5.0 + len(hypothesis)) / 6.0) ** alpha
        scored.append((log_prob / penalty, log_prob, hypothesis))
    scored.sort(key=lambda item: -item[0])
    return scored[:k]


def run(search, *args, **kwargs):
    """``search`` on a batch of identical one-token sources, ``LIMIT`` tokens at most."""
    batch = kwargs.pop("batch", 1)
    source = tf.fill([batch, 2], 5)
    return search(*args[:1], source, tf.fill([batch], LIMIT), LIMIT, *args[1:], **kwargs)


def strip(tokens) -> tuple:
    """A hypothesis' tokens up to and including EOS, without padding."""
    out = []
    for token in tokens:
        if token == PAD:
            break
        out.append(int(token))
        if token == EOS:
            break
    return tuple(out)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("static_shapes", [False, True])
def test_greedy_follows_the_arg_max_and_never_emits_a_banned_id(seed, static_shapes):
    """Greedy decoding takes each step's arg-max among the allowed ids (pad and BOS banned,
    though the table may rank them first) and reports the chain's log-probability."""
    table = markov_table(seed)
    table[:, :, BOS] += 5.0  # the likeliest, but banned
    out = run(greedy_search, markov_steps(table, static_shapes))
    expected, last = [], BOS
    for t in range(LIMIT):
        allowed = table[t, last].copy()
        allowed[[PAD, BOS]] = -np.inf
        last = int(np.argmax(allowed))
        expected.append(last)
        if last == EOS:
            break
    assert strip(out.tokens[0, 0].numpy()) == tuple(expected)
    assert out.log_probs[0, 0].numpy() == pytest.approx(sequence_log_prob(table, expected), 1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("static_shapes", [False, True])
def test_exact_beam_search_finds_the_brute_force_best(seed, alpha, static_shapes):
    """With the exact stopping rule and a beam as wide as the vocabulary of words, beam search
    returns the brute-force k best complete hypotheses, their scores and log-probabilities."""
    table = markov_table(seed)
    k = 4
    out = run(beam_search, markov_steps(table, static_shapes), Beam(k, alpha, "exact"))
    best = brute_force(table, k, alpha)
    # A beam of 4 over 4 words keeps every prefix up to length 1 but not beyond: compare the
    # best hypothesis, and that each returned one is scored correctly and in order.
    assert strip(out.tokens[0, 0].numpy()) == best[0][2]
    for i in range(k):
        tokens = strip(out.tokens[0, i].numpy())
        log_prob = sequence_log_prob(table, tokens)
        assert out.log_probs[0, i].numpy() == pytest.approx(log_prob, abs=1e-4)
        penalty = float(length_penalty(len(tokens), alpha))
        assert out.scores[0, i].numpy() == pytest.approx(log_prob / penalty, abs=1e-4)
    assert np.all(np.diff(out.scores[0].numpy()) <= 1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_beam_wide_enough_is_exhaustive(seed):
    """A beam of every possible prefix (4 words³ = 64 live hypotheses at the last step) is an
    exhaustive search: its n-best list is the brute-force one, in order."""
    table = markov_table(seed)
    k = 64
    out = run(beam_search, markov_steps(table), Beam(k, 0.0, "exact"))
    best = brute_force(table, 10, 0.0)
    got = [strip(out.tokens[0, i].numpy()) for i in range(10)]
    assert got == [hypothesis for _, _, hypothesis in best]
    np.testing.assert_allclose(out.log_probs[0, :10], [lp for _, lp, _ in best], atol=1e-4)


@pytest.mark.parametrize("prefix", [(4,), (5, 3), (6, 6, 6)])
@pytest.mark.parametrize("static_shapes", [False, True])
def test_beam_search_with_a_prefix_continues_it(prefix, static_shapes):
    """Every hypothesis begins with the forced prefix, and the best is the brute-force best of
    the hypotheses that begin so; the log-probabilities count the prefix's tokens."""
    table = markov_table(7)
    k = 16
    beam = Beam(k, 0.0, "exact")
    prefix_ids = tf.constant([list(prefix)])
    out = run(beam_search, markov_steps(table, static_shapes), beam, prefix_ids=prefix_ids)
    best = brute_force(table, 3, 0.0, prefix=prefix)
    for i in range(3):
        tokens = strip(out.tokens[0, i].numpy())
        assert tokens[: len(prefix)] == prefix
        assert tokens == best[i][2]
        assert out.log_probs[0, i].numpy() == pytest.approx(best[i][1], abs=1e-4)
    possible = out.log_probs[0].numpy() > NEG / 2  # the rest: fewer hypotheses than the beam
    for i in np.flatnonzero(possible):
        assert strip(out.tokens[0, i].numpy())[: len(prefix)] == prefix


@pytest.mark.parametrize("static_shapes", [False, True])
def test_greedy_with_a_prefix_forces_it_then_takes_the_arg_max(static_shapes):
    """Rows with prefixes of different lengths (one empty) in one batch: each is forced, then
    continued as greedy decoding would from there."""
    table = markov_table(3)
    prefixes = tf.constant([[5, 5], [0, 0], [6, 0]])
    steps = markov_steps(table, static_shapes)
    out = run(greedy_search, steps, prefix_ids=prefixes, batch=3)
    for row, prefix in enumerate([(5, 5), (), (6,)]):
        expected, last = list(prefix), prefix[-1] if prefix else BOS
        for t in range(len(prefix), LIMIT):
            allowed = table[t, last].copy()
            allowed[[PAD, BOS]] = -np.inf
            last = int(np.argmax(allowed))
            expected.append(last)
            if last == EOS:
                break
        assert strip(out.tokens[row, 0].numpy()) == tuple(expected)
        assert out.log_probs[row, 0].numpy() == pytest.approx(
            sequence_log_prob(table, expected), abs=1e-5
        )


def test_min_length_bans_an_early_eos():
    """EOS, the likeliest first token, is not taken before ``min_length`` tokens."""
    table = markov_table(0)
    table[:, :, EOS] += 10.0
    out = run(greedy_search, markov_steps(table), min_length=2)
    tokens = strip(out.tokens[0, 0].numpy())
    assert len(tokens) == 3 and tokens[-1] == EOS and EOS not in tokens[:2]


def keys_for(count: int) -> tf.Tensor:
    return tf.constant(np.arange(count, dtype=np.uint64) * 2654435761 % 2**32, tf.uint32)


def first_tokens(table, sample, count: int) -> np.ndarray:
    out = sample_search(
        markov_steps(table),
        tf.fill([count, 2], 5),
        tf.fill([count], 1),
        1,
        sample,
        keys_for(count),
    )
    return out.tokens[:, 0, 0].numpy()


def test_sampling_matches_the_softmax():
    """With ``top_k=0`` and ``temperature=1``, the first token's frequencies over many keys
    match the softmax of its logits (banned ids excluded): a χ² test with fixed keys."""
    table = markov_table(11)
    table[0, BOS] = [0.0, 0.0, 0.5, 1.0, -0.5, 0.2, 1.5]
    count = 8000
    tokens = first_tokens(table, Sample(), count)
    allowed = np.arange(2, VOCAB)
    probs = np.exp(table[0, BOS, allowed]) / np.exp(table[0, BOS, allowed]).sum()
    observed = np.array([(tokens == token).sum() for token in allowed])
    assert observed.sum() == count  # never a banned id
    expected = probs * count
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    # 4 degrees of freedom: the 0.999 quantile is 18.47.
    assert chi2 < 18.47, (observed, expected.round(1), chi2)


def test_temperature_sharpens_and_flattens():
    """A low temperature draws the arg-max nearly always; a high one spreads the draws."""
    table = markov_table(11)
    table[0, BOS] = [0.0, 0.0, 0.5, 1.0, -0.5, 0.2, 1.5]
    cold = first_tokens(table, Sample(temperature=0.05), 2000)
    hot = first_tokens(table, Sample(temperature=5.0), 2000)
    assert (cold == 6).mean() > 0.99
    assert 0.12 < (hot == 4).mean() < 0.28  # the least likely word: near uniform's 0.2


@pytest.mark.parametrize("top_p", [0.3, 0.6, 0.9])
def test_top_p_never_picks_outside_the_nucleus(top_p):
    """The draws all fall in the smallest set of likeliest tokens whose mass reaches top_p,
    and they cover it."""
    table = markov_table(11)
    table[0, BOS] = [0.0, 0.0, 0.5, 1.0, -0.5, 0.2, 1.5]
    tokens = first_tokens(table, Sample(top_p=top_p), 3000)
    allowed = np.arange(2, VOCAB)
    probs = np.exp(table[0, BOS, allowed]) / np.exp(table[0, BOS, allowed]).sum()
    order = np.argsort(-probs)
    before = np.cumsum(probs[order]) - probs[order]
    nucleus = set(allowed[order[before < top_p]].tolist())
    assert set(tokens.tolist()) == nucleus


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_top_k_keeps_the_k_likeliest(top_k):
    """The draws cover exactly the top_k likeliest allowed tokens; top_k=1 is the arg-max."""
    table = markov_table(11)
    table[0, BOS] = [0.0, 9.0, 0.5, 1.0, -0.5, 0.2, 1.5]  # BOS is likeliest, but banned
    tokens = first_tokens(table, Sample(top_k=top_k), 1000)
    expected = {6, 3, 2}
    assert set(tokens.tolist()) == set(list([6, 3, 2])[:top_k]) <= expected


def test_top_k_one_is_greedy_decoding_whole_sequences():
    table = markov_table(5)
    greedy = run(greedy_search, markov_steps(table), batch=3)
    sampled = sample_search(
        markov_steps(table),
        tf.fill([3, 2], 5),
        tf.fill([3], LIMIT),
        LIMIT,
        Sample(top_k=1),
        keys_for(3),
    )
    np.testing.assert_array_equal(greedy.tokens, sampled.tokens)
    np.testing.assert_allclose(greedy.log_probs, sampled.log_probs)


def test_a_sample_is_the_same_in_any_batch():
    """A row's sample depends on its key alone: the same key alone or among others gives the
    same tokens, with dynamic shapes (compaction) and static ones."""
    table = markov_table(9)
    sample = Sample()
    keys = keys_for(9)
    for static_shapes in (False, True):
        steps = markov_steps(table, static_shapes)
        whole = sample_search(steps, tf.fill([9, 2], 5), tf.fill([9], LIMIT), LIMIT, sample, keys)
        for row in (0, 4, 8):
            alone = sample_search(
                steps, tf.fill([1, 2], 5), tf.fill([1], LIMIT), LIMIT, sample, keys[row : row + 1]
            )
            np.testing.assert_array_equal(alone.tokens[0], whole.tokens[row])


def test_sentence_keys_ignore_padding_and_follow_the_seed():
    ids = tf.constant([[5, 6, 3, 0, 0], [5, 6, 3, 0, 0], [6, 5, 3, 0, 0]])
    keys = sentence_keys(ids, 0, seed=7).numpy()
    alone = sentence_keys(ids[:1, :3], 0, seed=7).numpy()
    assert keys[0] == keys[1] == alone[0]
    assert keys[2] != keys[0]  # the order of the ids counts
    assert sentence_keys(ids, 0, seed=8).numpy()[0] != keys[0]
    big = sentence_keys(ids, 0, seed=2**40 + 7).numpy()[0]
    assert big != keys[0]  # the high bits of a 64-bit seed count


def test_filter_logits_clamps_tensors_and_keeps_banned_ids_out():
    """Tensor parameters (a served request) are clamped, and an impossible token (at the
    finite -inf) stays impossible at any temperature."""
    logits = tf.constant([[-1e9, 1.0, 2.0, 3.0]])
    kept = filter_logits(logits, tf.constant(-3), tf.constant(7.0), tf.constant(1000.0))
    assert (kept.numpy()[0] > -1e8).tolist() == [False, True, True, True]
    kept = filter_logits(logits, tf.constant(0), tf.constant(0.0), tf.constant(0.0))
    assert (kept.numpy()[0] > -1e8).tolist() == [False, False, False, True]
    assert math.isfinite(float(tf.reduce_max(kept)))


@pytest.mark.parametrize(
    "search",
    [Greedy(), Beam(size=3, alpha=0.6), Sample(top_p=0.9, temperature=1.3, seed=5)],
    ids=["greedy", "beam", "sample"],
)
def test_decode_on_a_model_gives_the_same_with_static_shapes_and_prefixes(search):
    """``decode`` on a real (tiny, random) model: the static-shape decoders, as XLA runs them,
    give the dynamic ones' hypotheses, with prefixes of different lengths."""
    from tiny_models import peaked_tiny_model

    from keras_transformer.decoding import KernelChoice, decode

    model = peaked_tiny_model(4, 3.0)
    source = tf.constant([[5, 6, 7, 3], [8, 3, 0, 0], [9, 10, 3, 0]])
    prefix = tf.constant([[11, 12], [0, 0], [13, 0]])
    limits, n = Limits(extra_length=5), search.hypotheses
    dynamic = decode(model, source, search, limits, n=n, prefix_ids=prefix)
    static = decode(
        model,
        source,
        search,
        limits,
        n=n,
        prefix_ids=prefix,
        choice=KernelChoice(True, buffer_length=12),
    )
    width = dynamic.tokens.shape[-1]
    np.testing.assert_array_equal(static.tokens[:, :, :width], dynamic.tokens)
    np.testing.assert_allclose(static.log_probs, dynamic.log_probs, atol=1e-4)
    for row, length in enumerate([2, 0, 1]):
        for hypothesis in dynamic.tokens[row].numpy():
            if hypothesis.any():
                assert hypothesis[:length].tolist() == prefix[row, :length].numpy().tolist()


def test_an_empty_batch_decodes_to_nothing():
    """No sentences in, no hypotheses out, with every strategy and in parts."""
    from tiny_models import peaked_tiny_model

    from keras_transformer.decoding import decode, decode_in_parts

    model = peaked_tiny_model(4, 3.0)
    empty = tf.zeros([0, 0], tf.int32)
    for search in (Greedy(), Beam(size=2), Sample(seed=1)):
        n = search.hypotheses
        out = decode(model, empty, search, n=n)
        assert out.tokens.shape[0] == 0 and out.log_probs.shape == (0, n)
        run = tf.function(
            lambda ids, search=search, n=n: decode(model, ids, search, n=n),
            input_signature=[tf.TensorSpec([None, None], tf.int32)],
        )
        assert decode_in_parts(run, empty, 0, beam_size=n).tokens.shape[0] == 0
