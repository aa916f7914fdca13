"""``StepPlan``: the updates a training run makes, where its epochs end and
when it backs up (no TensorFlow here: ``kt train`` checks a
config with it before importing TensorFlow). ``training.loop`` describes the
semantics."""

from __future__ import annotations

import dataclasses

from keras_transformer.training.run_config import TrainingSection


class BackupError(ValueError):
    """A backup this run cannot resume from; the message says what to do."""


def _positive_int(name: str, value, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        none = " or null" if allow_none else ""
        raise ValueError(f"training.{name} must be an integer >= 1{none}, got {value!r}.")
    return value


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """The updates a run makes, where its epochs end and when it backs up.

    Args:
        steps_per_epoch: updates per epoch (validation, logs, checkpoints).
        epochs: epochs to train, or None when ``max_steps`` alone bounds the run.
        max_steps: updates to train, or None for ``epochs × steps_per_epoch``;
            with both, the run ends at the first of the two.
        accumulate_steps: micro-batches per update.
        steps_per_execution: updates per ``tf.function`` call.
        backup_every_steps: updates between backups; None backs up at each
            epoch end.

    Example:
        >>> plan = StepPlan(steps_per_epoch=100, epochs=None, max_steps=250)
        >>> plan.total, plan.epochs_in_total, plan.epoch_end(200)
        (250, 3, 250)
    """

    steps_per_epoch: int
    epochs: int | None = None
    max_steps: int | None = None
    accumulate_steps: int = 1
    steps_per_execution: int = 1
    backup_every_steps: int | None = None

    def __post_init__(self):
        _positive_int("steps_per_epoch", self.steps_per_epoch)
        _positive_int("epochs", self.epochs, allow_none=True)
        _positive_int("max_steps", self.max_steps, allow_none=True)
        _positive_int("accumulate_steps", self.accumulate_steps)
        _positive_int("steps_per_execution", self.steps_per_execution)
        _positive_int("backup_every_steps", self.backup_every_steps, allow_none=True)
        if self.epochs is None and self.max_steps is None:
            raise ValueError(
                "Set training.epochs or training.max_steps (or both: the run ends at the first)."
            )
        execution = self.steps_per_execution
        for name in ("steps_per_epoch", "max_steps", "backup_every_steps"):
            value = getattr(self, name)
            if value is not None and value % execution:
                raise ValueError(
                    f"training.{name}={value} must be a multiple of "
                    f"training.steps_per_execution={execution}."
                )

    @classmethod
    def from_options(cls, options: TrainingSection) -> StepPlan:
        """The plan of a config's ``training`` section (``backup_every_steps``: ``epoch`` or
        a number of updates).

        Raises:
            ValueError: the step counts do not fit together (``StepPlan``'s checks).
        """
        every = options.backup_every_steps
        return cls(
            steps_per_epoch=options.steps_per_epoch,
            epochs=options.epochs,
            max_steps=options.max_steps,
            accumulate_steps=options.accumulate_steps,
            steps_per_execution=options.steps_per_execution,
            backup_every_steps=None if every == "epoch" else every,
        )

    @property
    def total(self) -> int:
        """Updates in the whole run."""
        bounds = [self.max_steps] if self.max_steps is not None else []
        if self.epochs is not None:
            bounds.append(self.epochs * self.steps_per_epoch)
        return min(bounds)

    @property
    def epochs_in_total(self) -> int:
        """Epochs in the whole run, a shorter last one included."""
        return -(-self.total // self.steps_per_epoch)

    def epoch_end(self, step: int) -> int:
        """The step at which the epoch containing update ``step + 1`` ends."""
        return min((step // self.steps_per_epoch + 1) * self.steps_per_epoch, self.total)

    def is_epoch_end(self, step: int) -> bool:
        return step == self.total or step % self.steps_per_epoch == 0

    def backs_up_at(self, step: int) -> bool:
        """Whether a backup is written when ``step`` updates are done."""
        if self.backup_every_steps is None:
            return self.is_epoch_end(step)
        return step % self.backup_every_steps == 0 or step == self.total

    def epoch_number(self, step: int) -> int:
        """1-based number of the epoch that ends at ``step``."""
        return -(-step // self.steps_per_epoch)
