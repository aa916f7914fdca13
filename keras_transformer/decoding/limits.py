"""How long a decoder's outputs may be: each sentence's limit and the batch's.

A sentence's limit is its own (its source length plus ``extra_length``, or
``max_length``), so that it decodes the same in any batch; static shapes fix
the batch's to a Python int, the size of their buffers.
"""

from __future__ import annotations

import tensorflow as tf


def longest(row_limits) -> tf.Tensor:
    """The largest of ``row_limits``, 0 for an empty batch (not ``reduce_max``'s lowest int).

    Args:
        row_limits: ``[batch]`` int, each row's longest output.

    Returns:
        A scalar of ``row_limits``' dtype.
    """
    return tf.reduce_max(tf.concat([row_limits, tf.zeros([1], row_limits.dtype)], axis=0))


def decode_lengths(model, source_ids, max_length=None, extra_length: int = 50) -> tf.Tensor:
    """The longest output of each sentence, per sentence so that it decodes the same in any batch.

    Args:
        model: a ``keras_transformer.Transformer``.
        source_ids: ``[batch, src_len]`` int ids, padded with ``pad_id``.
        max_length: one limit for every sentence, if given.
        extra_length: else each sentence's limit is its own length plus this
            (the paper's input + 50).

    Returns:
        ``[batch]`` int32, never beyond the model's position table.
    """
    batch = tf.shape(source_ids)[0]
    if max_length is not None:
        return tf.fill([batch], min(int(max_length), model.config.max_length))
    real = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, model.config.pad_id), tf.int32), axis=1)
    return tf.minimum(real + extra_length, model.config.max_length)


def decode_limits(
    model,
    source_ids,
    max_length=None,
    extra_length: int = 50,
    static_shapes: bool = False,
    buffer_length: int | None = None,
):
    """The longest output of each row and of the batch, for a decoder.

    Args:
        model, source_ids, max_length, extra_length: as for ``decode_lengths``.
        static_shapes: the limit is a Python int, the fixed buffer size:
            ``max_length`` (every row gets it), or ``buffer_length``.
        buffer_length: with ``static_shapes``, the buffer size; each row
            keeps its own source length + ``extra_length``, capped by the
            buffer: the same outputs as the dynamic decoder, at a fixed shape.

    Returns:
        ``(row_limits [batch] int32, limit)``.

    Raises:
        ValueError: ``buffer_length`` without ``static_shapes``, or with
            ``max_length``; ``static_shapes`` with neither an int
            ``max_length`` nor ``buffer_length``.
    """
    if not static_shapes:
        if buffer_length is not None:
            raise ValueError("buffer_length sets a fixed buffer: use it with static_shapes=True.")
        rows = decode_lengths(model, source_ids, max_length, extra_length)
        return rows, longest(rows)
    if buffer_length is not None:
        if max_length is not None:
            raise ValueError(
                "Pass max_length (one limit for every row) or buffer_length, not both."
            )
        limit = min(int(buffer_length), model.config.max_length)
        return tf.minimum(decode_lengths(model, source_ids, None, extra_length), limit), limit
    if not isinstance(max_length, int):
        raise ValueError(
            "static_shapes=True needs max_length as a Python int (a fixed buffer size) "
            "or buffer_length."
        )
    return decode_lengths(model, source_ids, max_length, extra_length), min(
        max_length, model.config.max_length
    )
