"""Decoder layer and decoder stack (paper §3.1, right half of Figure 1),
with the caches that make step-by-step decoding cost O(1) projections a step."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.layers.block import (
    StackBase,
    TransformerBlockBase,
    residual_connection,
)
from keras_transformer.layers.masks import causal_mask, key_padding_mask, merge_masks


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerBlockBase):
    """One decoder layer: masked self-attention, cross-attention, then feed-forward.

    Each sublayer sits in a residual + LayerNorm block.

    Args: see ``TransformerBlockBase``.

    Call arguments:
        x: ``[batch, tgt_len, d_model]``.
        memory: ``[batch, src_len, d_model]`` encoder output (not needed when
            ``cache`` holds the projected cross-attention keys/values).
        self_attention_mask: bool ``[batch|1, tgt_len, key_len]`` (look-ahead
            and target padding), built by ``Decoder``.
        memory_padding_mask: ``[batch, src_len]`` bool, ``True`` for real tokens.
        cache: ``{"self": {"key", "value"}, "cross": {"key", "value"}}`` (see
            ``Decoder.initial_cache``); when given, the updated cache is returned.
        cache_index: position of ``x``'s first token in a fixed-size cache
            (``None`` appends to a growing cache).
        return_attention_weights: also return ``{"self": ..., "cross": ...}``.

    Masking: padded memory positions get zero cross-attention weight; the
        output carries ``x``'s Keras mask.
    """

    def build(self, x_shape, memory_shape=None):
        memory_shape = x_shape if memory_shape is None else memory_shape

        self._add_sublayer("self_attention", self._attention("self_attention"), x_shape)
        self._add_sublayer(
            "cross_attention", self._attention("cross_attention"), x_shape, memory_shape
        )
        self._add_sublayer("feed_forward", self._feed_forward(), x_shape)
        self.built = True

    def call(
        self,
        x,
        memory=None,
        self_attention_mask=None,
        memory_padding_mask=None,
        cache=None,
        cache_index=None,
        return_attention_weights=False,
        training=None,
    ):
        if cache is None and memory is None:
            raise ValueError("DecoderLayer needs `memory` (or a `cache` holding its projection).")
        cross_mask = key_padding_mask(memory_padding_mask)

        def self_attend(h):
            return self.self_attention(
                h,
                attention_mask=self_attention_mask,
                cache=None if cache is None else cache["self"],
                cache_index=cache_index,
                return_attention_weights=True,
                training=training,
            )

        def cross_attend(h):
            return self.cross_attention(
                h,
                memory,
                attention_mask=cross_mask,
                key_value=None if cache is None else cache["cross"],
                return_attention_weights=True,
                training=training,
            )

        self_results = residual_connection(
            x,
            self_attend,
            self.self_attention_norm,
            self.self_attention_dropout,
            self.norm_first,
            training,
        )
        x = self_results[0]
        x, cross_weights = residual_connection(
            x,
            cross_attend,
            self.cross_attention_norm,
            self.cross_attention_dropout,
            self.norm_first,
            training,
        )
        x = self._feed_forward_block(x, training)
        results = (x,)
        if cache is not None:
            results += ({"self": self_results[1], "cross": cache["cross"]},)
        if return_attention_weights:
            results += ({"self": self_results[-1], "cross": cross_weights},)
        return results[0] if len(results) == 1 else results


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(StackBase):
    """The decoder: a stack of ``num_layers`` ``DecoderLayer``s that builds its own masks.

    A pre-LN stack (``norm_first``) ends with a final LayerNorm; the
    look-ahead and padding masks are built here.

    Args:
        num_layers: N (6 in the paper).
        Others: as ``DecoderLayer``.

    Call arguments:
        x: ``[batch, tgt_len, d_model]`` embedded (shifted-right) target.
        memory: ``[batch, src_len, d_model]`` encoder output; may be omitted
            with a cache.
        memory_padding_mask: ``[batch, src_len]`` bool for the source.
        target_padding_mask: ``[batch, tgt_len]`` bool; defaults to ``x``'s
            Keras mask. Combined with the look-ahead mask.
        cache: list (one per layer) from ``initial_cache``; enables incremental
            decoding and makes the call return ``(output, new_cache)``.
        cache_index: for a fixed-size cache, the position of ``x``'s first
            token; ``None`` for a growing cache (positions then follow the
            cache length).
        return_attention_weights: also return a list of per-layer
            ``{"self", "cross"}`` weights.

    Example:
        >>> dec = Decoder(num_layers=2, d_model=16, num_heads=2, d_ff=32)
        >>> memory = tf.zeros([2, 7, 16])
        >>> dec(tf.zeros([2, 5, 16]), memory).shape
        TensorShape([2, 5, 16])
    """

    def build(self, x_shape, memory_shape=None):
        self._build_stack(DecoderLayer, x_shape, memory_shape)

    def initial_cache(self, memory, max_length: int | None = None) -> list:
        """Builds the per-layer caches for decoding against ``memory``.

        Cross-attention keys/values are projected here, once per source. Self
        attention starts empty and grows a step at a time (``max_length=None``)
        or is a zeroed ``max_length`` buffer written in place (static shapes).

        Args:
            memory: the encoder output ``[batch, src_len, d_model]``.
            max_length: the fixed self-attention cache length, or ``None`` to grow.

        Returns:
            One ``{"self": ..., "cross": ...}`` cache dict per layer, as a list.
        """
        batch_size = tf.shape(memory)[0]
        return [
            {
                "self": layer.self_attention.initial_cache(batch_size, max_length),
                "cross": layer.cross_attention.project_key_value(memory),
            }
            for layer in self.layer_stack
        ]

    def call(
        self,
        x,
        memory=None,
        memory_padding_mask=None,
        target_padding_mask=None,
        cache=None,
        cache_index=None,
        return_attention_weights=False,
        training=None,
    ):
        target_padding_mask = (
            target_padding_mask
            if target_padding_mask is not None
            else getattr(x, "_keras_mask", None)
        )
        length = tf.shape(x)[1]
        if cache is None:
            self_mask = causal_mask(length)[tf.newaxis]
        elif cache_index is None and x.shape[1] == 1:
            self_mask = None  # one new token, a growing cache: every key is its own past
            target_padding_mask = None
        else:
            cached = cache[0]["self"]["key"]
            cached_length = tf.shape(cached)[2]
            offset = cached_length if cache_index is None else cache_index
            key_length = cached_length + length if cache_index is None else cached_length
            self_mask = causal_mask(length, key_length, offset)[tf.newaxis]
            target_padding_mask = None  # the decoded prefix has no padding
        self_mask = merge_masks(self_mask, key_padding_mask(target_padding_mask))

        new_cache, all_weights = [], []
        for i, layer in enumerate(self.layer_stack):
            results = layer(
                x,
                memory,
                self_attention_mask=self_mask,
                memory_padding_mask=memory_padding_mask,
                cache=None if cache is None else cache[i],
                cache_index=cache_index,
                return_attention_weights=True,
                training=training,
            )
            x = results[0]
            if cache is not None:
                new_cache.append(results[1])
            all_weights.append(results[-1])
        x = self._finish(x)

        results = (x,)
        if cache is not None:
            results += (new_cache,)
        if return_attention_weights:
            results += (all_weights,)
        return results[0] if len(results) == 1 else results
