"""Boolean attention masks: ``True`` means "may attend".

Masks are passed explicitly between layers (never through Keras' implicit
``_keras_mask`` machinery alone) because implicit masks are silently dropped
by some Keras layers; a dropped encoder padding mask changes the logits with
the amount of padding.
"""

from __future__ import annotations

import tensorflow as tf


def padding_mask(token_ids: tf.Tensor, pad_id: int = 0) -> tf.Tensor:
    """Marks the real tokens of padded ids.

    Args:
        token_ids: int ids ``[batch, length]``.
        pad_id: the padding id.

    Returns:
        A bool ``[batch, length]`` mask, ``True`` for real tokens and ``False`` for padding.

    Example:

    >>> padding_mask(tf.constant([[5, 6, 0]])).numpy()
    array([[ True,  True, False]])
    """
    return tf.not_equal(token_ids, tf.cast(pad_id, token_ids.dtype))


def target_padding_mask(target_ids: tf.Tensor, config) -> tf.Tensor:
    """Marks the real tokens of decoder inputs that start with ``config.bos_id``.

    It is ``padding_mask(target_ids, config.pad_id)``, except that where the
    decoder starts from the pad id (``bos_id == pad_id``, as Marian's does)
    position 0 is the start token, a real one, and is never masked.

    Args:
        target_ids: int decoder inputs ``[batch, length]``, position 0 first.
        config: anything with ``pad_id`` and ``bos_id`` (a ``TransformerConfig``).

    Returns:
        A bool ``[batch, length]`` mask, ``True`` for real tokens.
    """
    mask = padding_mask(target_ids, config.pad_id)
    if config.bos_id != config.pad_id:
        return mask
    first = tf.equal(tf.range(tf.shape(target_ids)[-1]), 0)
    return tf.logical_or(mask, first[tf.newaxis, :])


def causal_mask(query_length, key_length=None, query_offset=0) -> tf.Tensor:
    """Builds the look-ahead mask ``[query_length, key_length]``.

    Query ``i`` sits at absolute position ``query_offset + i`` and may attend to
    keys ``0 .. query_offset + i``. With ``query_offset`` the same mask serves a
    full teacher-forced pass (offset 0) and incremental decoding against a cache
    (offset = number of tokens already decoded).

    Args:
        query_length: the number of queries.
        key_length: the number of keys (default: ``query_length``).
        query_offset: the absolute position of the first query.

    Returns:
        A bool mask, ``True`` where a query may attend to a key.

    Example:

    >>> causal_mask(2, 3, query_offset=1).numpy()
    array([[ True,  True, False],
           [ True,  True,  True]])
    """
    if key_length is None:
        key_length = query_length
    query_positions = tf.range(query_length) + tf.cast(query_offset, tf.int32)
    key_positions = tf.range(key_length)
    return key_positions[tf.newaxis, :] <= query_positions[:, tf.newaxis]


def merge_masks(*masks):
    """Combines masks with a logical AND, ignoring ``None`` entries.

    Args:
        *masks: masks that broadcast together, or ``None``.

    Returns:
        The combined bool mask, or ``None`` when every entry is ``None``.
    """
    result = None
    for mask in masks:
        if mask is None:
            continue
        mask = tf.cast(mask, tf.bool)
        result = mask if result is None else tf.logical_and(result, mask)
    return result


def key_padding_mask(padding: tf.Tensor | None) -> tf.Tensor | None:
    """Turns a ``[batch, key_len]`` padding mask into a ``[batch, 1, key_len]`` attention mask.

    Args:
        padding: the padding mask (``True`` for real tokens), or ``None``.

    Returns:
        The attention mask, or ``None`` for ``None``.
    """
    if padding is None:
        return None
    # expand_dims rather than [:, None, :]: a TFLite builtin for bool tensors too.
    return tf.expand_dims(tf.cast(padding, tf.bool), 1)
