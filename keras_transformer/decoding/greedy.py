"""Greedy decoding and sampling: one hypothesis a sentence, one token a step.

Both run over a ``DecodingSteps`` and never see the model. Finished rows are
removed from the batch in rounds (compaction, dynamic shapes), so the rest
decodes on fewer rows; a sentence decodes the same alone and in any batch.
Decoding starts from ``bos_id`` and never chooses a ``banned`` id.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.decoding.loop import (
    DecodeOutput,
    ban_early_eos,
    ban_tokens,
    batch_free_shape,
    decode_loop,
    keep_rows,
    loose_shape,
    scatter_rows,
)
from keras_transformer.decoding.options import DecodeOptions
from keras_transformer.decoding.sampling import sample_tokens


class GreedyState(NamedTuple):
    """The loop state of greedy decoding and sampling, one row a sentence still decoding.

    ``rows`` starts as the batch size and, with dynamic shapes, falls as
    compaction removes finished rows.
    """

    step: tf.Tensor  # [] int32: tokens decoded so far
    last: tf.Tensor  # [rows] int32: the token each row decodes from
    cache: object  # the steps' cache, a row a sentence
    finished: tf.Tensor  # [rows] bool: the row emitted EOS or reached its length limit
    scores: tf.Tensor  # [rows] float32: summed log-probabilities of the chosen tokens
    tokens: tf.Tensor  # [rows, step] int32 (static shapes: [rows, limit]), pad after EOS
    sentence: tf.Tensor  # [rows] int32: the row's position in the input batch
    row_limits: tf.Tensor  # [rows] int32: the row's longest output
    source_padding: tf.Tensor  # [rows, src_len] bool: True for real source tokens
    prefix: tf.Tensor  # [rows, width] int32: the forced first tokens ([rows, 0]: none)
    prefix_lengths: tf.Tensor  # [rows] int32: how many of them
    keys: tf.Tensor  # [rows] uint32: sampling keys ([rows] zeros for greedy)
    results: tuple  # ([batch, limit] tokens, [batch] scores) of the rows compaction removed
    #                            (static shapes: (), every sentence keeps its row)


def forced_tokens(prefix, prefix_lengths, step):
    """Which rows are still in their prefix at ``step``, and the prefix token each would take.

    Args:
        prefix: ``[rows, width]`` int32, at least one column.
        prefix_lengths: ``[rows]`` int32.
        step: the decoding step.

    Returns:
        ``(forced [rows] bool, token [rows] int32)``.
    """
    width = tf.shape(prefix)[1]
    return step < prefix_lengths, tf.gather(prefix, tf.minimum(step, width - 1), axis=1)


def prefix_inputs(prefix_ids, batch, pad_id: int):
    """``(prefix [batch, width >= 1], lengths [batch])`` of a padded prefix batch, or of none.

    Args:
        prefix_ids: ``[batch, width]`` int ids padded with ``pad_id``, or ``None``.
        batch: the batch size.
        pad_id: the padding id.

    Returns:
        The prefix with at least one column, and each row's prefix length.
    """
    if prefix_ids is None:
        return tf.fill([batch, 1], tf.constant(pad_id, tf.int32)), tf.zeros([batch], tf.int32)
    prefix_ids = tf.cast(tf.convert_to_tensor(prefix_ids), tf.int32)
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefix_ids, pad_id), tf.int32), axis=1)
    return tf.pad(prefix_ids, [[0, 0], [0, 1]], constant_values=pad_id), lengths


def _one_best_search(
    steps, source_ids, row_limits, limit, options, choose, prefix_ids=None, keys=None
) -> DecodeOutput:
    """The loop of greedy decoding and sampling; ``choose(logits, keys, step)`` picks tokens."""
    source_ids = tf.convert_to_tensor(source_ids)
    static_shapes = steps.static_shapes
    batch = tf.shape(source_ids)[0]
    memory = steps.encode(source_ids)
    source_padding = tf.not_equal(source_ids, steps.pad_id)
    cache = steps.initial_cache(memory)
    pad = tf.constant(steps.pad_id, tf.int32)
    eos_id, pad_id, banned, min_length = (
        steps.eos_id,
        steps.pad_id,
        steps.banned,
        options.min_length,
    )
    forcing = prefix_ids is not None
    prefix, prefix_lengths = prefix_inputs(prefix_ids, batch, pad_id)
    keys = tf.zeros([batch], tf.uint32) if keys is None else keys

    if static_shapes:

        def write(tokens, chosen, t):
            return tf.where(
                tf.equal(tf.range(limit), t)[tf.newaxis, :], chosen[:, tf.newaxis], tokens
            )
    else:

        def write(tokens, chosen, t):
            return tf.concat([tokens, chosen[:, tf.newaxis]], axis=1)

    def write_results(results, state: GreedyState, rows):
        tokens = tf.gather(state.tokens, rows)
        tokens = tf.pad(tokens, [[0, 0], [0, limit - tf.shape(tokens)[1]]], constant_values=pad)
        at = tf.gather(state.sentence, rows)
        return (
            scatter_rows(results[0], at, tokens),
            scatter_rows(results[1], at, tf.gather(state.scores, rows)),
        )

    def compact(state: GreedyState) -> GreedyState:
        """The state without its finished rows, whose answers go to ``results``."""
        results = write_results(state.results, state, tf.where(state.finished)[:, 0])
        return keep_rows(state, tf.where(~state.finished)[:, 0], results)

    def step_with(decode_step):
        """The loop's step (state → state) with ``decode_step`` computing the logits."""

        def step(state: GreedyState) -> GreedyState:
            t, finished = state.step, state.finished
            logits, cache = decode_step(state.last, t, state.cache, state.source_padding)
            # The choice from the logits; the chosen tokens' log-probabilities beside it, off the
            # path to the next step.
            chosen = choose(
                ban_early_eos(ban_tokens(logits, banned), t, min_length, eos_id), state.keys, t
            )
            if forcing:
                forced, token = forced_tokens(state.prefix, state.prefix_lengths, t)
                chosen = tf.where(forced, token, chosen)
            chosen = tf.where(finished, pad_id, chosen)  # constants made here: see kernels
            log_probs = tf.gather(tf.nn.log_softmax(logits), chosen, batch_dims=1)
            scores = state.scores + tf.where(finished, 0.0, log_probs)
            finished = finished | tf.equal(chosen, eos_id) | (t + 1 >= state.row_limits)
            return state._replace(
                step=t + 1,
                last=chosen,
                cache=cache,
                finished=finished,
                scores=scores,
                tokens=write(state.tokens, chosen, t),
            )

        return step

    start = GreedyState(
        step=tf.constant(0),
        last=tf.fill([batch], tf.constant(steps.bos_id, tf.int32)),
        cache=cache,
        finished=tf.zeros([batch], tf.bool),
        scores=tf.zeros([batch], tf.float32),
        tokens=tf.fill([batch, limit], pad) if static_shapes else tf.zeros([batch, 0], tf.int32),
        sentence=tf.range(batch),
        row_limits=row_limits,
        source_padding=source_padding,
        prefix=prefix,
        prefix_lengths=prefix_lengths,
        keys=keys,
        results=()
        if static_shapes
        else (tf.fill([batch, limit], pad), tf.zeros([batch], tf.float32)),
    )
    invariants = GreedyState(
        step=tf.TensorShape([]),
        last=tf.TensorShape([None]),
        cache=tf.nest.map_structure(batch_free_shape if static_shapes else loose_shape, cache),
        finished=tf.TensorShape([None]),
        scores=tf.TensorShape([None]),
        tokens=tf.TensorShape([None, limit if static_shapes else None]),
        sentence=tf.TensorShape([None]),
        row_limits=tf.TensorShape([None]),
        source_padding=tf.TensorShape([None, None]),
        prefix=tf.TensorShape([None, None]),
        prefix_lengths=tf.TensorShape([None]),
        keys=tf.TensorShape([None]),
        results=() if static_shapes else (tf.TensorShape([None, None]), tf.TensorShape([None])),
    )
    state = decode_loop(
        step_with(steps.large_batch),
        compact,
        start,
        invariants,
        lambda state: state.finished,
        limit,
        static_shapes,
        small_batch_step=steps.small_batch and step_with(steps.small_batch),
        rows=lambda state: tf.size(state.finished),
        small_batch_rows=steps.small_batch_rows,
    )
    if static_shapes:  # every sentence kept its row
        tokens, scores = state.tokens, state.scores
    else:
        tokens, scores = write_results(state.results, state, tf.range(tf.shape(state.finished)[0]))
        tokens = tokens[:, : state.step]
    return DecodeOutput(
        tokens[:, tf.newaxis, :], scores[:, tf.newaxis], scores[:, tf.newaxis], state.step
    )


def greedy_search(
    steps, source_ids, row_limits, limit, options: DecodeOptions | None = None, prefix_ids=None
) -> DecodeOutput:
    """Arg-max decoding, a batch at a time, until every row emitted EOS or reached its limit.

    Args:
        steps: the ``DecodingSteps`` to run.
        source_ids: ``[batch, src_len]`` int ids, padded with ``steps.pad_id``.
        row_limits: ``[batch]`` int32, each row's longest output.
        limit: the longest of them (a Python int: the buffer of static shapes).
        options: the ``DecodeOptions`` (``min_length``).
        prefix_ids: ``[batch, width]`` int ids padded with ``pad_id``: each
            row's first tokens, forced, or ``None``.

    Returns:
        A ``DecodeOutput`` with one hypothesis a sentence, its score its log-probability.

    Example:
        >>> from keras_transformer.decoding import DecodingSteps
        >>> table = tf.math.log(tf.constant([[0.1, 0.1, 0.1, 0.2, 0.5], [0.1, 0.1, 0.1, 0.6, 0.1]]))
        >>> steps = DecodingSteps(  # step t's logits are row t of the table, whatever the tokens
        ...     encode=lambda ids: ids, initial_cache=lambda memory: tf.zeros_like(memory[:, 0]),
        ...     large_batch=lambda ids, t, cache, padding: (
        ...         tf.repeat(table[t][tf.newaxis], tf.size(ids), axis=0), cache),
        ...     bos_id=1, eos_id=3, pad_id=0, banned=(0, 1))
        >>> out = greedy_search(steps, tf.constant([[7, 3]]), tf.constant([5]), 5)
        >>> out.tokens.numpy().tolist(), round(float(out.log_probs[0, 0]), 4)
        ([[[4, 3]]], -1.204)
    """
    options = options or DecodeOptions()

    def choose(logits, keys, t):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)

    return _one_best_search(steps, source_ids, row_limits, limit, options, choose, prefix_ids)


def sample_search(
    steps, source_ids, row_limits, limit, options: DecodeOptions, keys, prefix_ids=None
) -> DecodeOutput:
    """Sampling, a token a step, from the filtered softmax (``sampling.sample_tokens``).

    Args:
        steps, source_ids, row_limits, limit, prefix_ids: as for ``greedy_search``.
        options: the ``DecodeOptions``: ``top_k``, ``top_p``, ``temperature``
            (Python numbers or tensors) and ``min_length``.
        keys: ``[batch]`` uint32, each row's noise key (``sampling.sentence_keys``).

    Returns:
        A ``DecodeOutput`` with one sample a sentence, its score its
        log-probability under the model (unfiltered, temperature 1).
    """

    def choose(logits, row_keys, t):
        return sample_tokens(logits, row_keys, t, options.top_k, options.top_p, options.temperature)

    return _one_best_search(
        steps, source_ids, row_limits, limit, options, choose, prefix_ids, keys=keys
    )
