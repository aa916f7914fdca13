"""Length buckets and token-based batch sizes.

Bucketing batches sentences of similar length so little compute is spent on
padding; sizing each bucket's batch by tokens keeps memory per step roughly
constant (the paper used ~25k source + ~25k target tokens per batch). Bounds
here are *inclusive* upper lengths: bounds ``(8, 16, 64)`` mean buckets of
lengths 1–8, 9–16 and 17–64.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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
