"""What every search shares: the loop, compaction, and the bans on tokens.

``decode_loop`` runs a search's step until every sentence is done, in rounds
that remove the finished rows (compaction); ``keep_rows`` is that removal.
Nothing here knows the model or its kernels.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.layers import masked_score_value

NEG = masked_score_value(tf.float32)  # an impossible log-probability or score, finite


class DecodeOutput(NamedTuple):
    """What every search returns: each sentence's hypotheses, best first.

    Fields:
        tokens: ``[batch, n, len]`` int32, without the start token, ending
            with EOS (where emitted) and padded with ``pad_id``.
        scores: ``[batch, n]`` float32, the ranking: beam search's
            log-probability over its length penalty, else the log-probability.
        log_probs: ``[batch, n]`` float32, the sum of log p over the tokens
            and EOS, under the model's own distribution (no length penalty,
            no sampling filter); ``-inf`` where a sentence has fewer than
            ``n`` hypotheses (its tokens are then all ``pad_id``).
        steps: ``[]`` int32, the decoder steps the search ran.
    """

    tokens: tf.Tensor
    scores: tf.Tensor
    log_probs: tf.Tensor
    steps: tf.Tensor


def loose_shape(x: tf.Tensor) -> tf.TensorShape:
    """Shape invariant for a growing loop variable (a cache tensor): only the last dim is fixed.

    Args:
        x: the loop variable.

    Returns:
        ``x``'s shape with every dimension but the last unknown.
    """
    return tf.TensorShape([None] * (x.shape.rank - 1) + x.shape[-1:].as_list())


def batch_free_shape(x: tf.Tensor) -> tf.TensorShape:
    """Shape invariant for a fixed-size loop variable: only the batch dim may vary.

    Args:
        x: the loop variable, batch first.

    Returns:
        ``x``'s shape with the first dimension unknown.
    """
    return tf.TensorShape([None]) + x.shape[1:]


def ban_early_eos(scores: tf.Tensor, step, min_length: int, eos_id: int) -> tf.Tensor:
    """``scores`` with EOS made impossible while ``step < min_length``.

    Args:
        scores: ``[..., vocab]`` logits or log-probabilities.
        step: the tokens decoded so far (a scalar).
        min_length: the shortest output allowed (0: no limit).
        eos_id: the EOS id.

    Returns:
        ``scores``, EOS's entries ``masked_score_value`` while too early.
    """
    if not min_length:
        return scores
    is_eos = tf.equal(tf.range(tf.shape(scores)[-1]), eos_id)
    too_early = tf.logical_and(is_eos, step < min_length)
    return tf.where(too_early, tf.constant(masked_score_value(scores.dtype), scores.dtype), scores)


def ban_tokens(scores: tf.Tensor, token_ids) -> tf.Tensor:
    """``scores`` with ``token_ids`` made impossible, the others left as they are.

    The others are not renormalised: greedy decoding chooses from the logits
    so, and scores the chosen tokens by their log-probabilities.

    Args:
        scores: ``[..., vocab]`` logits or log-probabilities, above
            ``masked_score_value``.
        token_ids: the ids to ban.

    Returns:
        ``scores``, the banned entries the finite -inf of ``masked_score_value``.

    Example:
        >>> ban_tokens(tf.constant([[1.0, 2.0, 3.0]]), [0, 2]).numpy().tolist()
        [[-1000000000.0, 2.0, -1000000000.0]]
    """
    size = scores.shape[-1]
    if size is not None:  # the usual case: one constant [vocab] cap, no ops a decoding step
        # masked where banned, +inf elsewhere: a score (never below masked) becomes masked
        # or stays as it is, a select's values by a minimum (docs/kernels.md).
        cap = np.where(
            np.isin(np.arange(size), list(token_ids)), masked_score_value(scores.dtype), np.inf
        )
        return tf.minimum(scores, tf.constant(cap.astype(scores.dtype.as_numpy_dtype)))
    vocab = tf.range(tf.shape(scores)[-1])
    banned = tf.reduce_any(
        tf.equal(vocab[:, tf.newaxis], tf.constant(list(token_ids), tf.int32)[tf.newaxis, :]),
        axis=1,
    )
    return tf.where(banned, tf.constant(masked_score_value(scores.dtype), scores.dtype), scores)


# Compaction removes the finished rows of a dynamic-shape batch once they are this share of it:
# each compaction gathers the caches of the rows that stay (docs/kernels.md).
_COMPACT_FRACTION = 0.25


def scatter_rows(buffer: tf.Tensor, rows: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """``buffer`` with ``values[i]`` written over row ``rows[i]``.

    Args:
        buffer: ``[rows, ...]`` the tensor to write into.
        rows: ``[n]`` row indices.
        values: ``[n, ...]`` the new rows.

    Returns:
        The updated copy of ``buffer``.
    """
    return tf.tensor_scatter_nd_update(buffer, rows[:, tf.newaxis], values)


def keep_rows(state, rows, results, beam_rows=None, beam_fields=()):
    """``state`` with only its ``rows``: a decoder's compaction.

    Args:
        state: a decoder's loop state (a ``NamedTuple`` with ``step`` and
            ``results`` fields); every other field holds a row a sentence,
            or, the ``beam_fields``, several.
        rows: ``[kept]`` the rows to keep.
        results: the new ``results`` (the removed rows' answers written in).
        beam_rows: the flat rows to keep of the ``beam_fields``.
        beam_fields: the fields with a row a beam.

    Returns:
        ``state`` of the kept rows, with ``results``.
    """

    def keep(name, value):
        if name in ("step", "results"):
            return value
        at = beam_rows if name in beam_fields else rows
        return tf.nest.map_structure(lambda x: tf.gather(x, at), value)

    kept = state._replace(**{name: keep(name, getattr(state, name)) for name in state._fields})
    return kept._replace(results=results)


def decode_loop(
    step,
    compact,
    start,
    invariants,
    done,
    limit,
    static_shapes: bool,
    small_batch_step=None,
    rows=None,
    small_batch_rows: int = 0,
):
    """Every decoder's loop: run ``step`` until every row is done or ``state.step`` is ``limit``.

    With dynamic shapes the loop runs in rounds: each round decodes until
    ``_COMPACT_FRACTION`` of its rows are done, and then ``compact`` removes
    those rows, so later steps run on fewer rows. A done row must not change
    in the steps it waits, which keeps every sentence's output independent of
    its batch. A round of at most ``small_batch_rows`` decoding rows
    runs ``small_batch_step`` where there is one, a choice made once a round;
    a batch that starts with at most that many rows decodes in one flat loop
    of ``small_batch_step`` instead, its finished rows waiting in it
    (``docs/kernels.md`` says why).

    Args:
        step: the loop's step, state → state.
        compact: state → the state without its done rows (dynamic shapes).
        start: the first state, a ``NamedTuple`` with a ``step`` field.
        invariants: the state's shape invariants.
        done: state → ``[rows]`` bool.
        limit: the most steps.
        static_shapes: one loop of ``step``, no compaction.
        small_batch_step: the loop's step by the small-batch decoding step, or ``None``.
        rows: state → its decoding rows (needed with ``small_batch_step``).
        small_batch_rows: the most decoding rows ``small_batch_step`` takes.

    Returns:
        The last state.
    """

    def running(state):
        return tf.logical_and(state.step < limit, tf.logical_not(tf.reduce_all(done(state))))

    def loop(condition, body, state):
        (state,) = tf.while_loop(
            lambda state: condition(state),
            lambda state: (body(state),),
            (state,),
            shape_invariants=(invariants,),
        )
        return state

    if static_shapes:
        return loop(running, step, start)

    def round_(state):
        count = tf.cast(tf.size(done(state)), tf.float32)
        due = tf.maximum(1, tf.cast(tf.math.ceil(_COMPACT_FRACTION * count), tf.int32))

        def until_due(s):
            return running(s) & (tf.reduce_sum(tf.cast(done(s), tf.int32)) < due)

        if small_batch_step is None:
            state = loop(until_due, step, state)
        else:
            state = tf.cond(
                rows(state) <= small_batch_rows,
                lambda: loop(until_due, small_batch_step, state),
                lambda: loop(until_due, step, state),
            )
        return compact(state)

    if small_batch_step is None:
        return loop(running, round_, start)
    return tf.cond(
        rows(start) <= small_batch_rows,
        lambda: loop(running, small_batch_step, start),
        lambda: loop(running, round_, start),
    )
