"""Callbacks of the training program and its backup. The per-epoch callbacks
(validation BLEU, early stopping, the epoch snapshots kept for averaging and
the final choice, a wall-time budget) serve
``model.fit`` and ``custom_fit`` alike; ``TrainingBackup`` is both loops'
resumable state (``training.loop``'s ``StepBackup`` writes it during ``fit``)."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.files import staging_directory, write_atomically
from keras_transformer.training.loop import optimizer_step
from keras_transformer.training.scoring import score_translations
from keras_transformer.training.steps import BackupError

log = logging.getLogger("training")


class TrainingBackup:
    """A run's resumable state in one folder, and the one before it beside it.

    ``latest.weights.h5`` holds the weights and the optimizer state (its step
    and, under accumulation, its gradient accumulators, zero at an update);
    ``training_metadata.json`` the step, the epochs done, the micro-batches
    consumed, ``accumulate_steps``, whether a callback had ended the run
    (``stopped``), the state of the callbacks ``track`` names (the best epoch
    so far, the patience counter, the kept snapshots, the time used) and the
    size and CRC-32 of every other file; the input's position: ``iterator/``
    (custom loop) the input iterator's (``tf.train.Checkpoint``: tf.data's
    buffers, e.g. the shuffle buffer, are in it), ``input/`` (``model.fit``)
    the ``ResumableInput``'s (its host iterator's, and the micro-batches read
    ahead of training).

    Each save writes a new folder beside the old one (the metadata last),
    moves the old one aside to ``<directory>.previous`` (replacing the one
    before it; an old one that is incomplete, or that a restore could not
    read, is dropped instead) and renames the new one in: a kill at any
    moment, even during the write, leaves a complete backup. ``restore`` checks the files against
    the sizes and checksums the metadata recorded; a backup that cannot be
    read (truncated by a full disk, say) is passed over for the previous one,
    with a warning: the run then loses only the steps between the two.

    Args:
        directory: the backup folder (``Workdir.backup_dir``).
    """

    WEIGHTS = "latest.weights.h5"
    METADATA = "training_metadata.json"
    ITERATOR = "iterator"
    INPUT = "input"

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.previous = self.directory.with_name(self.directory.name + ".previous")
        self.restored_from = self.directory
        self.iterator_checkpoints = True  # until an iterator cannot be saved
        self.tracked: dict[str, object] = {}
        self.unreadable: set[Path] = set()  # folders a restore passed over

    def track(self, name: str, state) -> None:
        """Save ``state.get_state()`` (JSON) with each backup under ``name``, and
        hand it back to ``state.set_state`` when a backup is restored."""
        self.tracked[name] = state

    def _folders(self) -> list[Path]:
        return [folder for folder in (self.directory, self.previous) if folder.is_dir()]

    def exists(self) -> bool:
        return any(
            (folder / self.WEIGHTS).exists() or (folder / self.METADATA).exists()
            for folder in self._folders()
        )

    def save(
        self,
        model: keras.Model,
        *,
        step: int,
        epoch: int,
        accumulate_steps: int = 1,
        iterator=None,
        stream=None,
        stopped: bool = False,
    ) -> None:
        """Write the backup: ``model``'s weights and optimizer state, ``step`` and the
        others in the metadata, the tracked states, and the input's position: the
        custom loop's ``iterator`` (a ``tf.data`` iterator) or ``fit``'s ``stream`` (a
        ``training.loop.ResumableInput``). An input that cannot be saved (a
        ``from_generator`` stage) is left out, with a warning, from then on."""
        for stale in self.directory.parent.glob(f".{self.directory.name}.backup-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a run killed while it saved
        staging = staging_directory(self.directory, "backup")
        try:
            model.save_weights(str(staging / self.WEIGHTS))
            if iterator is not None:
                self._save_input(
                    staging / self.ITERATOR,
                    lambda folder: tf.train.Checkpoint(iterator=iterator).write(
                        str(folder / "state")
                    ),
                )
            if stream is not None:
                self._save_input(staging / self.INPUT, stream.save)
            metadata = {
                "step": step,
                "epoch": epoch,
                "batches": step * accumulate_steps,
                "accumulate_steps": accumulate_steps,
                "stopped": bool(stopped),
                "state": {name: state.get_state() for name, state in self.tracked.items()},
                "files": _file_records(staging),
            }
            _write_synced(staging / self.METADATA, json.dumps(metadata).encode("utf-8"))
            self._swap_in(staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _save_input(self, folder: Path, write) -> None:
        """``write(folder)``: the input's position, unless it could not be saved before."""
        if not self.iterator_checkpoints:
            return
        try:
            write(folder)
        except (tf.errors.OpError, ValueError) as error:  # e.g. a from_generator stage
            self.iterator_checkpoints = False
            shutil.rmtree(folder, ignore_errors=True)
            log.warning(
                "the input's position cannot be saved (%s); a resumed run will read and drop "
                "the batches already used instead",
                str(error).strip().splitlines()[0],
            )

    def _swap_in(self, staging: Path) -> None:
        """Make the complete ``staging`` the backup, the current one the previous."""
        trash = staging_directory(self.directory, "backup")  # removed at the end, or next save
        try:
            complete = (self.directory / self.METADATA).exists()
            if complete and self.directory not in self.unreadable:  # it becomes the previous
                if self.previous.exists():
                    os.replace(self.previous, trash / "previous")
                os.replace(self.directory, self.previous)
            elif self.directory.exists():  # incomplete or unreadable: the previous one stays
                os.replace(self.directory, trash / "unusable")
            os.replace(staging, self.directory)
            self.unreadable.discard(self.directory)
        finally:
            shutil.rmtree(trash, ignore_errors=True)

    @classmethod
    def _read_metadata(cls, folder: Path) -> dict:
        """The folder's metadata, or a ``ValueError`` saying why it cannot be used."""
        path = folder / cls.METADATA
        if not path.is_file():
            raise ValueError(f"{cls.METADATA} is missing")
        try:
            metadata = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{cls.METADATA} cannot be read ({error})") from error
        if not isinstance(metadata, dict):
            raise ValueError(f"{cls.METADATA} holds no metadata")
        return metadata

    @classmethod
    def check_folder(cls, folder: Path) -> dict:
        """The metadata of ``folder``, its files checked against it; a ``ValueError``
        names the first missing, truncated or corrupt file."""
        metadata = cls._read_metadata(folder)
        if not (folder / cls.WEIGHTS).is_file():
            raise ValueError(f"{cls.WEIGHTS} is missing")
        for name, (size, crc) in (metadata.get("files") or {}).items():
            path = folder / name
            if not path.is_file():
                raise ValueError(f"{name} is missing")
            actual = path.stat().st_size
            if actual != size:
                raise ValueError(f"{name} is truncated ({actual:,} of {size:,} bytes)")
            if _crc32(path) != crc:
                raise ValueError(f"{name} is corrupt (its checksum differs)")
        return metadata

    def metadata(self) -> dict:
        """The metadata of the backup a restore would use first ({} without one)."""
        for folder in self._folders():
            try:
                return self._read_metadata(folder)
            except ValueError:
                continue
        return {}

    def saved_states(self, name: str) -> list:
        """The states ``track``'s ``name`` had in the backup and the previous one."""
        states = []
        for folder in self._folders():
            try:
                state = self._read_metadata(folder).get("state", {}).get(name)
            except (ValueError, AttributeError):
                continue
            if state is not None:
                states.append(state)
        return states

    def restore(self, model: keras.Model, accumulate_steps: int = 1) -> dict:
        """Load the weights and optimizer state into ``model`` (compiled, built) and the
        tracked states; returns the metadata, ``step`` checked against the optimizer's.
        A backup that cannot be read gives way to the previous one (logged)."""
        problems = []
        for folder in self._folders():
            try:
                metadata = self.check_folder(folder)
            except ValueError as error:
                problems.append(f"{folder}: {error}")
                self.unreadable.add(folder)
                continue
            saved = metadata.get("accumulate_steps", 1)
            if saved != accumulate_steps:
                raise BackupError(
                    f"The backup in {folder} was written with training.accumulate_steps={saved}, "
                    "this run "
                    f"has {accumulate_steps}: resume with the same value, or delete the folder to "
                    "start afresh."
                )
            try:
                with model.distribute_strategy.scope():
                    if not model.optimizer.built:
                        model.optimizer.build(model.trainable_variables)
                    model.load_weights(folder / self.WEIGHTS)
            except (OSError, ValueError) as error:
                problems.append(f"{folder}: {self.WEIGHTS} cannot be loaded ({error})")
                self.unreadable.add(folder)
                continue
            step = optimizer_step(model)
            if metadata.get("step", step) != step:
                raise BackupError(
                    f"The backup in {folder} says step {metadata['step']} but its optimizer "
                    f"state is at step {step}; delete the folder to start afresh."
                )
            if folder != self.directory:
                log.warning(
                    "the backup in %s cannot be read (%s); resuming from the previous one, %s, at "
                    "step %d: the updates after it are made again",
                    self.directory,
                    "; ".join(problems)
                    if problems
                    else "missing: the run stopped while replacing it",
                    folder,
                    step,
                )
            elif problems:
                log.warning("backup problems: %s", "; ".join(problems))
            states = metadata.get("state") or {}
            for name, state in self.tracked.items():
                state.set_state(states.get(name))
            self.restored_from = folder
            return {**metadata, "step": step}
        raise BackupError(
            f"No backup can be resumed from: {'; '.join(problems)}. Delete {self.directory} and "
            f"{self.previous} to start afresh."
        )

    def restore_iterator(self, iterator) -> bool:
        """Restore ``iterator``'s position; False when the backup has none
        (written by ``model.fit``'s loop)."""
        prefix = self.restored_from / self.ITERATOR / "state"
        if not prefix.with_suffix(".index").exists():
            return False
        tf.train.Checkpoint(iterator=iterator).read(str(prefix)).assert_consumed()
        return True

    def restore_input(self, stream, trained: int) -> bool:
        """Restore ``fit``'s ``stream`` (a ``training.loop.ResumableInput``) to micro-batch
        ``trained``; False when the backup has no position for it (written by the custom
        loop or before positions were saved, or the input could not be saved) or one that
        does not fit this run's input (logged: its settings changed)."""
        folder = self.restored_from / self.INPUT
        if not stream.saved_in(folder):
            return False
        try:
            stream.restore(folder, trained)
        except (tf.errors.OpError, ValueError) as error:
            log.warning(
                "the input position in %s does not fit this run's input (%s): were its settings "
                "changed?",
                folder,
                str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__,
            )
            return False
        return True

    def delete(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        shutil.rmtree(self.previous, ignore_errors=True)


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def _file_records(folder: Path) -> dict[str, list[int]]:
    """``{relative path: [size, CRC-32]}`` of every file under ``folder``, each synced
    to the disk first (a full disk then fails the save, not a later restore)."""
    records = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
            records[path.relative_to(folder).as_posix()] = [path.stat().st_size, _crc32(path)]
    return records


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


class ValidationBleu(keras.callbacks.Callback):
    """Greedy-decodes a sample of the validation set after each epoch and adds
    ``val_bleu``/``val_chrf`` (sacrebleu, detokenized, cased) to the logs and
    to TensorBoard."""

    def __init__(
        self, translator, pairs: Sequence[tuple[str, str]], summary_dir: Path | None = None
    ):
        super().__init__()
        self.translator = translator
        self.sources = [source for source, _ in pairs]
        self.references = [target for _, target in pairs]
        self.writer = tf.summary.create_file_writer(str(summary_dir)) if summary_dir else None

    def score(self) -> dict:
        """BLEU and chrF of the model's weights now on the validation sample."""
        hypotheses = self.translator.translate(self.sources, batch_size=128)
        return score_translations(hypotheses, self.references)

    def on_epoch_end(self, epoch, logs=None):
        started = time.time()
        scores = self.score()
        if logs is not None:
            logs["val_bleu"] = scores["bleu"]
            logs["val_chrf"] = scores["chrf"]
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


# The validation metrics that rank epochs: the logs' key, and whether higher is better.
METRICS = {"bleu": ("val_bleu", True), "loss": ("val_loss", False)}


def better(metric: str, value, than) -> bool:
    """Whether ``value`` of ``metric`` beats ``than`` (``None`` beats nothing, loses to all)."""
    if value is None:
        return False
    if than is None:
        return True
    return value > than if METRICS[metric][1] else value < than


def metric_name(metric: str) -> str:
    return {"bleu": "validation BLEU", "loss": "validation loss"}[metric]


def metric_value(metric: str, value) -> str:
    """``value`` as the log shows it: BLEU with 2 decimals, a loss with 4."""
    if value is None:
        return "none"
    return f"{value:.2f}" if metric == "bleu" else f"{value:.4f}"


class KeepSnapshots(keras.callbacks.Callback):
    """Writes the model weights (no optimizer state) at each epoch end to
    ``directory/epoch_NNNN.npz`` with the epoch's ``metric`` (``val_bleu`` or
    ``val_loss`` from the logs) and keeps the snapshots of the ``last`` last
    epochs and of the ``best`` best ones, for the average and the final choice
    at the end (``average_weights``).

    A snapshot that is no longer kept is deleted once no backup that a resumed
    run could restore (``protect()``: the snapshot names the backup and the
    previous one kept) needs it. ``get_state``/``set_state`` are what the
    backup saves and restores (``TrainingBackup.track``).
    """

    def __init__(
        self,
        directory: Path,
        *,
        last: int,
        best: int = 0,
        metric: str | None = None,
        protect=None,
    ):
        super().__init__()
        if last < 0 or best < 0 or last + best < 1:
            raise ValueError(f"keep at least one snapshot (last={last}, best={best}).")
        if best and metric is None:
            raise ValueError("the best epochs need a validation metric.")
        self.directory = Path(directory)
        self.last, self.best, self.metric = last, best, metric
        self.protect = protect or (lambda: set())
        self.values: dict[int, float | None] = {}  # epoch (1-based) → its metric value

    # The state a backup holds.
    def get_state(self) -> dict:
        return {
            "values": {str(epoch): value for epoch, value in self.values.items()},
            "kept": [self.path(epoch).name for epoch in self.kept_epochs()],
        }

    def set_state(self, state: dict | None) -> None:
        if state is None:  # a backup of an older version: the snapshots on the disk
            self.values = {
                int(path.stem.split("_")[1]): None for path in self.directory.glob("epoch_*.npz")
            }
            return
        self.values = {int(epoch): value for epoch, value in state.get("values", {}).items()}

    # Which epochs.
    def path(self, epoch: int) -> Path:
        return self.directory / f"epoch_{epoch:04d}.npz"

    def last_epochs(self, count: int | None = None) -> list[int]:
        epochs = sorted(self.values)
        return epochs[-(self.last if count is None else count) :] if epochs else []

    def best_epochs(self, count: int | None = None) -> list[int]:
        """The best ``count`` epochs, best first (ties: the later, trained longer)."""
        if self.metric is None:
            return []
        scored = [epoch for epoch in sorted(self.values) if self.values[epoch] is not None]
        sign = -1.0 if METRICS[self.metric][1] else 1.0
        scored.sort(key=lambda epoch: (sign * self.values[epoch], -epoch))
        return scored[: self.best if count is None else count]

    def best_epoch(self) -> int | None:
        best = self.best_epochs(1)
        return best[0] if best else None

    def kept_epochs(self) -> list[int]:
        return sorted(set(self.last_epochs()) | set(self.best_epochs()))

    def paths(self, epochs=None) -> list[Path]:
        return [self.path(epoch) for epoch in (self.kept_epochs() if epochs is None else epochs)]

    def on_epoch_end(self, epoch, logs=None):
        buffer = io.BytesIO()
        np.savez(buffer, *self.model.get_weights())
        write_atomically({self.path(epoch + 1): buffer.getvalue()})
        value = None
        if self.metric is not None and logs is not None:
            value = logs.get(METRICS[self.metric][0])
        self.values[epoch + 1] = None if value is None else float(value)
        self.collect()

    def collect(self) -> None:
        """Delete the snapshots neither kept nor needed by a backup."""
        needed = {path.name for path in self.paths()} | set(self.protect())
        for path in self.directory.glob("epoch_*.npz"):
            if path.name not in needed:
                path.unlink(missing_ok=True)


class EarlyStopping(keras.callbacks.Callback):
    """Ends the run when ``metric`` (``bleu``: ``val_bleu``, higher is better;
    ``loss``: ``val_loss``) has not improved by more than ``min_delta`` for
    ``patience`` validations in a row. Unlike Keras' ``EarlyStopping`` its
    state (the best value so far, its epoch, the validations without
    improvement) survives ``fit``'s restarts and is saved with each backup
    (``get_state``/``set_state``)."""

    def __init__(self, metric: str, patience: int, min_delta: float = 0.0):
        super().__init__()
        if metric not in METRICS:
            raise ValueError(f"training.early_stopping={metric!r}: use one of {sorted(METRICS)}.")
        if patience < 1:
            raise ValueError(f"training.patience must be >= 1, got {patience}.")
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

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(METRICS[self.metric][0])
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


def average_weights(paths: Sequence[Path]) -> list[np.ndarray]:
    """Element-wise mean of the weight lists stored in ``paths``."""
    if not paths:
        raise ValueError("No checkpoints to average.")
    total = None
    for path in paths:
        with np.load(path) as stored:
            weights = [stored[f"arr_{i}"].astype(np.float64) for i in range(len(stored.files))]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    return [(t / len(paths)).astype(np.float32) for t in total]


class EpochHistory(keras.callbacks.Callback):
    """Keeps the per-epoch logs of every epoch of a run, across any number of resumes.

    A backup saves the logs of the epochs done so far (``TrainingBackup.track``);
    a resumed run gets them back (``before``) and ``whole`` puts them in front
    of the resumed process's own history, so ``metrics.json`` and the learning
    curves span the whole run. Place it after the other per-epoch callbacks,
    which add to the logs (``val_bleu``, ``epoch_seconds``).

    Example:
        >>> history = EpochHistory()
        >>> history.set_state({"history": {"loss": [3.0, 2.5]}})
        >>> history.whole({"loss": [2.1]})
        {'loss': [3.0, 2.5, 2.1]}
    """

    def __init__(self):
        super().__init__()
        self.before: dict[str, list[float]] = {}  # the epochs before this process
        self.recorded: dict[str, list[float]] = {}  # this process's epochs

    def on_epoch_end(self, epoch, logs=None):
        for name, value in (logs or {}).items():
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


class TimeBudget(keras.callbacks.Callback):
    """Stops training at the end of the last epoch that fits in ``minutes`` of
    training time, counted over all the run's processes (a resumed run goes on
    with the time its backup recorded), so a recipe can promise "at most N
    minutes" on any machine. With ``minutes=None`` it only counts the time
    (``seconds``), for the run's ``metrics.json``.

    The clock starts when the callback is created (just before training);
    ``set_state`` (a backup's, ``TrainingBackup.track``) moves it back by the
    seconds used up to that backup (the updates a kill lost after it are made
    again, and counted once). A new epoch is started only if one more epoch as
    long as the last one (end to end, validation and other callbacks included)
    still ends inside the budget. Each epoch's duration is added to the logs as
    ``epoch_seconds``. Place it after the other per-epoch callbacks so their
    time is counted.
    """

    def __init__(self, minutes: float | None):
        super().__init__()
        if minutes is not None and minutes <= 0:
            raise ValueError(
                f"training.max_minutes must be > 0 (or null for no limit), got {minutes}."
            )
        self.budget = None if minutes is None else 60.0 * minutes
        self.started = self.last_end = time.time()

    def seconds(self) -> float:
        """The training time used so far, over all the run's processes."""
        return time.time() - self.started

    def get_state(self) -> dict:
        """The seconds used so far, and those of them in the epoch under way."""
        now = time.time()
        return {
            "seconds": round(now - self.started, 3),
            "epoch_seconds": round(now - self.last_end, 3),
        }

    def set_state(self, state: dict | None) -> None:
        if not state:  # a fresh run, or a backup written before the time was recorded
            return
        used = float(state.get("seconds", 0.0))
        self.started -= used  # this process's seconds so far count too
        self.last_end -= min(used, float(state.get("epoch_seconds", 0.0)))
        if self.budget is not None:
            log.info(
                "time budget: %.1f of %.1f min used before this restart",
                used / 60,
                self.budget / 60,
            )

    def on_epoch_end(self, epoch, logs=None):
        now = time.time()
        seconds, self.last_end = now - self.last_end, now
        if logs is not None:
            logs["epoch_seconds"] = round(seconds, 1)
        elapsed = now - self.started
        if self.budget is not None and elapsed + seconds > self.budget:
            log.info(
                "time budget: %.1f of %.1f min used, another epoch would not fit; stopping after "
                "epoch %d",
                elapsed / 60,
                self.budget / 60,
                epoch + 1,
            )
            self.model.stop_training = True
