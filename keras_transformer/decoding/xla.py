"""Fixed shapes for XLA: a batch padded to the sizes an XLA decoder compiles for."""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.numerics import round_up


def pad_for_xla(source_ids, rows, length_multiple: int, pad_id: int) -> tf.Tensor:
    """``source_ids`` padded to the fixed shapes an XLA decoder compiles for.

    Args:
        source_ids: ``[batch, len]`` int ids, padded with ``pad_id``.
        rows: the padded batch size, at least ``batch`` (an int or a scalar tensor).
        length_multiple: the padded length is ``len`` rounded up to a multiple of it.
        pad_id: the id the new columns hold.

    Returns:
        ``[rows, round_up(len, length_multiple)]``: the batch, then copies of its
        first sentence, which end when it does and so add no decoding steps.

    Example:
        >>> pad_for_xla(tf.constant([[5, 6, 3]]), 2, 4, 0).numpy().tolist()
        [[5, 6, 3, 0], [5, 6, 3, 0]]
    """
    length = tf.shape(source_ids)[1]
    ids = tf.pad(
        source_ids,
        [[0, 0], [0, round_up(length, length_multiple) - length]],
        constant_values=pad_id,
    )
    return tf.concat([ids, tf.repeat(ids[:1], rows - tf.shape(ids)[0], axis=0)], axis=0)
