"""Sampling's choice of a token: temperature, top-k, top-p, and stateless noise.

The noise is a counter-based hash of ``(seed, sentence, step, token)`` in
uint32 integer ops (MurmurHash3's finalizer): no random state, so the same
seed and sentence give the same sample in any batch, in any process, and in a
served model, and the ops run the same under XLA. A token is drawn by the
Gumbel-max trick: the arg-max of ``logits / temperature + Gumbel noise`` over
the tokens the filters keep is a draw from their renormalised softmax.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_transformer.decoding.tokens import NEG

_MASK32 = 0xFFFFFFFF


def _u32(value) -> tf.Tensor:
    return tf.constant(value & _MASK32, tf.uint32)


def mix32(x: tf.Tensor) -> tf.Tensor:
    """MurmurHash3's 32-bit finalizer: every input bit changes each output bit half the time.

    Args:
        x: uint32 values.

    Returns:
        The mixed uint32 values, elementwise.

    Example:
        >>> mix32(tf.constant([0, 1], tf.uint32)).numpy().tolist()
        [0, 1364076727]
    """
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))
    x = x * _u32(0x85EBCA6B)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(13)))
    x = x * _u32(0xC2B2AE35)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))


def _seed_word(seed) -> tf.Tensor:
    """A seed of any integer dtype (or Python int) folded to one mixed uint32."""
    seed = tf.cast(seed, tf.int64)
    low = tf.cast(tf.bitwise.bitwise_and(seed, _MASK32), tf.uint32)
    high = tf.cast(tf.bitwise.bitwise_and(tf.bitwise.right_shift(seed, 32), _MASK32), tf.uint32)
    return mix32(tf.bitwise.bitwise_xor(low, mix32(high + _u32(0x9E3779B9))))


def sentence_keys(source_ids, pad_id: int, seed) -> tf.Tensor:
    """Each sentence's sampling key: a hash of the seed and the sentence's ids, not its padding.

    Args:
        source_ids: ``[batch, src_len]`` int ids, padded with ``pad_id``.
        pad_id: the padding id.
        seed: an integer scalar (Python or tensor).

    Returns:
        ``[batch]`` uint32: equal for equal sentences and seeds, in any batch.

    Example:
        >>> keys = sentence_keys(tf.constant([[5, 6, 3, 0], [5, 6, 3, 0]]), 0, seed=1)
        >>> bool(keys[0] == sentence_keys(tf.constant([[5, 6, 3]]), 0, seed=1)[0])
        True
    """
    source_ids = tf.convert_to_tensor(source_ids)
    real = tf.not_equal(source_ids, pad_id)
    position = tf.cast(tf.range(tf.shape(source_ids)[1]), tf.uint32)[tf.newaxis, :]
    token = mix32(
        tf.bitwise.bitwise_xor(
            tf.cast(source_ids, tf.uint32) * _u32(0x27D4EB2F), mix32(position + _u32(0x165667B1))
        )
    )
    token = tf.where(real, token, tf.zeros_like(token))
    length = tf.cast(tf.reduce_sum(tf.cast(real, tf.int32), axis=1), tf.uint32)
    sentence = mix32(tf.bitwise.bitwise_xor(tf.reduce_sum(token, axis=1), mix32(length)))
    return mix32(tf.bitwise.bitwise_xor(sentence, _seed_word(seed)))


def uniform_noise(keys, step, vocab_size: int) -> tf.Tensor:
    """Uniform numbers in (0, 1) for each row and token at ``step``, from the rows' keys.

    Args:
        keys: ``[rows]`` uint32 sentence keys (``sentence_keys``).
        step: the decoding step (an int32 scalar).
        vocab_size: the tokens a row.

    Returns:
        ``[rows, vocab_size]`` float32, a function of ``(key, step, token)`` only.
    """
    row = mix32(
        tf.bitwise.bitwise_xor(
            keys * _u32(0x2C1B3C6D), mix32(tf.cast(step, tf.uint32) + _u32(0x7F4A7C15))
        )
    )
    token = mix32(
        tf.constant(
            (np.arange(vocab_size, dtype=np.uint64) * 0x297A2D39 + 0x6A09E667) & _MASK32,
            tf.uint32,
        )
    )
    bits = mix32(tf.bitwise.bitwise_xor(row[:, tf.newaxis], token[tf.newaxis, :]))
    # The top 24 bits, centred in their interval: never 0 or 1.
    return (tf.cast(tf.bitwise.right_shift(bits, _u32(8)), tf.float32) + 0.5) * 2.0**-24


def filter_logits(logits, top_k=0, top_p=1.0, temperature=1.0) -> tf.Tensor:
    """``logits / temperature`` with the tokens outside the top-k and the nucleus made impossible.

    The filters apply in that order, as in Hugging Face's generation: the
    ``top_k`` likeliest tokens (0: all), then among them the smallest set,
    likeliest first, whose renormalised probability reaches ``top_p``. A
    token tied with the last one kept is kept too. Tensors are clamped to
    range: ``top_k`` below 0 as 0, ``top_p`` into [1e-6, 1],
    ``temperature`` to at least 1e-6.

    Args:
        logits: ``[rows, vocab]`` float32, impossible tokens at ``NEG``.
        top_k, top_p, temperature: as in ``Sample``.

    Returns:
        ``[rows, vocab]`` float32: the scaled logits, ``NEG`` where filtered out.

    Example:
        >>> kept = filter_logits(tf.math.log([[0.5, 0.3, 0.2]]), top_p=0.6) > -1e8
        >>> kept.numpy().tolist()
        [[True, True, False]]
    """
    vocab = tf.shape(logits)[-1]
    temperature = tf.maximum(tf.cast(temperature, tf.float32), 1e-6)
    scaled = tf.where(logits > NEG / 2, logits / temperature, NEG)  # impossible stays impossible
    static = isinstance(top_k, int) and isinstance(top_p, (int, float))
    if static and top_k <= 0 and top_p >= 1.0:
        return scaled
    k = tf.cast(top_k, tf.int32)
    k = tf.where(k > 0, tf.minimum(k, vocab), vocab)
    ordered = tf.sort(scaled, axis=-1, direction="DESCENDING")  # [rows, vocab]
    in_top_k = tf.range(vocab)[tf.newaxis, :] < k
    probs = tf.nn.softmax(tf.where(in_top_k, ordered, NEG))
    before = tf.math.cumsum(probs, axis=-1, exclusive=True)  # the mass of the likelier tokens
    top_p = tf.clip_by_value(tf.cast(top_p, tf.float32), 1e-6, 1.0)
    kept = in_top_k & (before < top_p)  # the first token always: nothing is before it
    count = tf.maximum(tf.reduce_sum(tf.cast(kept, tf.int32), axis=-1), 1)
    threshold = tf.gather(ordered, count - 1, batch_dims=1)[:, tf.newaxis]
    return tf.where(scaled >= threshold, scaled, NEG)


def sample_tokens(logits, keys, step, top_k=0, top_p=1.0, temperature=1.0) -> tf.Tensor:
    """One token a row, drawn from the filtered softmax of ``logits`` by the rows' noise.

    ``top_k == 1`` is the arg-max, as greedy decoding chooses.

    Args:
        logits: ``[rows, vocab]`` float32, impossible tokens at ``NEG``.
        keys: ``[rows]`` uint32 sentence keys.
        step: the decoding step.
        top_k, top_p, temperature: as in ``filter_logits``.

    Returns:
        ``[rows]`` int32 token ids.
    """
    greedy = tf.argmax(logits, axis=-1, output_type=tf.int32)
    if isinstance(top_k, int) and top_k == 1:
        return greedy
    filtered = filter_logits(logits, top_k, top_p, temperature)
    vocab = logits.shape[-1]
    if vocab is None:
        raise ValueError("sampling needs logits of a known vocabulary size.")
    gumbel = -tf.math.log(-tf.math.log(uniform_noise(keys, step, vocab)))
    drawn = tf.argmax(
        tf.where(filtered > NEG / 2, filtered + gumbel, NEG), axis=-1, output_type=tf.int32
    )
    if isinstance(top_k, int):
        return drawn
    return tf.where(tf.equal(tf.cast(top_k, tf.int32), 1), greedy, drawn)
