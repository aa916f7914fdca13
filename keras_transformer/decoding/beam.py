"""Beam search (paper §6.1: beam 4, length penalty α = 0.6, max length input + 50).

Batched and cached like greedy decoding, over a ``DecodingSteps``: the cache
is reordered along with the beams by the steps' ``reorder`` (for the
Transformer, the self-attention keys and values; the cross-attention ones,
the same for every beam of a sentence, never move). Scores use the GNMT
length penalty ``lp(n) = ((5 + n) / 6)^α`` of Wu et al. 2016.

A sentence is done as soon as no live beam can beat its finished hypotheses
(see ``stopping``): its best hypotheses are written to the output, and the
dynamic-shape search removes its rows (compaction), so the rest of the batch
decodes on fewer rows. A sentence therefore decodes the same alone and in any
batch.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.decoding.greedy import forced_tokens, prefix_inputs
from keras_transformer.decoding.loop import (
    NEG,
    DecodeOutput,
    batch_free_shape,
    decode_loop,
    keep_rows,
    loose_shape,
    scatter_rows,
)
from keras_transformer.decoding.options import DecodeOptions

_NEG = NEG


class Hypotheses(NamedTuple):
    """The search's answer for every sentence of the batch, filled in as sentences are done.

    ``seq`` is ``[batch, k, limit + 1]`` int32 (BOS first, pad-filled), ``scores`` and
    ``log_probs`` are ``[batch, k]`` float32."""

    seq: tf.Tensor
    scores: tf.Tensor
    log_probs: tf.Tensor


class BeamState(NamedTuple):
    """The search's loop state, one step at a time (``k`` = beam size).

    A row is a sentence still being searched: ``rows`` starts as the batch
    size and, in the dynamic-shape search, falls as compaction removes done
    sentences.
    Sequences start with BOS and are ``[rows, k, len]`` int32, padded with
    ``pad_id``: ``len`` grows by one a step, or is the fixed buffer
    (``limit + 1``) with static shapes. Empty finished slots score ``_NEG``.
    """

    step: tf.Tensor  # [] int32: tokens decoded so far
    alive_seq: tf.Tensor  # [rows, k, len] int32: the live hypotheses
    alive_log_probs: tf.Tensor  # [rows, k] float32: their summed log-probabilities, best first
    cache: object  # the steps' cache, [rows·k, ...] leaves, reordered with the beams
    finished_seq: tf.Tensor  # [rows, k, len] int32: the best hypotheses that ended (EOS or limit)
    finished_scores: (
        tf.Tensor
    )  # [rows, k] float32: their log-probability / length penalty, best first
    finished_log_probs: tf.Tensor  # [rows, k] float32: their summed log-probabilities
    finished_flags: tf.Tensor  # [rows, k] bool: the slot holds a finished hypothesis
    done: (
        tf.Tensor
    )  # [rows] bool: the sentence is done (static shapes keep its row, frozen, to the end)
    sentence: tf.Tensor  # [rows] int32: the row's position in the input batch
    row_limits: tf.Tensor  # [rows] int32: the row's longest output
    source_padding: tf.Tensor  # [rows·k, src_len] bool: True for real source tokens
    prefix: tf.Tensor  # [rows, width] int32: the forced first tokens (one pad column: none)
    prefix_lengths: tf.Tensor  # [rows] int32: how many of them
    results: Hypotheses  # [batch, ...]: the hypotheses of the rows compaction removed
    #                                (static shapes: (), every sentence keeps its row)


def length_penalty(length, alpha: float) -> tf.Tensor:
    """GNMT's length penalty ``((5 + length) / 6)^alpha`` (Wu et al. 2016), float32.

    Args:
        length: a hypothesis' length in tokens (a number or a tensor).
        alpha: the exponent; 0 turns the penalty off.

    Returns:
        The float32 divisor of the hypothesis' log-probability.

    Example:
        >>> round(float(length_penalty(7, 0.6)), 4)
        1.5157
    """
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def beam_search(
    steps, source_ids, row_limits, limit, options: DecodeOptions, prefix_ids=None
) -> DecodeOutput:
    """Beam search over ``source_ids``, with GNMT's length penalty and a stopping rule.

    A sentence is done, and compaction removes it from the search, when its
    length limit is reached or when ``beam_size`` finished hypotheses outscore
    its best live beam, as ``options.stopping`` judges it:

    * ``"exact"``: the live beam is judged by the best score it could still
      reach, its log-probability (which only falls as it grows) over the
      length penalty of the longest output allowed. No hypothesis that could
      win is dropped: the search returns what an unbounded wait would.
    * ``"heuristic"``: the live beam is judged by its score at its current
      length (the rule of Hugging Face's beam search). With ``alpha = 0`` it
      is the exact rule; with a large ``alpha`` it stops much earlier, at the
      price of missing the rare longer hypothesis that would have won.

    Hypotheses start from ``bos_id`` and never take a ``banned`` id. With a
    prefix, each sentence's hypotheses all begin with it.

    Args:
        steps: the ``DecodingSteps`` to run.
        source_ids: ``[batch, src_len]`` int ids, padded with ``steps.pad_id``.
        row_limits: ``[batch]`` int32, each row's longest output.
        limit: the longest of them (a Python int: the buffer of static shapes).
        options: the ``DecodeOptions``: ``beam_size``, ``alpha``,
            ``min_length``, ``stopping``.
        prefix_ids: ``[batch, width]`` int ids padded with ``pad_id``: each
            row's first tokens, forced, or ``None``.

    Returns:
        A ``DecodeOutput`` of ``beam_size`` hypotheses a sentence, best
        first; a sentence with fewer has ``-inf`` log-probabilities in the
        rest (``decoding.decode`` clears their tokens).

    Example:
        >>> from keras_transformer.decoding import DecodingSteps
        >>> table = tf.math.log(tf.constant([[0.1, 0.1, 0.1, 0.3, 0.4], [0.1, 0.1, 0.1, 0.6, 0.1]]))
        >>> steps = DecodingSteps(  # step t's logits are row t of the table, whatever the tokens
        ...     encode=lambda ids: ids, initial_cache=lambda memory: tf.zeros_like(memory[:, 0]),
        ...     large_batch=lambda ids, t, cache, padding: (
        ...         tf.repeat(table[t][tf.newaxis], tf.size(ids), axis=0), cache),
        ...     bos_id=1, eos_id=3, pad_id=0, banned=(0, 1))
        >>> out = beam_search(steps, tf.constant([[7, 3]]), tf.constant([2]), 2,
        ...                   DecodeOptions(beam_size=2, alpha=0.0))
        >>> out.tokens.numpy().tolist(), [round(float(x), 3) for x in out.log_probs[0]]
        ([[[3, 0], [4, 3]]], [-1.204, -1.427])
    """
    source_ids = tf.convert_to_tensor(source_ids)
    k, alpha, min_length, stopping = (
        options.beam_size,
        options.alpha,
        options.min_length,
        options.stopping,
    )
    static_shapes = steps.static_shapes
    batch = tf.shape(source_ids)[0]
    # The loop's body makes its constants itself (a tensor made out here would be a loop variable).
    eos, pad = steps.eos_id, steps.pad_id
    forcing = prefix_ids is not None
    prefix, prefix_lengths = prefix_inputs(prefix_ids, batch, pad)
    buffer_width = limit + 1  # BOS and the longest output

    # Every beam of a sentence attends to the same source: encode it and project
    # its cross-attention keys and values once, then copy the cache to its k
    # beam rows (batch → batch·k).
    beam_sentences = tf.repeat(tf.range(batch), k)  # [batch·k]: the sentence of each beam row
    cache = tf.nest.map_structure(
        lambda x: tf.gather(x, beam_sentences), steps.initial_cache(steps.encode(source_ids))
    )
    source_padding = tf.not_equal(tf.gather(source_ids, beam_sentences), pad)

    if static_shapes:
        # Sequences live in [rows, beams, limit + 1] buffers (BOS first), pad-filled.
        def last_token(seq, t):
            return tf.gather(seq, t, axis=2)

        def append(seq, tokens, t):
            at = tf.equal(tf.range(buffer_width), t + 1)[tf.newaxis, tf.newaxis, :]
            return tf.where(at, tokens[:, :, tf.newaxis], seq)

        def grow(seq):
            return seq
    else:

        def last_token(seq, t):
            return seq[:, :, -1]

        def append(seq, tokens, t):
            return tf.concat([seq, tokens[:, :, tf.newaxis]], axis=2)

        def grow(seq):  # keep finished sequences as long as the candidates
            return tf.concat([seq, tf.fill([tf.shape(seq)[0], k, 1], pad)], axis=2)

    # The tokens never emitted (and EOS before min_length) are struck from the best `reach`
    # candidates of a sentence, which leaves its best 2k possible ones: a beam holds each
    # such token once. top_k puts the lower index first among equal values, so the order is
    # that of one top_k over the candidates with those tokens struck, which would cost an
    # op over every beam's whole vocabulary a step.
    banned = list(steps.banned)
    struck_per_beam = len(banned) + (1 if min_length else 0)
    reorder = steps.reorder or (
        lambda cache, rows: tf.nest.map_structure(lambda x: tf.gather(x, rows), cache)
    )

    def impossible(tokens, t):
        """Which of ``tokens`` the search may not take at step ``t``."""
        struck = tf.reduce_any(
            tf.equal(tokens[..., tf.newaxis], tf.constant(banned, tf.int32)), axis=-1
        )
        if min_length:
            struck |= tf.logical_and(tf.equal(tokens, eos), t < min_length)
        return struck

    def beam_rows(rows, beams):
        """Flat ``[rows·k]`` indices into the ``rows·k`` beam rows of the state."""
        return tf.reshape(rows[:, tf.newaxis] * k + beams, [-1])

    def is_done(state: BeamState) -> tf.Tensor:
        """Which sentences the stopping rule ends: no live beam can beat their finished ones."""
        length = state.row_limits if stopping == "exact" else state.step
        best_alive = state.alive_log_probs[:, 0] / length_penalty(length, alpha)
        worst_finished = tf.reduce_min(
            tf.where(state.finished_flags, state.finished_scores, _NEG), axis=1
        )
        return worst_finished >= best_alive

    def hypotheses(state: BeamState, rows) -> Hypotheses:
        """The answer of the state's ``rows``: their finished hypotheses, or
        their live beams where none finished (sequences as wide as the state's)."""
        take = lambda x: tf.gather(x, rows)  # noqa: E731
        any_finished = tf.reduce_any(take(state.finished_flags), axis=1)
        seq = tf.where(
            any_finished[:, tf.newaxis, tf.newaxis], take(state.finished_seq), take(state.alive_seq)
        )
        alive_lp = take(state.alive_log_probs)
        scores = tf.where(
            any_finished[:, tf.newaxis],
            take(state.finished_scores),
            alive_lp / length_penalty(state.step, alpha),
        )
        log_probs = tf.where(any_finished[:, tf.newaxis], take(state.finished_log_probs), alive_lp)
        return Hypotheses(seq, scores, log_probs)

    def write_results(results: Hypotheses, state: BeamState, rows) -> Hypotheses:
        """``results`` with the answers of the state's ``rows`` written at their sentences."""
        answer = hypotheses(state, rows)
        seq = tf.pad(
            answer.seq,
            [[0, 0], [0, 0], [0, buffer_width - tf.shape(answer.seq)[2]]],
            constant_values=pad,
        )
        at = tf.gather(state.sentence, rows)
        return Hypotheses(
            scatter_rows(results.seq, at, seq),
            scatter_rows(results.scores, at, answer.scores),
            scatter_rows(results.log_probs, at, answer.log_probs),
        )

    def compact(state: BeamState) -> BeamState:
        """The state without its done rows, whose answers go to ``results``."""
        staying = tf.cast(tf.where(~state.done)[:, 0], tf.int32)
        results = write_results(state.results, state, tf.cast(tf.where(state.done)[:, 0], tf.int32))
        return keep_rows(
            state,
            staying,
            results,
            beam_rows=beam_rows(staying, tf.range(k)[tf.newaxis]),
            beam_fields=("cache", "source_padding"),
        )

    def step_with(decode_step):
        """The loop's step (state → state) with ``decode_step`` computing the logits."""

        def step(state: BeamState) -> BeamState:
            t = state.step
            rows = tf.shape(state.alive_seq)[0]
            last = tf.reshape(last_token(state.alive_seq, t), [-1])
            logits, cache = decode_step(last, t, state.cache, state.source_padding)
            vocab = logits.shape[-1]
            reach = min(k * vocab, 2 * k + k * struck_per_beam)
            log_probs = tf.reshape(tf.nn.log_softmax(logits), [rows, k, vocab])
            if forcing:  # a row in its prefix may take only the prefix's token
                forced, token = forced_tokens(state.prefix, state.prefix_lengths, t)
                other = tf.not_equal(tf.range(vocab)[tf.newaxis, :], token[:, tf.newaxis])
                log_probs = tf.where(
                    (forced[:, tf.newaxis] & other)[:, tf.newaxis, :], _NEG, log_probs
                )
            candidates = tf.reshape(
                state.alive_log_probs[:, :, tf.newaxis] + log_probs, [rows, k * vocab]
            )
            # The best `reach` candidates, then the best 2k of them once the impossible ones are
            # struck.
            top_lp, top_index = kernels.top_k(candidates, k=reach)
            top_lp = tf.where(impossible(top_index % vocab, t), _NEG, top_lp)
            # 2k candidates guarantee k that do not end here.
            top_lp, pick = tf.math.top_k(top_lp, k=2 * k)
            top_index = tf.gather(top_index, pick, batch_dims=1)
            parents = top_index // vocab
            tokens = top_index % vocab
            candidate_seq = append(tf.gather(state.alive_seq, parents, batch_dims=1), tokens, t)
            # A hypothesis ends with EOS, or when its sentence reaches its length limit.
            ended = tf.equal(tokens, eos) | (t + 1 >= state.row_limits)[:, tf.newaxis]
            # Only a possible hypothesis may finish (not one of the impossible fillers that a
            # forced step or the first step's empty beams leave among the candidates).
            finishes = ended & (top_lp > _NEG / 2)

            alive_lp, keep = tf.math.top_k(tf.where(ended, _NEG, top_lp), k=k)
            alive_seq = tf.gather(candidate_seq, keep, batch_dims=1)
            flat = beam_rows(tf.range(rows), tf.gather(parents, keep, batch_dims=1))
            cache = reorder(cache, flat)

            penalty = length_penalty(t + 1, alpha)
            # A done sentence, waiting for compaction (or kept to the end with static shapes), takes
            # no new hypothesis.
            new_scores = tf.where(finishes & ~state.done[:, tf.newaxis], top_lp / penalty, _NEG)
            pool_seq = tf.concat([grow(state.finished_seq), candidate_seq], axis=1)
            pool_scores = tf.concat([state.finished_scores, new_scores], axis=1)
            pool_lp = tf.concat([state.finished_log_probs, top_lp], axis=1)
            pool_flags = tf.concat([state.finished_flags, finishes], axis=1)
            fin_scores, best = tf.math.top_k(pool_scores, k=k)
            state = state._replace(
                step=t + 1,
                alive_seq=alive_seq,
                alive_log_probs=alive_lp,
                cache=cache,
                finished_seq=tf.gather(pool_seq, best, batch_dims=1),
                finished_scores=fin_scores,
                finished_log_probs=tf.gather(pool_lp, best, batch_dims=1),
                finished_flags=tf.gather(pool_flags, best, batch_dims=1),
            )
            return state._replace(done=state.done | is_done(state))

        return step

    start_lp = tf.tile(tf.concat([[0.0], tf.fill([k - 1], _NEG)], axis=0)[tf.newaxis], [batch, 1])
    width = buffer_width if static_shapes else 1
    start_seq = tf.concat(
        [
            tf.fill([batch, k, 1], tf.constant(steps.bos_id, tf.int32)),
            tf.fill([batch, k, width - 1], pad),
        ],
        axis=2,
    )
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
        done=tf.zeros([batch], tf.bool),
        sentence=tf.range(batch),
        row_limits=row_limits,
        source_padding=source_padding,
        prefix=prefix,
        prefix_lengths=prefix_lengths,
        results=()
        if static_shapes
        else Hypotheses(
            tf.fill([batch, k, buffer_width], pad),
            tf.fill([batch, k], _NEG),
            tf.fill([batch, k], _NEG),
        ),
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
        done=tf.TensorShape([None]),
        sentence=tf.TensorShape([None]),
        row_limits=tf.TensorShape([None]),
        source_padding=tf.TensorShape([None, None]),
        prefix=tf.TensorShape([None, None]),
        prefix_lengths=tf.TensorShape([None]),
        results=()
        if static_shapes
        else Hypotheses(
            tf.TensorShape([None, k, None]), tf.TensorShape([None, k]), tf.TensorShape([None, k])
        ),
    )
    state = decode_loop(
        step_with(steps.large_batch),
        compact,
        start,
        invariants,
        lambda state: state.done,
        limit,
        static_shapes,
        small_batch_step=steps.small_batch and step_with(steps.small_batch),
        rows=lambda state: tf.size(state.done) * k,
        small_batch_rows=steps.small_batch_rows,
    )
    if static_shapes:  # every sentence kept its row
        results = hypotheses(state, tf.range(batch))
        width = buffer_width
    else:  # rows still searching at the length limit answer with what they hold
        results = write_results(state.results, state, tf.range(tf.shape(state.alive_seq)[0]))
        width = state.step + 1
    # Drop the BOS column; a done row that holds fewer than k hypotheses pads with NEG-scored
    # entries.
    return DecodeOutput(results.seq[:, :, 1:width], results.scores, results.log_probs, state.step)
