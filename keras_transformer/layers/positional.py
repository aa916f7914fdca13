"""Token embeddings plus positions (paper §3.4 and §3.5)."""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.config import POSITION_ENCODINGS, check_embedding_scale
from keras_transformer.layers.dropout import Dropout


def check_position_encoding(position_encoding: str) -> str:
    """``position_encoding`` if it names a table layout, else a ``ValueError`` that lists them."""
    if position_encoding not in POSITION_ENCODINGS:
        raise ValueError(
            f"position_encoding={position_encoding!r} is not a table layout; use one of "
            f"{POSITION_ENCODINGS} ('interleaved' is the paper's, 'halves' Marian's)."
        )
    return position_encoding


def sinusoidal_positions(
    length: int, d_model: int, position_encoding: str = "interleaved"
) -> tf.Tensor:
    """Builds the paper's fixed position table, ``[length, d_model]`` float32.

    ``PE(pos, 2i) = sin(pos / 10000^(2i/d_model))`` and
    ``PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))``: sine and cosine
    interleaved column by column, positions counted from 0.

    ``position_encoding="halves"`` is the layout of Marian (and Hugging
    Face's ``MarianMTModel``): the same angles and positions, with every sine
    in the first half of the columns and every cosine in the second (an odd
    ``d_model`` has one sine more than cosines).

    Args:
        length: the number of positions.
        d_model: the model width, the table's columns.
        position_encoding: ``"interleaved"`` (the paper) or ``"halves"`` (Marian).

    Returns:
        The table, a float32 tensor ``[length, d_model]``.
    """
    return tf.constant(sinusoidal_table(length, d_model, position_encoding))


def sinusoidal_table(
    length: int, d_model: int, position_encoding: str = "interleaved"
) -> np.ndarray:
    """``sinusoidal_positions`` as a NumPy array (graph-independent)."""
    check_position_encoding(position_encoding)
    if length < 0 or d_model <= 0:
        raise ValueError(f"Need length >= 0 and d_model > 0, got {length}, {d_model}.")
    positions = np.arange(length, dtype=np.float64)[:, np.newaxis]
    pair_index = np.arange(d_model, dtype=np.float64)[np.newaxis, :] // 2
    angles = positions / np.power(10000.0, 2.0 * pair_index / d_model)
    table = np.where(np.arange(d_model) % 2 == 0, np.sin(angles), np.cos(angles))
    if (
        position_encoding == "halves"
    ):  # columns 0, 2, 4, .. (the sines), then 1, 3, 5, .. (the cosines)
        table = np.concatenate([table[:, 0::2], table[:, 1::2]], axis=1)
    return table.astype(np.float32)


def default_embeddings_initializer(d_model: int) -> keras.initializers.Initializer:
    """N(0, d_model^-1/2): after the √d_model scale the embeddings have unit
    variance, and the same matrix works as a tied output projection."""
    return keras.initializers.RandomNormal(mean=0.0, stddev=d_model**-0.5)


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEmbedding(keras.layers.Layer):
    """Token embedding × √d_model + position encoding, then dropout.

    Every token id's row is used as it is, the pad id's included (nothing is
    zeroed: a decoder may start from the pad id, as Marian's does).

    Args:
        vocab_size: number of token ids.
        d_model: embedding width.
        max_length: longest sequence (positions ``0 .. max_length-1``).
        learned_positions: learn a ``[max_length, d_model]`` position table
            instead of the fixed sinusoid.
        dropout: dropout on the sum (the paper's P_drop applies here too).
        position_encoding: layout of the fixed sinusoid: ``"interleaved"``
            (the paper's) or ``"halves"`` (Marian's: all sines, then all
            cosines); see ``sinusoidal_positions``. Unused with
            ``learned_positions``.
        embedding_scale: factor on the token embeddings; ``None`` is the
            paper's √d_model, ``1.0`` leaves them unscaled (Marian's
            ``scale_embedding=False``).
        pad_id: id whose positions the output mask marks as padding.
        embeddings_initializer: defaults to N(0, d_model^-1/2).

    Call arguments:
        token_ids: ``[batch, length]`` int ids.
        start_index: position of the first token (int or scalar tensor), for
            incremental decoding; 0 by default.

    Masking: produces a Keras mask ``token_ids != pad_id`` for downstream
    layers; the library's own layers take masks explicitly as well. (For a
    decoder that starts from the pad id, that mask hides the start token:
    pass ``masks.target_padding_mask`` to the decoder explicitly.)

    Example:
        >>> emb = PositionalEmbedding(vocab_size=100, d_model=16, max_length=32)
        >>> emb(tf.constant([[5, 6, 0]])).shape
        TensorShape([1, 3, 16])
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_length: int,
        learned_positions: bool = False,
        dropout: float = 0.0,
        pad_id: int = 0,
        embeddings_initializer=None,
        position_encoding: str = "interleaved",
        embedding_scale: float | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if vocab_size <= 0 or d_model <= 0 or max_length <= 0:
            raise ValueError(
                "vocab_size, d_model and max_length must be positive, got "
                f"{vocab_size}, {d_model}, {max_length}."
            )
        self.vocab_size = int(vocab_size)
        self.d_model = int(d_model)
        self.max_length = int(max_length)
        self.learned_positions = bool(learned_positions)
        self.dropout = float(dropout)
        self.pad_id = int(pad_id)
        self.position_encoding = check_position_encoding(position_encoding)
        if self.learned_positions and self.position_encoding != "interleaved":
            raise ValueError(
                f"position_encoding={position_encoding!r} lays out the fixed sinusoid, but "
                "learned_positions=True learns the table: drop one of them."
            )
        self.embedding_scale = check_embedding_scale(embedding_scale)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or default_embeddings_initializer(self.d_model)
        )
        self.supports_masking = True

    def build(self, input_shape=None):
        self.token_embedding = keras.layers.Embedding(
            self.vocab_size,
            self.d_model,
            embeddings_initializer=self.embeddings_initializer,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.token_embedding.build((None, None))
        if self.learned_positions:
            self.position_table = self.add_weight(
                name="position_embedding",
                shape=(self.max_length, self.d_model),
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )
        else:
            # Kept as NumPy: a tensor made here would belong to whichever graph
            # happened to trigger the build.
            self.position_table = sinusoidal_table(
                self.max_length, self.d_model, self.position_encoding
            )
        self.embedding_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    @property
    def scale(self) -> float:
        """The factor on the token embeddings: ``embedding_scale``, or √d_model."""
        return math.sqrt(self.d_model) if self.embedding_scale is None else self.embedding_scale

    @property
    def embeddings(self):
        """The ``[vocab_size, d_model]`` token matrix (shared with a tied output layer)."""
        return self.token_embedding.embeddings

    def call(self, token_ids, start_index=0, training=None):
        static_length = token_ids.shape[-1]
        if static_length is not None and isinstance(start_index, int):
            if start_index + static_length > self.max_length:
                raise ValueError(
                    f"Sequence of length {static_length} starting at position "
                    f"{start_index} exceeds max_length={self.max_length}. Truncate "
                    "the input or raise max_length in the config."
                )
        x = self.token_embedding(token_ids)
        x = x * tf.cast(self.scale, x.dtype)
        length = tf.shape(token_ids)[-1]
        positions = tf.slice(
            tf.convert_to_tensor(self.position_table),
            tf.stack([tf.cast(start_index, tf.int32), 0]),
            tf.stack([length, self.d_model]),
        )
        x = x + tf.cast(positions, x.dtype)
        return self.embedding_dropout(x, training=training)

    def compute_mask(self, token_ids, mask=None):
        return tf.not_equal(token_ids, tf.cast(self.pad_id, token_ids.dtype))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "d_model": self.d_model,
                "max_length": self.max_length,
                "learned_positions": self.learned_positions,
                "dropout": self.dropout,
                "pad_id": self.pad_id,
                "position_encoding": self.position_encoding,
                "embedding_scale": self.embedding_scale,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config
