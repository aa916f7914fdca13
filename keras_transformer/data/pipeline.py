"""``make_dataset``: string pairs to padded id batches for ``model.fit``.

Elements are ``((src_ids, tgt_in_ids), tgt_out_ids)``, all int32 ``[batch, len]``
padded with 0; the id layout (source EOS, target BOS/EOS) is described in
``keras_transformer.data.sequences``. Steps, in order:

1. tokenize in the graph, a thousand pairs at a time (``SubwordTokenizer``),
2. add EOS/BOS and apply the length limit (drop or truncate),
3. cache the tokenized examples (memory, or a file when ``cache`` is a path),
4. shuffle (training only; order fixed by ``seed`` together with the global
   TF seed, e.g. ``keras.utils.set_random_seed``), then repeat if asked,
5. batch: by length buckets with per-bucket sizes from ``batch_tokens`` or a
   fixed ``batch_size``; or, with ``static_shapes``, every batch padded to the
   maximum lengths with a fixed batch size (TPU/XLA need static shapes),
6. prefetch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Sequence

import tensorflow as tf

from keras_transformer.config import PAD_ID
from keras_transformer.data.batching import bucket_batch_sizes, resolve_bucket_bounds
from keras_transformer.data.sequences import source_ids, target_ids

logger = logging.getLogger("keras_transformer.data")

LENGTH_FILTERS = ("drop", "truncate")
TOKENIZE_BATCH = 1024  # pairs tokenized per op call: far cheaper than one at a time


def _check_positive(name: str, value, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


def _is_scalar_string(spec) -> bool:
    return isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string and spec.shape.is_compatible_with([])


def _check_pairs(pairs: tf.data.Dataset) -> None:
    spec = getattr(pairs, "element_spec", None)
    if not (isinstance(spec, tuple) and len(spec) == 2 and all(_is_scalar_string(s) for s in spec)):
        raise ValueError(
            f"make_dataset needs a tf.data.Dataset of (source, target) scalar strings, got element_spec "
            f"{spec}; build it with text_file_pairs, tsv_pairs, tfds_pairs or pairs_from_list."
        )


def make_dataset(
    pairs: tf.data.Dataset,
    src_tokenizer,
    tgt_tokenizer,
    *,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    max_src_length: int,
    max_tgt_length: int,
    length_filter: str = "drop",
    bucket_boundaries: Sequence[int] | None = None,
    shuffle_buffer: int = 10_000,
    seed: int | None = None,
    cache: bool | str | os.PathLike = True,
    repeat: bool = False,
    static_shapes: bool = False,
    drop_remainder: bool | None = None,
    training: bool = True,
) -> tf.data.Dataset:
    """Batches ``((src_ids, tgt_in_ids), tgt_out_ids)`` for ``Transformer.fit``.

    Args:
        pairs: ``(source, target)`` scalar-string dataset (see ``sources``).
        src_tokenizer, tgt_tokenizer: ``SubwordTokenizer``s (the same one for a
            shared vocabulary).
        batch_tokens: ids per batch and side, padding included: each length
            bucket gets ``max(1, batch_tokens // bucket_bound)`` sentences.
        batch_size: sentences per batch instead. Give exactly one of the two.
        max_src_length: longest ``src_ids`` row, EOS included.
        max_tgt_length: most target tokens, BOS/EOS excluded; decoder rows are
            at most ``max_tgt_length + 1`` long. The model's ``max_length``
            must cover ``max(max_src_length, max_tgt_length + 1)``.
        length_filter: ``"drop"`` longer pairs or ``"truncate"`` them (EOS kept).
        bucket_boundaries: inclusive upper lengths of the buckets (length of a
            pair = its longer side); ``None`` picks ~1.1x-spaced bounds, ``()``
            puts everything in one bucket (no reordering).
        shuffle_buffer: examples in the shuffle buffer; 0 disables shuffling. A
            corpus stored in length order (Tatoeba's is) needs a buffer as large as
            the corpus, or training sees short sentences first and long ones last.
        seed: shuffle seed; the same seed (and global TF seed) gives the same order.
        cache: cache tokenized examples in memory (``True``), in files at
            this path prefix (a path), or not at all (``False``).
        repeat: repeat forever (then pass ``steps_per_epoch`` to ``fit``).
        static_shapes: pad every batch to ``(batch_size, max_src_length)`` /
            ``(batch_size, max_tgt_length + 1)`` and drop the last partial
            batch, so ``element_spec`` is fully static (TPU/XLA). With
            ``batch_tokens``, ``batch_size = batch_tokens // longest row``.
        drop_remainder: drop partial batches; defaults to ``static_shapes``.
        training: ``False`` turns shuffling and tf.data autotuning off (evaluation).
    """
    _check_pairs(pairs)
    if (batch_tokens is None) == (batch_size is None):
        raise ValueError(
            "Give exactly one of batch_tokens (ids per batch, e.g. 4096) or batch_size "
            f"(sentences per batch); got batch_tokens={batch_tokens!r}, batch_size={batch_size!r}."
        )
    _check_positive("max_src_length", max_src_length, minimum=2)
    _check_positive("max_tgt_length", max_tgt_length)
    longest = max(max_src_length, max_tgt_length + 1)
    if batch_tokens is not None:
        _check_positive("batch_tokens", batch_tokens)
        if batch_tokens < longest:
            raise ValueError(
                f"batch_tokens={batch_tokens} cannot hold one sentence of the longest allowed length "
                f"{longest} (max(max_src_length, max_tgt_length + 1)); raise batch_tokens or lower "
                "the max lengths."
            )
    else:
        _check_positive("batch_size", batch_size)
    if length_filter not in LENGTH_FILTERS:
        raise ValueError(f"length_filter must be one of {LENGTH_FILTERS}, got {length_filter!r}.")
    _check_positive("shuffle_buffer", shuffle_buffer, minimum=0)
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError(f"seed must be an int or None, got {seed!r}.")
    if drop_remainder is None:
        drop_remainder = static_shapes
    if static_shapes and not drop_remainder:
        raise ValueError("static_shapes=True needs full batches: leave drop_remainder unset or set it True.")
    if static_shapes and bucket_boundaries is not None:
        raise ValueError(
            "static_shapes=True pads every batch to the maximum lengths; drop bucket_boundaries."
        )
    bounds = None if static_shapes else resolve_bucket_bounds(bucket_boundaries, longest)

    truncate = length_filter == "truncate"

    def tokenize(src_text, tgt_text):
        src = source_ids(src_tokenizer.tokenize(src_text), max_src_length if truncate else None)
        tgt_in, tgt_out = target_ids(tgt_tokenizer.tokenize(tgt_text), max_tgt_length if truncate else None)
        return src, tgt_in, tgt_out

    dataset = pairs.batch(TOKENIZE_BATCH).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    # Unbatched ragged rows arrive as dense tensors; restructure for Keras.
    dataset = dataset.map(
        lambda src, tgt_in, tgt_out: ((tf.identity(src), tf.identity(tgt_in)), tf.identity(tgt_out))
    )
    if not truncate:
        dataset = dataset.filter(
            lambda inputs, tgt_out: tf.logical_and(tf.size(inputs[0]) <= max_src_length,
                                                   tf.size(tgt_out) <= max_tgt_length + 1)
        )
    if cache:
        dataset = dataset.cache() if cache is True else dataset.cache(os.fspath(cache))
    if training and shuffle_buffer > 0:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()

    if static_shapes:
        size = batch_size if batch_size is not None else batch_tokens // longest
        shapes = (([max_src_length], [max_tgt_length + 1]), [max_tgt_length + 1])
        dataset = dataset.padded_batch(size, padded_shapes=shapes, padding_values=PAD_ID, drop_remainder=True)
        logger.info("Static batches of %d: src %d, tgt %d ids.", size, max_src_length, max_tgt_length + 1)
    else:
        if batch_tokens is not None:
            sizes = bucket_batch_sizes(bounds, batch_tokens)
        else:
            sizes = (batch_size,) * len(bounds)
        logger.info("Length buckets (upper bounds) %s with batch sizes %s.", bounds, sizes)
        dataset = dataset.bucket_by_sequence_length(
            lambda inputs, tgt_out: tf.maximum(tf.size(inputs[0]), tf.size(inputs[1])),
            bucket_boundaries=[bound + 1 for bound in bounds[:-1]],  # tf's bounds are exclusive
            bucket_batch_sizes=list(sizes),
            padding_values=PAD_ID,
            drop_remainder=drop_remainder,
        )
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    if not training:
        # Evaluation datasets are iterated afresh every epoch. Deleting a used
        # iterator waits for tf.data's autotune thread to wake (up to ~10-20 s,
        # its back-off doubles from 10 ms), which stalled every other epoch of
        # model.fit with validation. Eval input is cheap: no autotuning needed.
        options = tf.data.Options()
        options.autotune.enabled = False
        dataset = dataset.with_options(options)
    return dataset


@dataclasses.dataclass(frozen=True)
class TokenCounts:
    """Totals over batches: real (non-pad) ids and ids including padding, per side.

    ``tgt_tokens`` counts ``tgt_out`` ids (EOS included): the positions the
    model is trained to predict, the usual numerator for tokens/s.
    """

    batches: int
    sentences: int
    src_tokens: int
    tgt_tokens: int
    src_padded: int
    tgt_padded: int

    @property
    def padding_fraction(self) -> float:
        padded = self.src_padded + self.tgt_padded
        return 1.0 - (self.src_tokens + self.tgt_tokens) / padded if padded else 0.0


def count_tokens(dataset: tf.data.Dataset, max_batches: int | None = None) -> TokenCounts:
    """Count sentences and ids in ``make_dataset`` batches (e.g. to report tokens/s)."""
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], tuple) and len(spec[0]) == 2):
        raise ValueError(f"count_tokens needs ((src_ids, tgt_in_ids), tgt_out_ids) batches, got {spec}.")
    if max_batches is not None:
        _check_positive("max_batches", max_batches)
        dataset = dataset.take(max_batches)
    elif dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ValueError("The dataset repeats forever; pass max_batches to count_tokens.")

    def batch_counts(inputs, tgt_out):
        src = inputs[0]
        return tf.cast(tf.stack([
            1, tf.shape(src)[0],
            tf.math.count_nonzero(src != PAD_ID, dtype=tf.int32),
            tf.math.count_nonzero(tgt_out != PAD_ID, dtype=tf.int32),
            tf.size(src), tf.size(tgt_out),
        ]), tf.int64)

    totals = dataset.map(batch_counts).reduce(tf.zeros([6], tf.int64), lambda total, counts: total + counts)
    return TokenCounts(*(int(value) for value in totals.numpy()))
