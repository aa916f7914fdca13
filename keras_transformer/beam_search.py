"""Beam search (paper §6.1: beam 4, length penalty α = 0.6, max length input + 50).

Batched and cached like greedy decoding: self-attention keys/values are
reordered along with the beams, while the cross-attention keys/values, which
are identical for every beam of a sentence, are computed once and never moved.
Scores use the GNMT length penalty ``lp(n) = ((5 + n) / 6)^α`` of Wu et al. 2016.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.decoding import ban_early_eos, batch_free_shape, decode_limits, loose_shape
from keras_transformer.layers import masked_score_value, padding_mask

_NEG = masked_score_value(tf.float32)  # an impossible log-probability or score, finite


class BeamSearchOutput(NamedTuple):
    """``tokens`` ``[batch, beam, len]`` int32 (no BOS; EOS then padding), best
    first; ``scores`` ``[batch, beam]``: log-probability / length penalty, the
    ranking criterion; ``log_probs`` ``[batch, beam]``: the sequences' summed
    token log-probabilities under the model; ``steps`` ``[]`` int32: the
    decoder steps the search ran (at most the longest output allowed)."""

    tokens: tf.Tensor
    scores: tf.Tensor
    log_probs: tf.Tensor
    steps: tf.Tensor


class BeamState(NamedTuple):
    """The search's loop state, one step at a time (``k`` = beam size).

    Sequences start with BOS and are ``[batch, k, len]`` int32, padded with
    ``pad_id``: ``len`` grows by one a step, or is the fixed buffer
    (``limit + 1``) with static shapes. Empty finished slots score ``_NEG``.
    """

    step: tf.Tensor                # [] int32: tokens decoded so far
    alive_seq: tf.Tensor           # [batch, k, len] int32: the live hypotheses
    alive_log_probs: tf.Tensor     # [batch, k] float32: their summed log-probabilities, best first
    cache: list                    # per decoder layer: {"self": {"key", "value"}: [batch·k, heads, len, depth]
    #                                (reordered with the beams), "cross": projected once per sentence}
    finished_seq: tf.Tensor        # [batch, k, len] int32: the best hypotheses that ended (EOS or limit)
    finished_scores: tf.Tensor     # [batch, k] float32: their log-probability / length penalty, best first
    finished_log_probs: tf.Tensor  # [batch, k] float32: their summed log-probabilities
    finished_flags: tf.Tensor      # [batch, k] bool: the slot holds a finished hypothesis


def length_penalty(length, alpha: float) -> tf.Tensor:
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def beam_search(model, source_ids, beam_size: int = 4, alpha: float = 0.6, max_length=None,
                extra_length: int = 50, min_length: int = 0, static_shapes: bool = False,
                buffer_length: int | None = None) -> BeamSearchOutput:
    """Beam search over ``source_ids`` ``[batch, src_len]`` (padded with ``pad_id``).

    Stops when the longest allowed length is reached or when, for every
    sentence, ``beam_size`` finished hypotheses score better than any live
    beam still could (log-probabilities only fall as a sequence grows).
    ``min_length`` forbids EOS before that many tokens (benchmarks force the
    output length with it). ``static_shapes=True`` keeps every loop variable
    at a fixed shape (fixed-size KV cache, sequence buffers of an int
    ``max_length`` or of ``buffer_length``, see ``decoding.decode_limits``) so
    the search compiles with XLA (TPU, ``tf.function(jit_compile=True)``); its
    tokens are padded to the buffer length.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}.")
    config = model.config
    source_ids = tf.convert_to_tensor(source_ids)
    k = beam_size
    row_limits, limit = decode_limits(model, source_ids, max_length, extra_length, static_shapes, buffer_length)
    batch = tf.shape(source_ids)[0]
    vocab = config.tgt_vocab_size
    eos = tf.constant(config.eos_id, tf.int32)
    pad = tf.constant(config.pad_id, tf.int32)

    # Every beam of a sentence attends to the same source: encode once, then
    # tile the encoder output batch → batch·k (cross K/V are projected once).
    memory = tf.repeat(model.encode(source_ids, training=False), k, axis=0)
    source_padding = padding_mask(tf.repeat(source_ids, k, axis=0), config.pad_id)
    cache = model.initial_cache(memory, max_length=limit if static_shapes else None)

    if static_shapes:
        # Sequences live in [batch, beams, limit + 1] buffers (BOS first), pad-filled.
        def last_token(seq, t):
            return tf.gather(seq, t, axis=2)

        def append(seq, tokens, t):
            at = tf.equal(tf.range(limit + 1), t + 1)[tf.newaxis, tf.newaxis, :]
            return tf.where(at, tokens[:, :, tf.newaxis], seq)

        def grow(seq):
            return seq
    else:
        def last_token(seq, t):
            return seq[:, :, -1]

        def append(seq, tokens, t):
            return tf.concat([seq, tokens[:, :, tf.newaxis]], axis=2)

        def grow(seq):  # keep finished sequences as long as the candidates
            return tf.concat([seq, tf.fill([batch, k, 1], pad)], axis=2)

    def reorder_self_cache(cache, parents):
        flat = tf.reshape(parents + tf.range(batch)[:, tf.newaxis] * k, [-1])
        return [
            {"self": {name: tf.gather(value, flat) for name, value in layer["self"].items()},
             "cross": layer["cross"]}
            for layer in cache
        ]

    def body(state: BeamState) -> BeamState:
        t = state.step
        last = tf.reshape(last_token(state.alive_seq, t), [-1, 1])
        logits, cache = model.decode(last, state.cache, source_padding,
                                     cache_index=t if static_shapes else None, training=False)
        step_log_probs = ban_early_eos(tf.nn.log_softmax(logits[:, -1, :]), t, min_length, config.eos_id)
        log_probs = tf.reshape(step_log_probs, [batch, k, vocab])
        candidates = tf.reshape(state.alive_log_probs[:, :, tf.newaxis] + log_probs, [batch, k * vocab])
        # 2k candidates guarantee k that do not end here.
        top_lp, top_index = tf.math.top_k(candidates, k=2 * k)
        parents = top_index // vocab
        tokens = top_index % vocab
        candidate_seq = append(tf.gather(state.alive_seq, parents, batch_dims=1), tokens, t)
        # A hypothesis ends with EOS, or when its sentence reaches its length limit.
        ended = tf.equal(tokens, eos) | (t + 1 >= row_limits)[:, tf.newaxis]

        alive_lp, keep = tf.math.top_k(tf.where(ended, _NEG, top_lp), k=k)
        alive_seq = tf.gather(candidate_seq, keep, batch_dims=1)
        cache = reorder_self_cache(cache, tf.gather(parents, keep, batch_dims=1))

        penalty = length_penalty(t + 1, alpha)
        pool_seq = tf.concat([grow(state.finished_seq), candidate_seq], axis=1)
        pool_scores = tf.concat([state.finished_scores, tf.where(ended, top_lp / penalty, _NEG)], axis=1)
        pool_lp = tf.concat([state.finished_log_probs, top_lp], axis=1)
        pool_flags = tf.concat([state.finished_flags, ended], axis=1)
        fin_scores, best = tf.math.top_k(pool_scores, k=k)
        return BeamState(
            step=t + 1, alive_seq=alive_seq, alive_log_probs=alive_lp, cache=cache,
            finished_seq=tf.gather(pool_seq, best, batch_dims=1), finished_scores=fin_scores,
            finished_log_probs=tf.gather(pool_lp, best, batch_dims=1),
            finished_flags=tf.gather(pool_flags, best, batch_dims=1))

    def running(state: BeamState) -> tf.Tensor:
        best_alive_could_reach = state.alive_log_probs[:, 0] / length_penalty(row_limits, alpha)
        worst_finished = tf.reduce_min(tf.where(state.finished_flags, state.finished_scores, _NEG), axis=1)
        settled = tf.reduce_all(worst_finished >= best_alive_could_reach)
        return tf.logical_and(state.step < limit, tf.logical_not(settled))

    start_lp = tf.tile(tf.concat([[0.0], tf.fill([k - 1], _NEG)], axis=0)[tf.newaxis], [batch, 1])
    width = limit + 1 if static_shapes else 1
    start_seq = tf.concat([tf.fill([batch, k, 1], tf.constant(config.bos_id, tf.int32)),
                           tf.fill([batch, k, width - 1], pad)], axis=2)
    seq_shape = tf.TensorShape([None, k, width if static_shapes else None])
    start = BeamState(
        step=tf.constant(0),
        alive_seq=start_seq,
        alive_log_probs=start_lp,
        cache=cache,
        finished_seq=tf.fill([batch, k, width], pad),
        finished_scores=tf.fill([batch, k], _NEG),
        finished_log_probs=tf.fill([batch, k], _NEG),
        finished_flags=tf.zeros([batch, k], tf.bool),
    )
    invariants = BeamState(
        step=tf.TensorShape([]),
        alive_seq=seq_shape,
        alive_log_probs=tf.TensorShape([None, k]),
        cache=tf.nest.map_structure(batch_free_shape if static_shapes else loose_shape, cache),
        finished_seq=seq_shape,
        finished_scores=tf.TensorShape([None, k]),
        finished_log_probs=tf.TensorShape([None, k]),
        finished_flags=tf.TensorShape([None, k]),
    )
    (state,) = tf.while_loop(lambda state: running(state), lambda state: (body(state),), (start,),
                             shape_invariants=(invariants,))
    t, alive_seq, alive_lp = state.step, state.alive_seq, state.alive_log_probs
    fin_seq, fin_scores, fin_lp, fin_flags = (state.finished_seq, state.finished_scores,
                                              state.finished_log_probs, state.finished_flags)

    # Drop the BOS column; sentences with no finished hypothesis keep their live beams.
    alive_seq, fin_seq = alive_seq[:, :, 1:], fin_seq[:, :, 1:]
    any_finished = tf.reduce_any(fin_flags, axis=1)
    tokens = tf.where(any_finished[:, tf.newaxis, tf.newaxis], fin_seq, alive_seq)
    scores = tf.where(any_finished[:, tf.newaxis], fin_scores, alive_lp / length_penalty(t, alpha))
    log_probs = tf.where(any_finished[:, tf.newaxis], fin_lp, alive_lp)
    # A finished row that holds fewer than k hypotheses pads with NEG-scored entries.
    return BeamSearchOutput(tokens, scores, log_probs, t)
