"""Attention at inference, ``softmax(q kᵀ + bias) v`` over the heads, with the
batched products TensorFlow's oneDNN build leaves to Eigen.

On an x86 CPU, TensorFlow's oneDNN build rewrites ``BatchMatMulV2`` (what
``tf.matmul`` and ``tf.einsum`` emit for batched operands) and ``Softmax``
into its own kernels, which take tens of microseconds even for an
inference step's ``[rows, heads, 1, depth] × [rows, heads, len, depth]ᵀ``.
It does not rewrite ``BatchMatMulV3``, the same product with an output dtype:
Eigen's batched kernel computes it, several times faster at these sizes
(``benchmarks/README.md``: one attention of a decoding step, 1 to 64 rows).
Nor does it rewrite ``LogSoftmax``: the softmax is ``exp(log_softmax(s))``,
two graph nodes that take less time than oneDNN's ``Softmax`` and than the
five of ``exp(s − max s) / Σ exp(s − max s)``, with oneDNN's rewrites on or
off (in a decoding loop, at a row or a few; the same time at 64 rows).
``attend`` is used by the inference kernels (``decoding_step``,
``encode``); the paper's layers keep their own attention. These ops run on
CPU, GPU and TPU, and stock TF Serving has them.
"""

from __future__ import annotations

import tensorflow as tf


def batched_product(a: tf.Tensor, b: tf.Tensor, adjoint_b: bool = False) -> tf.Tensor:
    """``a @ b`` (``a @ bᵀ`` with ``adjoint_b``) over the leading batch axes:
    ``BatchMatMulV3`` in float32, which oneDNN leaves to Eigen, ``tf.matmul``
    in other dtypes (oneDNN's bf16 kernels are the fast ones there).

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
    """``softmax(query keyᵀ + bias) value`` in the heads layout.

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
    """
    scores = tf.cast(batched_product(query, key, adjoint_b=True), tf.float32)
    if bias is not None:
        scores += bias
    weights = tf.exp(tf.nn.log_softmax(scores))
    attended = batched_product(tf.cast(weights, value.dtype), value)
    if has_key is not None:
        attended *= tf.cast(has_key, attended.dtype)
    return attended
