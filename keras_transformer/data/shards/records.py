"""The shards' records: blocks of examples as raw id arrays, written and decoded.

A record holds up to ``EXAMPLES_PER_RECORD`` consecutive examples of a shard:
the raw little-endian bytes (uint16 when every id and length fits, else
int32) of ``[k, src lengths (k), tgt lengths (k), src tokens..., tgt
tokens...]``, the tokens without EOS/BOS. ``_Ragged`` holds examples as
numpy arrays while they are written; ``_decoder`` rebuilds the model's ids
from a record.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_transformer.data.sequences import source_ids, target_ids
from keras_transformer.numerics import ceil_div

EXAMPLES_PER_RECORD = 64


def _id_dtype(src_tokenizer, tgt_tokenizer, max_src_length: int, max_tgt_length: int) -> np.dtype:
    """uint16 when every id and length fits in it, else int32 (little-endian)."""
    fits = (
        max(src_tokenizer.vocab_size, tgt_tokenizer.vocab_size) <= 1 << 16
        and max(max_src_length, max_tgt_length + 1, EXAMPLES_PER_RECORD) < 1 << 16
    )
    return np.dtype("<u2" if fits else "<i4")


def _shard_name(index: int, count: int) -> str:
    return f"shard-{index:05d}-of-{count:05d}.tfrecord"


def _starts(lengths: np.ndarray) -> np.ndarray:
    """Where each row of a ragged array starts in its values, and the end: ``len + 1`` offsets."""
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])


def _take_rows(
    values: np.ndarray, lengths: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``order`` of the ragged array ``(values, lengths)``, as a ragged array."""
    picked = lengths[order]
    if not len(picked):
        return values[:0], picked
    shift = np.repeat(_starts(lengths)[order] - _starts(picked)[:-1], picked)
    return values[np.arange(len(shift)) + shift], picked


class _Ragged:
    """Examples as numpy arrays: token counts and the tokens of each side, no specials."""

    def __init__(self, src_lengths, tgt_lengths, src_tokens, tgt_tokens):
        self.src_lengths, self.tgt_lengths = src_lengths, tgt_lengths
        self.src_tokens, self.tgt_tokens = src_tokens, tgt_tokens

    def __len__(self) -> int:
        return len(self.src_lengths)

    def take(self, order: np.ndarray) -> _Ragged:
        src_tokens, src_lengths = _take_rows(self.src_tokens, self.src_lengths, order)
        tgt_tokens, tgt_lengths = _take_rows(self.tgt_tokens, self.tgt_lengths, order)
        return _Ragged(src_lengths, tgt_lengths, src_tokens, tgt_tokens)

    def chunks(self, sizes) -> list[_Ragged]:
        """Consecutive pieces of ``sizes`` examples (which sum to ``len(self)``)."""
        bounds = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        src, tgt = _starts(self.src_lengths), _starts(self.tgt_lengths)
        return [
            _Ragged(
                self.src_lengths[a:b],
                self.tgt_lengths[a:b],
                self.src_tokens[src[a] : src[b]],
                self.tgt_tokens[tgt[a] : tgt[b]],
            )
            for a, b in zip(bounds[:-1], bounds[1:])
        ]

    def record(self, dtype: np.dtype) -> bytes:
        """The record layout of the module docstring."""
        return (
            np.concatenate(
                [[len(self)], self.src_lengths, self.tgt_lengths, self.src_tokens, self.tgt_tokens]
            )
            .astype(dtype)
            .tobytes()
        )

    def append_to(self, handle, dtype: np.dtype) -> None:
        """One chunk of a temporary file: the count, then the arrays."""
        handle.write(np.int64(len(self)).tobytes())
        for lengths in (self.src_lengths, self.tgt_lengths):
            handle.write(lengths.astype(np.int32).tobytes())
        for tokens in (self.src_tokens, self.tgt_tokens):
            handle.write(tokens.astype(dtype).tobytes())

    @staticmethod
    def read(path: Path, dtype: np.dtype) -> _Ragged:
        """A temporary file's chunks, concatenated."""

        def array(handle, kind: np.dtype, count: int) -> np.ndarray:
            return np.frombuffer(handle.read(count * kind.itemsize), kind)

        parts = []
        with open(path, "rb") as handle:
            while header := handle.read(8):
                count = int(np.frombuffer(header, np.int64)[0])
                src_lengths, tgt_lengths = (
                    array(handle, np.dtype(np.int32), count) for _ in range(2)
                )
                src_tokens = array(handle, dtype, int(src_lengths.sum()))
                tgt_tokens = array(handle, dtype, int(tgt_lengths.sum()))
                parts.append((src_lengths, tgt_lengths, src_tokens, tgt_tokens))
        if not parts:
            return _Ragged(*(np.zeros(0, kind) for kind in (np.int32, np.int32, dtype, dtype)))
        return _Ragged(*(np.concatenate(column) for column in zip(*parts)))


def _write_records(path: Path, examples: _Ragged, dtype: np.dtype) -> None:
    """A final shard: ``examples`` in blocks of ``EXAMPLES_PER_RECORD``."""
    blocks = ceil_div(len(examples), EXAMPLES_PER_RECORD)
    sizes = [EXAMPLES_PER_RECORD] * (blocks - 1) + [
        len(examples) - EXAMPLES_PER_RECORD * (blocks - 1)
    ]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for block in examples.chunks(sizes):
            writer.write(block.record(dtype))


def _decoder(dtype: tf.DType, special_ids: dict[str, int]) -> Callable:
    """A record (a block of examples) to ragged ``(src_ids, tgt_in_ids, tgt_out_ids)``."""

    def decode(record):
        flat = tf.cast(tf.io.decode_raw(record, dtype, little_endian=True), tf.int32)
        count = flat[0]
        src_lengths, tgt_lengths = flat[1 : 1 + count], flat[1 + count : 1 + 2 * count]
        tokens = flat[1 + 2 * count :]
        src_total = tf.reduce_sum(src_lengths)
        src = tf.RaggedTensor.from_row_lengths(tokens[:src_total], src_lengths, validate=False)
        tgt = tf.RaggedTensor.from_row_lengths(tokens[src_total:], tgt_lengths, validate=False)
        return (
            source_ids(src, eos_id=special_ids["src_eos_id"]),
            *target_ids(tgt, bos_id=special_ids["tgt_bos_id"], eos_id=special_ids["tgt_eos_id"]),
        )

    return decode
