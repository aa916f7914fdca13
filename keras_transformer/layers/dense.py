"""``keras.layers.Dense`` computed by the projection kernel (``kernels.project``)."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer import kernels


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dense(keras.layers.Dense):
    """``keras.layers.Dense`` computed by ``kernels.project``.

    Same weights, config and results as ``keras.layers.Dense``; the kernel
    gradient is computed in the orientation oneDNN runs faster (for the FFN's
    ``d_ff → d_model`` projection, for one), and
    bias and ReLU are fused into the matmul. Quantized layers keep Keras'
    own path.

    Example:
        >>> Dense(8)(tf.zeros([2, 3, 4])).shape
        TensorShape([2, 3, 8])
    """

    def call(self, inputs, training=None):
        if self.quantization_mode is not None:
            return super().call(inputs, training=training)
        bias = None if self.bias is None else tf.cast(self.bias, self.compute_dtype)
        relu = self.activation is keras.activations.relu
        x = kernels.project(
            inputs,
            tf.cast(self.kernel, self.compute_dtype),
            bias,
            relu=relu,
            with_gradient=training is not False,
        )
        if self.activation is not None and not relu:
            x = self.activation(x)
        return x
