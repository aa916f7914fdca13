"""Batching id examples: length buckets, token-based batch sizes, padded batches.

``batch_examples`` is steps 3-6 of ``make_dataset``: cache, shuffle, batch
by length (or to static shapes), prefetch.

Bucketing batches sentences of similar length so little compute is spent on
padding; sizing each bucket's batch by tokens keeps memory per step roughly
constant (the paper used ~25k source + ~25k target tokens per batch). Bounds
here are *inclusive* upper lengths: bounds ``(8, 16, 64)`` mean buckets of
lengths 1–8, 9–16 and 17–64.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from keras_transformer.config import PAD_ID

logger = logging.getLogger("keras_transformer.data")

SHUFFLE_BUFFER = 10_000  # examples in the shuffle buffer by default


def default_bucket_bounds(
    max_length: int, min_bound: int = 8, growth: float = 1.1, multiple: int = 8
) -> tuple[int, ...]:
    """Computes length-bucket bounds from ``min_bound`` up to ``max_length``, as tensor2tensor does.

    Bounds grow by ``growth`` (at least ``multiple`` per step, rounded up to
    multiples of ``multiple`` for accelerator-friendly shapes); the last is
    ``max_length``. A bound within ``multiple / 2`` of ``max_length`` is left
    out so the last bucket is not a sliver.

    Args:
        max_length: the longest sequence, the last bound.
        min_bound: the first bound.
        growth: the factor between neighbouring bounds.
        multiple: bounds are multiples of this (except the last).

    Returns:
        The inclusive upper bounds, increasing.

    Raises:
        ValueError: ``max_length`` is below 1.

    Example:

    >>> default_bucket_bounds(64)
    (8, 16, 24, 32, 40, 48, 56, 64)
    >>> default_bucket_bounds(257)[-3:]
    (216, 240, 257)
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}.")
    bounds = []
    bound = min_bound
    while bound <= max_length - max(1, multiple // 2):
        bounds.append(bound)
        bound = max(bound + multiple, math.ceil(bound * growth / multiple) * multiple)
    bounds.append(max_length)
    return tuple(bounds)


def resolve_bucket_bounds(
    bucket_boundaries: Sequence[int] | None, max_length: int
) -> tuple[int, ...]:
    """User bounds checked and closed with ``max_length``.

    ``None`` gives the defaults, ``()`` one bucket."""
    if bucket_boundaries is None:
        return default_bucket_bounds(max_length)
    bounds = list(bucket_boundaries)
    for bound in bounds:
        if not isinstance(bound, int) or isinstance(bound, bool) or bound < 1:
            raise ValueError(f"bucket_boundaries must be positive integers, got {bound!r}.")
    if any(b >= a for a, b in zip(bounds[1:], bounds)):
        raise ValueError(f"bucket_boundaries must be strictly increasing, got {tuple(bounds)}.")
    if bounds and bounds[-1] >= max_length:
        raise ValueError(
            f"bucket_boundaries {tuple(bounds)} reach the longest allowed length {max_length} "
            "(max(max_src_length, max_tgt_length + 1)); a last bucket up to it is added "
            f"automatically, so keep only bounds below {max_length}."
        )
    return (*bounds, max_length)


def bucket_batch_sizes(bounds: Sequence[int], batch_tokens: int) -> tuple[int, ...]:
    """Computes each bucket's batch size so that a padded batch holds at most ``batch_tokens`` ids.

    Args:
        bounds: the buckets' inclusive upper lengths.
        batch_tokens: the most ids per side in one padded batch.

    Returns:
        Sentences per batch for each bucket, ``max(1, batch_tokens // bound)``.

    Example:

    >>> bucket_batch_sizes((8, 16, 64), batch_tokens=256)
    (32, 16, 4)
    """
    return tuple(max(1, batch_tokens // bound) for bound in bounds)


def _check_positive(name: str, value, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


def _check_lengths(max_src_length, max_tgt_length) -> int:
    """Check the length limits; returns the longest row they allow."""
    _check_positive("max_src_length", max_src_length, minimum=2)
    _check_positive("max_tgt_length", max_tgt_length)
    return max(max_src_length, max_tgt_length + 1)


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

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any], **overrides) -> _BatchPlan:
        """``resolve`` with the arguments of that name in ``arguments``, ``overrides``
        in place of some. ``batch_examples``, ``make_dataset`` and ``sharded_dataset``
        name their batching arguments alike and pass their ``locals()``, so the
        arguments are forwarded in this one place."""
        names = inspect.signature(cls.resolve).parameters
        given = {name: arguments[name] for name in names if name in arguments}
        return cls.resolve(**(given | overrides))

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


def batch_examples(
    examples: tf.data.Dataset,
    *,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    max_src_length: int,
    max_tgt_length: int,
    bucket_boundaries: Sequence[int] | None = None,
    shuffle_buffer: int = SHUFFLE_BUFFER,
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
        batch_tokens: as in ``make_dataset``.
        batch_size: as in ``make_dataset``.
        max_src_length: as in ``make_dataset``.
        max_tgt_length: as in ``make_dataset``.
        bucket_boundaries: as in ``make_dataset``.
        shuffle_buffer: as in ``make_dataset``.
        seed: as in ``make_dataset``.
        cache: as in ``make_dataset``.
        repeat: as in ``make_dataset``.
        static_shapes: as in ``make_dataset``.
        drop_remainder: as in ``make_dataset``.
        training: as in ``make_dataset``.
        pad_id: the tokenizers' pad id (``pad_id_of``).

    Returns:
        A ``tf.data.Dataset`` of ``((src_ids, tgt_in_ids), tgt_out_ids)`` int32
        batches ``[batch, length]``.

    Raises:
        ValueError: ``examples`` has another structure, or an argument is out of range.
    """
    _check_examples(examples)
    return _BatchPlan.from_arguments(locals()).apply(examples)
