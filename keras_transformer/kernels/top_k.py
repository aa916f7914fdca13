"""``tf.math.top_k`` over a long last axis, by the maxima of blocks.

Beam search takes, every step, the best few of ``beam · vocab`` candidate
scores a sentence (16 of 32,000 for a beam of 4 and an 8,000-piece
vocabulary). TensorFlow's ``TopKV2`` kernel walks every element one at a time;
a ``reduce_max`` over blocks of the same elements is vectorized. ``top_k``
finds the blocks that can hold the answer from their maxima, and runs
``TopKV2`` over those blocks only: the same values and indices as
``tf.math.top_k``, several times faster from a few rows up
(``python -m benchmarks.inference_kernels``).

Why it is exact: order the elements by value, the lower index first among
equal values, as ``tf.math.top_k`` does. A block's maximum in that order is
one of its elements, so at most ``k`` blocks have their maximum among the best
``k`` elements, and every block that holds one of the best ``k`` is among
them. The ``k`` blocks with the best maxima (lower block first among equals,
which is the lower element first) therefore hold the answer; taken in
ascending block order, their elements keep their relative order, so
``TopKV2`` over them breaks ties as it would over the whole row.

Plain core ops (``Max``, ``TopKV2``, ``GatherV2``): CPU, GPU, TPU, XLA,
TFLite builtins and stock TF Serving.
"""

from __future__ import annotations

import tensorflow as tf

# Elements a block. Timed over 32,000 candidates at 1 to 64 rows, blocks of 32 to 128 were
# within 10% of each other; 256 was slower from 16 rows up.
BLOCK = 64


def top_k(values: tf.Tensor, k: int, block: int = BLOCK) -> tuple[tf.Tensor, tf.Tensor]:
    """``tf.math.top_k(values, k)`` for a rank-2 ``[rows, n]`` float tensor
    with a static ``n``: the same ``(values [rows, k], indices [rows, k]
    int32)``, best first, the lower index first among equal values.

    Rows of fewer than ``4 · k · block`` elements go to ``tf.math.top_k``
    directly (the blocks would not pay). A row whose length is not a multiple
    of ``block`` is padded with ``-inf`` at its end, which can only follow the
    row's own elements.

    Example:
        >>> x = tf.random.stateless_normal([3, 5000], seed=[1, 2])
        >>> best, where = top_k(x, 8)
        >>> expected, expected_where = tf.math.top_k(x, 8)
        >>> bool(tf.reduce_all(best == expected)), bool(tf.reduce_all(where == expected_where))
        (True, True)
    """
    n = values.shape[-1]
    if values.shape.rank != 2 or n is None:
        raise ValueError(
            f"top_k needs a [rows, n] tensor with a static n, got shape {values.shape}."
        )
    if not 0 < k <= n:
        raise ValueError(f"top_k: k={k} must be between 1 and the row length {n}.")
    if n < 4 * k * block:
        return tf.math.top_k(values, k=k)
    rows = tf.shape(values)[0]
    blocks = -(-n // block)
    if blocks * block != n:
        values = tf.pad(values, [[0, 0], [0, blocks * block - n]], constant_values=float("-inf"))
    by_block = tf.reshape(values, [rows, blocks, block])
    _, best_blocks = tf.math.top_k(tf.reduce_max(by_block, axis=2), k=k)
    best_blocks = tf.sort(best_blocks, axis=1)  # ascending: candidates keep the row's order
    candidates = tf.reshape(tf.gather(by_block, best_blocks, batch_dims=1), [rows, k * block])
    best, at = tf.math.top_k(candidates, k=k)
    return best, tf.gather(best_blocks, at // block, batch_dims=1) * block + at % block
