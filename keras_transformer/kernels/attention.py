"""Attention at inference, ``softmax(q kᵀ + bias) v`` over the heads, with the
batched products TensorFlow's oneDNN build leaves to Eigen.

``attend`` computes the product as ``BatchMatMulV3`` in float32, which oneDNN
does not rewrite, and the softmax as ``exp(log_softmax)``
(``docs/kernels.md`` says why). It is used by the inference kernels
(``decoding_step``, ``encode``); the paper's layers keep their own attention.
These ops run on CPU, GPU and TPU, and stock TF Serving has them.
"""

from __future__ import annotations

import tensorflow as tf


def batched_product(a: tf.Tensor, b: tf.Tensor, adjoint_b: bool = False) -> tf.Tensor:
    """``a @ b`` (``a @ bᵀ`` with ``adjoint_b``) over the leading batch axes.

    ``BatchMatMulV3`` in float32, which oneDNN leaves to Eigen;
    ``tf.matmul`` in other dtypes.

    Args:
        a: ``[..., m, k]``.
        b: ``[..., k, n]`` (``[..., n, k]`` with ``adjoint_b``), ``a``'s dtype.
        adjoint_b: multiply by ``b``'s transpose.

    Returns:
        ``[..., m, n]`` in ``a``'s dtype.

    Example:
        >>> a = tf.ones([2, 3, 1, 4]); b = tf.ones([2, 3, 5, 4])
        >>> batched_product(a, b, adjoint_b=True).shape
        TensorShape([2, 3, 1, 5])
    """
    if a.dtype == tf.float32 and b.dtype == tf.float32:
        return tf.raw_ops.BatchMatMulV3(x=a, y=b, Tout=tf.float32, adj_y=adjoint_b)
    return tf.matmul(a, b, transpose_b=adjoint_b)


def attend(
    query: tf.Tensor,
    key: tf.Tensor,
    value: tf.Tensor,
    bias: tf.Tensor | None = None,
    has_key: tf.Tensor | None = None,
) -> tf.Tensor:
    """``softmax(query keyᵀ + bias) value`` in the heads layout, softmax in float32.

    Args:
        query: ``[rows, heads, queries, depth]``, already scaled by ``1/√d_k``.
        key, value: ``[rows, heads, keys, depth]``, the query's dtype.
        bias: float32, broadcastable to ``[rows, heads, queries, keys]``:
            0 for a key that may be attended to, the finite "-inf" of
            ``numerics.masked_score_value`` for one that may not.
        has_key: bool, broadcastable to the output: False for a row with no
            key at all, whose output is zeroed (as the layers zero it)
            rather than the mean of its masked values.

    Returns:
        ``[rows, heads, queries, depth]`` in the query's dtype. Scores and
        softmax are float32 whatever the compute dtype (the softmax as
        ``exp(log_softmax)``); the products are ``batched_product``'s.

    Example:
        >>> q = tf.zeros([1, 2, 1, 4]); kv = tf.ones([1, 2, 3, 4])
        >>> attend(q, kv, kv).shape
        TensorShape([1, 2, 1, 4])
    """
    scores = tf.cast(batched_product(query, key, adjoint_b=True), tf.float32)
    if bias is not None:
        scores += bias
    weights = tf.exp(tf.nn.log_softmax(scores))
    attended = batched_product(tf.cast(weights, value.dtype), value)
    if has_key is not None:
        attended *= tf.cast(has_key, attended.dtype)
    return attended
