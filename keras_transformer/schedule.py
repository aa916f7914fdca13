"""The paper's learning-rate schedule (§5.3)."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.kernels import FusedAdam


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The paper's learning rate, ``scale·d_model^-0.5·min(step^-0.5, step·warmup_steps^-1.5)``.

    Linear warm-up for ``warmup_steps`` steps, then decay ∝ 1/√step; the peak
    is ``scale · (d_model · warmup_steps)^-0.5`` at ``step = warmup_steps``.
    Steps are counted from 1 as in the paper. Keras calls a schedule with the
    optimizer's 0-based update counter, so ``schedule(i)`` is the rate of the
    (i+1)-th update: ``schedule(0)`` is the paper's step 1 (never a zero rate).

    Args:
        d_model: model width.
        warmup_steps: warm-up length (4000 in the paper).
        scale: multiplier on the whole curve (1.0 in the paper).

    Raises:
        ValueError: an argument is not positive.

    Example:

    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 6)  # the peak, (512 · 4000)^-0.5
    0.000699
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        if d_model <= 0 or warmup_steps <= 0 or scale <= 0:
            raise ValueError(
                "d_model, warmup_steps and scale must be positive, got "
                f"{d_model}, {warmup_steps}, {scale}."
            )
        self.d_model = int(d_model)
        self.warmup_steps = int(warmup_steps)
        self.scale = float(scale)

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0
        decay = tf.math.rsqrt(step)
        warmup = step * self.warmup_steps**-1.5
        return self.scale * self.d_model**-0.5 * tf.minimum(decay, warmup)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


def paper_adam(
    learning_rate=None, *, d_model: int | None = None, warmup_steps: int = 4000, **kwargs
) -> FusedAdam:
    """Builds the paper's optimizer, Adam with β1=0.9, β2=0.98 and ε=1e-9, as ``FusedAdam``.

    Args:
        learning_rate: a rate or schedule; ``None`` uses
            ``TransformerSchedule(d_model, warmup_steps)``.
        d_model: the model width, for the schedule.
        warmup_steps: the schedule's warm-up length.
        **kwargs: further ``keras.optimizers.Adam`` arguments (e.g. ``clipnorm``).

    Returns:
        The ``FusedAdam`` optimizer.

    Raises:
        ValueError: neither ``learning_rate`` nor ``d_model`` is given.

    Example:

    >>> optimizer = paper_adam(d_model=512)
    >>> (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon)
    (0.9, 0.98, 1e-09)
    """
    if learning_rate is None:
        if d_model is None:
            raise ValueError("paper_adam needs d_model (for the schedule) or a learning_rate.")
        learning_rate = TransformerSchedule(d_model, warmup_steps)
    options = {"beta_1": 0.9, "beta_2": 0.98, "epsilon": 1e-9, **kwargs}
    return FusedAdam(learning_rate=learning_rate, **options)
