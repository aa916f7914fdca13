"""``keras.layers.Dropout`` computed by the dropout kernel (``kernels.dropout``)."""

from __future__ import annotations

import keras

from keras_transformer import kernels


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """``keras.layers.Dropout`` computed by ``kernels.dropout`` (16-bit randomness).

    Same config, seeding (``seed``, Keras' ``SeedGenerator``) and
    expectation as Keras' layer; ``noise_shape`` takes Keras' path.

    Example:
        >>> import tensorflow as tf
        >>> Dropout(0.1)(tf.ones([2, 8]), training=True).shape
        TensorShape([2, 8])
    """

    def call(self, inputs, training=False):
        if not training or self.rate == 0 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        return kernels.dropout(inputs, self.rate, self.seed_generator.next())
