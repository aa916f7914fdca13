"""``keras.layers.LayerNormalization`` computed by the LayerNorm kernel (``kernels.layer_norm``)."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer import kernels


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """``keras.layers.LayerNormalization`` computed by ``kernels.layer_norm``.

    Same weights, config and values as Keras' layer (float32 statistics
    under any policy); the last-axis, centred-and-scaled case, the only one
    a Transformer uses, gets the closed-form gradient. Other settings
    (several axes, ``center``/``scale`` off) take Keras' path.

    In training (``training=True``) on a CPU-only process outside XLA, it runs
    the native C++ kernels (``keras_transformer.kernels.native``) when they are
    enabled and build. They are off by default; turn them on with
    ``keras_transformer.kernels.native.set_enabled(True)``, the environment variable
    ``KERAS_TRANSFORMER_NATIVE_OPS=1`` or, in ``kt train``, the config
    key ``training.native_ops: true``. Inference always uses TensorFlow's ops, so exported
    SavedModels and
    TFLite models contain only standard ops; the two paths agree to float32
    rounding (``tests/test_native_ops.py``).

    Example:
        >>> LayerNormalization(epsilon=1e-6)(tf.ones([2, 3, 8])).shape
        TensorShape([2, 3, 8])
    """

    def kernel_covers(self, rank: int) -> bool:
        """Tells whether ``kernels.layer_norm`` computes this layer for inputs of a rank.

        It does for the last axis alone, centred and scaled.

        Args:
            rank: the inputs' rank.

        Returns:
            ``True`` when the kernel computes it, ``False`` when Keras' path does.
        """
        last_axis_only = list(self.axis) in ([-1], [rank - 1])
        return (
            last_axis_only
            and self.gamma is not None
            and self.beta is not None
            and not self.rms_scaling
        )

    def call(self, inputs, training=None):
        if not self.kernel_covers(len(inputs.shape)):
            return super().call(inputs)
        x = tf.cast(inputs, tf.float32)
        y = kernels.layer_norm(
            x,
            tf.cast(self.gamma, tf.float32),
            tf.cast(self.beta, tf.float32),
            float(self.epsilon),
            kernels.native.usable() if training is True else None,
            with_gradient=training is not False,
        )
        return tf.cast(y, self.compute_dtype)
