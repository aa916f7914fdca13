"""``make_dataset``: string pairs to padded id batches for ``model.fit``.

It is two stages, public for pipelines that store the tokenized examples
(``keras_transformer.data.shards``): ``tokenize_pairs`` (steps 1-2) and
``batch_examples`` (steps 3-6). Elements are ``((src_ids, tgt_in_ids),
tgt_out_ids)``, all int32 ``[batch, len]`` padded with the tokenizers' pad
id (``pad_id``: 0 for ``SubwordTokenizer``); the id layout
(source EOS, target BOS/EOS) is described in ``keras_transformer.data.sequences``.
Steps, in order:

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
from collections.abc import Sequence

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
    return (
        isinstance(spec, tf.TensorSpec)
        and spec.dtype == tf.string
        and spec.shape.is_compatible_with([])
    )


def _check_pairs(pairs: tf.data.Dataset) -> None:
    spec = getattr(pairs, "element_spec", None)
    if not (isinstance(spec, tuple) and len(spec) == 2 and all(_is_scalar_string(s) for s in spec)):
        raise ValueError(
            "make_dataset and tokenize_pairs need a tf.data.Dataset of (source, target) scalar "
            "strings, got "
            f"element_spec {spec}; build it with PairSource(...).dataset()."
        )


def _check_lengths(max_src_length, max_tgt_length) -> int:
    """Check the length limits; returns the longest row they allow."""
    _check_positive("max_src_length", max_src_length, minimum=2)
    _check_positive("max_tgt_length", max_tgt_length)
    return max(max_src_length, max_tgt_length + 1)


def _check_length_filter(length_filter) -> None:
    if length_filter not in LENGTH_FILTERS:
        raise ValueError(f"length_filter must be one of {LENGTH_FILTERS}, got {length_filter!r}.")


def _is_id_vector(spec) -> bool:
    return isinstance(spec, tf.TensorSpec) and spec.dtype == tf.int32 and spec.shape.rank == 1


def _check_examples(examples: tf.data.Dataset) -> None:
    spec = getattr(examples, "element_spec", None)
    if not (
        isinstance(spec, tuple)
        and len(spec) == 2
        and isinstance(spec[0], tuple)
        and len(spec[0]) == 2
        and all(_is_id_vector(s) for s in (*spec[0], spec[1]))
    ):
        raise ValueError(
            f"batch_examples needs a tf.data.Dataset of ((src_ids, tgt_in_ids), tgt_out_ids) int32 "
            f"vectors, got element_spec {spec}; build it with tokenize_pairs or sharded_dataset."
        )


@dataclasses.dataclass(frozen=True)
class _BatchPlan:
    """The checked batching arguments of ``batch_examples``."""

    batch_tokens: int | None
    batch_size: int | None
    max_src_length: int
    max_tgt_length: int
    bounds: tuple[int, ...] | None  # None: static shapes
    shuffle_buffer: int
    seed: int | None
    cache: bool | str | os.PathLike
    repeat: bool
    static_shapes: bool
    drop_remainder: bool
    training: bool
    pad_id: int = PAD_ID

    @classmethod
    def resolve(
        cls,
        *,
        batch_tokens,
        batch_size,
        max_src_length,
        max_tgt_length,
        bucket_boundaries,
        shuffle_buffer,
        seed,
        cache,
        repeat,
        static_shapes,
        drop_remainder,
        training,
        pad_id: int = PAD_ID,
    ) -> _BatchPlan:
        if (batch_tokens is None) == (batch_size is None):
            raise ValueError(
                "Give exactly one of batch_tokens (ids per batch, e.g. 4096) or batch_size "
                f"(sentences per batch); got batch_tokens={batch_tokens!r}, "
                f"batch_size={batch_size!r}."
            )
        longest = _check_lengths(max_src_length, max_tgt_length)
        if batch_tokens is not None:
            _check_positive("batch_tokens", batch_tokens)
            if batch_tokens < longest:
                raise ValueError(
                    f"batch_tokens={batch_tokens} cannot hold one sentence of the longest allowed "
                    "length "
                    f"{longest} (max(max_src_length, max_tgt_length + 1)); raise batch_tokens or "
                    "lower "
                    "the max lengths."
                )
        else:
            _check_positive("batch_size", batch_size)
        _check_positive("shuffle_buffer", shuffle_buffer, minimum=0)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"seed must be an int or None, got {seed!r}.")
        if drop_remainder is None:
            drop_remainder = static_shapes
        if static_shapes and not drop_remainder:
            raise ValueError(
                "static_shapes=True needs full batches: leave drop_remainder unset or set it True."
            )
        if static_shapes and bucket_boundaries is not None:
            raise ValueError(
                "static_shapes=True pads every batch to the maximum lengths; drop "
                "bucket_boundaries."
            )
        bounds = None if static_shapes else resolve_bucket_bounds(bucket_boundaries, longest)
        return cls(
            batch_tokens,
            batch_size,
            max_src_length,
            max_tgt_length,
            bounds,
            shuffle_buffer,
            seed,
            cache,
            bool(repeat),
            bool(static_shapes),
            bool(drop_remainder),
            bool(training),
            int(pad_id),
        )

    @property
    def longest(self) -> int:
        return max(self.max_src_length, self.max_tgt_length + 1)

    def apply(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        if self.cache:
            dataset = (
                dataset.cache() if self.cache is True else dataset.cache(os.fspath(self.cache))
            )
        if self.training and self.shuffle_buffer > 0:
            dataset = dataset.shuffle(
                self.shuffle_buffer, seed=self.seed, reshuffle_each_iteration=True
            )
        if self.repeat:
            dataset = dataset.repeat()

        if self.static_shapes:
            size = (
                self.batch_size
                if self.batch_size is not None
                else self.batch_tokens // self.longest
            )
            shapes = (([self.max_src_length], [self.max_tgt_length + 1]), [self.max_tgt_length + 1])
            dataset = dataset.padded_batch(
                size, padded_shapes=shapes, padding_values=self.pad_id, drop_remainder=True
            )
            logger.info(
                "Static batches of %d: src %d, tgt %d ids.",
                size,
                self.max_src_length,
                self.max_tgt_length + 1,
            )
        else:
            bounds = self.bounds
            if self.batch_tokens is not None:
                sizes = bucket_batch_sizes(bounds, self.batch_tokens)
            else:
                sizes = (self.batch_size,) * len(bounds)
            logger.info("Length buckets (upper bounds) %s with batch sizes %s.", bounds, sizes)
            dataset = dataset.bucket_by_sequence_length(
                lambda inputs, tgt_out: tf.maximum(tf.size(inputs[0]), tf.size(inputs[1])),
                bucket_boundaries=[bound + 1 for bound in bounds[:-1]],  # tf's bounds are exclusive
                bucket_batch_sizes=list(sizes),
                padding_values=self.pad_id,
                drop_remainder=self.drop_remainder,
            )
        dataset = dataset.prefetch(tf.data.AUTOTUNE)
        if not self.training:
            # Evaluation datasets are iterated afresh every epoch. Deleting a used
            # iterator waits for tf.data's autotune thread to wake (up to ~10-20 s,
            # its back-off doubles from 10 ms), which stalled every other epoch of
            # model.fit with validation. Eval input is cheap: no autotuning needed.
            options = tf.data.Options()
            options.autotune.enabled = False
            dataset = dataset.with_options(options)
        return dataset


def pad_id_of(src_tokenizer, tgt_tokenizer) -> int:
    """Gives the pad id that batches of a tokenizer pair are padded with.

    Both tokenizers' ``pad_id`` must agree: the model masks one pad id.

    Args:
        src_tokenizer: the source-side tokenizer.
        tgt_tokenizer: the target-side tokenizer.

    Returns:
        The shared ``pad_id``.

    Raises:
        ValueError: the two tokenizers pad with different ids.
    """
    if src_tokenizer.pad_id != tgt_tokenizer.pad_id:
        raise ValueError(
            f"The source tokenizer pads with id {src_tokenizer.pad_id}, the target one with "
            f"{tgt_tokenizer.pad_id}; use tokenizers that share their pad id."
        )
    return int(src_tokenizer.pad_id)


def _tokenized_batches(
    pairs: tf.data.Dataset,
    src_tokenizer,
    tgt_tokenizer,
    *,
    max_src_length: int,
    max_tgt_length: int,
    length_filter: str,
) -> tf.data.Dataset:
    """Ragged ``(src_ids, tgt_in_ids, tgt_out_ids)`` batches of up to ``TOKENIZE_BATCH``
    pairs, in order, the length limits applied (pairs dropped or truncated)."""
    truncate = length_filter == "truncate"

    def tokenize(src_text, tgt_text):
        src = source_ids(
            src_tokenizer.tokenize(src_text),
            max_src_length if truncate else None,
            eos_id=src_tokenizer.eos_id,
        )
        tgt_in, tgt_out = target_ids(
            tgt_tokenizer.tokenize(tgt_text),
            max_tgt_length if truncate else None,
            bos_id=tgt_tokenizer.bos_id,
            eos_id=tgt_tokenizer.eos_id,
        )
        if not truncate:
            keep = tf.logical_and(
                src.row_lengths() <= max_src_length, tgt_out.row_lengths() <= max_tgt_length + 1
            )
            src, tgt_in, tgt_out = (
                tf.ragged.boolean_mask(ids, keep) for ids in (src, tgt_in, tgt_out)
            )
        return src, tgt_in, tgt_out

    return pairs.batch(TOKENIZE_BATCH).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)


def _examples(batches: tf.data.Dataset) -> tf.data.Dataset:
    """Ragged ``(src, tgt_in, tgt_out)`` batches to ``((src, tgt_in), tgt_out)`` examples."""
    # Unbatched ragged rows arrive as dense tensors; restructure for Keras.
    return batches.unbatch().map(
        lambda src, tgt_in, tgt_out: ((tf.identity(src), tf.identity(tgt_in)), tf.identity(tgt_out))
    )


def tokenize_pairs(
    pairs: tf.data.Dataset,
    src_tokenizer,
    tgt_tokenizer,
    *,
    max_src_length: int,
    max_tgt_length: int,
    length_filter: str = "drop",
) -> tf.data.Dataset:
    """Tokenizes string pairs into unbatched id examples (steps 1-2 of ``make_dataset``).

    Elements are ``((src_ids, tgt_in_ids), tgt_out_ids)``, int32 vectors laid
    out as ``keras_transformer.data.sequences`` describes, in the order of
    ``pairs``; pairs over the length limits are dropped or truncated.

    Args:
        pairs: a dataset of ``(source, target)`` scalar strings (``PairSource.dataset()``).
        src_tokenizer: the source-side ``SubwordTokenizer``.
        tgt_tokenizer: the target-side one (the same one for a shared vocabulary).
        max_src_length: longest ``src_ids`` row, EOS included.
        max_tgt_length: most target tokens, BOS/EOS excluded.
        length_filter: ``"drop"`` longer pairs or ``"truncate"`` them (EOS kept).

    Returns:
        A ``tf.data.Dataset`` of ``((src_ids, tgt_in_ids), tgt_out_ids)`` examples.

    Raises:
        ValueError: ``pairs`` is not a dataset of string pairs, or a length
            argument is out of range.
    """
    _check_pairs(pairs)
    _check_lengths(max_src_length, max_tgt_length)
    _check_length_filter(length_filter)
    examples = _examples(
        _tokenized_batches(
            pairs,
            src_tokenizer,
            tgt_tokenizer,
            max_src_length=max_src_length,
            max_tgt_length=max_tgt_length,
            length_filter=length_filter,
        )
    )
    # The tokenizers' ops read their SentencePiece model through a resource, which
    # TF Text 2.19 marks stateful: saving an iterator (a data position) would fail.
    # The model is loaded again from the same file, so the position does not need it.
    options = tf.data.Options()
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return examples.with_options(options)


def batch_examples(
    examples: tf.data.Dataset,
    *,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    max_src_length: int,
    max_tgt_length: int,
    bucket_boundaries: Sequence[int] | None = None,
    shuffle_buffer: int = 10_000,
    seed: int | None = None,
    cache: bool | str | os.PathLike = True,
    repeat: bool = False,
    static_shapes: bool = False,
    drop_remainder: bool | None = None,
    training: bool = True,
    pad_id: int = PAD_ID,
) -> tf.data.Dataset:
    """Batches id examples into padded batches (steps 3-6 of ``make_dataset``).

    ``examples`` yields ``((src_ids, tgt_in_ids), tgt_out_ids)`` int32 vectors
    within the length limits (``tokenize_pairs``, or records read back by
    ``sharded_dataset``). The length limits set the padded shapes and the
    longest bucket; they filter nothing.

    Args:
        examples: a dataset of ``((src_ids, tgt_in_ids), tgt_out_ids)`` vectors.
        batch_tokens: ids per batch and side, padding included: each length
            bucket gets ``max(1, batch_tokens // bucket_bound)`` sentences.
        batch_size: sentences per batch instead. Give exactly one of the two.
        max_src_length: longest ``src_ids`` row, EOS included.
        max_tgt_length: most target tokens, BOS/EOS excluded; decoder rows are
            at most ``max_tgt_length + 1`` long. The model's ``max_length``
            must cover ``max(max_src_length, max_tgt_length + 1)``.
        bucket_boundaries: inclusive upper lengths of the buckets (length of a
            pair = its longer side); ``None`` picks ~1.1x-spaced bounds
            (``default_bucket_bounds``), ``()`` puts everything in one bucket.
        shuffle_buffer: examples in the shuffle buffer; 0 disables shuffling. A
            corpus stored in length order needs a buffer as large as the corpus.
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
        pad_id: the tokenizers' pad id (``pad_id_of``).

    Returns:
        A ``tf.data.Dataset`` of ``((src_ids, tgt_in_ids), tgt_out_ids)`` int32
        batches ``[batch, length]``.

    Raises:
        ValueError: ``examples`` has another structure, or an argument is out of range.
    """
    _check_examples(examples)
    plan = _BatchPlan.resolve(
        batch_tokens=batch_tokens,
        batch_size=batch_size,
        max_src_length=max_src_length,
        max_tgt_length=max_tgt_length,
        bucket_boundaries=bucket_boundaries,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        cache=cache,
        repeat=repeat,
        static_shapes=static_shapes,
        drop_remainder=drop_remainder,
        training=training,
        pad_id=pad_id,
    )
    return plan.apply(examples)


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
    """Turns string pairs into padded id batches for ``Transformer.fit``.

    It is ``tokenize_pairs`` followed by ``batch_examples``. Batches are
    ``((src_ids, tgt_in_ids), tgt_out_ids)``, int32 ``[batch, length]``, padded
    with the tokenizers' pad id.

    Args:
        pairs: a dataset of ``(source, target)`` scalar strings (``PairSource.dataset()``).
        src_tokenizer: the source-side ``SubwordTokenizer``.
        tgt_tokenizer: the target-side one (the same one for a shared vocabulary).
        batch_tokens: ids per batch and side, padding included: each length
            bucket gets ``max(1, batch_tokens // bucket_bound)`` sentences.
        batch_size: sentences per batch instead. Give exactly one of the two.
        max_src_length: longest ``src_ids`` row, EOS included.
        max_tgt_length: most target tokens, BOS/EOS excluded; decoder rows are
            at most ``max_tgt_length + 1`` long. The model's ``max_length``
            must cover ``max(max_src_length, max_tgt_length + 1)``.
        length_filter: ``"drop"`` longer pairs or ``"truncate"`` them (EOS kept).
        bucket_boundaries: inclusive upper lengths of the buckets (length of a
            pair = its longer side); ``None`` picks ~1.1x-spaced bounds
            (``default_bucket_bounds``), ``()`` puts everything in one bucket.
        shuffle_buffer: examples in the shuffle buffer; 0 disables shuffling. A
            corpus stored in length order needs a buffer as large as the corpus.
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

    Returns:
        A ``tf.data.Dataset`` of ``((src_ids, tgt_in_ids), tgt_out_ids)`` batches.

    Raises:
        ValueError: ``pairs`` is not a dataset of string pairs, the tokenizers'
            pad ids differ, or an argument is out of range.
    """
    _check_pairs(pairs)
    _check_length_filter(length_filter)
    plan = _BatchPlan.resolve(
        batch_tokens=batch_tokens,
        batch_size=batch_size,
        max_src_length=max_src_length,
        max_tgt_length=max_tgt_length,
        bucket_boundaries=bucket_boundaries,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        cache=cache,
        repeat=repeat,
        static_shapes=static_shapes,
        drop_remainder=drop_remainder,
        training=training,
        pad_id=pad_id_of(src_tokenizer, tgt_tokenizer),
    )
    examples = tokenize_pairs(
        pairs,
        src_tokenizer,
        tgt_tokenizer,
        max_src_length=max_src_length,
        max_tgt_length=max_tgt_length,
        length_filter=length_filter,
    )
    return plan.apply(examples)


@dataclasses.dataclass(frozen=True)
class TokenCounts:
    """Totals over batches: real (non-pad) ids and ids including padding, per side.

    ``tgt_tokens`` counts ``tgt_out`` ids (EOS included): the positions the
    model is trained to predict, the usual numerator for tokens/s.

    Args:
        batches: the batches counted.
        sentences: the sentences (rows) in them.
        src_tokens: the non-pad source ids.
        tgt_tokens: the non-pad ``tgt_out`` ids.
        src_padded: the source ids including padding.
        tgt_padded: the ``tgt_out`` ids including padding.
    """

    batches: int
    sentences: int
    src_tokens: int
    tgt_tokens: int
    src_padded: int
    tgt_padded: int

    @property
    def padding_fraction(self) -> float:
        """The share of all ids, both sides together, that are padding."""
        padded = self.src_padded + self.tgt_padded
        return 1.0 - (self.src_tokens + self.tgt_tokens) / padded if padded else 0.0


def count_tokens(
    dataset: tf.data.Dataset, max_batches: int | None = None, *, pad_id: int = PAD_ID
) -> TokenCounts:
    """Counts the sentences and ids in ``make_dataset`` batches, e.g. to report tokens/s.

    Args:
        dataset: batches ``((src_ids, tgt_in_ids), tgt_out_ids)``.
        max_batches: count only this many batches (needed for a repeating dataset).
        pad_id: the tokenizers' pad id; ids equal to it are padding.

    Returns:
        The ``TokenCounts``.

    Raises:
        ValueError: ``dataset`` has another structure, or repeats forever
            without ``max_batches``.
    """
    spec = dataset.element_spec
    if not (
        isinstance(spec, tuple)
        and len(spec) == 2
        and isinstance(spec[0], tuple)
        and len(spec[0]) == 2
    ):
        raise ValueError(
            f"count_tokens needs ((src_ids, tgt_in_ids), tgt_out_ids) batches, got {spec}."
        )
    if max_batches is not None:
        _check_positive("max_batches", max_batches)
        dataset = dataset.take(max_batches)
    elif dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ValueError("The dataset repeats forever; pass max_batches to count_tokens.")

    def batch_counts(inputs, tgt_out):
        src = inputs[0]
        return tf.cast(
            tf.stack(
                [
                    1,
                    tf.shape(src)[0],
                    tf.math.count_nonzero(src != pad_id, dtype=tf.int32),
                    tf.math.count_nonzero(tgt_out != pad_id, dtype=tf.int32),
                    tf.size(src),
                    tf.size(tgt_out),
                ]
            ),
            tf.int64,
        )

    totals = dataset.map(batch_counts).reduce(
        tf.zeros([6], tf.int64), lambda total, counts: total + counts
    )
    return TokenCounts(*(int(value) for value in totals.numpy()))
