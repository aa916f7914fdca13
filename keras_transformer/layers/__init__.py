"""The Transformer's building blocks as Keras 3 layers."""

from keras_transformer.layers.attention import (
    MultiHeadAttention,
    masked_score_value,
    scaled_dot_product_attention,
)
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.dense import Dense
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.layer_norm import LayerNormalization
from keras_transformer.layers.masks import (
    causal_mask,
    key_padding_mask,
    merge_masks,
    padding_mask,
    target_padding_mask,
)
from keras_transformer.layers.positional import PositionalEmbedding, sinusoidal_positions

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Dense",
    "Dropout",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "LayerNormalization",
    "MultiHeadAttention",
    "PositionalEmbedding",
    "causal_mask",
    "key_padding_mask",
    "masked_score_value",
    "merge_masks",
    "padding_mask",
    "scaled_dot_product_attention",
    "sinusoidal_positions",
    "target_padding_mask",
]
