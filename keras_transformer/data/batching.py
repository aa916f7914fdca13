"""Length buckets and token-based batch sizes.

Bucketing batches sentences of similar length so little compute is spent on
padding; sizing each bucket's batch by tokens keeps memory per step roughly
constant (the paper used ~25k source + ~25k target tokens per batch). Bounds
here are *inclusive* upper lengths: bounds ``(8, 16, 64)`` mean buckets of
lengths 1–8, 9–16 and 17–64.
"""

from __future__ import annotations

import math
from typing import Sequence


def default_bucket_bounds(
    max_length: int, min_bound: int = 8, growth: float = 1.1, multiple: int = 8
) -> tuple[int, ...]:
    """Bounds from ``min_bound`` to ``max_length`` growing by ``growth`` (at least
    ``multiple`` per step, rounded up to multiples of ``multiple`` for
    accelerator-friendly shapes), as in tensor2tensor; the last is ``max_length``.
    A bound within ``multiple / 2`` of ``max_length`` is left out so the last
    bucket is not a sliver (e.g. 257 gives ..., 240, 257, not ..., 256, 257)."""
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
    """User bounds checked and closed with ``max_length``; ``None`` gives the defaults, ``()`` one bucket."""
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
    """Sentences per batch for each bucket: ``max(1, batch_tokens // bound)``, so a padded
    batch never holds more than ``batch_tokens`` ids per side."""
    return tuple(max(1, batch_tokens // bound) for bound in bounds)
