"""The encoder–decoder ``Transformer`` model."""

from __future__ import annotations

import inspect
from typing import Any

import keras
import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.config import TransformerConfig
from keras_transformer.layers import (
    Decoder,
    Encoder,
    PositionalEmbedding,
    padding_mask,
    target_padding_mask,
)
from keras_transformer.layers.dense import Dense
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy

_COMPILE_SIGNATURE = inspect.signature(keras.Model.compile)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The paper's encoder–decoder Transformer as a ``keras.Model``.

    ``model((source_ids, target_in_ids))`` returns float32 logits
    ``[batch, tgt_len, tgt_vocab_size]`` for next-token prediction
    (teacher forcing; ``target_in_ids`` starts with ``bos_id``). Padding
    (``pad_id``) is masked from ids: padded source tokens never affect the
    output, padded target positions only affect their own (ignored) logits.
    (Where ``bos_id == pad_id`` the first target position is the start
    token, not padding: see ``layers.target_padding_mask``.)

    With ``config.final_logits_bias`` the model owns the variable
    ``final_logits_bias`` (``[tgt_vocab_size]``, float32), added to every
    logit the model makes: the full pass, ``decode`` and the fused training
    step.

    Decoders use the incremental API::

        memory = model.encode(source_ids)
        cache = model.initial_cache(memory)                 # growing cache
        logits, cache = model.decode(step_ids, cache, source_padding)

    ``model.save("model.keras")`` keeps the optimizer state, schedule, loss and
    metrics, and ``keras.models.load_model`` restores them (safe mode on) once
    ``keras_transformer`` is imported; ``model.export`` writes a SavedModel
    that serves the logits (see ``export`` for decoding endpoints).

    Args:
        config: a ``TransformerConfig`` (or its dict).
        **kwargs: further ``keras.Model`` arguments (``name``, ``dtype``: the
            dtype policy).

    Raises:
        ValueError: ``config`` is a dict that makes no valid ``TransformerConfig``.

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
                position_encoding=c.position_encoding,
                embedding_scale=c.embedding_scale,
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
        self.final_logits_bias = None  # created by build() when the config asks for it

    @property
    def input_dtype(self):
        """Token ids are int32 under every dtype policy, for exported inputs too."""
        return "int32"

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
        if self.config.final_logits_bias and self.final_logits_bias is None:
            self.final_logits_bias = self.add_weight(
                name="final_logits_bias",
                shape=(self.config.tgt_vocab_size,),
                initializer="zeros",
                dtype="float32",
                trainable=True,
            )
        self.built = True

    def _post_build(self):
        # Keras records the arguments `build` received as the model's input
        # shapes, which `model.export`, `get_build_config` and `summary` read:
        # nothing at all for `build()`, the first batch's lengths when built by
        # its first call. The model takes token ids of any batch size and
        # length, as a pair or a dict: record that, whatever built it.
        super()._post_build()
        self._build_shapes_dict = {"input_shape": _ids_structure(self._build_shapes_dict)}

    def build_from_config(self, config):
        # Keras' version would keep the JSON lists of the saved config as the
        # recorded shapes (and an exported signature would take a list).
        if not self.built:
            self.build((config or {}).get("input_shape"))

    def _build_if_needed(self):
        # Decoders may call encode/initial_cache on a fresh model before any __call__.
        if not self.built:
            self.build()

    # --- full (teacher-forced) pass -------------------------------------------------

    def call(self, inputs, training=None):
        return self.logits(self.decoder_states(inputs, training=training), training=training)

    def decoder_states(self, inputs, training=None) -> tf.Tensor:
        """Runs a teacher-forced pass up to the last decoder layer (``call`` less the output layer).

        Args:
            inputs: ``(source_ids, target_in_ids)``, int ``[batch, src_len]`` and ``[batch,
            tgt_len]``.
            training: whether dropout is on.

        Returns:
            The last decoder layer's states ``[batch, tgt_len, d_model]``.
        """
        source_ids, target_ids = _unpack_inputs(inputs)
        source_padding = padding_mask(source_ids, self.config.pad_id)
        memory = self.encode(source_ids, training=training)
        return self.decoder(
            self.target_embedding(target_ids, training=training),
            memory,
            memory_padding_mask=source_padding,
            target_padding_mask=target_padding_mask(target_ids, self.config),
            training=training,
        )

    def encode(self, source_ids, training=None) -> tf.Tensor:
        """Runs the encoder.

        Args:
            source_ids: int ids ``[batch, src_len]``, padded with ``pad_id``.
            training: whether dropout is on.

        Returns:
            The encoder memory ``[batch, src_len, d_model]``.
        """
        self._build_if_needed()
        source_padding = padding_mask(source_ids, self.config.pad_id)
        return self.encoder(
            self.source_embedding(source_ids, training=training),
            padding_mask=source_padding,
            training=training,
        )

    def logits(self, hidden, training=None, output_kernel=None) -> tf.Tensor:
        """Projects decoder states to the vocabulary, in float32 under any dtype policy.

        ``final_logits_bias`` is added (in float32) when the config has one.

        Args:
            hidden: decoder states ``[..., d_model]``.
            training: whether dropout is on.
            output_kernel: ``output_kernel()``, read once by a decoder before its loop.

        Returns:
            The logits ``[..., tgt_vocab_size]``, float32.
        """
        if self.output_projection is not None:
            logits = self.output_projection(hidden)
        elif output_kernel is not None:
            logits = kernels.project(hidden, output_kernel, with_gradient=training is not False)
        else:
            kernel = tf.cast(self.target_embedding.embeddings, hidden.dtype)
            logits = kernels.project(
                hidden, kernel, transpose_kernel=True, with_gradient=training is not False
            )
        logits = tf.cast(logits, tf.float32)
        if self.final_logits_bias is not None:
            logits = logits + tf.cast(self.final_logits_bias, tf.float32)
        return logits

    def output_kernel(self) -> tf.Tensor | None:
        """Gives the tied output projection's kernel, for decoders to read once before their loop.

        Returns:
            The target embedding transposed, ``[d_model, vocab]`` in the compute
            dtype, or ``None`` when the projection is a layer of its own.
        """
        self._build_if_needed()
        if self.output_projection is not None:
            return None
        return tf.transpose(tf.cast(self.target_embedding.embeddings, self.compute_dtype))

    def _output_weights(self, dtype) -> tuple[tf.Tensor, tf.Tensor | None, bool]:
        """``(kernel, bias, vocab_major)`` of the output projection in ``dtype``:
        the target embedding ``[V, d_model]`` when tied, else the Dense layer's.
        ``bias`` sums the Dense layer's bias and ``final_logits_bias`` (either
        may be absent; ``None`` when both are)."""
        biases = [self.final_logits_bias]
        if self.output_projection is None:
            kernel, vocab_major = self.target_embedding.embeddings, True
        else:
            kernel, vocab_major = self.output_projection.kernel, False
            biases.insert(0, self.output_projection.bias)
        biases = [tf.cast(bias, dtype) for bias in biases if bias is not None]
        bias = None if not biases else biases[0] if len(biases) == 1 else biases[0] + biases[1]
        return tf.cast(kernel, dtype), bias, vocab_major

    # --- training ---------------------------------------------------------------------

    def compile(self, *args, fuse_output_and_loss: bool | None = None, **kwargs):
        """``keras.Model.compile``, which also decides how the training step runs.

        Args:
            fuse_output_and_loss: train with the output projection and the loss
                fused (``kernels.projected_smoothed_cross_entropy``): the same
                loss, metrics and updates as Keras' step, without the
                ``[tokens, vocab]`` logits gradient. ``None`` (the default)
                fuses when ``loss`` is a ``MaskedLabelSmoothedCrossEntropy``
                and there are no ``loss_weights``; ``True`` insists on it
                (a ``ValueError`` otherwise), ``False`` keeps Keras' step.
            *args, **kwargs: those of ``keras.Model.compile``.
        """
        bound = _COMPILE_SIGNATURE.bind(self, *args, **kwargs).arguments
        super().compile(*args, **kwargs)
        token_mean_loss = (
            isinstance(bound.get("loss"), MaskedLabelSmoothedCrossEntropy)
            and bound.get("loss_weights") is None
        )
        if fuse_output_and_loss and not token_mean_loss:
            raise ValueError(
                "fuse_output_and_loss=True needs loss=MaskedLabelSmoothedCrossEntropy(...) and no "
                "loss_weights; leave it at None to fuse only then."
            )
        # Both read by the steps below; set here, from compile's own arguments.
        self.token_mean_loss = token_mean_loss
        self.fuse_output_and_loss = (
            token_mean_loss if fuse_output_and_loss is None else bool(fuse_output_and_loss)
        )
        self._fuse_choice = fuse_output_and_loss  # saved with the compile config

    def get_compile_config(self):
        config = super().get_compile_config()
        if config and getattr(self, "_fuse_choice", None) is not None:
            config["fuse_output_and_loss"] = self._fuse_choice
        return config

    def compile_from_config(self, config):
        """Keras' own, which skips a model whose ``compile`` is overridden: the
        saved compile arguments, and ``fuse_output_and_loss`` where one was given."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if hasattr(self, "optimizer") and self.built:
            self.optimizer.build(
                self.trainable_variables
            )  # the optimizer's variables, to load into

    def train_step(self, data):
        """Keras' training step, with the output projection and the loss fused
        when ``compile`` chose it (``fuse_output_and_loss``).

        ``kernels.projected_smoothed_cross_entropy`` back-propagates through the
        projection without writing the ``[tokens, vocab]`` logits gradient.
        Loss, metrics and updated weights match Keras' step
        (``tests/test_model.py``); loss scaling and replica scaling go through
        the same calls as in Keras' step. A quantized output layer takes
        Keras' step.
        """
        quantized = (
            self.output_projection is not None
            and self.output_projection.quantization_mode is not None
        )
        if not getattr(self, "fuse_output_and_loss", False) or quantized:
            return super().train_step(data)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            hidden = self.decoder_states(x, training=True)
            kernel, bias, vocab_major = self._output_weights(hidden.dtype)
            token_losses, logits = kernels.projected_smoothed_cross_entropy(
                hidden, kernel, y, self.loss.label_smoothing, bias=bias, vocab_major=vocab_major
            )
            loss = self.loss.reduce_token_losses(y, token_losses, sample_weight)
            for extra in self.losses:  # add_loss and regularizers, summed as Keras does
                loss += tf.reduce_sum(tf.cast(extra, loss.dtype))
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            self._loss_tracker.update_state(loss * replicas, sample_weight=tf.shape(y)[0])
            loss = self.optimizer.scale_loss(loss)
        weights = self.trainable_weights
        self.optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
        return self.compute_metrics(x, y, logits, sample_weight=sample_weight)

    def test_step(self, data):
        """Keras' evaluation step, with the loss averaged over target tokens
        when the compiled loss is ``MaskedLabelSmoothedCrossEntropy`` without
        loss weights (and no sample weights are given).

        Keras weights each batch's loss by its sentences, so its ``val_loss``
        is a sentence-weighted mean of per-batch token means, which moves with
        the batching. Here each batch (each replica's share of it) counts by
        its non-pad target tokens: ``val_loss`` is the mean loss of every
        target token of the data, whatever the batch sizes, the number of
        replicas, or the all-pad rows added to split a batch evenly between
        them. Other losses take Keras' step.
        """
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if sample_weight is not None or not getattr(self, "token_mean_loss", False):
            return super().test_step(data)
        y_pred = self(x, training=False)
        loss = self._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=None, training=False)
        replicas = tf.distribute.get_strategy().num_replicas_in_sync  # Keras divides by it
        tokens = tf.reduce_sum(tf.cast(tf.not_equal(y, self.loss.pad_id), loss.dtype))
        self._loss_tracker.update_state(loss * replicas, sample_weight=tokens)
        return self.compute_metrics(x, y, y_pred, sample_weight=None)

    # --- incremental decoding -------------------------------------------------------

    def initial_cache(self, memory, max_length: int | None = None) -> list:
        """Builds the decoder caches for ``memory``.

        Cross-attention keys and values are projected once; self-attention
        caches start empty and grow (``max_length=None``) or are a zeroed
        ``max_length`` buffer for static-shape decoding.

        Args:
            memory: the encoder memory ``[batch, src_len, d_model]`` (``encode``).
            max_length: the fixed self-attention cache length, or ``None`` to grow.

        Returns:
            One cache dict per decoder layer, as a list.
        """
        self._build_if_needed()
        return self.decoder.initial_cache(memory, max_length)

    def decode(
        self,
        target_ids,
        cache: list,
        memory_padding_mask,
        cache_index=None,
        training=None,
        output_kernel=None,
    ):
        """Computes the logits of the next target positions, given the cache of those before.

        Positions continue from the cache: its length for a growing cache, or
        ``cache_index`` for a fixed-size one. The model is built (the cache came
        from ``initial_cache``).

        Args:
            target_ids: int ids ``[batch, n]`` (usually n = 1).
            cache: the caches from ``initial_cache`` or the previous ``decode``.
            memory_padding_mask: the source padding mask, as the decoders build it.
            cache_index: where ``target_ids`` go in a fixed-size cache.
            training: whether dropout is on.
            output_kernel: ``output_kernel()``, read before the decoding loop.

        Returns:
            ``(logits, cache)``: float32 logits ``[batch, n, tgt_vocab_size]`` and
            the caches with ``target_ids`` added.
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
        return self.logits(hidden, training=training, output_kernel=output_kernel), cache

    # --- export and serialization -----------------------------------------------------

    def export(
        self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs
    ):
        """Exports a SavedModel whose ``serve`` endpoint returns the logits.

        ``model.export("exports/logits")`` writes it; after
        ``serving = tf.saved_model.load("exports/logits")``,
        ``serving.serve((source_ids, target_ids))`` is ``model((source_ids,
        target_ids))``. With no ``input_signature`` the endpoint takes int32
        token ids of any batch size and length (named ``source_ids`` and
        ``target_ids``; a dict if the model was built from one), whether the
        model was built by ``build()``, by its first call, by ``fit`` or by
        ``load_model``. (Keras alone needs a call after the build, then fixes
        the lengths of that call's inputs and takes floats.)

        Decoding endpoints (ids in, ids out) are functions of the model added
        to a ``keras.export.ExportArchive``. For strings in and out with the
        tokenizer inside, beam size and length penalty fixed at export, and TF
        Serving's warm-up requests, use ``kt export saved-model``.

        Args:
            filepath: the folder to write.
            format: ``"tf_saved_model"`` (Keras' other formats pass through).
            verbose: whether Keras prints the endpoints.
            input_signature: the ``serve`` endpoint's inputs; ``None`` gives
                int32 ids of any batch size and length.
            **kwargs: further ``keras.Model.export`` arguments.

        Returns:
            What ``keras.Model.export`` returns.

        Example:
            >>> from keras_transformer.decoding import Beam, Greedy, Limits, decode
            >>> # a tiny untrained model; a trained one works alike
            >>> model = Transformer(TransformerConfig.from_preset("tiny", num_layers=1))
            >>> model.build()
            >>> def greedy(source_ids):
            ...     out = decode(model, source_ids, Greedy(), Limits(max_length=20))
            ...     return {"target_ids": out.tokens[:, 0], "scores": out.scores[:, 0]}
            >>> def beam(source_ids):
            ...     best = decode(model, source_ids, Beam(size=4), Limits(max_length=20))
            ...     return {"target_ids": best.tokens[:, 0], "scores": best.scores[:, 0]}
            >>> archive = keras.export.ExportArchive()
            >>> archive.track(model)
            >>> source_ids = keras.InputSpec(shape=(None, None), dtype="int32", name="source_ids")
            >>> for name, function in [("greedy", greedy), ("beam", beam)]:
            ...     _ = archive.add_endpoint(name, function, input_signature=[source_ids])
            >>> archive.write_out("exports/decoders", verbose=False)
            >>> decoders = tf.saved_model.load("exports/decoders")
            >>> decoders.greedy(tf.constant([[5, 6, 3], [7, 3, 0]]))["target_ids"].dtype
            tf.int32
            >>> sorted(decoders.beam(tf.constant([[5, 6, 3]])))
            ['scores', 'target_ids']
        """
        if input_signature is None:
            self._build_if_needed()
            input_signature = [
                _ids_structure(
                    self._build_shapes_dict,
                    lambda name: keras.InputSpec(
                        shape=(None, None), dtype=self.input_dtype, name=name
                    ),
                )
            ]
        return super().export(
            filepath, format=format, verbose=verbose, input_signature=input_signature, **kwargs
        )

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


def _ids_structure(recorded, leaf=lambda name: (None, None)) -> tuple | dict:
    """The model's inputs from the arguments its ``build`` was called with:
    ``{"source_ids": …, "target_ids": …}`` when built from a dict, else the
    pair; each ``leaf(name)``, by default the shape of ids of any batch size
    and length."""
    names = ("source_ids", "target_ids")
    if isinstance((recorded or {}).get("input_shape"), dict):
        return {name: leaf(name) for name in names}
    return tuple(leaf(name) for name in names)


def _unpack_inputs(inputs):
    if isinstance(inputs, dict):
        try:
            return inputs["source_ids"], inputs["target_ids"]
        except KeyError as error:
            raise ValueError(
                f"Dict inputs need keys 'source_ids' and 'target_ids', got {sorted(inputs)}."
            ) from error
    if isinstance(inputs, (tuple, list)) and len(inputs) == 2:
        return inputs[0], inputs[1]
    raise ValueError(
        "Transformer expects (source_ids, target_in_ids) or a dict with "
        f"'source_ids'/'target_ids'; got {type(inputs).__name__}."
    )
