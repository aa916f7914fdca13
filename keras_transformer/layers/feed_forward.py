"""The position-wise feed-forward network (paper §3.3)."""

from __future__ import annotations

import keras

from keras_transformer.config import ACTIVATIONS
from keras_transformer.layers.dense import Dense
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.initializers import clone_initializer

# ACTIVATIONS: "swish" (Marian's) is x·sigmoid(x); "silu" is another name for it.


def check_activation(activation: str) -> str:
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"activation={activation!r} is not supported; use one of {ACTIVATIONS} "
            "(the paper uses 'relu')."
        )
    return activation


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """FFN(x) = act(x W1 + b1) W2 + b2, applied to every position alike.

    Args:
        d_model: input and output width.
        d_ff: inner width (2048 in the base model).
        activation: ``"relu"`` (the paper), ``"gelu"`` (the exact, erf form)
            or ``"swish"`` (x·sigmoid(x), Marian's; ``"silu"`` is the same).
        dropout: dropout on the inner activations (0 in the paper).
        kernel_initializer, bias_initializer: for both projections.

    Masking: position-wise, so padding needs no mask here.

    Example:
        >>> import tensorflow as tf
        >>> FeedForward(d_model=16, d_ff=64)(tf.zeros([2, 3, 16])).shape
        TensorShape([2, 3, 16])
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: str = "relu",
        dropout: float = 0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if d_model <= 0 or d_ff <= 0:
            raise ValueError(f"d_model and d_ff must be positive, got {d_model}, {d_ff}.")
        self.d_model = int(d_model)
        self.d_ff = int(d_ff)
        self.activation = check_activation(activation)
        self.dropout = float(dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def _dense(self, units, activation, name):
        return Dense(
            units,
            activation=activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, input_shape):
        self.inner_dense = self._dense(self.d_ff, self.activation, "inner")
        self.inner_dense.build(input_shape)
        self.activation_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.outer_dense = self._dense(self.d_model, None, "outer")
        self.outer_dense.build(tuple(input_shape[:-1]) + (self.d_ff,))
        self.built = True

    def call(self, x, training=None):
        hidden = self.activation_dropout(self.inner_dense(x), training=training)
        return self.outer_dense(hidden)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "d_ff": self.d_ff,
                "activation": self.activation,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
