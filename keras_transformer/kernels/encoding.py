"""``Transformer.encode`` at inference in few graph nodes: one product for each
layer's query, key and value, rank-2 products on the real tokens only, and the
attention of ``kernels.attention``.

``encoder_weights`` reads the weights once (or takes the model's precomputed
weights, ``weights.FrozenWeights``); ``encode`` computes the memory that
``Transformer.encode`` computes for a decoder (the tests compare the two).
Dropout is off. Static-shape decoding (XLA, TFLite) keeps
``Transformer.encode``. ``docs/kernels.md`` says how, and why.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import tensorflow as tf

from keras_transformer.kernels.attention import attend as attend_heads
from keras_transformer.kernels.layer_norm import inference_norm, inference_residual
from keras_transformer.kernels.projection import permute, project_rows
from keras_transformer.kernels.weights import (
    Norm,
    PrecomputedWeights,
    dense_weights,
    fused_qkv,
    norm_weights,
    read_weights,
)
from keras_transformer.numerics import masked_score_value


class EncoderLayerWeights(NamedTuple):
    """One encoder layer's weights in the compute dtype (norms in float32)."""

    qkv: tuple  # ([d_model, 3·d_model] kernel, [3·d_model] bias | None): query scaled by 1/√d_k
    output: tuple  # ([d_model, d_model], [d_model] | None)
    attention_norm: Norm
    inner: tuple  # ([d_model, d_ff], [d_ff] | None)
    outer: tuple  # ([d_ff, d_model], [d_model] | None)
    ffn_norm: Norm


class EncoderWeights(NamedTuple):
    """Everything ``encode`` reads, read once a call."""

    embeddings: tf.Tensor  # [src_vocab, d_model] compute dtype
    positions: tf.Tensor  # [max_length, d_model] compute dtype
    layers: tuple  # EncoderLayerWeights per encoder layer
    final_norm: Norm | None  # pre-LN stacks only


def supported(model) -> bool:
    """Whether ``encode`` reproduces ``model.encode`` for ``model``'s settings.

    Returns:
        ``False`` for a quantized projection, a LayerNorm that Keras' own
        path computes or learned positions, else ``True``.
    """
    encoder = model.encoder
    denses, norms = [], []
    for layer in encoder.layer_stack:
        attention = layer.self_attention
        denses += [
            attention.query_dense,
            attention.key_dense,
            attention.value_dense,
            attention.output_dense,
            layer.feed_forward.inner_dense,
            layer.feed_forward.outer_dense,
        ]
        norms += [layer.self_attention_norm, layer.feed_forward_norm]
    if encoder.final_norm is not None:
        norms.append(encoder.final_norm)
    return (
        all(dense.quantization_mode is None for dense in denses)
        and all(norm.kernel_covers(2) and norm.kernel_covers(3) for norm in norms)
        and not model.source_embedding.learned_positions
    )


def encoder_weights(model, precomputed: PrecomputedWeights | None = None) -> EncoderWeights:
    """Everything ``encode`` reads: the encoder's weights and the source embedding, read once.

    Args:
        model: a ``keras_transformer.Transformer``.
        precomputed: the model's precomputed weights
            (``weights.FrozenWeights``); by default the fused query, key and
            value kernels are made here.

    Returns:
        An ``EncoderWeights``, in the compute dtype (norms in float32).
    """
    dtype = model.compute_dtype
    stack = model.encoder.layer_stack
    if precomputed is None:
        qkv = tuple(fused_qkv(layer.self_attention, dtype) for layer in stack)
    else:
        qkv = precomputed.encoder_qkv
    layers = tuple(
        EncoderLayerWeights(
            qkv=fused,
            output=dense_weights(layer.self_attention.output_dense, dtype),
            attention_norm=norm_weights(layer.self_attention_norm),
            inner=dense_weights(layer.feed_forward.inner_dense, dtype),
            outer=dense_weights(layer.feed_forward.outer_dense, dtype),
            ffn_norm=norm_weights(layer.feed_forward_norm),
        )
        for layer, fused in zip(stack, qkv)
    )
    embedding = model.source_embedding
    return EncoderWeights(
        embeddings=tf.cast(embedding.embeddings, dtype),
        positions=tf.constant(embedding.position_table, dtype),
        layers=layers,
        final_norm=None
        if model.encoder.final_norm is None
        else norm_weights(model.encoder.final_norm),
    )


def encode(model, source_ids, weights: EncoderWeights | None = None) -> tf.Tensor:
    """``model.encode(source_ids, training=False)`` in few graph nodes.

    Args:
        model: a ``keras_transformer.Transformer`` that ``supported(model)``
            accepts.
        source_ids: ``[rows, src_len]`` int ids, padded with ``pad_id``.
        weights: ``encoder_weights(model)``; by default read here.

    Returns:
        The memory ``[rows, src_len, d_model]`` in the compute dtype, equal to
        ``model.encode``'s at the real tokens; a padded place holds another
        token's values, which no decoder reads (its key is masked).

    Example:
        >>> import keras_transformer as kt
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=1))
        >>> model.build()
        >>> ids = tf.constant([[5, 6, 3]])
        >>> memory = encode(model, ids)
        >>> bool(tf.reduce_all(tf.abs(memory - model.encode(ids, training=False)) < 1e-5))
        True
    """
    weights = read_weights(encoder_weights(model) if weights is None else weights)
    config = model.config
    dtype = model.compute_dtype
    heads, d_model = config.num_heads, config.d_model
    depth = d_model // heads
    norm_first = model.encoder.norm_first
    activation = model.encoder.layer_stack[0].feed_forward.inner_dense.activation
    inner_activation = tf.nn.relu if activation is keras.activations.relu else activation
    masked = masked_score_value(tf.float32)

    source_ids = tf.convert_to_tensor(source_ids)
    rows, length = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
    real = tf.not_equal(source_ids, tf.cast(config.pad_id, source_ids.dtype))  # [rows, len]
    # The tokens the products run on, packed: the real ones, row after row, and the first position
    # of the grid whatever it holds, so that a grid of padding only still has one.
    packed = tf.logical_or(
        tf.reshape(real, [-1]), tf.equal(tf.range(rows * length), 0)
    )  # [rows·len]
    positions = tf.cast(tf.where(packed)[:, 0], tf.int32)  # [tokens]: each one's place in the grid
    # Each place in the grid, the packed token it reads: its own, or for padding the first one
    # (a padded key is masked, a padded query's output dropped: any finite values serve).
    unpack = tf.where(packed, tf.cumsum(tf.cast(packed, tf.int32)) - 1, 0)  # [rows·len]
    x = tf.gather(
        weights.embeddings, tf.gather(tf.reshape(source_ids, [-1]), positions)
    ) * tf.constant(model.source_embedding.scale, dtype) + tf.gather(
        weights.positions, positions % length
    )  # [tokens, d_model]
    # Heads lead, sentences after them: [heads, rows, queries, keys].
    bias = tf.where(real, 0.0, masked)[tf.newaxis, :, tf.newaxis, :]
    # A sentence with no real token attends to nothing: its outputs are zeroed, as the layer does.
    has_key = tf.reduce_any(real, axis=-1)[tf.newaxis, :, tf.newaxis, tf.newaxis]
    grid = tf.reshape(unpack, [rows, length])

    def attend(qkv):  # [tokens, 3·d_model] → [tokens, d_model]: the grid only around the attention
        qkv = permute(
            tf.reshape(qkv, [-1, 3, heads, depth]), [1, 2, 0, 3]
        )  # [3, heads, tokens, depth]
        q, k, v = tf.unstack(tf.gather(qkv, grid, axis=2))  # [heads, rows, len, depth]
        attended = tf.reshape(attend_heads(q, k, v, bias, has_key), [heads, -1, depth])
        return tf.reshape(permute(tf.gather(attended, positions, axis=1), [1, 0, 2]), [-1, d_model])

    def norm(x, n: Norm):
        return inference_norm(x, n, dtype)

    def residual(x, sublayer, n: Norm):
        return inference_residual(x, sublayer, n, norm_first, dtype)

    for layer in weights.layers:

        def attention(h, layer=layer):
            return project_rows(attend(project_rows(h, layer.qkv)), layer.output)

        x = residual(x, attention, layer.attention_norm)
        x = residual(
            x,
            lambda h, layer=layer: project_rows(
                project_rows(h, layer.inner, inner_activation), layer.outer
            ),
            layer.ffn_norm,
        )
    if weights.final_norm is not None:
        x = norm(x, weights.final_norm)
    return tf.gather(x, grid)  # [rows, len, d_model]
