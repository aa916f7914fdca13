"""What encoder and decoder layers (and their stacks) share: hyper-parameters,
validation, config, and the residual + LayerNorm connection (paper §3.1)."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.feed_forward import FeedForward, check_activation
from keras_transformer.layers.initializers import clone_initializer
from keras_transformer.layers.layer_norm import LayerNormalization


class TransformerBlockBase(keras.layers.Layer):
    """Holds the hyper-parameters common to every encoder/decoder layer.

    Args:
        d_model: model width.
        num_heads: attention heads; must divide ``d_model``.
        d_ff: inner width of the feed-forward network.
        dropout: residual dropout on each sublayer output (paper: 0.1).
        attention_dropout: dropout on attention weights (paper: 0).
        activation_dropout: dropout inside the feed-forward network (paper: 0).
        activation: ``"relu"`` (paper), ``"gelu"`` or ``"swish"`` (``"silu"``).
        norm_first: ``False`` = post-LN, ``x = LN(x + Sublayer(x))`` (the
            paper); ``True`` = pre-LN, ``x = x + Sublayer(LN(x))``, and the
            stacks add a final LayerNorm.
        layer_norm_epsilon: LayerNorm epsilon (tensor2tensor uses 1e-6).
        kernel_initializer: for every projection.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}. "
                f"Choose num_heads among the divisors of {d_model}."
            )
        for name, rate in (
            ("dropout", dropout),
            ("attention_dropout", attention_dropout),
            ("activation_dropout", activation_dropout),
        ):
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {rate}.")
        self.d_model = int(d_model)
        self.num_heads = int(num_heads)
        self.d_ff = int(d_ff)
        self.dropout = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.activation_dropout = float(activation_dropout)
        self.activation = check_activation(activation)
        self.norm_first = bool(norm_first)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def _hyper_parameters(self) -> dict:
        """The block's hyper-parameters: every constructor argument but the initializer."""
        return {
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "activation_dropout": self.activation_dropout,
            "activation": self.activation,
            "norm_first": self.norm_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }

    def block_kwargs(self) -> dict:
        """Gives the constructor arguments for a sublayer with the same hyper-parameters.

        Returns:
            The keyword arguments, with a fresh initializer and this layer's dtype policy.
        """
        return {
            **self._hyper_parameters(),
            "kernel_initializer": self._initializer(),
            "dtype": self.dtype_policy,
        }

    def _initializer(self):
        return clone_initializer(self.kernel_initializer)

    def _attention(self, name: str) -> MultiHeadAttention:
        return MultiHeadAttention(
            self.d_model,
            self.num_heads,
            dropout=self.attention_dropout,
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
            name=name,
        )

    def _feed_forward(self) -> FeedForward:
        return FeedForward(
            self.d_model,
            self.d_ff,
            activation=self.activation,
            dropout=self.activation_dropout,
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
            name="feed_forward",
        )

    def _add_sublayer(self, name: str, layer: keras.layers.Layer, *build_shapes) -> None:
        """Create and build ``name`` with its ``name_norm`` and ``name_dropout``
        (one residual block of the paper's Figure 1)."""
        layer.build(*build_shapes)
        norm = self._layer_norm(f"{name}_norm")
        norm.build(build_shapes[0])
        setattr(self, name, layer)
        setattr(self, f"{name}_norm", norm)
        setattr(self, f"{name}_dropout", self._dropout())

    def _feed_forward_block(self, x: tf.Tensor, training=None) -> tf.Tensor:
        """The position-wise feed-forward network (paper §3.3) in its residual block: the
        last sublayer of every encoder and decoder layer."""
        (x,) = residual_connection(
            x,
            lambda h: self.feed_forward(h, training=training),
            self.feed_forward_norm,
            self.feed_forward_dropout,
            self.norm_first,
            training,
        )
        return x

    def _layer_norm(self, name: str) -> LayerNormalization:
        # float32 even under mixed precision (bf16/fp16 variance is too coarse).
        return LayerNormalization(epsilon=self.layer_norm_epsilon, dtype="float32", name=name)

    def _dropout(self) -> Dropout:
        return Dropout(self.dropout, dtype=self.dtype_policy)

    def compute_mask(self, inputs, mask=None):
        # Outputs are position-aligned with the first input: pass its mask on.
        return mask

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(self._hyper_parameters())
        config["kernel_initializer"] = keras.initializers.serialize(self.kernel_initializer)
        return config


class StackBase(TransformerBlockBase):
    """``num_layers`` identical blocks of one kind, plus the final LayerNorm that a
    pre-LN stack needs (``norm_first``); the encoder and decoder stacks."""

    def __init__(self, num_layers: int, **kwargs):
        super().__init__(**kwargs)
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}.")
        self.num_layers = int(num_layers)

    def _build_stack(self, layer_class, *build_shapes) -> None:
        """Create and build ``layer_stack`` (``layer_0`` …) and ``final_norm``."""
        self.layer_stack = []
        for i in range(self.num_layers):
            layer = layer_class(**self.block_kwargs(), name=f"layer_{i}")
            layer.build(*build_shapes)
            self.layer_stack.append(layer)
        self.final_norm = None
        if self.norm_first:
            self.final_norm = self._layer_norm("final_norm")
            self.final_norm.build(build_shapes[0])
        self.built = True

    def _finish(self, x: tf.Tensor) -> tf.Tensor:
        """The stack's output: ``x`` through the final LayerNorm where there is one."""
        return x if self.final_norm is None else apply_layer_norm(self.final_norm, x)

    def get_config(self):
        config = super().get_config()
        config["num_layers"] = self.num_layers
        return config


def apply_layer_norm(norm: LayerNormalization, x: tf.Tensor) -> tf.Tensor:
    """LayerNorm computed in float32, returned in ``x``'s dtype."""
    return tf.cast(norm(x), x.dtype)


def residual_connection(x, sublayer, norm, dropout, norm_first: bool, training=None):
    """Post-LN ``LN(x + Dropout(F(x)))`` or pre-LN ``x + Dropout(F(LN(x)))``.

    ``sublayer`` maps the (normalised) input to a tuple whose first element is
    the sublayer output; any further elements (caches, attention weights) are
    returned unchanged after the new ``x``.
    """
    inputs = apply_layer_norm(norm, x) if norm_first else x
    result = sublayer(inputs)
    result = result if isinstance(result, tuple) else (result,)
    x = x + tf.cast(dropout(result[0], training=training), x.dtype)
    if not norm_first:
        x = apply_layer_norm(norm, x)
    return (x,) + result[1:]
