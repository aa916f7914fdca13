"""``prepare_shards``: tokenize a corpus once and write it shuffled, in shards.

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
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from keras_transformer.data.batching import _check_positive
from keras_transformer.data.shards.manifest import (
    MANIFEST,
    PathLike,
    PreparedShards,
    _fingerprint,
    special_ids_of,
)
from keras_transformer.data.shards.records import (
    _id_dtype,
    _Ragged,
    _shard_name,
    _write_records,
)
from keras_transformer.data.tokenizing import _check_pairs, _LengthLimits, _tokenized_batches
from keras_transformer.files import replace_directory, staging_directory
from keras_transformer.numerics import ceil_div

logger = logging.getLogger("keras_transformer.data")

MAX_OPEN_FILES = 256  # temporary files written at once in pass 1
COUNT_BATCH = 8192  # pairs counted per step when the source does not know its length


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
    limits = _LengthLimits(max_src_length, max_tgt_length, length_filter).checked()
    _check_positive("examples_per_shard", examples_per_shard)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}.")
    fingerprint = _fingerprint(src_tokenizer, tgt_tokenizer, limits, source)
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

    batches = _tokenized_batches(pairs, src_tokenizer, tgt_tokenizer, limits).map(tokens)
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
