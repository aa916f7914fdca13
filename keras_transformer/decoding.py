"""Greedy decoding with the model's incremental (cached) decoder.

Runs as TensorFlow ops (a ``tf.while_loop``), so it can be wrapped in
``tf.function``, exported in a SavedModel, and compiled with XLA in its
static-shape form.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.layers import masked_score_value, padding_mask


def loose_shape(x: tf.Tensor) -> tf.TensorShape:
    """Shape invariant for a growing loop variable (a cache tensor): only the last dim is fixed."""
    return tf.TensorShape([None] * (x.shape.rank - 1) + x.shape[-1:].as_list())


def batch_free_shape(x: tf.Tensor) -> tf.TensorShape:
    """Shape invariant for a fixed-size loop variable: only the batch dim may vary."""
    return tf.TensorShape([None]) + x.shape[1:]


def ban_early_eos(log_probs: tf.Tensor, step, min_length: int, eos_id: int) -> tf.Tensor:
    """``log_probs`` ``[..., vocab]`` with EOS made impossible while ``step < min_length``."""
    if not min_length:
        return log_probs
    is_eos = tf.equal(tf.range(tf.shape(log_probs)[-1]), eos_id)
    too_early = tf.logical_and(is_eos, step < min_length)
    return tf.where(too_early, tf.constant(masked_score_value(log_probs.dtype), log_probs.dtype), log_probs)


def decode_lengths(model, source_ids, max_length=None, extra_length: int = 50) -> tf.Tensor:
    """Longest output of each sentence, ``[batch]`` int32: ``max_length`` if given,
    else the sentence's own length + ``extra_length`` (the paper's input + 50),
    never beyond the model's position table. Per sentence, so that a sentence
    decodes the same alone and in a padded batch."""
    batch = tf.shape(source_ids)[0]
    if max_length is not None:
        return tf.fill([batch], min(int(max_length), model.config.max_length))
    real = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, model.config.pad_id), tf.int32), axis=1)
    return tf.minimum(real + extra_length, model.config.max_length)


def decode_limits(model, source_ids, max_length=None, extra_length: int = 50, static_shapes: bool = False,
                  buffer_length: int | None = None):
    """``(row_limits [batch], limit)`` for a decoder: the longest output of each
    row and of the batch. With ``static_shapes`` the limit is a Python int, the
    fixed buffer size: ``max_length`` (every row gets it), or ``buffer_length``
    (each row keeps its own source length + ``extra_length``, capped by the
    buffer: the same outputs as the dynamic decoder, at a fixed shape)."""
    if not static_shapes:
        if buffer_length is not None:
            raise ValueError("buffer_length sets a fixed buffer: use it with static_shapes=True.")
        rows = decode_lengths(model, source_ids, max_length, extra_length)
        return rows, tf.reduce_max(rows)
    if buffer_length is not None:
        if max_length is not None:
            raise ValueError("Pass max_length (one limit for every row) or buffer_length, not both.")
        limit = min(int(buffer_length), model.config.max_length)
        return tf.minimum(decode_lengths(model, source_ids, None, extra_length), limit), limit
    if not isinstance(max_length, int):
        raise ValueError("static_shapes=True needs max_length as a Python int (a fixed buffer size) "
                         "or buffer_length.")
    return decode_lengths(model, source_ids, max_length, extra_length), min(max_length, model.config.max_length)


def greedy_decode(model, source_ids, max_length=None, extra_length: int = 50,
                  static_shapes: bool = False, min_length: int = 0, buffer_length: int | None = None):
    """Arg-max decoding, a batch at a time, stopping when every row emitted EOS.

    Args:
        model: a ``keras_transformer.Transformer``.
        source_ids: ``[batch, src_len]`` int ids, padded with ``pad_id``.
        max_length: output length limit (defaults to ``src_len + extra_length``).
        static_shapes: use a fixed-size KV cache and output buffer (every loop
            variable keeps its shape: XLA/TPU/TFLite). Needs an int
            ``max_length`` or ``buffer_length`` (see ``decode_limits``).
        min_length: EOS is not allowed before this many tokens (benchmarks use
            it to force a fixed output length).

    Returns:
        ``(tokens, scores)``: ``tokens`` ``[batch, out_len]`` int32 without BOS,
        ending with EOS (when emitted) and padded with ``pad_id``; ``scores``
        ``[batch]`` float32, the sum of the chosen tokens' log-probabilities.
    """
    config = model.config
    source_ids = tf.convert_to_tensor(source_ids)
    row_limits, limit = decode_limits(model, source_ids, max_length, extra_length, static_shapes, buffer_length)
    batch = tf.shape(source_ids)[0]
    memory = model.encode(source_ids, training=False)
    source_padding = padding_mask(source_ids, config.pad_id)
    cache = model.initial_cache(memory, max_length=limit if static_shapes else None)
    pad = tf.constant(config.pad_id, tf.int32)
    eos = tf.constant(config.eos_id, tf.int32)

    if static_shapes:
        tokens = tf.fill([batch, limit], pad)
        # Only the batch size may be unknown: lengths stay fixed.
        cache_invariants = tf.nest.map_structure(batch_free_shape, cache)

        def write(tokens, chosen, t):
            return tf.where(tf.equal(tf.range(limit), t)[tf.newaxis, :], chosen[:, tf.newaxis], tokens)
    else:
        tokens = tf.zeros([batch, 0], tf.int32)
        cache_invariants = tf.nest.map_structure(loose_shape, cache)

        def write(tokens, chosen, t):
            return tf.concat([tokens, chosen[:, tf.newaxis]], axis=1)

    def running(t, last, cache, finished, scores, tokens):
        return tf.logical_and(t < limit, tf.logical_not(tf.reduce_all(finished)))

    def body(t, last, cache, finished, scores, tokens):
        logits, cache = model.decode(last, cache, source_padding,
                                     cache_index=t if static_shapes else None, training=False)
        log_probs = ban_early_eos(tf.nn.log_softmax(logits[:, -1, :]), t, min_length, config.eos_id)
        chosen = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        chosen = tf.where(finished, pad, chosen)
        scores = scores + tf.where(finished, 0.0, tf.gather(log_probs, chosen, batch_dims=1))
        finished = finished | tf.equal(chosen, eos) | (t + 1 >= row_limits)
        return t + 1, chosen[:, tf.newaxis], cache, finished, scores, write(tokens, chosen, t)

    loop_vars = (
        tf.constant(0),
        tf.fill([batch, 1], tf.constant(config.bos_id, tf.int32)),
        cache,
        tf.zeros([batch], tf.bool),
        tf.zeros([batch], tf.float32),
        tokens,
    )
    invariants = (
        tf.TensorShape([]),
        tf.TensorShape([None, 1]),
        cache_invariants,
        tf.TensorShape([None]),
        tf.TensorShape([None]),
        tf.TensorShape([None, limit]) if static_shapes else tf.TensorShape([None, None]),
    )
    _, _, _, _, scores, tokens = tf.while_loop(running, body, loop_vars, shape_invariants=invariants)
    return tokens, scores
