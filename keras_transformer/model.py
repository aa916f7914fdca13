"""The encoder–decoder ``Transformer`` model."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.layers import Decoder, Encoder, PositionalEmbedding, padding_mask
from keras_transformer.layers.dense import Dense, project


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The paper's encoder–decoder Transformer as a ``keras.Model``.

    ``model((source_ids, target_in_ids))`` returns float32 logits
    ``[batch, tgt_len, tgt_vocab_size]`` for next-token prediction
    (teacher forcing; ``target_in_ids`` starts with ``bos_id``). Padding
    (``pad_id``) is masked from ids: padded source tokens never affect the
    output, padded target positions only affect their own (ignored) logits.

    Decoders use the incremental API::

        memory = model.encode(source_ids)
        cache = model.initial_cache(memory)                 # growing cache
        logits, cache = model.decode(step_ids, cache, source_padding)

    Args:
        config: a ``TransformerConfig`` (or its dict).

    Example:
        >>> model = Transformer(TransformerConfig.from_preset("tiny"))
        >>> model((tf.constant([[5, 6, 3]]), tf.constant([[2, 7]]))).shape
        TensorShape([1, 2, 1024])
    """

    def __init__(self, config: TransformerConfig | dict[str, Any], **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        self.config = config
        c = config
        stack_kwargs = dict(
            d_model=c.d_model,
            num_heads=c.num_heads,
            d_ff=c.d_ff,
            dropout=c.dropout,
            attention_dropout=c.attention_dropout,
            activation_dropout=c.activation_dropout,
            activation=c.activation,
            norm_first=c.norm_first,
            layer_norm_epsilon=c.layer_norm_epsilon,
            dtype=self.dtype_policy,
        )

        def embedding(vocab_size, name):
            return PositionalEmbedding(
                vocab_size,
                c.d_model,
                c.max_length,
                learned_positions=c.learned_positions,
                dropout=c.dropout,
                pad_id=c.pad_id,
                dtype=self.dtype_policy,
                name=name,
            )

        self.source_embedding = embedding(c.src_vocab_size, "source_embedding")
        self.target_embedding = (
            self.source_embedding
            if c.share_embeddings
            else embedding(c.tgt_vocab_size, "target_embedding")
        )
        self.encoder = Encoder(c.num_encoder_layers, name="encoder", **stack_kwargs)
        self.decoder = Decoder(c.num_decoder_layers, name="decoder", **stack_kwargs)
        self.output_projection = None
        if not c.tie_embeddings:
            self.output_projection = Dense(
                c.tgt_vocab_size, dtype=self.dtype_policy, name="output_projection"
            )

    def build(self, input_shape=None):
        # Every weight is determined by the config: build without data so that
        # `load_model` and checkpoint restore find all variables.
        ids_shape = (None, None)
        hidden_shape = (None, None, self.config.d_model)
        self.source_embedding.build(ids_shape)
        if not self.target_embedding.built:
            self.target_embedding.build(ids_shape)
        self.encoder.build(hidden_shape)
        self.decoder.build(hidden_shape, hidden_shape)
        if self.output_projection is not None:
            self.output_projection.build(hidden_shape)
        self.built = True

    def _build_if_needed(self):
        # Decoders may call encode/initial_cache on a fresh model before any __call__.
        if not self.built:
            self.build()

    # --- full (teacher-forced) pass -------------------------------------------------

    def call(self, inputs, training=None):
        source_ids, target_ids = _unpack_inputs(inputs)
        source_padding = padding_mask(source_ids, self.config.pad_id)
        memory = self.encode(source_ids, training=training)
        hidden = self.decoder(
            self.target_embedding(target_ids, training=training),
            memory,
            memory_padding_mask=source_padding,
            target_padding_mask=padding_mask(target_ids, self.config.pad_id),
            training=training,
        )
        return self.logits(hidden)

    def encode(self, source_ids, training=None) -> tf.Tensor:
        """Encoder memory ``[batch, src_len, d_model]`` for ``source_ids``."""
        self._build_if_needed()
        source_padding = padding_mask(source_ids, self.config.pad_id)
        return self.encoder(
            self.source_embedding(source_ids, training=training),
            padding_mask=source_padding,
            training=training,
        )

    def logits(self, hidden) -> tf.Tensor:
        """Pre-softmax projection of decoder states; float32 under any policy."""
        if self.output_projection is not None:
            logits = self.output_projection(hidden)
        else:
            embeddings = tf.cast(self.target_embedding.embeddings, hidden.dtype)
            logits = project(hidden, embeddings, transpose_kernel=True)
        return tf.cast(logits, tf.float32)

    # --- incremental decoding -------------------------------------------------------

    def initial_cache(self, memory, max_length: int | None = None) -> list:
        """Decoder caches for ``memory``: cross-attention keys/values projected
        once; self-attention empty and growing (``max_length=None``) or a
        zeroed ``max_length`` buffer for static-shape decoding."""
        self._build_if_needed()
        return self.decoder.initial_cache(memory, max_length)

    def decode(
        self,
        target_ids,
        cache: list,
        memory_padding_mask,
        cache_index=None,
        training=None,
    ):
        """Logits for ``target_ids`` ``[batch, n]`` (usually n = 1) given the
        cache of everything decoded before them; returns ``(logits, cache)``.

        Positions continue from the cache: its length for a growing cache, or
        ``cache_index`` for a fixed-size one. (The model is built: the cache
        came from ``initial_cache``.)
        """
        if cache_index is None:
            start = tf.shape(cache[0]["self"]["key"])[2]
        else:
            start = cache_index
        hidden = self.target_embedding(target_ids, start_index=start, training=training)
        hidden, cache = self.decoder(
            hidden,
            memory_padding_mask=memory_padding_mask,
            cache=cache,
            cache_index=cache_index,
            training=training,
        )
        return self.logits(hidden), cache

    # --- serialization --------------------------------------------------------------

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "config": self.config.to_dict(),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)


def _unpack_inputs(inputs):
    if isinstance(inputs, dict):
        try:
            return inputs["source_ids"], inputs["target_ids"]
        except KeyError as error:
            raise ValueError(
                "Dict inputs need keys 'source_ids' and 'target_ids', got "
                f"{sorted(inputs)}."
            ) from error
    if isinstance(inputs, (tuple, list)) and len(inputs) == 2:
        return inputs[0], inputs[1]
    raise ValueError(
        "Transformer expects (source_ids, target_in_ids) or a dict with "
        f"'source_ids'/'target_ids'; got {type(inputs).__name__}."
    )
