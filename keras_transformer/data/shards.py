"""Prepared corpora: tokenized once, shuffled, written as sharded TFRecord files.

A big corpus is tokenized and length-filtered once, by ``prepare_shards``,
instead of at the start of every run, and written shuffled, in files that
training reads in parallel, each worker its own (``sharded_dataset``)::

    DIR/manifest.json                   what the shards hold and what made them
    DIR/shard-00000-of-00042.tfrecord   about examples_per_shard examples each
    ...

Preparing takes bounded memory whatever the corpus size. Pass 1 tokenizes
in the graph, a batch at a time, and appends each example to one of ``K``
temporary files picked at random (``K = ceil(pairs / examples_per_shard)``,
at most ``MAX_OPEN_FILES``); pass 2 loads one temporary file at a time,
permutes it and writes it out as its final shard(s). The result is a
uniformly shuffled corpus; memory holds one temporary file (about
``max(examples_per_shard, pairs / MAX_OPEN_FILES)`` examples, as numpy
arrays of ids). The same pairs, tokenizers and ``seed`` give byte-identical
shards. Everything is written in a hidden folder beside ``DIR`` and renamed
onto it at the end, so a killed preparation leaves the previous one (or
none), never half of one.

A record holds up to ``EXAMPLES_PER_RECORD`` consecutive examples of a
shard (already in random order), so reading decodes a block of examples per
op instead of one: the raw little-endian bytes (uint16 when every id and
length fits, else int32) of ``[k, src lengths (k), tgt lengths (k), src
tokens..., tgt tokens...]``, the tokens without EOS/BOS (the limits already
applied). Reading rebuilds ``src_ids``, ``tgt_in_ids`` and ``tgt_out_ids``
with the functions ``make_dataset`` uses (``keras_transformer.data.sequences``).

``manifest.json`` records the shards and their sizes, the counts (pairs
read, dropped as too long, ids), the length limits, and a fingerprint of
what determines the examples (tokenizer models, limits, length filter, a
description of the source) so that a preparation made with other settings
is detected (``PreparedShards.check``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.data.pipeline import (
    _BatchPlan,
    _check_length_filter,
    _check_lengths,
    _check_pairs,
    _check_positive,
    _examples,
    _tokenized_batches,
    pad_id_of,
)
from keras_transformer.data.sequences import source_ids, target_ids
from keras_transformer.files import replace_directory, staging_directory
from keras_transformer.numerics import ceil_div

logger = logging.getLogger("keras_transformer.data")

PathLike = str | os.PathLike
FORMAT = 1
MANIFEST = "manifest.json"
MAX_OPEN_FILES = 256  # temporary files written at once in pass 1
EXAMPLES_PER_RECORD = 64
COUNT_BATCH = 8192  # pairs counted per step when the source does not know its length
SHUFFLE_BUFFER = 10_000


class PreparationError(ValueError):
    """A folder that holds no usable prepared corpus; the message says what to do."""


class StalePreparationError(PreparationError):
    """A prepared corpus made with other tokenizers, limits or source than asked for."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tokenizer_digest(tokenizer) -> str:
    """What identifies a tokenizer's ids: its SentencePiece model, and for a
    tokenizer with its own vocabulary (``MarianSubwordTokenizer``) that
    vocabulary and its special ids too."""
    vocabulary = getattr(tokenizer, "vocabulary", None)
    if vocabulary is None:
        return _sha256(tokenizer.model_bytes)
    ids = [tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id]
    return _sha256(tokenizer.model_bytes + json.dumps([list(vocabulary), ids]).encode("utf-8"))


def special_ids_of(src_tokenizer, tgt_tokenizer) -> dict[str, int]:
    """The ids reading a prepared corpus adds back: the source's EOS, the
    target's BOS and EOS, and the pad id of both."""
    return {
        "pad_id": pad_id_of(src_tokenizer, tgt_tokenizer),
        "src_eos_id": int(src_tokenizer.eos_id),
        "tgt_bos_id": int(tgt_tokenizer.bos_id),
        "tgt_eos_id": int(tgt_tokenizer.eos_id),
    }


# The special ids of a corpus prepared before manifests recorded them (SubwordTokenizer's).
DEFAULT_SPECIAL_IDS = {
    "pad_id": PAD_ID,
    "src_eos_id": EOS_ID,
    "tgt_bos_id": BOS_ID,
    "tgt_eos_id": EOS_ID,
}


def preparation_fingerprint(
    src_tokenizer,
    tgt_tokenizer,
    *,
    max_src_length: int,
    max_tgt_length: int,
    length_filter: str,
    source: Any = None,
) -> dict[str, Any]:
    """Describes what decides which examples a preparation holds, as a JSON-able dict.

    The shuffle seed and shard size are not part of it: they change the order
    and the files, not the examples.

    Args:
        src_tokenizer: the source-side tokenizer (its model is hashed).
        tgt_tokenizer: the target-side tokenizer.
        max_src_length: the source length limit.
        max_tgt_length: the target length limit.
        length_filter: ``"drop"`` or ``"truncate"``.
        source: a JSON-serializable description of the corpus (e.g. a config's
            ``data`` section).

    Returns:
        The fingerprint, a dict that ``json.dumps`` accepts.
    """
    try:
        source = json.loads(json.dumps(source, sort_keys=True))
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"source must be JSON-serializable (a dict of settings, a name), got {source!r}."
        ) from error
    return {
        "format": FORMAT,
        "src_tokenizer": _tokenizer_digest(src_tokenizer),
        "tgt_tokenizer": _tokenizer_digest(tgt_tokenizer),
        "max_src_length": int(max_src_length),
        "max_tgt_length": int(max_tgt_length),
        "length_filter": length_filter,
        "source": source,
    }


@dataclasses.dataclass(frozen=True)
class PreparedShards:
    """A prepared corpus, as its ``manifest.json`` describes it.

    ``prepare_shards`` writes one and ``PreparedShards.load`` reads it back;
    ``sharded_dataset`` batches it.

    Args:
        directory: the folder of the shards.
        files: shard file names, in order.
        examples_per_file: examples in each shard.
        pairs_read: pairs the source yielded.
        dropped_too_long: pairs dropped by the length limits (``"drop"``).
        max_src_length: the source length limit applied.
        max_tgt_length: the target length limit applied.
        length_filter: ``"drop"`` or ``"truncate"``.
        id_dtype: how ids are stored (``"uint16"`` or ``"int32"``).
        seed: the shuffle's seed.
        examples_per_shard: the examples per shard asked for.
        src_tokens: ``src_ids`` over all examples, EOS included.
        tgt_tokens: ``tgt_out_ids`` over all examples, EOS included.
        longest_src: the longest ``src_ids``.
        longest_tgt: the longest ``tgt_out_ids``.
        fingerprint: ``preparation_fingerprint`` of what made it.
        special_ids: the ids reading adds back (pad, the source's EOS, the
            target's BOS and EOS).
    """

    directory: Path
    files: tuple[str, ...]
    examples_per_file: tuple[int, ...]
    pairs_read: int
    dropped_too_long: int
    max_src_length: int
    max_tgt_length: int
    length_filter: str
    id_dtype: str
    seed: int
    examples_per_shard: int
    src_tokens: int
    tgt_tokens: int
    longest_src: int
    longest_tgt: int
    fingerprint: dict[str, Any]
    special_ids: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_SPECIAL_IDS)
    )

    @property
    def examples(self) -> int:
        """The examples over all shards."""
        return sum(self.examples_per_file)

    @property
    def paths(self) -> tuple[Path, ...]:
        """The shard files' paths, in order."""
        return tuple(self.directory / name for name in self.files)

    @staticmethod
    def exists(directory: PathLike) -> bool:
        """Tells whether ``directory`` holds a manifest (``load`` checks the rest).

        Args:
            directory: the folder to look in.

        Returns:
            ``True`` when ``directory/manifest.json`` exists.
        """
        return (Path(directory) / MANIFEST).is_file()

    @classmethod
    def load(cls, directory: PathLike) -> PreparedShards:
        """Reads a prepared corpus from its ``manifest.json``.

        Args:
            directory: the folder ``prepare_shards`` wrote.

        Returns:
            The ``PreparedShards``.

        Raises:
            PreparationError: the manifest is missing, of another format, or names
                a shard that is not there.
        """
        directory = Path(directory)
        path = directory / MANIFEST
        if not path.is_file():
            raise PreparationError(
                f"{directory} holds no prepared corpus ({path} not found); "
                "write one with prepare_shards (python -m training.prepare)."
            )
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            if manifest.get("format") != FORMAT:
                raise PreparationError(
                    f"{path} is format {manifest.get('format')!r}, this library reads "
                    f"format {FORMAT}: prepare the corpus again."
                )
            fields = {field.name for field in dataclasses.fields(cls)} - {
                "directory",
                "files",
                "examples_per_file",
            }
            shards = manifest["shards"]
            prepared = cls(
                directory=directory,
                files=tuple(shard["file"] for shard in shards),
                examples_per_file=tuple(int(shard["examples"]) for shard in shards),
                **{name: manifest[name] for name in fields if name != "special_ids"},
                special_ids=manifest.get("special_ids", DEFAULT_SPECIAL_IDS),
            )
            if set(prepared.special_ids) != set(DEFAULT_SPECIAL_IDS):
                raise ValueError(f"special_ids holds {sorted(prepared.special_ids)}")
        except (KeyError, TypeError, ValueError) as error:
            if isinstance(error, PreparationError):
                raise
            raise PreparationError(
                f"{path} is not a prepared corpus's manifest ({error!r}): prepare the corpus again."
            ) from error
        missing = [p.name for p in prepared.paths if not p.is_file()]
        if missing:
            raise PreparationError(
                f"{directory} lacks shard(s) {', '.join(missing[:3])} named in its "
                "manifest: prepare the corpus again."
            )
        return prepared

    def to_json(self) -> dict[str, Any]:
        """Gives the manifest's content.

        Returns:
            The fields as a JSON-able dict, the shards listed with their counts.
        """
        record = {"format": FORMAT, "examples": self.examples}
        for field in dataclasses.fields(self):
            if field.name not in ("directory", "files", "examples_per_file"):
                record[field.name] = getattr(self, field.name)
        record["shards"] = [
            {"file": name, "examples": count}
            for name, count in zip(self.files, self.examples_per_file)
        ]
        return record

    def check(
        self,
        src_tokenizer,
        tgt_tokenizer,
        *,
        max_src_length: int,
        max_tgt_length: int,
        length_filter: str = "drop",
        source: Any = None,
    ) -> PreparedShards:
        """Checks that the shards were made with these tokenizers, limits and source.

        Args:
            src_tokenizer: the source-side tokenizer training uses.
            tgt_tokenizer: the target-side tokenizer training uses.
            max_src_length: the source length limit training uses.
            max_tgt_length: the target length limit training uses.
            length_filter: ``"drop"`` or ``"truncate"``.
            source: the corpus description given to ``prepare_shards``.

        Returns:
            ``self``, when everything matches.

        Raises:
            StalePreparationError: something differs; the message names it.
        """
        wanted = preparation_fingerprint(
            src_tokenizer,
            tgt_tokenizer,
            max_src_length=max_src_length,
            max_tgt_length=max_tgt_length,
            length_filter=length_filter,
            source=source,
        )
        differ = [key for key in wanted if self.fingerprint.get(key) != wanted[key]]
        if differ:
            details = "; ".join(
                f"{key}: prepared with {_short(self.fingerprint.get(key))}, now "
                f"{_short(wanted[key])}"
                for key in differ
            )
            raise StalePreparationError(
                f"the prepared corpus in {self.directory} is stale ({details})."
            )
        return self


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _count_pairs(pairs: tf.data.Dataset) -> int:
    cardinality = int(pairs.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            "prepare_shards needs a finite dataset of pairs; this one repeats forever."
        )
    if cardinality >= 0:
        return cardinality

    def add(count, *batch):  # counted a batch at a time: tf.data's per-element calls are slow
        return count + tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[0]

    return int(pairs.batch(COUNT_BATCH).reduce(np.int64(0), add))


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


def prepare_shards(
    pairs: tf.data.Dataset,
    src_tokenizer,
    tgt_tokenizer,
    directory: PathLike,
    *,
    max_src_length: int,
    max_tgt_length: int,
    length_filter: str = "drop",
    examples_per_shard: int = 100_000,
    seed: int = 0,
    source: Any = None,
) -> PreparedShards:
    """Tokenizes ``pairs`` once and writes them shuffled, in shards, to ``directory``.

    Args:
        pairs: a finite dataset of ``(source, target)`` scalar strings
            (``PairSource.dataset()``). One of unknown length is read once more
            first, to count it (text only, no tokenizing).
        src_tokenizer: the source-side ``SubwordTokenizer``.
        tgt_tokenizer: the target-side one.
        directory: the folder to write; a previous preparation there is
            replaced (atomically, once the new one is complete). A folder that
            holds something else is refused.
        max_src_length: as in ``make_dataset``; ``sharded_dataset`` batches
            with the same limits.
        max_tgt_length: as in ``make_dataset``.
        length_filter: as in ``make_dataset``.
        examples_per_shard: examples per shard file, about (fewer when many
            pairs are dropped as too long). Training splits the files over
            its input pipelines, so it needs at least one file per worker.
        seed: the shuffle; the same seed gives byte-identical shards.
        source: a JSON-serializable description of the corpus, kept in the
            fingerprint (``PreparedShards.check``).

    Returns:
        The ``PreparedShards`` written.

    Raises:
        ValueError: an argument is out of range, the corpus is empty, or
            every pair is over the length limits.
        FileExistsError: ``directory`` holds something other than a preparation.
    """
    directory = Path(directory)
    _check_pairs(pairs)
    _check_lengths(max_src_length, max_tgt_length)
    _check_length_filter(length_filter)
    _check_positive("examples_per_shard", examples_per_shard)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}.")
    fingerprint = preparation_fingerprint(
        src_tokenizer,
        tgt_tokenizer,
        max_src_length=max_src_length,
        max_tgt_length=max_tgt_length,
        length_filter=length_filter,
        source=source,
    )
    if directory.exists() and (
        not directory.is_dir()
        or (any(directory.iterdir()) and not PreparedShards.exists(directory))
    ):
        raise FileExistsError(
            f"{directory} exists and holds no prepared corpus: choose another folder or remove it."
        )
    dtype = _id_dtype(src_tokenizer, tgt_tokenizer, max_src_length, max_tgt_length)
    special_ids = special_ids_of(src_tokenizer, tgt_tokenizer)

    def tokens(src, tgt_in, tgt_out):
        src, tgt = src[:, :-1], tgt_out[:, :-1]  # no EOS: reading adds the specials back
        return src.row_lengths(), tgt.row_lengths(), src.flat_values, tgt.flat_values

    batches = _tokenized_batches(
        pairs,
        src_tokenizer,
        tgt_tokenizer,
        max_src_length=max_src_length,
        max_tgt_length=max_tgt_length,
        length_filter=length_filter,
    ).map(tokens)
    started = time.perf_counter()
    pairs_read = _count_pairs(pairs)
    if pairs_read == 0:
        raise ValueError("prepare_shards got no pairs: the corpus is empty.")
    shards = ceil_div(pairs_read, examples_per_shard)
    buckets = min(shards, MAX_OPEN_FILES)
    # Final shards per temporary file: `shards` spread evenly over the `buckets`.
    shards_per_bucket = [shards // buckets + (index < shards % buckets) for index in range(buckets)]

    staging = staging_directory(directory, "prepare")
    try:
        unshuffled = staging / "unshuffled"
        unshuffled.mkdir()
        temp_paths = [unshuffled / f"{index:05d}.bin" for index in range(buckets)]
        sizes = np.zeros(buckets, np.int64)
        src_tokens = tgt_tokens = longest_src = longest_tgt = 0
        rng = np.random.default_rng(seed)
        with contextlib.ExitStack() as stack:
            handles = [stack.enter_context(open(path, "wb")) for path in temp_paths]
            for src_lengths, tgt_lengths, src_values, tgt_values in batches.as_numpy_iterator():
                if not len(src_lengths):
                    continue
                targets = rng.integers(buckets, size=len(src_lengths))
                counts = np.bincount(targets, minlength=buckets)
                grouped = _Ragged(src_lengths, tgt_lengths, src_values, tgt_values).take(
                    np.argsort(targets, kind="stable")
                )
                for bucket, chunk in zip(
                    np.flatnonzero(counts).tolist(), grouped.chunks(counts[counts > 0])
                ):
                    chunk.append_to(handles[bucket], dtype)
                sizes += counts
                src_tokens += int(src_lengths.sum()) + len(src_lengths)  # + EOS
                tgt_tokens += int(tgt_lengths.sum()) + len(tgt_lengths)
                longest_src = max(longest_src, int(src_lengths.max()) + 1)
                longest_tgt = max(longest_tgt, int(tgt_lengths.max()) + 1)
        kept = int(sizes.sum())
        if kept == 0:
            raise ValueError(
                f"all {pairs_read} pairs are longer than max_src_length={max_src_length} / "
                f"max_tgt_length={max_tgt_length}: nothing to prepare; raise the limits."
            )
        logger.info(
            "Tokenized %d pairs (%d kept) into %d temporary file(s) in %.1fs.",
            pairs_read,
            kept,
            buckets,
            time.perf_counter() - started,
        )

        parts = [
            [len(part) for part in np.array_split(np.arange(size), count) if len(part)]
            for size, count in zip(sizes.tolist(), shards_per_bucket)
        ]
        total_files = sum(len(bucket_parts) for bucket_parts in parts)
        files, counts = [], []
        for bucket, path in enumerate(temp_paths):
            if parts[bucket]:
                examples = _Ragged.read(path, dtype)
                order = np.random.default_rng([seed, bucket]).permutation(len(examples))
                for shard in examples.take(order).chunks(parts[bucket]):
                    name = _shard_name(len(files), total_files)
                    _write_records(staging / name, shard, dtype)
                    files.append(name)
                    counts.append(len(shard))
                del examples
            path.unlink()
        unshuffled.rmdir()

        prepared = PreparedShards(
            directory=directory,
            files=tuple(files),
            examples_per_file=tuple(counts),
            pairs_read=pairs_read,
            dropped_too_long=pairs_read - kept,
            max_src_length=max_src_length,
            max_tgt_length=max_tgt_length,
            length_filter=length_filter,
            id_dtype=dtype.name,
            seed=seed,
            examples_per_shard=examples_per_shard,
            src_tokens=src_tokens,
            tgt_tokens=tgt_tokens,
            longest_src=longest_src,
            longest_tgt=longest_tgt,
            fingerprint=fingerprint,
            special_ids=special_ids,
        )
        (staging / MANIFEST).write_text(
            json.dumps(prepared.to_json(), indent=2) + "\n", encoding="utf-8"
        )
        replace_directory(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    seconds = time.perf_counter() - started
    logger.info(
        "Prepared %d examples in %d shard(s) in %s in %.1fs (%.0f examples/s); %d pairs dropped "
        "as too long.",
        kept,
        len(files),
        directory,
        seconds,
        kept / seconds,
        pairs_read - kept,
    )
    return prepared


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


def _load_all(
    prepared: PreparedShards | PathLike | Sequence[PreparedShards | PathLike],
) -> list[PreparedShards]:
    """``prepared`` as a list of ``PreparedShards`` (one, or several corpora)."""
    if isinstance(prepared, (PreparedShards, str, os.PathLike)):
        prepared = [prepared]
    corpora = [
        one if isinstance(one, PreparedShards) else PreparedShards.load(one) for one in prepared
    ]
    if not corpora:
        raise ValueError("sharded_dataset needs one prepared corpus or more, got none.")
    return corpora


def _check_mix(corpora: list[PreparedShards], weights) -> list[float] | None:
    """The weights of several prepared corpora, checked; ``None`` for one corpus without."""
    if weights is None:
        if len(corpora) > 1:
            raise ValueError(
                f"{len(corpora)} prepared corpora need weights (one positive number each)."
            )
        return None
    weights = list(weights)
    if len(weights) != len(corpora) or not all(
        isinstance(weight, (int, float)) and not isinstance(weight, bool) and weight > 0
        for weight in weights
    ):
        raise ValueError(
            f"weights={weights!r}: give one positive number for each of the {len(corpora)} "
            "prepared corpora."
        )
    first = corpora[0]
    for other in corpora[1:]:
        for what in ("max_src_length", "max_tgt_length", "special_ids"):
            if getattr(other, what) != getattr(first, what):
                raise ValueError(
                    f"{other.directory} was prepared with {what}={getattr(other, what)!r} and "
                    f"{first.directory} with {getattr(first, what)!r}: prepare them alike."
                )
        for side in ("src_tokenizer", "tgt_tokenizer"):
            if other.fingerprint.get(side) != first.fingerprint.get(side):
                raise ValueError(
                    f"{other.directory} and {first.directory} were prepared with different "
                    f"{side.replace('_', ' ')}s: prepare them with the same ones."
                )
    return [float(weight) for weight in weights]


def _shard_examples(
    prepared: PreparedShards,
    *,
    num_input_pipelines: int,
    input_pipeline_index: int,
    training: bool,
    seed: int | None,
    cycle_length: int,
) -> tf.data.Dataset:
    """This pipeline's examples of ``prepared``, unbatched: its shard files, in a
    new seeded order each pass when training, interleaved."""
    if len(prepared.files) < num_input_pipelines:
        raise ValueError(
            f"{prepared.directory} holds {len(prepared.files)} shard file(s), fewer than the "
            f"{num_input_pipelines} input pipelines that split them by file: prepare it again with "
            f"examples_per_shard <= {max(1, prepared.examples // num_input_pipelines)}."
        )
    paths = [str(path) for path in prepared.paths[input_pipeline_index::num_input_pipelines]]
    if num_input_pipelines > 1:
        logger.info(
            "input pipeline %d of %d reads %d of the %d shard files: %s",
            input_pipeline_index + 1,
            num_input_pipelines,
            len(paths),
            len(prepared.files),
            ", ".join(prepared.files[input_pipeline_index::num_input_pipelines]),
        )
    if len(prepared.files) % num_input_pipelines:
        logger.warning(
            "%d shard files over %d input pipelines: some read one file more than others.",
            len(prepared.files),
            num_input_pipelines,
        )
    files = tf.data.Dataset.from_tensor_slices(paths)
    if training and len(paths) > 1:
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    records = files.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(cycle_length, len(paths)),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    blocks = records.map(
        _decoder(tf.as_dtype(prepared.id_dtype), prepared.special_ids),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return _examples(blocks)


def sharded_dataset(
    prepared: PreparedShards | PathLike | Sequence[PreparedShards | PathLike],
    *,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    bucket_boundaries=None,
    shuffle_buffer: int = SHUFFLE_BUFFER,
    seed: int | None = None,
    repeat: bool = False,
    static_shapes: bool = False,
    drop_remainder: bool | None = None,
    training: bool = True,
    num_input_pipelines: int = 1,
    input_pipeline_index: int = 0,
    cycle_length: int = 4,
    weights: Sequence[float] | None = None,
) -> tf.data.Dataset:
    """Reads a prepared corpus back as batches, the same batches ``make_dataset`` gives.

    The shard files are split over the input pipelines (workers) by file:
    pipeline ``i`` reads files ``i, i + n, i + 2n, ...``, so pipelines see
    disjoint parts that together are the corpus, once per pass. Each pass
    reads its files in a new order (seeded; training only), ``cycle_length``
    at a time interleaved, through a shuffle buffer, then batches with
    ``batch_examples``, the prepared length limits giving the buckets and
    static shapes. With ``num_input_pipelines > 1`` tf.distribute's
    auto-sharding is turned off (the files are split here already); for
    ``strategy.distribute_datasets_from_function`` use ``sharded_dataset_fn``.

    Several prepared corpora (a sequence, with ``weights``) are each read so,
    on their own: corpus ``k``'s files split over the pipelines, shuffled with
    ``seed + k`` through its own buffer and, with ``repeat``, repeated on its
    own (a small corpus never runs out); ``tf.data.Dataset.sample_from_datasets``
    (``seed``) then draws each example from corpus ``k`` with probability
    ``weights[k] / sum(weights)``, and the draws are batched as one stream.
    Without ``repeat`` each corpus is read once (by weight while all last).
    They must share length limits, special ids and tokenizers.

    Args:
        prepared: a ``PreparedShards`` or the folder ``prepare_shards`` wrote;
            or a sequence of them (several corpora, with ``weights``).
        batch_tokens: as in ``make_dataset`` (per pipeline).
        batch_size: as in ``make_dataset`` (per pipeline).
        bucket_boundaries: as in ``make_dataset``.
        shuffle_buffer: examples in the shuffle buffer (each corpus's); 0 disables it.
        seed: the order of files and examples (with the global TF seed).
        repeat: repeat forever (then pass ``steps_per_epoch`` to ``fit``).
        static_shapes: as in ``make_dataset``.
        drop_remainder: as in ``make_dataset``.
        training: as in ``make_dataset``.
        num_input_pipelines: how many pipelines read the corpus
            (``tf.distribute.InputContext.num_input_pipelines``).
        input_pipeline_index: which one this is
            (``tf.distribute.InputContext.input_pipeline_id``).
        cycle_length: files read at once (per corpus).
        weights: the corpora's shares of the examples drawn, one positive
            number per corpus (relative); needed with several, optional with one.

    Returns:
        A ``tf.data.Dataset`` of ``((src_ids, tgt_in_ids), tgt_out_ids)`` batches.

    Raises:
        PreparationError: ``prepared`` is a folder without a usable preparation.
        ValueError: an argument is out of range, this pipeline has no file of a
            corpus, or several corpora lack weights or were prepared unalike.
    """
    corpora = _load_all(prepared)
    weights = _check_mix(corpora, weights)
    _check_positive("num_input_pipelines", num_input_pipelines)
    _check_positive("input_pipeline_index", input_pipeline_index, minimum=0)
    _check_positive("cycle_length", cycle_length)
    if input_pipeline_index >= num_input_pipelines:
        raise ValueError(
            f"input_pipeline_index={input_pipeline_index} must be below "
            f"num_input_pipelines={num_input_pipelines}."
        )
    first = corpora[0]
    plan = _BatchPlan.resolve(
        batch_tokens=batch_tokens,
        batch_size=batch_size,
        max_src_length=first.max_src_length,
        max_tgt_length=first.max_tgt_length,
        bucket_boundaries=bucket_boundaries,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        cache=False,
        repeat=repeat,
        static_shapes=static_shapes,
        drop_remainder=drop_remainder,
        training=training,
        pad_id=first.special_ids["pad_id"],
    )
    streams = []
    for index, corpus in enumerate(corpora):
        own_seed = seed if seed is None or len(corpora) == 1 else seed + index
        examples = _shard_examples(
            corpus,
            num_input_pipelines=num_input_pipelines,
            input_pipeline_index=input_pipeline_index,
            training=training,
            seed=own_seed,
            cycle_length=cycle_length,
        )
        if len(corpora) > 1:
            if training and shuffle_buffer > 0:
                examples = examples.shuffle(
                    shuffle_buffer, seed=own_seed, reshuffle_each_iteration=True
                )
            if repeat:
                examples = examples.repeat()
        streams.append(examples)
    if len(corpora) == 1:
        dataset = plan.apply(streams[0])
    else:
        mixed = tf.data.Dataset.sample_from_datasets(
            streams, weights=weights, seed=seed, stop_on_empty_dataset=False
        )
        # Each corpus is shuffled and repeated on its own.
        dataset = dataclasses.replace(plan, shuffle_buffer=0, repeat=False).apply(mixed)
    if num_input_pipelines > 1:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        dataset = dataset.with_options(options)
    return dataset


def sharded_dataset_fn(
    prepared: PreparedShards | PathLike | Sequence[PreparedShards | PathLike],
    *,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    **kwargs,
) -> Callable:
    """Builds a ``dataset_fn(input_context)`` for ``strategy.distribute_datasets_from_function``.

    ``batch_tokens`` / ``batch_size`` are global: each replica gets batches of
    ``batch_tokens // replicas`` tokens (a budget, rounded down), or of
    ``batch_size / replicas`` sentences (which must divide: see
    ``input_context.get_per_replica_batch_size``). Each input pipeline (one per
    worker under ``MultiWorkerMirroredStrategy``, one per host on TPUs) reads
    its own files (``sharded_dataset``; of each corpus, for several with ``weights``).

    Args:
        prepared: a ``PreparedShards`` or the folder ``prepare_shards`` wrote,
            or a sequence of them (several corpora: pass ``weights``).
        batch_tokens: tokens per global batch and side.
        batch_size: sentences per global batch instead.
        **kwargs: further ``sharded_dataset`` arguments.

    Returns:
        The ``dataset_fn``, which returns this pipeline's ``sharded_dataset``.

    Example::

        dataset = strategy.distribute_datasets_from_function(
            sharded_dataset_fn("runs/big/prepared", batch_tokens=25_000, seed=0, repeat=True))
    """
    prepared = _load_all(prepared)
    for name in ("num_input_pipelines", "input_pipeline_index"):
        if name in kwargs:
            raise ValueError(
                f"sharded_dataset_fn takes {name} from the InputContext; do not pass it."
            )

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = {}
        if batch_tokens is not None:
            replicas = input_context.num_replicas_in_sync
            if batch_tokens < replicas:
                raise ValueError(
                    f"batch_tokens={batch_tokens} is fewer than one token for each of the "
                    f"{replicas} replicas; raise it."
                )
            per_replica["batch_tokens"] = batch_tokens // replicas
        if batch_size is not None:
            per_replica["batch_size"] = input_context.get_per_replica_batch_size(batch_size)
        return sharded_dataset(
            prepared,
            num_input_pipelines=input_context.num_input_pipelines,
            input_pipeline_index=input_context.input_pipeline_id,
            **per_replica,
            **kwargs,
        )

    return dataset_fn
