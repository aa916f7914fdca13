"""Parallel-text sources: ``tf.data.Dataset`` of ``(source, target)`` string pairs.

Files are read in Python (corpora here are at most a few hundred thousand
lines) and cleaned before they reach TensorFlow:

* whitespace is normalised (``normalize_whitespace``: strip, collapse runs,
  NBSP included);
* a pair whose source or target is empty after normalising is skipped;
* a line that is not valid UTF-8 is skipped (with its partner);
* a TSV row with too few columns is skipped;
* two plain-text files with different line counts are an error: every pair
  after the first missing line would be misaligned.

Skips are counted in a ``ReadStats`` (``read_text_file_pairs`` /
``read_tsv_pairs`` return it with the pairs) and logged as a warning on the
``keras_transformer.data`` logger with the first few line numbers (1-based).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Iterable, Iterator

import tensorflow as tf

from keras_transformer.data.normalize import normalize_whitespace

logger = logging.getLogger("keras_transformer.data")

PathLike = str | os.PathLike
MAX_REPORTED_LINES = 5  # line numbers kept per kind of problem


@dataclasses.dataclass(frozen=True)
class ReadStats:
    """What reading a corpus kept and skipped.

    ``*_lines`` hold the first ``MAX_REPORTED_LINES`` offending line numbers
    (1-based) of each kind; the counts are complete.
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
        return self.empty + self.invalid_utf8 + self.malformed

    def summary(self) -> str:
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
        return (f"Skipped {self.skipped} of {self.lines} lines in {names}: {'; '.join(parts)}. "
                f"Kept {self.pairs} pairs.")


@dataclasses.dataclass(frozen=True)
class ParallelText:
    """Cleaned, aligned sentences and the stats of reading them."""

    sources: tuple[str, ...]
    targets: tuple[str, ...]
    stats: ReadStats

    def __len__(self) -> int:
        return len(self.sources)

    def to_dataset(self) -> tf.data.Dataset:
        return _dataset_from_lists(self.sources, self.targets)


def _dataset_from_lists(sources: Iterable[str], targets: Iterable[str]) -> tf.data.Dataset:
    src = tf.constant(list(sources), dtype=tf.string)
    tgt = tf.constant(list(targets), dtype=tf.string)
    return tf.data.Dataset.from_tensor_slices((src, tgt))


def _read_lines(path: PathLike) -> list[bytes]:
    """Raw lines split on ``\\n`` only (``\\r\\n`` tolerated): ``str.splitlines``
    would also split on U+2028, form feeds etc. and misalign parallel files."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"Corpus file {str(path)!r} does not exist.")
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte-order mark
        data = data[3:]
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def _decode(line: bytes) -> str | None:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return None


class _Collector:
    """Accumulates kept pairs and skip counts/line numbers."""

    def __init__(self, files: tuple[str, ...]):
        self.files = files
        self.sources: list[str] = []
        self.targets: list[str] = []
        self.lines = 0
        self.problems: dict[str, list[int]] = {"empty": [], "invalid_utf8": [], "malformed": []}
        self.counts = dict.fromkeys(self.problems, 0)

    def skip(self, kind: str, line_number: int) -> None:
        self.counts[kind] += 1
        if len(self.problems[kind]) < MAX_REPORTED_LINES:
            self.problems[kind].append(line_number)

    def add(self, line_number: int, source: str | None, target: str | None) -> None:
        if source is None or target is None:
            self.skip("invalid_utf8", line_number)
            return
        source, target = normalize_whitespace(source), normalize_whitespace(target)
        if not source or not target:
            self.skip("empty", line_number)
            return
        self.sources.append(source)
        self.targets.append(target)

    def finish(self) -> ParallelText:
        stats = ReadStats(
            files=self.files, lines=self.lines, pairs=len(self.sources),
            empty=self.counts["empty"], invalid_utf8=self.counts["invalid_utf8"],
            malformed=self.counts["malformed"], empty_lines=tuple(self.problems["empty"]),
            invalid_utf8_lines=tuple(self.problems["invalid_utf8"]),
            malformed_lines=tuple(self.problems["malformed"]),
        )
        if stats.skipped:
            logger.warning(stats.summary())
        else:
            logger.info(stats.summary())
        return ParallelText(tuple(self.sources), tuple(self.targets), stats)


def read_text_file_pairs(src_path: PathLike, tgt_path: PathLike) -> ParallelText:
    """Read two line-aligned UTF-8 files (line i of one translates line i of the other)."""
    src_lines, tgt_lines = _read_lines(src_path), _read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"Parallel files are not aligned: {str(src_path)!r} has {len(src_lines)} lines but "
            f"{str(tgt_path)!r} has {len(tgt_lines)}. Line i of one must translate line i of the "
            "other; fix the corpus (a missing or extra line misaligns every pair after it)."
        )
    collector = _Collector((str(src_path), str(tgt_path)))
    collector.lines = len(src_lines)
    for number, (src, tgt) in enumerate(zip(src_lines, tgt_lines), start=1):
        collector.add(number, _decode(src), _decode(tgt))
    return collector.finish()


def read_tsv_pairs(path: PathLike, src_column: int = 0, tgt_column: int = 1) -> ParallelText:
    """Read a tab-separated file, one pair per row.

    Fields are split on tabs only, without CSV quoting (quotes are text, as in
    Tatoeba/ParaCrawl dumps). A blank row counts as empty, a row with fewer
    than ``max(src_column, tgt_column) + 1`` fields as malformed.
    """
    for name, column in (("src_column", src_column), ("tgt_column", tgt_column)):
        if not isinstance(column, int) or isinstance(column, bool) or column < 0:
            raise ValueError(f"{name} must be a non-negative column index, got {column!r}.")
    if src_column == tgt_column:
        raise ValueError(f"src_column and tgt_column are both {src_column}; point them at different columns.")
    lines = _read_lines(path)
    needed = max(src_column, tgt_column) + 1
    collector = _Collector((str(path),))
    collector.lines = len(lines)
    for number, raw in enumerate(lines, start=1):
        line = _decode(raw)
        if line is None:
            collector.skip("invalid_utf8", number)
            continue
        if not normalize_whitespace(line):
            collector.skip("empty", number)
            continue
        fields = line.split("\t")
        if len(fields) < needed:
            collector.skip("malformed", number)
            continue
        collector.add(number, fields[src_column], fields[tgt_column])
    return collector.finish()


def text_file_pairs(src_path: PathLike, tgt_path: PathLike) -> tf.data.Dataset:
    """Pairs from two line-aligned files; ``read_text_file_pairs`` also gives the ``ReadStats``."""
    return read_text_file_pairs(src_path, tgt_path).to_dataset()


def tsv_pairs(path: PathLike, src_column: int = 0, tgt_column: int = 1) -> tf.data.Dataset:
    """Pairs from a TSV file; ``read_tsv_pairs`` also gives the ``ReadStats``."""
    return read_tsv_pairs(path, src_column, tgt_column).to_dataset()


def _checked_pairs(pairs: Iterable[tuple[str, str]]) -> Iterator[tuple[int, str, str]]:
    for index, pair in enumerate(pairs):
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not all(isinstance(text, str) for text in pair)):
            raise ValueError(f"Item {index} is {pair!r}; pairs_from_list needs (source, target) str pairs.")
        yield index + 1, pair[0], pair[1]


def pairs_from_list(pairs: Iterable[tuple[str, str]]) -> tf.data.Dataset:
    """In-memory ``(source, target)`` pairs (e.g. ``generate_pairs``), normalised like files.

    Empty pairs are skipped and logged with their 1-based positions.
    """
    collector = _Collector(("<list>",))
    for number, source, target in _checked_pairs(pairs):
        collector.lines = number
        collector.add(number, source, target)
    return collector.finish().to_dataset()
