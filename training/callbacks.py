"""Callbacks of the training program and its backup. The per-epoch callbacks
(validation BLEU, the last-K weights for averaging, a wall-time budget) serve
``model.fit`` and ``custom_fit`` alike; ``TrainingBackup`` is both loops'
resumable state (``training.loop``'s ``StepBackup`` writes it during ``fit``)."""

from __future__ import annotations

import io
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.files import replace_directory, staging_directory, write_atomically
from training.loop import optimizer_step
from training.steps import BackupError
from training.scoring import score_translations

log = logging.getLogger("training")


class TrainingBackup:
    """A run's resumable state in one folder, replaced whole at each save.

    ``latest.weights.h5`` holds the weights and the optimizer state (its step
    and, under accumulation, its gradient accumulators, zero at an update);
    ``training_metadata.json`` the step, the epochs done, the micro-batches
    consumed and ``accumulate_steps``; ``iterator/`` (custom loop) the input
    iterator's position (``tf.train.Checkpoint``: tf.data's buffers, e.g. the
    shuffle buffer, are in it). Each save writes a new folder beside the old
    one and swaps it in (``replace_directory``): a kill at any moment, even
    during the write, leaves the previous backup or the new one, complete.

    Args:
        directory: the backup folder (``Workdir.backup_dir``).
    """

    WEIGHTS = "latest.weights.h5"
    METADATA = "training_metadata.json"
    ITERATOR = "iterator"

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.iterator_checkpoints = True  # until an iterator cannot be saved

    def exists(self) -> bool:
        return (self.directory / self.WEIGHTS).exists()

    def save(
        self, model: keras.Model, *, step: int, epoch: int, accumulate_steps: int = 1, iterator=None
    ) -> None:
        for stale in self.directory.parent.glob(f".{self.directory.name}.backup-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a run killed while it saved
        staging = staging_directory(self.directory, "backup")
        try:
            model.save_weights(str(staging / self.WEIGHTS))
            if iterator is not None and self.iterator_checkpoints:
                try:
                    tf.train.Checkpoint(iterator=iterator).write(
                        str(staging / self.ITERATOR / "state")
                    )
                except (tf.errors.OpError, ValueError) as error:  # e.g. a from_generator stage
                    self.iterator_checkpoints = False
                    shutil.rmtree(staging / self.ITERATOR, ignore_errors=True)
                    log.warning(
                        "the input iterator cannot be saved (%s); a resumed run will skip the batches "
                        "already used instead",
                        str(error).strip().splitlines()[0],
                    )
            metadata = {
                "step": step,
                "epoch": epoch,
                "batches": step * accumulate_steps,
                "accumulate_steps": accumulate_steps,
            }
            (staging / self.METADATA).write_text(json.dumps(metadata), encoding="utf-8")
            replace_directory(staging, self.directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def metadata(self) -> dict:
        path = self.directory / self.METADATA
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    def restore(self, model: keras.Model, accumulate_steps: int = 1) -> dict:
        """Load the weights and optimizer state into ``model`` (compiled, built);
        returns the metadata, ``step`` checked against the optimizer's."""
        metadata = self.metadata()
        saved = metadata.get("accumulate_steps", 1)
        if saved != accumulate_steps:
            raise BackupError(
                f"The backup in {self.directory} was written with training.accumulate_steps={saved}, this run "
                f"has {accumulate_steps}: resume with the same value, or delete the folder to start afresh."
            )
        with model.distribute_strategy.scope():
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
            model.load_weights(self.directory / self.WEIGHTS)
        step = optimizer_step(model)
        if metadata.get("step", step) != step:
            raise BackupError(
                f"The backup in {self.directory} says step {metadata['step']} but its optimizer "
                f"state is at step {step}; delete the folder to start afresh."
            )
        return {**metadata, "step": step}

    def restore_iterator(self, iterator) -> bool:
        """Restore ``iterator``'s position; False when the backup has none
        (written by ``model.fit``'s loop)."""
        prefix = self.directory / self.ITERATOR / "state"
        if not prefix.with_suffix(".index").exists():
            return False
        tf.train.Checkpoint(iterator=iterator).read(str(prefix)).assert_consumed()
        return True

    def delete(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


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

    def on_epoch_end(self, epoch, logs=None):
        started = time.time()
        hypotheses = self.translator.translate(self.sources, batch_size=128)
        scores = score_translations(hypotheses, self.references)
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


class KeepLastWeights(keras.callbacks.Callback):
    """Keeps the model weights of the last ``keep`` epochs (no optimizer state)
    in ``directory`` so that ``average_weights`` can average them at the end,
    as the paper averages its last 5 checkpoints."""

    def __init__(self, directory: Path, keep: int):
        super().__init__()
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}.")
        self.directory = Path(directory)
        self.keep = keep

    def on_epoch_end(self, epoch, logs=None):
        buffer = io.BytesIO()
        np.savez(buffer, *self.model.get_weights())
        write_atomically({self.directory / f"epoch_{epoch + 1:04d}.npz": buffer.getvalue()})
        for old in self.paths()[: -self.keep]:
            old.unlink()

    def paths(self) -> list[Path]:
        return sorted(self.directory.glob("epoch_*.npz"))


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


class TimeBudget(keras.callbacks.Callback):
    """Stops training at the end of the last epoch that fits in ``minutes`` of
    wall time, so a recipe can promise "at most N minutes" on any machine.

    The clock starts when the callback is created (just before training). A
    new epoch is started only if one more epoch as long as the last one (end to
    end, validation and other callbacks included) still ends inside the budget.
    Each epoch's duration is added to the logs as ``epoch_seconds``. Place it
    after the other per-epoch callbacks so their time is counted.
    """

    def __init__(self, minutes: float):
        super().__init__()
        if minutes <= 0:
            raise ValueError(
                f"training.max_minutes must be > 0 (or null for no limit), got {minutes}."
            )
        self.budget = 60.0 * minutes
        self.started = self.last_end = time.time()

    def on_epoch_end(self, epoch, logs=None):
        now = time.time()
        seconds, self.last_end = now - self.last_end, now
        if logs is not None:
            logs["epoch_seconds"] = round(seconds, 1)
        elapsed = now - self.started
        if elapsed + seconds > self.budget:
            log.info(
                "time budget: %.1f of %.1f min used, another epoch would not fit; stopping after epoch %d",
                elapsed / 60,
                self.budget / 60,
                epoch + 1,
            )
            self.model.stop_training = True
