"""The readers of each corpus format: two line-aligned text files, a TSV file, a list.

A reader of a file gives, for lines ``[first, stop)`` (``stop=None``: the
whole corpus), the two passes ``PairSource`` reads with: ``graph_batches()``,
the classified batches of ``dataset()``, and ``python_pass(tally, keep)``,
which yields the kept ``(sources, targets)`` lists. A list is cleaned once,
in Python, and held in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_transformer.data.normalize import normalize_whitespace
from keras_transformer.data.sources.cleaning import (
    GRAPH_BATCH,
    Keep,
    _classified,
    _classify_pairs,
    _classify_tsv_rows,
    _text_rows,
    _tsv_rows,
)
from keras_transformer.data.sources.lines import (
    PathLike,
    _check_file,
    _file_facts,
    _FileFacts,
    _line_batches,
    _line_dataset,
    _part_line_dataset,
)
from keras_transformer.data.sources.stats import (
    MAX_REPORTED_LINES,
    ParallelText,
    ReadStats,
    _logged,
    _Tally,
)

# reader(first, stop) -> (graph_batches, python_pass) of lines [first, stop).
Reader = Callable[[int, int | None], tuple[Callable[[], tf.data.Dataset], Callable]]


def _text_files_reader(
    src_path: PathLike, tgt_path: PathLike
) -> tuple[tuple[str, ...], Reader, int]:
    """The files' names, their reader and their line count (``PairSource.from_text_files``)."""
    src_path, tgt_path = _check_file(src_path), _check_file(tgt_path)
    src_facts, tgt_facts = _file_facts(src_path), _file_facts(tgt_path)
    if src_facts.lines != tgt_facts.lines:
        raise ValueError(_misaligned(src_path, src_facts.lines, tgt_path, tgt_facts.lines))

    def reader(first: int, stop: int | None):
        span = None if stop is None else (first, stop)

        def lines(path: Path, facts: _FileFacts) -> tf.data.Dataset:
            if span is None:
                return _line_dataset(path, facts)
            return _part_line_dataset(path, facts, first, stop)

        def graph_batches() -> tf.data.Dataset:
            src = lines(src_path, src_facts).batch(GRAPH_BATCH)
            tgt = lines(tgt_path, tgt_facts).batch(GRAPH_BATCH)
            return _classified(tf.data.Dataset.zip((src, tgt)), _classify_pairs, first)

        def python_pass(tally: _Tally, keep: Keep):
            for src, tgt in zip(
                _line_batches(src_path, src_facts, lines=span),
                _line_batches(tgt_path, tgt_facts, lines=span),
            ):
                yield _text_rows(tally, src, tgt, keep)

        return graph_batches, python_pass

    return (str(src_path), str(tgt_path)), reader, src_facts.lines


def _tsv_reader(
    path: PathLike, src_column: int, tgt_column: int
) -> tuple[tuple[str, ...], Reader, int]:
    """The file's name, its reader and its line count (``PairSource.from_tsv``)."""
    _check_columns(src_column, tgt_column)
    path = _check_file(path)
    facts = _file_facts(path)

    def reader(first: int, stop: int | None):
        span = None if stop is None else (first, stop)

        def graph_batches() -> tf.data.Dataset:
            lines = (
                _line_dataset(path, facts)
                if span is None
                else _part_line_dataset(path, facts, first, stop)
            )
            return _classified(
                lines.batch(GRAPH_BATCH),
                lambda lines: _classify_tsv_rows(lines, src_column, tgt_column),
                first,
            )

        def python_pass(tally: _Tally, keep: Keep):
            for lines in _line_batches(path, facts, lines=span):
                yield _tsv_rows(tally, lines, keep, src_column, tgt_column)

        return graph_batches, python_pass

    return (str(path),), reader, facts.lines


def _misaligned(src_path, src_lines: int, tgt_path, tgt_lines: int) -> str:
    return (
        f"Parallel files are not aligned: {str(src_path)!r} has {src_lines} lines but "
        f"{str(tgt_path)!r} has {tgt_lines}. Line i of one must translate line i of the "
        "other; fix the corpus (a missing or extra line misaligns every pair after it)."
    )


def _check_columns(src_column, tgt_column) -> None:
    for name, column in (("src_column", src_column), ("tgt_column", tgt_column)):
        if not isinstance(column, int) or isinstance(column, bool) or column < 0:
            raise ValueError(f"{name} must be a non-negative column index, got {column!r}.")
    if src_column == tgt_column:
        raise ValueError(
            f"src_column and tgt_column are both {src_column}; point them at different columns."
        )


def _collect_pairs(pairs: Iterable[tuple[str, str]]) -> tuple[ParallelText, np.ndarray]:
    """The cleaned pairs, and the 0-based indices of the items kept."""
    tally = _Tally(("<list>",))
    sources: list[str] = []
    targets: list[str] = []
    kept: list[int] = []
    for index, pair in enumerate(pairs):
        if (
            not isinstance(pair, (tuple, list))
            or len(pair) != 2
            or not all(isinstance(text, str) for text in pair)
        ):
            raise ValueError(
                f"Item {index} is {pair!r}; PairSource.from_pairs needs (source, target) str pairs."
            )
        tally.lines += 1
        source, target = normalize_whitespace(pair[0]), normalize_whitespace(pair[1])
        if not source or not target:
            tally.skip("empty", index + 1)
            continue
        tally.kept += 1
        sources.append(source)
        targets.append(target)
        kept.append(index)
    text = ParallelText(tuple(sources), tuple(targets), _logged(tally.stats()))
    return text, np.asarray(kept, np.int64)


def _list_part(text: ParallelText, kept: np.ndarray, first: int, stop: int) -> ParallelText:
    """``PairSource.part`` of an in-memory list: the kept pairs of items ``[first, stop)``."""
    low, high = (int(end) for end in np.searchsorted(kept, [first, stop]))
    skipped = np.setdiff1d(np.arange(first, stop), kept[low:high])
    stats = ReadStats(
        files=(f"<list> items {first + 1}-{stop}",),
        lines=stop - first,
        pairs=high - low,
        empty=len(skipped),
        empty_lines=tuple(int(index) + 1 for index in skipped[:MAX_REPORTED_LINES]),
    )
    return ParallelText(text.sources[low:high], text.targets[low:high], stats)
