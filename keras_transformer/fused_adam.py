"""Adam whose per-variable update is one TensorFlow kernel."""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(keras.optimizers.Adam):
    """``keras.optimizers.Adam`` with the update done by ``ResourceApplyAdam``.

    Keras writes Adam's update as ~12 element-wise ops per variable (two
    moment updates, a square root, a division, three assignments), each a
    full pass over the parameters. TensorFlow's ``ResourceApplyAdam`` kernel
    computes the same formula in one pass, so on CPU the optimizer step of
    the 9.5M-parameter benchmark model falls from ~38 ms to ~13 ms.

    The arithmetic is Keras' exactly (the "epsilon hat" form)::

        α = lr·√(1 − β2ᵗ) / (1 − β1ᵗ)
        m ← m + (g − m)(1 − β1);  v ← v + (g² − v)(1 − β2)
        θ ← θ − α·m / (√v + ε)

    and the slot variables are Keras' own, so checkpoints, ``get_config``
    and everything Keras does around ``update_step`` (clipping, gradient
    accumulation, EMA, loss scaling, ``tf.distribute``) are unchanged. Sparse
    gradients and ``amsgrad`` take Keras' path.

    Args: those of ``keras.optimizers.Adam``.

    Example:
        >>> optimizer = FusedAdam(1e-3, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    """

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].handle,
            v=self._velocities[index].handle,
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), step),
            beta2_power=tf.pow(tf.cast(self.beta_2, dtype), step),
            lr=tf.cast(learning_rate, dtype),
            beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype),
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(gradient, dtype),
        )
