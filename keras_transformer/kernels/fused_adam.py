"""Adam whose per-variable update is one TensorFlow kernel."""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class FusedAdam(keras.optimizers.Adam):
    """``keras.optimizers.Adam`` with each variable's update done by one ``ResourceApplyAdam``.

    The arithmetic is Keras' exactly (the "epsilon hat" form)::

        α = lr·√(1 − β2ᵗ) / (1 − β1ᵗ)
        m ← m + (g − m)(1 − β1);  v ← v + (g² − v)(1 − β2)
        θ ← θ − α·m / (√v + ε)

    and the slot variables are Keras' own, so checkpoints, ``get_config``
    and everything Keras does around ``update_step`` (clipping, EMA, loss
    scaling, ``tf.distribute``) are unchanged. Sparse gradients and
    ``amsgrad`` take Keras' path.

    Gradient accumulation (``gradient_accumulation_steps=N``: one update
    from the mean gradient of N calls) differs from Keras' in two ways:

    * a learning-rate schedule is called with ``iterations``, the number of
      updates, as the update's step; Keras passes the count of calls (N times
      as fast), so a warm-up of W updates would end after W / N of them;
    * it also runs under ``MirroredStrategy``, where Keras' accumulation
      fails ("merge_call called while defining a new graph"): each replica
      adds its gradient to its own accumulator, and the update all-reduces
      the replicas' sums (one all-reduce per call, as without accumulation).

    ``iterations`` counts updates, as in Keras.

    Args: those of ``keras.optimizers.Adam``.

    Example:
        >>> optimizer = FusedAdam(1e-3, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    """

    def _get_current_learning_rate(self):
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()

    def update_step(self, gradient, variable, learning_rate):
        """Apply one Adam update to ``variable`` in a single fused op.

        Args:
            gradient: the variable's gradient (dense; ``IndexedSlices`` take Keras' path).
            variable: the variable to update.
            learning_rate: this step's learning rate.

        Returns:
            None; Keras' own path (AMSGrad, sparse gradients) returns what it returns.
        """
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

    def _backend_apply_gradients(self, grads, trainable_variables):
        if not (self.gradient_accumulation_steps and _merge_call_replica_context()):
            return super()._backend_apply_gradients(grads, trainable_variables)
        if self.use_ema:
            raise ValueError(
                "FusedAdam: use_ema with gradient_accumulation_steps is not supported "
                "under a strategy that uses merge_call (MirroredStrategy)."
            )
        steps = self.gradient_accumulation_steps
        is_update = tf.equal((self._iterations + 1) % steps, 0)
        variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
        accumulators = [
            self._accumulated_gradients[self._get_variable_index(v)].value
            for v in trainable_variables
        ]
        # Replica context: reading an accumulator gives this replica's own sum.
        totals = [tf.convert_to_tensor(g) + a for g, a in zip(grads, accumulators)]
        kept = [tf.where(is_update, tf.zeros_like(t), t) for t in totals]
        means = self._clip_gradients([t / steps for t in totals])
        reduced = self._all_reduce_sum_gradients(list(zip(means, variables)))
        learning_rate = self.learning_rate

        def apply(distribution, reduced, kept, is_update, learning_rate):
            def keep(accumulator, value):
                return accumulator.assign(value)

            def update(variable, gradient, is_update, learning_rate):
                def step():
                    if self.weight_decay is not None and self._use_weight_decay(variable):
                        rate = tf.cast(learning_rate, variable.dtype) * tf.cast(
                            self.weight_decay, variable.dtype
                        )
                        variable.assign_sub(variable * rate)
                    self.update_step(gradient, variable, learning_rate)
                    return tf.constant(True)

                return tf.cond(is_update, step, lambda: tf.constant(False))

            for accumulator, value in zip(accumulators, kept):
                distribution.extended.update(accumulator, keep, args=(value,), group=False)
            for gradient, variable in reduced:
                distribution.extended.update(
                    variable, update, args=(gradient, is_update, learning_rate), group=False
                )

        tf.__internal__.distribute.interim.maybe_merge_call(
            apply, self._distribution_strategy, reduced, kept, is_update, learning_rate
        )


def _merge_call_replica_context() -> bool:
    """In a replica context of a strategy whose cross-replica steps go through
    ``merge_call`` (``MirroredStrategy``), which Keras' accumulation cannot call
    inside its ``cond``."""
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return False
    return not tf.__internal__.distribute.strategy_supports_no_merge_call()
