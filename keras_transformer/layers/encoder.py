"""Encoder layer and encoder stack (paper §3.1, left half of Figure 1)."""

from __future__ import annotations

import keras
import tensorflow as tf  # noqa: F401  (the docstring examples)

from keras_transformer.layers.block import (
    StackBase,
    TransformerBlockBase,
    residual_connection,
)
from keras_transformer.layers.masks import key_padding_mask


def _padding_or_keras_mask(x, padding_mask):
    """The explicit padding mask, else the Keras mask riding on ``x``."""
    if padding_mask is not None:
        return padding_mask
    return getattr(x, "_keras_mask", None)


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(TransformerBlockBase):
    """Self-attention then feed-forward, each in a residual + LayerNorm block.

    Args: see ``TransformerBlockBase`` (d_model, num_heads, d_ff, dropout,
        attention_dropout, activation_dropout, activation, norm_first,
        layer_norm_epsilon, kernel_initializer).

    Call arguments:
        x: ``[batch, src_len, d_model]``.
        padding_mask: ``[batch, src_len]`` bool, ``True`` for real tokens. If
            omitted, the Keras mask attached to ``x`` (if any) is used.
        return_attention_weights: also return ``[batch, heads, src_len, src_len]``.

    Masking: padded keys get zero attention weight; padded query positions
        produce values that later layers ignore. The output carries ``x``'s mask.

    Example:
        >>> layer = EncoderLayer(d_model=16, num_heads=2, d_ff=32)
        >>> layer(tf.zeros([2, 5, 16]), padding_mask=tf.ones([2, 5], bool)).shape
        TensorShape([2, 5, 16])
    """

    def build(self, input_shape):
        self._add_sublayer("self_attention", self._attention("self_attention"), input_shape)
        self._add_sublayer("feed_forward", self._feed_forward(), input_shape)
        self.built = True

    def call(self, x, padding_mask=None, return_attention_weights=False, training=None):
        attention_mask = key_padding_mask(_padding_or_keras_mask(x, padding_mask))
        x, weights = residual_connection(
            x,
            lambda h: self.self_attention(
                h,
                attention_mask=attention_mask,
                return_attention_weights=True,
                training=training,
            ),
            self.self_attention_norm,
            self.self_attention_dropout,
            self.norm_first,
            training,
        )
        x = self._feed_forward_block(x, training)
        return (x, weights) if return_attention_weights else x


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(StackBase):
    """The encoder: a stack of ``num_layers`` ``EncoderLayer``s over embedded inputs.

    A pre-LN stack (``norm_first``) ends with a final LayerNorm. The
    embedding lives in the model so that it can be shared with the decoder.

    Args:
        num_layers: N (6 in the paper).
        Others: as ``EncoderLayer``.

    Call arguments:
        x: ``[batch, src_len, d_model]`` embedded source.
        padding_mask: ``[batch, src_len]`` bool; defaults to ``x``'s Keras mask.
        return_attention_weights: also return a list of per-layer weights.

    Example:
        >>> enc = Encoder(num_layers=2, d_model=16, num_heads=2, d_ff=32)
        >>> enc(tf.zeros([2, 5, 16])).shape
        TensorShape([2, 5, 16])
    """

    def build(self, input_shape):
        self._build_stack(EncoderLayer, input_shape)

    def call(self, x, padding_mask=None, return_attention_weights=False, training=None):
        padding_mask = _padding_or_keras_mask(x, padding_mask)
        all_weights = []
        for layer in self.layer_stack:
            x, weights = layer(
                x, padding_mask=padding_mask, return_attention_weights=True, training=training
            )
            all_weights.append(weights)
        x = self._finish(x)
        return (x, all_weights) if return_attention_weights else x
