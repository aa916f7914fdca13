"""How a translator batches a long input: sorted by length, a token budget a batch.

``token_batches`` makes a window's batches, ``batch_capacity`` says how many
sentences a batch of a given length may hold, and ``check_batching`` and
``check_pairs`` refuse bad options with one line.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence

from keras_transformer.progress import progress_bar

# How a translator batches a long input (``token_batches``): at most BATCH_TOKENS padded source
# tokens a batch (rows × longest source), the lines read WINDOW at a time by
# ``Translator.translate_iterable``; INPUT_ORDER_BATCH sentences a batch in input order when no
# token budget is asked for (``batch_tokens=None``, the batching before token budgets).
BATCH_TOKENS = 2048
WINDOW = 10_000
INPUT_ORDER_BATCH = 64


def check_batching(
    batch_tokens: int | None, batch_size: int | None = None, window: int | None = None
) -> None:
    """Raise a ``ValueError`` unless each batching option is ``None`` or at least 1.

    Args:
        batch_tokens: the token budget of a batch (``token_batches``).
        batch_size: the most sentences a batch.
        window: the lines read and sorted at a time (``Translator.translate_iterable``).

    Raises:
        ValueError: an option is below 1, named in the message.
    """
    for name, value in (("batch_tokens", batch_tokens), ("batch_size", batch_size)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}.")
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1 (lines read at a time), got {window}.")


def batch_capacity(length: int, batch_tokens: int | None, batch_size: int | None = None) -> int:
    """The most sentences a batch whose longest source has ``length`` tokens may hold.

    Args:
        length: the batch's longest source, in tokens (EOS included).
        batch_tokens: the token budget (rows × longest source); ``None``: none.
        batch_size: the most sentences a batch; ``None``: no limit but the budget
            (``INPUT_ORDER_BATCH`` when there is no budget either).

    Returns:
        ``batch_tokens // length`` (at least 1: a source longer than the budget goes
        alone), capped at ``batch_size``.

    Example:
        >>> batch_capacity(10, 64), batch_capacity(100, 64), batch_capacity(10, 64, 4)
        (6, 1, 4)
    """
    if batch_tokens is None:
        return batch_size or INPUT_ORDER_BATCH
    rows = max(1, batch_tokens // max(1, length))
    return rows if batch_size is None else min(rows, batch_size)


def token_batches(
    lengths: Sequence[int], batch_tokens: int | None = BATCH_TOKENS, batch_size: int | None = None
) -> list[list[int]]:
    """The batches of a window of sources: sorted by length, filled up to a token budget.

    Sentences are taken shortest first (a stable sort) and a batch is closed when
    one more would put its rows × longest source over ``batch_tokens`` or its
    rows over ``batch_size`` (``batch_capacity``); a source longer than the
    budget is a batch alone. Every index appears in exactly one batch. With
    ``batch_tokens=None`` the batches are ``batch_size`` (default
    ``INPUT_ORDER_BATCH``) sentences in input order instead. Both translators
    batch with it (``Translator.translate_iterable``).

    Args:
        lengths: each source's length in tokens (EOS included).
        batch_tokens: the token budget of a batch; ``None``: input order.
        batch_size: the most sentences a batch (``None``: no limit but the budget).

    Returns:
        Lists of indices into ``lengths``, one a batch.

    Raises:
        ValueError: ``batch_tokens`` or ``batch_size`` is below 1.

    Example:
        >>> token_batches([5, 2, 9, 2, 3], batch_tokens=8)
        [[1, 3], [4], [0], [2]]
        >>> token_batches([5, 2, 9, 2, 3], batch_tokens=None, batch_size=2)
        [[0, 1], [2, 3], [4]]
    """
    check_batching(batch_tokens, batch_size)
    if batch_tokens is None:
        size = batch_size or INPUT_ORDER_BATCH
        starts = range(0, len(lengths), size)
        return [list(range(start, min(start + size, len(lengths)))) for start in starts]
    batches: list[list[int]] = []
    batch: list[int] = []
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        # Shortest first: the new source is the batch's longest.
        if batch and len(batch) + 1 > batch_capacity(lengths[index], batch_tokens, batch_size):
            batches.append(batch)
            batch = []
        batch.append(index)
    if batch:
        batches.append(batch)
    return batches


def check_pairs(name: str, first: Sequence, second: Sequence | None, other: str) -> None:
    """A ``ValueError`` unless ``second`` is ``None`` or as long as ``first``."""
    if second is not None and len(second) != len(first):
        one = {"prefixes": "prefix"}.get(other, other[:-1])
        raise ValueError(
            f"{len(first)} {name} but {len(second)} {other}: give one {one} a sentence."
        )


def stream_batches(
    items: Iterable[tuple[str, object]],
    prepare: Callable,
    run: Callable,
    *,
    batch_size: int | None = None,
    batch_tokens: int | None = BATCH_TOKENS,
    window: int | None = None,
    progress: bool = False,
    total: int | None = None,
    initial: int = 0,
) -> Iterator:
    """Answers of ``(text, extra)`` items, a window sorted and batched at a time, in input order.

    Each window of ``window`` items (``None``: all) is read by
    ``prepare(texts) → (lengths, prepared)`` and batched by ``token_batches``;
    ``run(prepared, rows, extras, capacity)`` answers a batch's rows, where
    ``capacity`` is the most sentences a batch of its length may hold
    (``batch_capacity``).

    Args:
        items: the texts and what goes with each (a prefix, a target, ``None``).
        prepare: reads a window's texts.
        run: answers a batch.
        batch_size, batch_tokens, window: the batching (``token_batches``).
        progress: show a progress bar on a terminal (needs ``tqdm``).
        total: the items to expect, for the progress bar.
        initial: where the progress bar starts.

    Yields:
        One answer an item, in input order.
    """
    items = iter(items)
    bar = progress_bar(progress, total=total, desc="translating", unit="sent", initial=initial)
    with bar:
        while chunk := list(itertools.islice(items, window)):
            lengths, prepared = prepare([text for text, _ in chunk])
            extras = [extra for _, extra in chunk]
            outputs: list = [None] * len(chunk)
            for batch in token_batches(lengths, batch_tokens, batch_size):
                longest = max(lengths[index] for index in batch)
                capacity = batch_capacity(longest, batch_tokens, batch_size)
                answers = run(prepared, batch, [extras[index] for index in batch], capacity)
                for index, answer in zip(batch, answers):
                    outputs[index] = answer
                bar.update(len(batch))
            yield from outputs
