"""Matrix products for the projections: the weight gradient in the faster orientation,
bias and ReLU inside the product for grappler's fusion, rank-2 reshapes by static sizes
(``docs/kernels.md`` says why)."""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf


def transposed_product(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """``aᵀ b`` for ``a [N, p]``, ``b [N, q]`` (a weight gradient, N = tokens).

    Args:
        a: ``[N, p]``.
        b: ``[N, q]``, ``a``'s dtype.

    Returns:
        ``[p, q]``: ``tf.matmul(a, b, transpose_a=True)``'s values.

    Example:
        >>> transposed_product(tf.ones([4, 3]), tf.ones([4, 2])).numpy().tolist()
        [[4.0, 4.0], [4.0, 4.0], [4.0, 4.0]]
    """
    p, q = a.shape[-1], b.shape[-1]
    if p is not None and q is not None and p > q:
        return tf.transpose(tf.matmul(b, a, transpose_a=True))
    return tf.matmul(a, b, transpose_a=True)


def permute(x: tf.Tensor, perm) -> tf.Tensor:
    """``tf.transpose(x, perm)`` as an ``einsum``: the same values, no ``Transpose`` node.

    Args:
        x: a tensor of rank 8 at most.
        perm: the permutation of ``x``'s axes.

    Returns:
        ``x`` with its axes in the order ``perm``.

    Example:
        >>> permute(tf.zeros([1, 2, 3]), [2, 0, 1]).shape
        TensorShape([3, 1, 2])
    """
    letters = "abcdefgh"[: len(perm)]
    return tf.einsum(f"{letters}->{''.join(letters[axis] for axis in perm)}", x)


class UnfusedBias(NamedTuple):
    """A bias that ``project_rows`` adds after the product rather than fused into it.

    Held negated as ``[1, n]`` and subtracted: ``y - (-b)`` is ``y + b``
    exactly, and grappler fuses no ``Sub`` into the product. ``unfused(bias)``
    makes one.
    """

    negated: tf.Tensor  # [1, n]


def unfused(bias: tf.Tensor | None) -> UnfusedBias | None:
    """``bias`` ``[n]`` as an ``UnfusedBias`` (``None`` stays ``None``).

    Example:
        >>> unfused(tf.constant([1.0, 2.0])).negated.numpy().tolist()
        [[-1.0, -2.0]]
    """
    return None if bias is None else UnfusedBias(-bias[tf.newaxis])


def project_rows(x: tf.Tensor, weights: tuple, activation=None) -> tf.Tensor:
    """``activation?(x @ kernel + bias)`` on rank-2 rows, with no gradient wrapper (inference).

    Args:
        x: ``[rows, k]``.
        weights: ``(kernel [k, n], bias)``, the bias ``[n]`` (added by
            ``BiasAdd``, which grappler fuses into the product with a ReLU),
            an ``UnfusedBias`` or ``None``.
        activation: applied last, if given.

    Returns:
        ``[rows, n]``.

    Example:
        >>> project_rows(tf.ones([2, 3]), (tf.ones([3, 4]), tf.ones([4]))).numpy()[0].tolist()
        [4.0, 4.0, 4.0, 4.0]
    """
    kernel, bias = weights
    return bias_and_activation(tf.matmul(x, kernel), bias, activation)


def bias_and_activation(y: tf.Tensor, bias, activation=None) -> tf.Tensor:
    """What follows a projection's product: ``activation?(y + bias)``.

    Args:
        y: the product ``[..., n]``.
        bias: a ``[n]`` bias (by ``BiasAdd``), an ``UnfusedBias``
            (subtracted) or ``None``.
        activation: applied last, if given.

    Returns:
        ``y``'s shape and dtype.
    """
    if isinstance(bias, UnfusedBias):
        y = y - bias.negated
    elif bias is not None:
        y = tf.nn.bias_add(y, bias)
    return activation(y) if activation is not None else y


def project_pointwise(x: tf.Tensor, weights: tuple, activation=None) -> tf.Tensor:
    """``project_rows`` as a 1×1 (pointwise) convolution: the small-batch decoding step's product.

    The kernel ``[k, n]`` becomes ``[1, 1, k, n]`` (a constant kernel's
    reshape is folded away by the graph optimiser); the same values, up to
    the order of a float sum.

    Args:
        x: ``[rows, k]``, or ``[rows, 1, 1, k]`` (the NHWC layout), which
            needs no reshape around the product.
        weights: ``(kernel [k, n], bias)`` as for ``project_rows``.
        activation: applied last, if given.

    Returns:
        ``[rows, n]``, or ``[rows, 1, 1, n]`` for a rank-4 ``x``.

    Example:
        >>> project_pointwise(tf.ones([2, 1, 1, 3]), (tf.ones([3, 4]), None)).shape
        TensorShape([2, 1, 1, 4])
    """
    kernel, bias = weights
    k, n = kernel.shape
    nhwc = x.shape.rank == 4  # [rows, 1, 1, k]: no reshape around the convolution
    y = tf.nn.conv2d(
        x if nhwc else tf.reshape(x, [-1, 1, 1, k]),
        tf.reshape(kernel, [1, 1, k, n]),
        strides=1,
        padding="VALID",
    )
    return bias_and_activation(y if nhwc else tf.reshape(y, [-1, n]), bias, activation)


def as_rows(x: tf.Tensor) -> tf.Tensor:
    """``x [..., depth]`` as the rank-2 ``[rows, depth]`` of a matmul, static sizes where known.

    Returns:
        ``x`` itself where it is rank 2, else ``[-1, depth]``.

    Example:
        >>> as_rows(tf.zeros([2, 3, 4])).shape
        TensorShape([6, 4])
    """
    if x.shape.rank == 2:
        return x
    depth = x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
    return tf.reshape(x, [-1, depth])


def from_rows(y: tf.Tensor, like: tf.Tensor, units) -> tf.Tensor:
    """``y [rows, units]`` back in ``like``'s leading axes: the inverse of ``as_rows``.

    Args:
        y: ``[rows, units]``.
        like: the tensor ``as_rows`` flattened.
        units: ``y``'s last size.

    Returns:
        ``[..., units]`` with ``like``'s leading axes.

    Example:
        >>> from_rows(tf.zeros([6, 5]), tf.zeros([2, 3, 4]), 5).shape
        TensorShape([2, 3, 5])
    """
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
    """``relu?(x @ kernel + bias)`` over ``x``'s last axis, with a hand-written gradient.

    A rank-2 product over the flattened leading axes; the kernel gradient
    by ``transposed_product``; the bias and ReLU right after the product,
    where grappler fuses them in. Values and gradients are those of
    ``tf.matmul`` / ``tf.nn.bias_add`` / ``tf.nn.relu``.

    Args:
        x: ``[..., k]``.
        kernel: ``[k, n]`` (``[n, k]`` with ``transpose_kernel``).
        bias: ``[n]`` or ``None``.
        relu: apply a ReLU after the bias.
        transpose_kernel: multiply by ``kernelᵀ``.
        with_gradient: ``False`` (inference) leaves the custom-gradient
            wrapper out of the graph: the same values, fewer nodes.

    Returns:
        ``[..., n]`` in ``x``'s dtype.

    Example:
        >>> project(tf.ones([2, 5, 3]), tf.ones([3, 4]), relu=True).shape
        TensorShape([2, 5, 4])
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
