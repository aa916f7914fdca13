"""Inverted dropout drawing 16 random bits per element instead of a float32."""

from __future__ import annotations

import tensorflow as tf

_LEVELS = 1 << 16


def _apply_mask(x: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """``x · mask`` whose gradient reuses the mask (one multiply backward)."""

    @tf.custom_gradient
    def masked(x):
        return x * mask, lambda upstream: upstream * mask

    return masked(x)


def dropout(x: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """Inverted dropout of ``x`` with drop probability ``rate``, from 16 random bits an element.

    The drop probability is ``rate`` rounded to a multiple of 2⁻¹⁶
    (|error| ≤ 7.7e-6), and kept values are scaled by the inverse of the
    resulting keep probability, so the expectation is unchanged (exactly in
    float32; in bfloat16 the scale rounds, as in Keras' own dropout).

    Args:
        x: any float tensor.
        rate: drop probability in (0, 1).
        seed: int32/int64 ``[2]`` seed of the stateless RNG.

    Returns:
        ``x``'s shape and dtype: each element zeroed or scaled up.

    Example:
        >>> y = dropout(tf.ones([1000]), 0.5, tf.constant([1, 2]))
        >>> sorted(set(y.numpy().tolist()))
        [0.0, 2.0]
    """
    threshold = round(rate * _LEVELS)
    size = tf.size(x)
    bits = tf.random.stateless_uniform(
        [(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.uint32
    )
    halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
    keep = tf.reshape(halves >= tf.constant(threshold, tf.uint16), tf.shape(x))
    scale = tf.constant(_LEVELS / (_LEVELS - threshold), x.dtype)
    return _apply_mask(x, tf.where(keep, scale, tf.zeros([], x.dtype)))
