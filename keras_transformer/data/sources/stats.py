"""What reading a corpus kept and skipped: ``ReadStats``, and the kept text held in memory.

Readers count every line they read and each kind of problem they skip, with
the first few line numbers (1-based) of each; the counts are logged as a
warning on the ``keras_transformer.data`` logger when anything was skipped.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

import tensorflow as tf

logger = logging.getLogger("keras_transformer.data")

MAX_REPORTED_LINES = 5  # line numbers kept per kind of problem

# Per-line status of the in-graph cleaning, and the ReadStats field of each problem.
KEPT, EMPTY, INVALID_UTF8, MALFORMED = 0, 1, 2, 3
PROBLEMS = {EMPTY: "empty", INVALID_UTF8: "invalid_utf8", MALFORMED: "malformed"}


@dataclasses.dataclass(frozen=True)
class ReadStats:
    """What reading a corpus kept and skipped.

    The counts are complete; ``*_lines`` hold the first ``MAX_REPORTED_LINES``
    offending line numbers (1-based) of each kind.

    Args:
        files: the files read (or a label such as ``"<list>"``).
        lines: the lines (rows, examples) read.
        pairs: the pairs kept.
        empty: pairs skipped because a side is empty after normalising.
        invalid_utf8: lines skipped because they are not valid UTF-8.
        malformed: TSV rows skipped because they have too few columns.
        empty_lines: the first line numbers of the ``empty`` skips.
        invalid_utf8_lines: the first line numbers of the ``invalid_utf8`` skips.
        malformed_lines: the first line numbers of the ``malformed`` skips.

    Example:

    >>> from keras_transformer.data import PairSource
    >>> stats = PairSource.from_pairs([("a", "b"), ("", "c")]).stats
    >>> (stats.lines, stats.pairs, stats.empty, stats.empty_lines)
    (2, 1, 1, (2,))
    """

    files: tuple[str, ...]
    lines: int
    pairs: int
    empty: int = 0
    invalid_utf8: int = 0
    malformed: int = 0
    empty_lines: tuple[int, ...] = ()
    invalid_utf8_lines: tuple[int, ...] = ()
    malformed_lines: tuple[int, ...] = ()

    @property
    def skipped(self) -> int:
        """The lines skipped, of every kind."""
        return self.empty + self.invalid_utf8 + self.malformed

    def summary(self) -> str:
        """One line of text saying what was kept and skipped (what the log shows).

        Returns:
            The summary, e.g. ``"Read 3 pairs from a.src / a.tgt."``.
        """
        parts = []
        for label, count, lines in (
            ("empty", self.empty, self.empty_lines),
            ("not valid UTF-8", self.invalid_utf8, self.invalid_utf8_lines),
            ("with too few columns", self.malformed, self.malformed_lines),
        ):
            if count:
                more = ", ..." if count > len(lines) else ""
                noun = "line" if count == 1 else "lines"
                parts.append(f"{count} {label} ({noun} {', '.join(map(str, lines))}{more})")
        names = " / ".join(self.files)
        if not parts:
            return f"Read {self.pairs} pairs from {names}."
        return (
            f"Skipped {self.skipped} of {self.lines} lines in {names}: {'; '.join(parts)}. "
            f"Kept {self.pairs} pairs."
        )


@dataclasses.dataclass(frozen=True)
class ParallelText:
    """Cleaned, aligned sentences held in memory, and the stats of reading them.

    Args:
        sources: the kept source sentences, in corpus order.
        targets: the kept target sentences, aligned with ``sources``.
        stats: what reading kept and skipped.

    Example:

    >>> from keras_transformer.data import PairSource
    >>> text = PairSource.from_pairs([("a  b", "c"), ("d", "e")]).read()
    >>> (len(text), text.sources)
    (2, ('a b', 'd'))
    """

    sources: tuple[str, ...]
    targets: tuple[str, ...]
    stats: ReadStats

    def __len__(self) -> int:
        return len(self.sources)

    def to_dataset(self) -> tf.data.Dataset:
        """The sentences as a ``tf.data.Dataset``.

        Returns:
            A dataset of ``(source, target)`` scalar strings, in corpus order.
        """
        return _dataset_from_lists(self.sources, self.targets)


def _dataset_from_lists(sources: Iterable[str], targets: Iterable[str]) -> tf.data.Dataset:
    src = tf.constant(list(sources), dtype=tf.string)
    tgt = tf.constant(list(targets), dtype=tf.string)
    return tf.data.Dataset.from_tensor_slices((src, tgt))


class _Tally:
    """Line and skip counts, with the first line numbers of each kind of skip."""

    def __init__(self, files: tuple[str, ...], first_line: int = 0):
        self.files = files
        self.first_line = first_line  # lines before the ones read (a part of the corpus)
        self.lines = 0
        self.kept = 0
        self.counts = dict.fromkeys(PROBLEMS.values(), 0)
        self.first: dict[str, list[int]] = {kind: [] for kind in PROBLEMS.values()}

    def skip(self, kind: str, line_number: int) -> None:
        self.counts[kind] += 1
        if len(self.first[kind]) < MAX_REPORTED_LINES:
            self.first[kind].append(line_number)

    def stats(self) -> ReadStats:
        return ReadStats(
            files=self.files,
            lines=self.lines,
            pairs=self.kept,
            **self.counts,
            **{f"{kind}_lines": tuple(lines) for kind, lines in self.first.items()},
        )


def _logged(stats: ReadStats) -> ReadStats:
    if stats.skipped:
        logger.warning(stats.summary())
    else:
        logger.info(stats.summary())
    return stats
