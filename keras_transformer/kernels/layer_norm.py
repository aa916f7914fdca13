"""LayerNorm over the last axis with a closed-form gradient, or the native C++ kernels."""

from __future__ import annotations

from types import ModuleType

import tensorflow as tf

from keras_transformer.kernels.projection import as_rows, from_rows


def layer_norm(
    x: tf.Tensor,
    gamma: tf.Tensor,
    beta: tf.Tensor,
    epsilon: float,
    native_ops: ModuleType | None = None,
    with_gradient: bool = True,
) -> tf.Tensor:
    """``γ·(x − μ)/√(σ² + ε) + β`` over the last axis of a float32 ``x``, closed-form gradient.

    Args:
        x: float32 ``[..., d]``.
        gamma, beta: float32 ``[d]``.
        epsilon: ε.
        native_ops: ``kernels.native.usable()`` (``None`` unless the native
            ops are enabled): forward and backward by one C++ kernel each.
        with_gradient: ``False`` (inference) computes the same forward pass
            without the custom-gradient wrapper and at ``x``'s own rank,
            with no reshape.

    Returns:
        ``x``'s shape, float32.

    Example:
        >>> y = layer_norm(tf.constant([[1.0, 3.0]]), tf.ones([2]), tf.zeros([2]), 0.0)
        >>> [round(value, 4) for value in y.numpy()[0].tolist()]
        [-1.0, 1.0]
    """
    if not with_gradient:
        return _plain_normalize(epsilon)(x, gamma, beta)
    flat = as_rows(x)
    if native_ops:
        normalize = _native_normalize(native_ops, epsilon)
    else:
        normalize = _normalize(epsilon)
    y = from_rows(
        normalize(flat, gamma, beta), x, x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
    )
    y.set_shape(x.shape)
    return y


def inference_norm(x: tf.Tensor, norm, dtype) -> tf.Tensor:
    """``x`` normalised by ``norm`` (a ``weights.Norm``: γ, β, ε) in float32 and
    cast back to ``dtype``, with no gradient wrapper: the inference kernels' LayerNorm."""
    return tf.cast(
        layer_norm(
            tf.cast(x, tf.float32), norm.gamma, norm.beta, norm.epsilon, with_gradient=False
        ),
        dtype,
    )


def inference_residual(
    x: tf.Tensor, sublayer, norm, norm_first: bool, dtype, skip: tf.Tensor | None = None
) -> tf.Tensor:
    """Post-LN ``LN(x + F(x))`` or pre-LN ``x + F(LN(x))`` at inference (no dropout).

    ``sublayer`` gives ``F`` as a tensor, or as a list of parts that sum to
    it, added with the residual by one ``AddN``. ``skip``: the residual
    branch, ``x`` by default; a decoding step passes ``x`` plus the bias of
    ``F``'s last product, which it leaves out of the product."""
    skip = x if skip is None else skip

    def plus_skip(f):
        parts = list(f) if isinstance(f, (list, tuple)) else [f]
        return skip + parts[0] if len(parts) == 1 else tf.add_n(parts + [skip])

    if norm_first:
        return plus_skip(sublayer(inference_norm(x, norm, dtype)))
    return inference_norm(plus_skip(sublayer(x)), norm, dtype)


def _statistics(flat, epsilon: float):
    mean = tf.reduce_mean(flat, axis=-1, keepdims=True)
    centered = flat - mean
    inverse_std = tf.math.rsqrt(
        tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon
    )
    return centered * inverse_std, inverse_std


def _plain_normalize(epsilon: float):
    def normalize(flat, gamma, beta):
        normalized, _ = _statistics(flat, epsilon)
        return normalized * gamma + beta

    return normalize


def _native_normalize(ops: ModuleType, epsilon: float):
    @tf.custom_gradient
    def normalize(flat, gamma, beta):
        y, mean, inverse_std = ops.keras_transformer_layer_norm(flat, gamma, beta, epsilon=epsilon)

        def grad(upstream):
            return ops.keras_transformer_layer_norm_grad(upstream, flat, gamma, mean, inverse_std)

        return y, grad

    return normalize


def _normalize(epsilon: float):
    @tf.custom_gradient
    def normalize(flat, gamma, beta):
        normalized, inverse_std = _statistics(flat, epsilon)

        def grad(upstream):
            width = tf.cast(tf.shape(flat)[-1], tf.float32)
            upstream_normalized = upstream * normalized
            d_gamma = tf.raw_ops.BiasAddGrad(out_backprop=upstream_normalized)
            d_beta = tf.raw_ops.BiasAddGrad(out_backprop=upstream)
            scaled = upstream * gamma
            mean_scaled = tf.reduce_mean(scaled, axis=-1, keepdims=True)
            mean_scaled_normalized = tf.matmul(upstream_normalized, gamma[:, tf.newaxis] / width)
            d_flat = inverse_std * (scaled - mean_scaled - normalized * mean_scaled_normalized)
            return d_flat, d_gamma, d_beta

        return normalized * gamma + beta, grad

    return normalize
