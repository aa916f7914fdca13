"""A run's resumable state: ``TrainingBackup``, one folder replaced whole at each
save with the one before it kept beside it. Both loops write it (``training.loop``'s
``StepBackup`` during ``fit``, ``custom_fit`` itself) and resume from it."""

from __future__ import annotations

import json
import logging
import os
import shutil
import zlib
from pathlib import Path

import keras
import tensorflow as tf

from keras_transformer.files import staging_directory
from keras_transformer.training.loop import optimizer_step
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
        ``training.inputs.ResumableInput``). An input that cannot be saved (a
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
        """Restore ``fit``'s ``stream`` (a ``training.inputs.ResumableInput``) to micro-batch
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
