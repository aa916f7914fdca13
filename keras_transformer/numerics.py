"""Finite stand-ins for -inf, per dtype (Model Garden's numerics).

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

    Example:
        >>> masked_score_value("float32"), masked_score_value("float16")
        (-1000000000.0, -60000.0)
    """
    return FLOAT16_MASK_VALUE if tf.as_dtype(dtype) == tf.float16 else MASK_VALUE
