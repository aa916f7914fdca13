"""Numeric helpers shared across the library: finite stand-ins for -inf, per
dtype (Model Garden's numerics), and integer rounding up.

A masked attention score, an impossible token and an empty beam slot all get
``masked_score_value(dtype)``: no ``inf - inf = NaN``, and ``exp()`` of it
still underflows to exactly 0. Attention scores and log-probabilities are
float32 (see ``layers.scaled_dot_product_attention``), where it is -1e9;
float16 tops out at 65504.
"""

from __future__ import annotations

import tensorflow as tf

MASK_VALUE = -1.0e9
FLOAT16_MASK_VALUE = -6.0e4


def masked_score_value(dtype) -> float:
    """Gives a finite stand-in for -inf that is representable in ``dtype``.

    Args:
        dtype: the dtype of the scores (a name or a ``tf.DType``).

    Returns:
        -6e4 for float16, -1e9 otherwise.

    Args:
        dtype: a float dtype (a ``tf.DType`` or its name).

    Returns:
        ``-6e4`` for float16, else ``-1e9``.

    Example:
        >>> masked_score_value("float32"), masked_score_value("float16")
        (-1000000000.0, -60000.0)
    """
    return FLOAT16_MASK_VALUE if tf.as_dtype(dtype) == tf.float16 else MASK_VALUE


def ceil_div(numerator, denominator):
    """``⌈numerator / denominator⌉`` for a positive ``denominator``, exactly, in integers.

    Args:
        numerator: an int, or an integer tensor.
        denominator: a positive int (or integer tensor).

    Returns:
        The quotient rounded up, of the operands' type.

    Example:
        >>> ceil_div(17, 16), ceil_div(16, 16), ceil_div(0, 16)
        (2, 1, 0)
    """
    return -(-numerator // denominator)


def round_up(value, multiple):
    """``value`` rounded up to a multiple of ``multiple`` (positive): an int, or an integer tensor.

    Example:
        >>> round_up(17, 16), round_up(32, 16)
        (32, 32)
    """
    return ceil_div(value, multiple) * multiple
