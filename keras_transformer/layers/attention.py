"""Scaled dot-product and multi-head attention, with masks and a KV cache."""

from __future__ import annotations

import math
from collections.abc import Callable

import keras
import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.layers.dense import Dense
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.initializers import clone_initializer
from keras_transformer.numerics import masked_score_value


def scaled_dot_product_attention(
    q: tf.Tensor,
    k: tf.Tensor,
    v: tf.Tensor,
    mask: tf.Tensor | None = None,
    weights_dropout: Callable[[tf.Tensor], tf.Tensor] | None = None,
    scale: float | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """softmax(Q Kᵀ / √d_k + M) V, the paper's equation (1).

    Args:
        q: ``[..., q_len, depth]`` queries.
        k: ``[..., k_len, depth]`` keys.
        v: ``[..., k_len, depth_v]`` values.
        mask: optional boolean tensor broadcastable to ``[..., q_len, k_len]``;
            ``True`` means "may attend". Masked positions get exactly zero
            weight; a query row with nothing to attend to gets all-zero weights
            (and a zero output) instead of NaN.
        weights_dropout: optional callable applied to the weights before they
            multiply ``v`` (attention dropout).
        scale: factor on ``q Kᵀ``; ``None`` is the paper's ``1/√d_k``. Pass
            ``1.0`` for queries that already carry it (``MultiHeadAttention``
            folds it into the query projection's weights).

    Returns:
        ``(output, weights)``: ``output`` is ``[..., q_len, depth_v]`` in
        ``v``'s dtype; ``weights`` are the float32 softmax probabilities
        ``[..., q_len, k_len]`` (before dropout).
    """
    if scale is None:
        depth = q.shape[-1]
        scale = (
            1.0 / math.sqrt(depth)
            if depth is not None
            else tf.math.rsqrt(tf.cast(tf.shape(q)[-1], q.dtype))
        )
    if not isinstance(scale, float) or scale != 1.0:
        # Scaling q (q_len × depth) is cheaper than scaling the scores (q_len × k_len)
        # and keeps low-precision products in range.
        q = q * tf.cast(scale, q.dtype)
    scores = tf.matmul(q, k, transpose_b=True)
    # Softmax in float32 even under mixed precision: bf16/fp16 exp() and
    # normalisation lose too much precision over long rows.
    scores = tf.cast(scores, tf.float32)
    has_key = None
    if mask is not None:
        mask = tf.cast(mask, tf.bool)
        # An additive bias on the mask's own (head-broadcast) shape: cheaper
        # than selecting over [batch, heads, q, k] forward and backward. Masked
        # keys get exactly 0 weight (exp(-1e9 - max) underflows to 0.0).
        scores += tf.where(mask, 0.0, masked_score_value(tf.float32))
        # A row with nothing to attend to has a uniform softmax: zero it.
        has_key = tf.cast(tf.reduce_any(mask, axis=-1, keepdims=True), tf.float32)
    weights = tf.nn.softmax(scores, axis=-1)
    attended = weights if weights_dropout is None else weights_dropout(weights)
    output = tf.matmul(tf.cast(attended, v.dtype), v)
    if has_key is not None:
        # Zeroing the [.., q, depth] output instead of the [.., q, k] weights is
        # cheaper; the returned weights are zeroed too (pruned when unused).
        output *= tf.cast(has_key, output.dtype)
        weights *= has_key
    return output, weights


def _split_heads(x: tf.Tensor, num_heads: int, depth: int) -> tf.Tensor:
    """``[batch, len, heads*depth]`` → ``[batch, heads, len, depth]``."""
    if x.shape[1] == 1:  # one token (a decoding step): the same memory order, no transpose
        return tf.reshape(x, [-1, num_heads, 1, depth])
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    x = tf.reshape(x, [batch, length, num_heads, depth])
    return kernels.permute(x, [0, 2, 1, 3])


def _merge_heads(x: tf.Tensor, d_model: int) -> tf.Tensor:
    """``[batch, heads, len, depth]`` → ``[batch, len, heads*depth]``."""
    if x.shape[2] == 1:
        return tf.reshape(x, [-1, 1, d_model])
    x = kernels.permute(x, [0, 2, 1, 3])
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    return tf.reshape(x, [batch, length, d_model])


def _write_at(buffer: tf.Tensor, update: tf.Tensor, index) -> tf.Tensor:
    """Write ``update`` [b, h, n, d] into ``buffer`` [b, h, L, d] at ``index``.

    Elementwise (one-hot select) rather than a scatter so that the fixed-size
    cache path stays static-shaped and lowers to plain ops on XLA/TPU and to
    TFLite builtins.
    """
    buffer_length = tf.shape(buffer)[2]
    n = update.shape[2]
    index = tf.cast(index, tf.int32)
    if n == 1:
        hit = tf.equal(tf.range(buffer_length), index)[tf.newaxis, tf.newaxis, :, tf.newaxis]
        return tf.where(hit, update, buffer)
    # General chunk: place row j of the update at index + j.
    positions = index + tf.range(tf.shape(update)[2])
    placement = tf.one_hot(positions, buffer_length, dtype=update.dtype)  # [n, L]
    scattered = tf.einsum("bhnd,nl->bhld", update, placement)
    written = tf.reduce_any(
        tf.equal(tf.range(buffer_length)[tf.newaxis, :], positions[:, tf.newaxis]), axis=0
    )
    return tf.where(written[tf.newaxis, tf.newaxis, :, tf.newaxis], scattered, buffer)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention (paper §3.2.2) with explicit masks and a KV cache.

    ``d_k = d_v = d_model / num_heads``; queries, keys and values get their own
    ``d_model × d_model`` projections and the concatenated heads one output
    projection. Written from scratch rather than wrapping
    ``keras.layers.MultiHeadAttention``, which clears the Keras mask of its
    inputs.

    Args:
        d_model: model width; the output width too.
        num_heads: number of heads ``h``; must divide ``d_model``.
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.
        kernel_initializer, bias_initializer: for the four projections.

    Call arguments:
        query: ``[batch, q_len, dim]``.
        value: ``[batch, k_len, dim]``; defaults to ``query`` (self-attention).
        key: ``[batch, k_len, dim]``; defaults to ``value``.
        attention_mask: boolean, ``True`` = may attend, of shape
            ``[batch, q_len, k_len]`` (broadcastable; e.g. ``[batch, 1, k_len]``
            for padding, ``[1, q_len, k_len]`` for look-ahead) or already with a
            head axis, ``[batch, heads, q_len, k_len]``.
        cache: incremental self-attention. A dict ``{"key", "value"}`` of
            projected ``[batch, heads, cache_len, depth]`` tensors (see
            ``initial_cache``). The keys/values of ``query`` are appended to it
            (``cache_index=None``: growing cache) or written in place at
            ``cache_index`` (fixed-size cache, static shapes for XLA/TPU/TFLite).
            The updated cache is returned.
        cache_index: scalar int position of ``query``'s first token in a
            fixed-size ``cache``.
        key_value: precomputed ``{"key", "value"}`` from
            ``project_key_value(memory)`` (cross-attention during decoding: the
            encoder memory is projected once per source, not once per step).
        return_attention_weights: also return the float32 per-head weights
            ``[batch, heads, q_len, k_len]``.

    Returns:
        ``output`` ``[batch, q_len, d_model]``; a tuple ``(output, cache)`` when
        ``cache`` is given; the weights appended as the last element when
        ``return_attention_weights`` is set.

    Example:
        >>> from keras_transformer.layers.masks import causal_mask
        >>> mha = MultiHeadAttention(d_model=64, num_heads=4)
        >>> x = tf.random.normal([2, 5, 64])
        >>> mha(x, attention_mask=causal_mask(5)[tf.newaxis]).shape
        TensorShape([2, 5, 64])
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}: "
                "each head gets d_model / num_heads features. Pick num_heads "
                f"among the divisors of {d_model}, or change d_model."
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}.")
        self.d_model = int(d_model)
        self.num_heads = int(num_heads)
        self.depth = self.d_model // self.num_heads
        self.dropout = float(dropout)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def _dense(self, name: str) -> Dense:
        return Dense(
            self.d_model,
            use_bias=self.use_bias,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        self.query_dense = self._dense("query")
        self.query_dense.build(query_shape)
        self.key_dense = self._dense("key")
        self.key_dense.build(key_shape)
        self.value_dense = self._dense("value")
        self.value_dense.build(value_shape)
        self.output_dense = self._dense("output")
        self.output_dense.build(tuple(query_shape[:-1]) + (self.d_model,))
        self.weights_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def initial_cache(self, batch_size, max_length: int | None = None, dtype=None) -> dict:
        """Builds an empty growing self-attention cache, or a zeroed fixed-size one.

        Args:
            batch_size: the number of rows.
            max_length: the fixed cache length, or ``None`` for a growing cache.
            dtype: the cache's dtype (default: the layer's compute dtype).

        Returns:
            ``{"key": ..., "value": ...}``, each ``[batch, heads, length, depth]``.
        """
        length = 0 if max_length is None else max_length
        shape = [batch_size, self.num_heads, length, self.depth]
        dtype = dtype or self.compute_dtype
        return {"key": tf.zeros(shape, dtype), "value": tf.zeros(shape, dtype)}

    def project_key_value(self, value: tf.Tensor, key: tf.Tensor | None = None) -> dict:
        """Projects and splits into heads the keys and values that ``key_value=`` takes.

        Args:
            value: the values ``[batch, len, d_model]`` (e.g. the encoder memory).
            key: the keys (default: ``value``).

        Returns:
            ``{"key": ..., "value": ...}``, each ``[batch, heads, len, depth]``.
        """
        key = value if key is None else key
        return {
            "key": _split_heads(self.key_dense(key), self.num_heads, self.depth),
            "value": _split_heads(self.value_dense(value), self.num_heads, self.depth),
        }

    def call(
        self,
        query,
        value=None,
        key=None,
        attention_mask=None,
        cache=None,
        cache_index=None,
        key_value=None,
        return_attention_weights: bool = False,
        training=None,
    ):
        if key_value is not None and cache is not None:
            raise ValueError(
                "Pass either `cache` (incremental self-attention) or `key_value` "
                "(precomputed cross-attention memory), not both."
            )
        if key_value is not None:
            projected = key_value
        else:
            projected = self.project_key_value(query if value is None else value, key)
        if cache is not None:
            if cache_index is None:
                projected = {
                    name: tf.concat([cache[name], projected[name]], axis=2)
                    for name in ("key", "value")
                }
            else:
                projected = {
                    name: _write_at(cache[name], projected[name], cache_index)
                    for name in ("key", "value")
                }

        q, scale = self._project_query(query, training)
        mask = _with_head_axis(attention_mask)
        attended, weights = scaled_dot_product_attention(
            _split_heads(q, self.num_heads, self.depth),
            projected["key"],
            projected["value"],
            mask=mask,
            weights_dropout=(lambda w: self.weights_dropout(w, training=training))
            if self.dropout > 0
            else None,
            scale=scale,
        )
        output = self.output_dense(_merge_heads(attended, self.d_model))

        results = (output,)
        if cache is not None:
            results += (projected,)
        if return_attention_weights:
            results += (weights,)
        return results[0] if len(results) == 1 else results

    def _project_query(self, query: tf.Tensor, training=None) -> tuple[tf.Tensor, float | None]:
        """Queries and the scale still to apply to them. The paper's 1/√d_k is
        folded into the projection's kernel and bias: a d_model² multiply per
        call instead of one over every query, forward and backward (12 per
        training step on the speed benchmark's [4096, 256] queries)."""
        dense = self.query_dense
        if dense.quantization_mode is not None:
            return dense(query), None
        scale = tf.constant(1.0 / math.sqrt(self.depth), self.compute_dtype)
        bias = None if dense.bias is None else tf.cast(dense.bias, self.compute_dtype) * scale
        kernel = tf.cast(dense.kernel, self.compute_dtype) * scale
        return kernels.project(query, kernel, bias, with_gradient=training is not False), 1.0

    def compute_mask(self, query, mask=None):
        # The output is aligned with the query: its Keras mask carries over.
        return mask

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return tuple(query_shape[:-1]) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config


def _with_head_axis(mask):
    """Masks are given per (query, key); insert the head axis for the scores."""
    if mask is None:
        return None
    rank = mask.shape.rank
    if rank == 3:
        return tf.expand_dims(tf.cast(mask, tf.bool), 1)
    if rank == 4:
        return tf.cast(mask, tf.bool)
    raise ValueError(
        f"attention_mask must have rank 3 ([batch, q_len, k_len], broadcastable) "
        f"or 4 ([batch, heads, q_len, k_len]); got shape {mask.shape}. For a "
        "[batch, k_len] padding mask use masks.key_padding_mask(mask)."
    )
