"""The per-epoch callbacks of the training program, for ``model.fit`` and
``custom_fit`` alike: validation BLEU, early stopping, the history of every epoch
across resumes and a wall-time budget. They share the epoch's results through one
``training.epochs.EpochRecord`` (with ``training.snapshots.KeepSnapshots``), so
their order in the callback list does not matter."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

from keras_transformer.training.epochs import (
    METRICS,
    EpochCallback,
    EpochRecord,
    metric_name,
    metric_value,
)
from keras_transformer.training.run_config import check_early_stopping
from keras_transformer.training.scoring import score_translations

log = logging.getLogger("training")


class ValidationBleu(EpochCallback):
    """Greedy-decodes a sample of the validation set after each epoch and adds
    ``val_bleu``/``val_chrf`` (sacrebleu, detokenized, cased) to the logs and
    to TensorBoard.

    It provides both through the ``EpochRecord``: the first callback of the
    epoch to ask for ``val_bleu`` (early stopping, the snapshots, or this one)
    scores the model's weights, once per epoch.

    Args:
        translator: a ``Translator`` of the model being trained.
        pairs: the validation sample, ``(source, reference)`` pairs.
        summary_dir: the TensorBoard folder (`None`: no summaries).
        record: the run's shared ``EpochRecord`` (`None`: one of its own).
    """

    def __init__(
        self,
        translator,
        pairs: Sequence[tuple[str, str]],
        summary_dir: Path | None = None,
        record: EpochRecord | None = None,
    ):
        super().__init__(record)
        self.translator = translator
        self.sources = [source for source, _ in pairs]
        self.references = [target for _, target in pairs]
        self.writer = tf.summary.create_file_writer(str(summary_dir)) if summary_dir else None
        self.record.provide(("val_bleu", "val_chrf"), self.validate)

    def score(self) -> dict:
        """BLEU and chrF of the model's weights now on the validation sample."""
        hypotheses = self.translator.translate(self.sources, batch_size=128)
        return score_translations(hypotheses, self.references)

    def epoch_end(self, epoch: int, record: EpochRecord) -> None:
        record.value("val_bleu")  # scored now, unless another callback asked first

    def validate(self, epoch: int) -> dict:
        """Score the end of ``epoch`` (0-based): log it, write it to TensorBoard and
        return ``{"val_bleu": ..., "val_chrf": ...}``."""
        started = time.time()
        scores = self.score()
        log.info(
            "epoch %d: validation BLEU %.2f chrF %.2f (%d sentences, greedy, %.1fs)",
            epoch + 1,
            scores["bleu"],
            scores["chrf"],
            len(self.references),
            time.time() - started,
        )
        if self.writer is not None:
            with self.writer.as_default():
                tf.summary.scalar("val_bleu", scores["bleu"], step=epoch + 1)
                tf.summary.scalar("val_chrf", scores["chrf"], step=epoch + 1)
        return {"val_bleu": scores["bleu"], "val_chrf": scores["chrf"]}


class EarlyStopping(EpochCallback):
    """Ends the run when ``metric`` (``bleu``: ``val_bleu``, higher is better;
    ``loss``: ``val_loss``) has not improved by more than ``min_delta`` for
    ``patience`` validations in a row. Unlike Keras' ``EarlyStopping`` its
    state (the best value so far, its epoch, the validations without
    improvement) survives ``fit``'s restarts and is saved with each backup
    (``get_state``/``set_state``).

    Args:
        metric: ``"bleu"`` or ``"loss"``.
        patience: the validations without improvement that end the run.
        min_delta: the least change that counts as an improvement.
        record: the run's shared ``EpochRecord``, through which it reads the
            metric (`None`: the loop's logs only).

    Raises:
        ValueError: an unknown metric, ``patience < 1`` or ``min_delta < 0``.
    """

    def __init__(
        self,
        metric: str,
        patience: int,
        min_delta: float = 0.0,
        record: EpochRecord | None = None,
    ):
        super().__init__(record)
        check_early_stopping(metric, patience, min_delta)
        self.metric, self.patience, self.min_delta = metric, patience, float(min_delta)
        self.best: float | None = None  # the value the next improvement is measured from
        self.best_epoch: int | None = None
        self.wait = 0
        self.stopped_epoch: int | None = None

    def get_state(self) -> dict:
        return {
            "best": self.best,
            "best_epoch": self.best_epoch,
            "wait": self.wait,
            "stopped_epoch": self.stopped_epoch,
        }

    def set_state(self, state: dict | None) -> None:
        state = state or {}
        self.best = state.get("best")
        self.best_epoch = state.get("best_epoch")
        self.wait = int(state.get("wait", 0))
        self.stopped_epoch = state.get("stopped_epoch")

    def improved(self, value: float) -> bool:
        if self.best is None:
            return True
        if METRICS[self.metric][1]:
            return value > self.best + self.min_delta
        return value < self.best - self.min_delta

    def epoch_end(self, epoch: int, record: EpochRecord) -> None:
        value = record.value(METRICS[self.metric][0])
        if value is None:
            log.warning("early stopping: no %s after epoch %d", metric_name(self.metric), epoch + 1)
            return
        value = float(value)
        if self.improved(value):
            self.best, self.best_epoch, self.wait = value, epoch + 1, 0
        else:
            self.wait += 1
        log.info(
            "early stopping: %s %s after epoch %d; best %s (epoch %d); %d of %d validations "
            "without improvement",
            metric_name(self.metric),
            metric_value(self.metric, value),
            epoch + 1,
            metric_value(self.metric, self.best),
            self.best_epoch,
            self.wait,
            self.patience,
        )
        if self.wait >= self.patience:
            self.stopped_epoch = epoch + 1
            log.info(
                "early stopping: %s has not improved by more than %g on %s (epoch %d) for %d "
                "validations; stopping after epoch %d",
                metric_name(self.metric),
                self.min_delta,
                metric_value(self.metric, self.best),
                self.best_epoch,
                self.patience,
                epoch + 1,
            )
            self.model.stop_training = True


class EpochHistory(EpochCallback):
    """Keeps the per-epoch logs of every epoch of a run, across any number of resumes.

    A backup saves the logs of the epochs done so far (``TrainingBackup.track``);
    a resumed run gets them back (``before``) and ``whole`` puts them in front
    of the resumed process's own history, so ``metrics.json`` and the learning
    curves span the whole run. It records each epoch's logs when the
    ``EpochRecord`` closes the epoch, after the other callbacks have added to
    them (``val_bleu``, ``epoch_seconds``), wherever it is in the list.

    Args:
        record: the run's shared ``EpochRecord`` (`None`: one of its own).

    Example:
        >>> history = EpochHistory()
        >>> history.set_state({"history": {"loss": [3.0, 2.5]}})
        >>> history.whole({"loss": [2.1]})
        {'loss': [3.0, 2.5, 2.1]}
    """

    CLOSE_RANK = 1  # after the time budget's epoch_seconds

    def __init__(self, record: EpochRecord | None = None):
        super().__init__(record)
        self.before: dict[str, list[float]] = {}  # the epochs before this process
        self.recorded: dict[str, list[float]] = {}  # this process's epochs

    def close_epoch(self, epoch: int, record: EpochRecord) -> None:
        for name, value in record.logs.items():
            self.recorded.setdefault(name, []).append(float(value))

    def get_state(self) -> dict:
        """The logs of every epoch done so far."""
        return {"history": self.whole(self.recorded)}

    def set_state(self, state: dict | None) -> None:
        """Take the epochs a backup recorded (none from a backup that did not record them)."""
        self.before = {
            name: list(values) for name, values in (state or {}).get("history", {}).items()
        }
        self.recorded = {}

    def whole(self, history: dict) -> dict[str, list[float]]:
        """``history`` (this process's epochs) after the epochs before the resume.

        Args:
            history: name → per-epoch values of the epochs this process trained.

        Returns:
            name → the values of every epoch of the run, oldest first.
        """
        names = list(self.before) + [name for name in history if name not in self.before]
        return {
            name: [*self.before.get(name, ()), *(float(v) for v in history.get(name, ()))]
            for name in names
        }


class TimeBudget(EpochCallback):
    """Stops training at the end of the last epoch that fits in ``minutes`` of
    training time, counted over all the run's processes (a resumed run goes on
    with the time its backup recorded), so a recipe can promise "at most N
    minutes" on any machine. With ``minutes=None`` it only counts the time
    (``seconds``), for the run's ``metrics.json``.

    The clock is the ``EpochRecord``'s: it starts when the record is created
    (just before training); ``set_state`` (a backup's, ``TrainingBackup.track``)
    moves it back by the seconds used up to that backup (the updates a kill
    lost after it are made again, and counted once). A new epoch is started
    only if one more epoch as long as the last one (end to end, validation and
    other callbacks included) still ends inside the budget. Each epoch's
    duration is added to the logs as ``epoch_seconds``. The record times an
    epoch once every callback sharing it has handled the epoch's end, so their
    time is counted wherever this one is in the list.

    Args:
        minutes: the training time allowed; `None` only counts it.
        record: the run's shared ``EpochRecord`` (`None`: one of its own).

    Raises:
        ValueError: ``minutes <= 0``.
    """

    CLOSE_RANK = 0

    def __init__(self, minutes: float | None, record: EpochRecord | None = None):
        super().__init__(record)
        if minutes is not None and minutes <= 0:
            raise ValueError(
                f"training.max_minutes must be > 0 (or null for no limit), got {minutes}."
            )
        self.budget = None if minutes is None else 60.0 * minutes

    def seconds(self) -> float:
        """The training time used so far, over all the run's processes."""
        return self.record.seconds()

    def get_state(self) -> dict:
        """The seconds used so far, and those of them in the epoch under way."""
        now = time.time()
        return {
            "seconds": round(now - self.record.started, 3),
            "epoch_seconds": round(now - self.record.last_end, 3),
        }

    def set_state(self, state: dict | None) -> None:
        if not state:  # a fresh run, or a backup written before the time was recorded
            return
        used = float(state.get("seconds", 0.0))
        self.record.started -= used  # this process's seconds so far count too
        self.record.last_end -= min(used, float(state.get("epoch_seconds", 0.0)))
        if self.budget is not None:
            log.info(
                "time budget: %.1f of %.1f min used before this restart",
                used / 60,
                self.budget / 60,
            )

    def close_epoch(self, epoch: int, record: EpochRecord) -> None:
        seconds = record.epoch_seconds
        record.logs["epoch_seconds"] = round(seconds, 1)
        elapsed = record.last_end - record.started
        if self.budget is not None and elapsed + seconds > self.budget:
            log.info(
                "time budget: %.1f of %.1f min used, another epoch would not fit; stopping after "
                "epoch %d",
                elapsed / 60,
                self.budget / 60,
                epoch + 1,
            )
            self.model.stop_training = True
