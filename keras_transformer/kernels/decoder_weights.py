"""The decoder's weights as the decoding step reads them, read once, before the loop.

``step_weights(model)`` gathers what ``decoding_step`` reads (a ``StepWeights``):
the model's variables where the step uses them as they are, and their products
(fused, scaled, packed, negated; ``weights``) made once. ``supported`` says
whether the step covers a model's settings; ``tied_output_kernel`` makes the
large-batch step's output kernel for a tied output layer.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.kernels.weights import (
    Norm,
    PrecomputedWeights,
    dense_weights,
    fused_qkv,
    model_weight,
    norm_weights,
    packed_cross_key_value,
    scaled_query,
    unfused_biases,
)


class LayerWeights(NamedTuple):
    """One decoder layer's weights in the compute dtype (norms in float32):
    variables or tensors (see ``StepWeights``)."""

    self_qkv: (
        tuple  # ([d_model, 3·d_model] kernel, [3·d_model] bias | None): query scaled by 1/√d_k
    )
    self_output: tuple  # ([d_model, d_model], [d_model] | None)
    self_norm: Norm
    cross_query: tuple  # ([d_model, d_model], [d_model] | None): scaled by 1/√d_k
    cross_output: tuple
    cross_norm: Norm
    inner: tuple  # ([d_model, d_ff], [d_ff] | None)
    outer: tuple  # ([d_ff, d_model], [d_model] | None)
    ffn_norm: Norm


class StepWeights(NamedTuple):
    """Everything a step reads. A leaf is a ``tf.Variable`` where the step
    can read it as it is (the step reads it at every step, inside the loop),
    else a tensor made once, before the loop; or, all of them, NumPy arrays
    (``weights.as_constants``) that the step makes constants of."""

    embeddings: tf.Tensor  # [tgt_vocab, d_model] compute dtype
    positions: np.ndarray  # [max_length, d_model] compute dtype: made a constant inside the step
    layers: tuple  # LayerWeights per decoder layer
    cross_key_value: (
        tuple  # ([d_model, 2·layers·d_model], bias | None): every layer's key, then value
    )
    final_norm: Norm | None  # pre-LN stacks only
    output: tuple  # ([d_model, tgt_vocab] kernel, [tgt_vocab] bias | None) compute dtype;
    #                              kernel None: tied to ``embeddings`` (see ``tied_output_kernel``)
    final_logits_bias: tf.Tensor | None  # [tgt_vocab] float32, added to the float32 logits
    unfused_biases: (
        tuple  # weights.unfused_biases: the small-batch step's biases (projection.UnfusedBias)
    )


def supported(model) -> bool:
    """Whether ``decoding_step`` reproduces ``model.decode`` for ``model``'s settings.

    Returns:
        ``False`` for a quantized projection, a LayerNorm that Keras' own path
        computes (``kernel_covers``) or learned positions, else ``True``.
    """
    decoder = model.decoder
    denses, norms = [], []
    for layer in decoder.layer_stack:
        for attention in (layer.self_attention, layer.cross_attention):
            denses += [
                attention.query_dense,
                attention.key_dense,
                attention.value_dense,
                attention.output_dense,
            ]
        denses += [layer.feed_forward.inner_dense, layer.feed_forward.outer_dense]
        norms += [layer.self_attention_norm, layer.cross_attention_norm, layer.feed_forward_norm]
    if model.output_projection is not None:
        denses.append(model.output_projection)
    if decoder.final_norm is not None:
        norms.append(decoder.final_norm)
    return (
        all(dense.quantization_mode is None for dense in denses)
        and all(norm.kernel_covers(3) for norm in norms)
        and not model.target_embedding.learned_positions
    )


def step_weights(model, precomputed: PrecomputedWeights | None = None) -> StepWeights:
    """Everything ``decoding_step`` reads: the decoder, output layer and target embedding weights.

    The model's variables where the step uses them as they are; their
    products (cast, scaled, concatenated, negated) made once here, or taken
    from ``precomputed``.

    Args:
        model: a ``keras_transformer.Transformer``.
        precomputed: the model's precomputed weights (``FrozenWeights``);
            by default made here, as tensors.

    Returns:
        A ``StepWeights``.
    """
    dtype = model.compute_dtype
    stack = model.decoder.layer_stack
    if precomputed is None:
        qkv = [fused_qkv(layer.self_attention, dtype) for layer in stack]
        cross_query = [scaled_query(layer.cross_attention, dtype) for layer in stack]
        cross_key_value = packed_cross_key_value(model.decoder, dtype)
        negated = unfused_biases(model, qkv, cross_query)
    else:
        qkv, cross_query, cross_key_value = (
            precomputed.decoder_qkv,
            precomputed.cross_query,
            precomputed.cross_key_value,
        )
        negated = precomputed.unfused_biases
    layers = tuple(
        LayerWeights(
            self_qkv=qkv[i],
            self_output=dense_weights(layer.self_attention.output_dense, dtype),
            self_norm=norm_weights(layer.self_attention_norm),
            cross_query=cross_query[i],
            cross_output=dense_weights(layer.cross_attention.output_dense, dtype),
            cross_norm=norm_weights(layer.cross_attention_norm),
            inner=dense_weights(layer.feed_forward.inner_dense, dtype),
            outer=dense_weights(layer.feed_forward.outer_dense, dtype),
            ffn_norm=norm_weights(layer.feed_forward_norm),
        )
        for i, layer in enumerate(stack)
    )
    embedding = model.target_embedding
    if model.output_projection is not None:
        output = dense_weights(model.output_projection, dtype)
    else:
        output = (None, None)  # the tied embedding
    return StepWeights(
        embeddings=model_weight(embedding.embeddings, dtype),
        positions=np.asarray(embedding.position_table, tf.as_dtype(dtype).as_numpy_dtype),
        layers=layers,
        cross_key_value=tuple(cross_key_value),
        final_norm=None
        if model.decoder.final_norm is None
        else norm_weights(model.decoder.final_norm),
        output=output,
        final_logits_bias=(
            None
            if model.final_logits_bias is None
            else model_weight(model.final_logits_bias, tf.float32)
        ),
        unfused_biases=negated,
    )
