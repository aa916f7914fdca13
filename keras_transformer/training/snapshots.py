"""The epoch snapshots a run keeps: ``KeepSnapshots`` writes the weights at each epoch
end and keeps those of the last and the best epochs (by the validation metric), for
the average and the final choice at the end of the run (``average_weights``)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from keras_transformer.files import write_atomically
from keras_transformer.training.epochs import METRICS, EpochCallback, EpochRecord


class KeepSnapshots(EpochCallback):
    """Writes the model weights (no optimizer state) at each epoch end to
    ``directory/epoch_NNNN.npz`` with the epoch's ``metric`` (``val_bleu`` or
    ``val_loss``, read through the ``EpochRecord``) and keeps the snapshots of the ``last`` last
    epochs and of the ``best`` best ones, for the average and the final choice
    at the end (``average_weights``).

    A snapshot that is no longer kept is deleted once no backup that a resumed
    run could restore (``protect()``: the snapshot names the backup and the
    previous one kept) needs it. ``get_state``/``set_state`` are what the
    backup saves and restores (``TrainingBackup.track``).

    Args:
        directory: the snapshots' folder (``Workdir.checkpoints_dir``).
        last: how many of the last epochs to keep.
        best: how many of the best epochs (by ``metric``) to keep.
        metric: ``"bleu"`` or ``"loss"``, what ranks the epochs; `None` ranks none.
        protect: returns the snapshot names a backup still needs.
        record: the run's shared ``EpochRecord`` (`None`: the loop's logs only).

    Raises:
        ValueError: nothing to keep, or best epochs without a metric.
    """

    def __init__(
        self,
        directory: Path,
        *,
        last: int,
        best: int = 0,
        metric: str | None = None,
        protect=None,
        record: EpochRecord | None = None,
    ):
        super().__init__(record)
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

    def epoch_end(self, epoch: int, record: EpochRecord) -> None:
        buffer = io.BytesIO()
        np.savez(buffer, *self.model.get_weights())
        write_atomically({self.path(epoch + 1): buffer.getvalue()})
        value = None
        if self.metric is not None:
            value = record.value(METRICS[self.metric][0])
        self.values[epoch + 1] = None if value is None else float(value)
        self.collect()

    def collect(self) -> None:
        """Delete the snapshots neither kept nor needed by a backup."""
        needed = {path.name for path in self.paths()} | set(self.protect())
        for path in self.directory.glob("epoch_*.npz"):
            if path.name not in needed:
                path.unlink(missing_ok=True)


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
