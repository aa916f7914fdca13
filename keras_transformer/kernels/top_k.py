"""``tf.math.top_k`` over a long last axis, by the maxima of blocks: beam search's candidates.

``top_k`` finds the blocks that can hold the answer from their maxima and
runs ``TopKV2`` over those blocks only: the same values and indices as
``tf.math.top_k`` (``docs/kernels.md`` has why it is exact, and why it is
faster). Plain core ops (``Max``, ``TopKV2``, ``GatherV2``): CPU, GPU, TPU,
XLA, TFLite builtins and stock TF Serving.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.numerics import ceil_div

# Elements a block (docs/kernels.md).
BLOCK = 64


def top_k(values: tf.Tensor, k: int, block: int = BLOCK) -> tuple[tf.Tensor, tf.Tensor]:
    """``tf.math.top_k(values, k)`` for a rank-2 ``[rows, n]`` float tensor with a static ``n``.

    Rows of fewer than ``4 · k · block`` elements go to ``tf.math.top_k``
    directly (the blocks would not pay). A row whose length is not a
    multiple of ``block`` is padded with ``-inf`` at its end, which can only
    follow the row's own elements.

    Args:
        values: ``[rows, n]`` float, ``n`` static.
        k: how many to take, 1 to ``n``.
        block: elements a block.

    Returns:
        ``(values [rows, k], indices [rows, k] int32)``, best first, the
        lower index first among equal values.

    Raises:
        ValueError: ``values`` is not ``[rows, n]`` with a static ``n``, or
            ``k`` is not between 1 and ``n``.

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
    blocks = ceil_div(n, block)
    if blocks * block != n:
        values = tf.pad(values, [[0, 0], [0, blocks * block - n]], constant_values=float("-inf"))
    by_block = tf.reshape(values, [rows, blocks, block])
    _, best_blocks = tf.math.top_k(tf.reduce_max(by_block, axis=2), k=k)
    best_blocks = tf.sort(best_blocks, axis=1)  # ascending: candidates keep the row's order
    candidates = tf.reshape(tf.gather(by_block, best_blocks, batch_dims=1), [rows, k * block])
    best, at = tf.math.top_k(candidates, k=k)
    return best, tf.gather(best_blocks, at // block, batch_dims=1) * block + at % block
