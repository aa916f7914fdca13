"""The ``model.fit`` loop's resumable input: one ``tf.data`` stream of micro-batches
for all the ``fit`` calls of a run (``ResumableInput``), whose position each backup
saves, and ``skip_batches``, which reads and drops the batches a backup without that
position has already used."""

from __future__ import annotations

import collections
import io
import json
import threading
from pathlib import Path

import numpy as np
import tensorflow as tf


def skip_batches(iterator, count: int) -> int:
    """Read and drop ``count`` elements of ``iterator`` (a ``tf.data`` iterator), in one
    ``tf.function`` call; returns how many there were (fewer when the data ran out). The
    iterator stays the one over its dataset, so its later checkpoints fit a run that
    restores them into a new iterator over the same dataset (``dataset.skip`` would not)."""

    @tf.function
    def drop(iterator, count):
        dropped = tf.constant(0, tf.int64)
        for _ in tf.range(count):
            if not iterator.get_next_as_optional().has_value():
                break
            dropped += 1
        return dropped

    return int(drop(iterator, tf.constant(count, tf.int64))) if count else 0


class ResumableInput:
    """One stream of training micro-batches for all the ``model.fit`` calls of a run,
    whose position a backup saves and a resumed run restores, in constant time.

    Contract: every new iterator over ``dataset()`` yields the stream from micro-batch
    ``trained`` on (``advance`` sets it: the micro-batches trained so far), and the
    stream is ``source``'s elements in order, each once. ``save(folder)`` then
    ``restore(folder)`` in a new process (over the same ``source``) continue the stream
    at the micro-batch that was ``trained`` at the save, reading none of those before
    it; ``skip(count)`` gets there by reading and dropping them instead.

    How: ``source`` (repeating) is read through one ``tf.data`` iterator on the host;
    ``dataset()`` is a ``from_generator`` over it. What ``fit`` reads ahead of training
    (its prefetch buffer; under a distribution strategy, also the iterator Keras opens
    to build the model, then drops) is kept here until ``trained`` passes it, and a new
    iterator hands it out again. The saved state is the host iterator's
    (``tf.train.Checkpoint``: tf.data's buffers, the shuffle buffer and the files'
    offsets included) and the micro-batches read ahead of ``trained``.

    Args:
        source: the micro-batches, from their start (``pad_batches_for_replicas``
            already applied: ``fit`` splits them between the replicas).
    """

    STATE = "state"  # the host iterator's checkpoint prefix
    AHEAD = "ahead.npz"  # the micro-batches read ahead of training
    POSITION = "position.json"

    def __init__(self, source: tf.data.Dataset):
        self.source = source
        self.element_spec = source.element_spec
        self._lock = threading.Lock()
        self._reset(0)

    def _reset(self, trained: int) -> None:
        with tf.device("/cpu:0"):
            self._iterator = iter(self.source)
        self._ahead: collections.deque = collections.deque()  # micro-batches first, first + 1, ...
        self._first = self._pulled = self._trained = trained
        self._ended = False

    @property
    def trained(self) -> int:
        """The micro-batches trained so far: where a new iterator over ``dataset()`` starts."""
        return self._trained

    @property
    def read(self) -> int:
        """The micro-batches read from ``source`` so far (from its start)."""
        return self._pulled

    def advance(self, trained: int) -> None:
        """Note that ``trained`` micro-batches (never more than ``fit`` has used) are
        trained: the ones before are dropped, a new iterator starts there."""
        with self._lock:
            drop = max(0, min(trained, self._pulled) - self._first)
            for _ in range(drop):
                self._ahead.popleft()
            self._first += drop
            self._trained = max(self._trained, trained)

    def _batch(self, index: int):
        """Micro-batch ``index`` of the stream, or ``None`` once it is gone (dropped, or
        past the end of a finite source)."""
        with self._lock:
            if index < self._first:
                return None  # an iterator fit has dropped, left behind
            while self._pulled <= index:
                if self._ended:
                    return None
                try:
                    batch = next(self._iterator)
                except StopIteration:
                    self._ended = True
                    return None
                self._ahead.append(tf.nest.map_structure(lambda tensor: tensor.numpy(), batch))
                self._pulled += 1
            return self._ahead[index - self._first]

    def _batches(self):
        index = self._trained
        while (batch := self._batch(index)) is not None:
            yield batch
            index += 1

    def dataset(self) -> tf.data.Dataset:
        """What ``fit`` reads: the stream from micro-batch ``trained`` on, for each new
        iterator."""
        batches = tf.data.Dataset.from_generator(self._batches, output_signature=self.element_spec)
        return batches.prefetch(tf.data.AUTOTUNE)

    def skip(self, count: int) -> None:
        """Start the stream at micro-batch ``count`` by reading and dropping the ones
        before it (a fresh stream: nothing read yet)."""
        with self._lock:
            if self._pulled:
                raise ValueError("skip starts a fresh stream; this one has been read.")
            dropped = skip_batches(self._iterator, count)
            self._ended = dropped < count
            self._first = self._pulled = self._trained = count

    def save(self, folder: Path) -> None:
        """Write the position at ``trained`` into ``folder`` (new): the host iterator's
        state and the micro-batches read ahead of ``trained``. Raises
        ``tf.errors.OpError`` or ``ValueError`` when the iterator cannot be saved."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            tf.train.Checkpoint(iterator=self._iterator).write(str(folder / self.STATE))
            ahead = list(self._ahead)[self._trained - self._first :]
            arrays = {
                f"b{index}_{part}": array
                for index, batch in enumerate(ahead)
                for part, array in enumerate(tf.nest.flatten(batch))
            }
            buffer = io.BytesIO()
            np.savez(buffer, **arrays)
            (folder / self.AHEAD).write_bytes(buffer.getvalue())
            position = {"trained": self._trained, "ahead": len(ahead), "ended": self._ended}
            (folder / self.POSITION).write_text(json.dumps(position), encoding="utf-8")

    @classmethod
    def saved_in(cls, folder: Path) -> bool:
        """Whether ``folder`` holds a saved position."""
        return (Path(folder) / cls.POSITION).is_file()

    def restore(self, folder: Path, trained: int) -> None:
        """Continue the stream at micro-batch ``trained`` from the position ``save`` wrote
        in ``folder``. Raises ``ValueError`` (the position is another one, or does not fit
        ``source``: a changed input pipeline) or ``tf.errors.OpError`` (unreadable); the
        stream is then a fresh one, as before the call."""
        folder = Path(folder)
        try:
            position = json.loads((folder / self.POSITION).read_text(encoding="utf-8"))
            if position["trained"] != trained:
                raise ValueError(
                    f"it is at micro-batch {position['trained']}, the backup's step at {trained}"
                )
            with self._lock:
                tf.train.Checkpoint(iterator=self._iterator).read(
                    str(folder / self.STATE)
                ).assert_consumed()
                with np.load(folder / self.AHEAD) as stored:
                    parts = len(tf.nest.flatten(self.element_spec))
                    ahead = [
                        tf.nest.pack_sequence_as(
                            self.element_spec,
                            [stored[f"b{index}_{part}"] for part in range(parts)],
                        )
                        for index in range(position["ahead"])
                    ]
                self._ahead = collections.deque(ahead)
                self._first = self._trained = trained
                self._pulled = trained + len(ahead)
                self._ended = bool(position.get("ended"))
        except (AssertionError, KeyError, OSError, json.JSONDecodeError) as error:
            self._reset(0)
            message = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise ValueError(message) from error
        except (ValueError, tf.errors.OpError):
            self._reset(0)
            raise
