"""Matrix products for the projections: the weight gradient in the faster orientation,
bias and ReLU inside the product for grappler's fusion, rank-2 reshapes by static sizes."""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf


def transposed_product(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """``aᵀ b`` for ``a [N, p]``, ``b [N, q]`` (a weight gradient, N = tokens).

    oneDNN runs this product markedly faster when ``p ≤ q`` than when ``p > q``
    (the output projection's ``[tokens, vocab]ᵀ [tokens, d_model]`` is the large
    case; ``benchmarks/README.md`` has the measurements), so the tall case is
    computed as ``(bᵀ a)ᵀ``: the extra transpose is of a weight-sized tensor
    only. Elsewhere (GPU, TPU) it costs no more.
    """
    p, q = a.shape[-1], b.shape[-1]
    if p is not None and q is not None and p > q:
        return tf.transpose(tf.matmul(b, a, transpose_a=True))
    return tf.matmul(a, b, transpose_a=True)


def permute(x: tf.Tensor, perm) -> tf.Tensor:
    """``tf.transpose(x, perm)`` as an ``einsum``: the same values. TensorFlow's
    oneDNN build runs a ``Transpose`` of a small tensor in tens of microseconds
    (~48 µs for a sentence's ``[1, 12, 4, 48]`` heads, where this takes ~1 µs),
    and the encoder and the decoders' caches move heads at every call; at
    training sizes the two cost about the same (``benchmarks/README.md``)."""
    letters = "abcdefgh"[: len(perm)]
    return tf.einsum(f"{letters}->{''.join(letters[axis] for axis in perm)}", x)


class ApartBias(NamedTuple):
    """A bias that ``project_rows`` adds after the product rather than fused
    into it, held negated as ``[1, n]`` and subtracted: ``y - (-b)`` is ``y +
    b`` exactly. Grappler's remapper fuses a ``BiasAdd``, and an ``AddV2`` of
    a ``[1, n]`` tensor too, into oneDNN's product with a bias, and leaves a
    ``Sub`` alone; at one row to a few dozen, oneDNN's plain product and the
    subtraction take less time than the fused product (``benchmarks/README.md``).
    ``apart(bias)`` makes one."""

    negated: tf.Tensor  # [1, n]


def apart(bias: tf.Tensor | None) -> ApartBias | None:
    """``bias`` ``[n]`` as an ``ApartBias`` (``None`` stays ``None``)."""
    return None if bias is None else ApartBias(-bias[tf.newaxis])


def project_rows(x: tf.Tensor, weights: tuple, activation=None) -> tf.Tensor:
    """``activation?(x [rows, k] @ kernel + bias)`` for ``weights = (kernel,
    bias | None)``, with no gradient wrapper (inference kernels). A ``[n]``
    bias goes in by ``BiasAdd`` right after the product, where grappler fuses
    it (and a ReLU) into one oneDNN product; an ``ApartBias`` after it, apart."""
    kernel, bias = weights
    return bias_and_activation(tf.matmul(x, kernel), bias, activation)


def bias_and_activation(y: tf.Tensor, bias, activation=None) -> tf.Tensor:
    """``y`` plus ``bias`` (a ``[n]`` bias by ``BiasAdd``, an ``ApartBias``
    subtracted, or ``None``), then ``activation``: what follows a projection's product."""
    if isinstance(bias, ApartBias):
        y = y - bias.negated
    elif bias is not None:
        y = tf.nn.bias_add(y, bias)
    return activation(y) if activation is not None else y


def project_few_rows(x: tf.Tensor, weights: tuple, activation=None) -> tf.Tensor:
    """``project_rows`` for a decoding step of a row or a few: the product as
    a 1×1 convolution, ``x`` ``[rows, 1, 1, k]`` by the kernel ``[1, 1, k, n]``,
    which sums the same products (the same values, up to the order of a
    float sum).

    On a CPU, TensorFlow splits a one-row ``MatMul`` (a matrix-vector product)
    across its intra-op threads even when the kernel sits in the caches, and
    the hand-off costs more than the product; its ``Conv2D`` runs the product
    on the calling thread. In a decoding loop, where each product waits for
    the one before, a decoder's products at one row take about 60% of the
    time under the default thread pools (what one intra-op thread gives
    them), and the same time as ``MatMul`` at 4 and 16 rows
    (``python -m benchmarks.row_products --rows N``). ``Conv2D`` runs on
    every device and XLA, is a TFLite builtin and is in stock TF Serving.
    A constant kernel's reshape is folded away by the graph optimiser.

    ``x`` ``[rows, k]`` gives ``[rows, n]``; ``x`` ``[rows, 1, 1, k]`` gives
    ``[rows, 1, 1, n]``, with no reshape of the rows: a decoding step that
    keeps its rows so saves two graph nodes a product.
    """
    kernel, bias = weights
    k, n = kernel.shape
    pixels = x.shape.rank == 4
    y = tf.nn.conv2d(
        x if pixels else tf.reshape(x, [-1, 1, 1, k]),
        tf.reshape(kernel, [1, 1, k, n]),
        strides=1,
        padding="VALID",
    )
    return bias_and_activation(y if pixels else tf.reshape(y, [-1, n]), bias, activation)


def as_rows(x: tf.Tensor) -> tf.Tensor:
    """``x [..., depth]`` as the rank-2 ``[rows, depth]`` a matmul takes, by
    static sizes where they are known (a decoding loop runs every shape op
    here once a step); a rank-2 ``x`` is returned as it is."""
    if x.shape.rank == 2:
        return x
    depth = x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
    return tf.reshape(x, [-1, depth])


def from_rows(y: tf.Tensor, like: tf.Tensor, units) -> tf.Tensor:
    """``y [rows, units]`` back in ``like``'s leading axes: ``[..., units]``."""
    if like.shape.rank == 2:
        return y
    if like.shape[1:-1].is_fully_defined():  # [batch, ..., depth] with only the batch unknown
        return tf.reshape(y, [-1] + like.shape[1:-1].as_list() + [units])
    return tf.reshape(y, tf.concat([tf.shape(like)[:-1], [units]], axis=0))


def project(
    x: tf.Tensor,
    kernel: tf.Tensor,
    bias: tf.Tensor | None = None,
    relu: bool = False,
    transpose_kernel: bool = False,
    with_gradient: bool = True,
) -> tf.Tensor:
    """``relu?(x [..., k] @ kernel [k, n] + bias)`` (``kernel [n, k]`` with ``transpose_kernel``).

    A rank-2 product over the flattened leading axes, with a hand-written
    gradient that takes the kernel gradient in the faster orientation
    (``transposed_product``). The bias and ReLU sit right after the
    product, inside the same function, so that TensorFlow's graph optimiser
    can fuse all three into one oneDNN matmul. Values and gradients are
    those of ``tf.matmul`` / ``tf.nn.bias_add`` / ``tf.nn.relu``.
    ``with_gradient=False`` (inference) leaves the custom-gradient wrapper
    out of the graph: the same values with fewer nodes, which a decoding loop
    runs at every step.
    """
    units = kernel.shape[0] if transpose_kernel else kernel.shape[-1]
    flat = as_rows(x)

    def forward(flat, kernel, *maybe_bias):
        y = tf.matmul(flat, kernel, transpose_b=transpose_kernel)
        if maybe_bias:
            y = tf.nn.bias_add(y, maybe_bias[0])
        return tf.nn.relu(y) if relu else y

    @tf.custom_gradient
    def product(flat, kernel, *maybe_bias):
        y = forward(flat, kernel, *maybe_bias)

        def grad(upstream):
            if relu:
                upstream = tf.raw_ops.ReluGrad(gradients=upstream, features=y)
            d_flat = tf.matmul(upstream, kernel, transpose_b=not transpose_kernel)
            if transpose_kernel:
                d_kernel = transposed_product(upstream, flat)
            else:
                d_kernel = transposed_product(flat, upstream)
            if maybe_bias:
                return d_flat, d_kernel, tf.raw_ops.BiasAddGrad(out_backprop=upstream)
            return d_flat, d_kernel

        return y, grad

    function = product if with_gradient else forward
    y = function(flat, kernel) if bias is None else function(flat, kernel, bias)
    y = from_rows(y, x, units)
    y.set_shape(x.shape[:-1].concatenate([units]))
    return y
