"""Callbacks of the training program. The per-epoch ones (validation BLEU, the
last-K weights for averaging, a wall-time budget) serve ``model.fit`` and
``custom_fit`` alike; ``AtomicBackupAndRestore`` is ``model.fit``'s backup."""

from __future__ import annotations

import io
import json
import logging
import time
from pathlib import Path
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.files import write_atomically, write_text_atomically, write_through_temp
from training.scoring import score_translations

log = logging.getLogger("training")


class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """``keras.callbacks.BackupAndRestore`` whose backup survives being killed
    while it is written.

    Keras overwrites ``latest.weights.h5`` in place; a run killed during that
    write (pre-emption, OOM killer, Ctrl-\\) leaves a truncated HDF5 file next to
    the previous epoch's metadata, and the resumed run dies in ``h5py`` with
    "bad object header version number". Here both files are written to temp
    paths and renamed into place, weights first: a kill at any moment leaves a
    loadable backup, at worst one save behind (that epoch is then re-run).

    Args:
        backup_dir: folder for ``latest.weights.h5`` and ``training_metadata.json``.
        save_freq: ``"epoch"`` or a number of batches, as in Keras.
        delete_checkpoint: remove the backup when training finishes (Keras' default).
    """

    def __init__(self, backup_dir: str, save_freq: str | int = "epoch", delete_checkpoint: bool = True):
        super().__init__(backup_dir, save_freq=save_freq, delete_checkpoint=delete_checkpoint)

    def _save_model(self):
        write_through_temp(self._weights_path, lambda temp: self.model.save_weights(str(temp), overwrite=True))
        write_text_atomically(self._training_metadata_path,
                              json.dumps({"epoch": self._current_epoch, "batch": self._last_batch_seen}))


class ValidationBleu(keras.callbacks.Callback):
    """Greedy-decodes a sample of the validation set after each epoch and adds
    ``val_bleu``/``val_chrf`` (sacrebleu, detokenized, cased) to the logs and
    to TensorBoard."""

    def __init__(self, translator, pairs: Sequence[tuple[str, str]], summary_dir: Path | None = None):
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
        log.info("epoch %d: validation BLEU %.2f chrF %.2f (%d sentences, greedy, %.1fs)", epoch + 1,
                 scores["bleu"], scores["chrf"], len(self.references), time.time() - started)
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
            raise ValueError(f"training.max_minutes must be > 0 (or null for no limit), got {minutes}.")
        self.budget = 60.0 * minutes
        self.started = self.last_end = time.time()

    def on_epoch_end(self, epoch, logs=None):
        now = time.time()
        seconds, self.last_end = now - self.last_end, now
        if logs is not None:
            logs["epoch_seconds"] = round(seconds, 1)
        elapsed = now - self.started
        if elapsed + seconds > self.budget:
            log.info("time budget: %.1f of %.1f min used, another epoch would not fit; stopping after epoch %d",
                     elapsed / 60, self.budget / 60, epoch + 1)
            self.model.stop_training = True
