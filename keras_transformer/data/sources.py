"""Parallel-text sources: ``(source, target)`` string pairs, cleaned alike.

Every reader applies the same cleaning:

* lines are split on ``\\n`` only (a ``\\r`` before it is dropped; U+2028,
  form feeds etc. stay inside the line), and a UTF-8 byte-order mark at the
  start of a file is dropped;
* whitespace is normalised (``normalize_whitespace``: strip, collapse runs,
  NBSP included);
* a pair whose source or target is empty after normalising is skipped;
* a line that is not valid UTF-8 is skipped (with its partner);
* a TSV row with too few columns is skipped;
* two plain-text files with different line counts are an error: every pair
  after the first missing line would be misaligned.

Skips are counted in a ``ReadStats`` and logged as a warning on the
``keras_transformer.data`` logger with the first few line numbers (1-based).

``PairSource`` reads a corpus of any size without holding it in memory:
``PairSource.from_text_files`` (plain or ``.gz``), ``from_tsv``, ``from_tfds``,
``from_pairs``. Its ``dataset()`` streams through ``tf.data`` and cleans in
the graph (``TextLineDataset`` lines); its ``stats``, its iteration (e.g. to
train a tokenizer) and ``read()`` make chunked passes in Python, a few times
faster than the graph for a whole pass. The two are kept equal by the tests.
``read_text_file_pairs`` / ``read_tsv_pairs`` read a small corpus into memory
(``ParallelText``: the sentences and their ``ReadStats``); ``text_file_pairs``
/ ``tsv_pairs`` / ``pairs_from_list`` give those as a ``tf.data.Dataset``.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import tensorflow as tf

from keras_transformer.data.normalize import normalize_whitespace, normalize_whitespace_tf

logger = logging.getLogger("keras_transformer.data")

PathLike = str | os.PathLike
MAX_REPORTED_LINES = 5  # line numbers kept per kind of problem
BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark
GRAPH_BATCH = 4096  # lines cleaned per op call in dataset()
PYTHON_BATCH = 65536  # lines per batch of the Python passes
READ_CHUNK = 1 << 22  # bytes read at a time
SIDES = ("source", "target")
Keep = tuple[bool, bool]  # which sides a Python pass hands out
NEITHER, BOTH = (False, False), (True, True)

# Per-line status of the in-graph cleaning, and the ReadStats field of each problem.
KEPT, EMPTY, INVALID_UTF8, MALFORMED = 0, 1, 2, 3
PROBLEMS = {EMPTY: "empty", INVALID_UTF8: "invalid_utf8", MALFORMED: "malformed"}


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
        return (
            f"Skipped {self.skipped} of {self.lines} lines in {names}: {'; '.join(parts)}. "
            f"Kept {self.pairs} pairs."
        )


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


class _Tally:
    """Line and skip counts, with the first line numbers of each kind of skip."""

    def __init__(self, files: tuple[str, ...]):
        self.files = files
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


def _blank(text: str) -> bool:
    """``normalize_whitespace(text) == ""``, without building the normalised text."""
    return not text or text.isspace()


# --------------------------------------------------------------------------- files


def _check_file(path: PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"Corpus file {str(path)!r} does not exist.")
    return path


def _is_gzip(path: Path) -> bool:
    return path.suffix == ".gz"


def _open_binary(path: Path):
    return gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")


@dataclasses.dataclass(frozen=True)
class _FileFacts:
    """What one chunked pass over a file finds: its line count, a leading
    byte-order mark, any ``\\r``, and a ``\\r`` not followed by ``\\n``
    (``tf.data.TextLineDataset`` drops every ``\\r`` of a line, which would
    join the words around such a one)."""

    lines: int
    bom: bool
    carriage_return: bool
    lone_carriage_return: bool


def _file_facts(path: Path) -> _FileFacts:
    with _open_binary(path) as stream:
        head = b""
        while len(head) < len(BOM):
            more = stream.read(len(BOM) - len(head))
            if not more:
                break
            head += more
        bom = head == BOM
        chunk = b"" if bom else head
        lines = carriage_returns = crlf = 0
        previous_cr, last = False, b""
        while True:
            if chunk:
                lines += chunk.count(b"\n")
                carriage_returns += chunk.count(b"\r")
                crlf += chunk.count(b"\r\n") + (previous_cr and chunk[:1] == b"\n")
                previous_cr, last = chunk[-1:] == b"\r", chunk[-1:]
            chunk = stream.read(READ_CHUNK)
            if not chunk:
                break
    if last and last != b"\n":
        lines += 1  # a last line without a newline
    lone = carriage_returns - crlf - previous_cr  # a \r ending the file ends its last line
    return _FileFacts(
        lines=lines, bom=bom, carriage_return=carriage_returns > 0, lone_carriage_return=lone > 0
    )


def _line_batches(path: Path, facts: _FileFacts, size: int = PYTHON_BATCH) -> Iterator[list[bytes]]:
    """The file's raw lines, ``size`` at a time: split on ``\\n`` only, one
    ``\\r`` before it dropped, the byte-order mark skipped."""
    with _open_binary(path) as stream:
        if facts.bom:
            stream.read(len(BOM))
        pending: list[bytes] = []
        rest = b""
        while True:
            chunk = stream.read(READ_CHUNK)
            if chunk:
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
            else:
                lines = [rest] if rest else []
            if facts.carriage_return:
                lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
            pending += lines
            while len(pending) >= size or (pending and not chunk):
                yield pending[:size]
                pending = pending[size:]
            if not chunk:
                return


def _line_dataset(path: Path, facts: _FileFacts) -> tf.data.Dataset:
    """The file's raw lines (byte-order mark dropped) as scalar strings, streamed."""
    if facts.lines == 0:
        return tf.data.Dataset.from_tensor_slices(tf.constant([], tf.string))
    if facts.lone_carriage_return:
        logger.info(
            "%s has a carriage return inside a line; streaming it through Python (slower).", path
        )
        spec = tf.TensorSpec([None], tf.string)
        batches = lambda: (np.array(lines, dtype=object) for lines in _line_batches(path, facts))  # noqa: E731
        return tf.data.Dataset.from_generator(batches, output_signature=spec).unbatch()
    lines = tf.data.TextLineDataset(
        os.fspath(path), compression_type="GZIP" if _is_gzip(path) else ""
    )
    if facts.bom:
        lines = (
            lines.take(1)
            .map(lambda line: tf.strings.substr(line, len(BOM), -1))
            .concatenate(lines.skip(1))
        )
    return lines


# --------------------------------------------------------------------------- cleaning in Python


def _keep_pair(
    tally: _Tally,
    number: int,
    src: str,
    tgt: str,
    keep: Keep,
    sources: list[str],
    targets: list[str],
) -> None:
    """Count line ``number``'s decoded pair as kept, or as empty when a side is blank;
    append the kept sides that ``keep`` asks for, normalised."""
    if _blank(src) or _blank(tgt):
        tally.skip("empty", number)
        return
    tally.kept += 1
    if keep[0]:
        sources.append(normalize_whitespace(src))
    if keep[1]:
        targets.append(normalize_whitespace(tgt))


def _text_rows(tally: _Tally, src_lines: list[bytes], tgt_lines: list[bytes], keep: Keep):
    """Clean one batch of aligned lines: counts into ``tally``; out, the kept
    sources and targets (each list empty unless ``keep`` asks for that side)."""
    sources, targets = [], []
    number = tally.lines
    tally.lines += len(src_lines)
    for src, tgt in zip(src_lines, tgt_lines):
        number += 1
        try:
            src, tgt = src.decode("utf-8"), tgt.decode("utf-8")
        except UnicodeDecodeError:
            tally.skip("invalid_utf8", number)
            continue
        _keep_pair(tally, number, src, tgt, keep, sources, targets)
    return sources, targets


def _tsv_rows(tally: _Tally, lines: list[bytes], keep: Keep, src_column: int, tgt_column: int):
    """``_text_rows`` for TSV rows: fields split on tabs, a row with too few is malformed."""
    sources, targets = [], []
    needed = max(src_column, tgt_column) + 1
    number = tally.lines
    tally.lines += len(lines)
    for raw in lines:
        number += 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            tally.skip("invalid_utf8", number)
            continue
        if _blank(line):
            tally.skip("empty", number)
            continue
        fields = line.split("\t")
        if len(fields) < needed:
            tally.skip("malformed", number)
            continue
        src, tgt = fields[src_column], fields[tgt_column]
        _keep_pair(tally, number, src, tgt, keep, sources, targets)
    return sources, targets


# --------------------------------------------------------------------------- cleaning in the graph


def _valid_utf8(texts: tf.Tensor) -> tf.Tensor:
    """Which strings are valid UTF-8 (what ``bytes.decode("utf-8")`` accepts): a
    transcode that replaces bad sequences leaves only those unchanged."""
    replaced = tf.strings.unicode_transcode(
        texts,
        "UTF-8",
        "UTF-8",
        errors="replace",
        replacement_char=0xFFFD,
        replace_control_characters=False,
    )
    return tf.equal(replaced, texts)


def _nonempty(texts: tf.Tensor) -> tf.Tensor:
    return tf.strings.length(texts) > 0


def _classify_pairs(src: tf.Tensor, tgt: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Normalised texts and the status of each pair of lines (batched)."""
    valid = _valid_utf8(src) & _valid_utf8(tgt)
    src = normalize_whitespace_tf(tf.where(valid, src, ""))
    tgt = normalize_whitespace_tf(tf.where(valid, tgt, ""))
    status = tf.where(valid, tf.where(_nonempty(src) & _nonempty(tgt), KEPT, EMPTY), INVALID_UTF8)
    return src, tgt, status


def _classify_tsv_rows(lines: tf.Tensor, src_column: int, tgt_column: int):
    """``_classify_pairs`` for TSV rows."""
    needed = max(src_column, tgt_column) + 1
    valid = _valid_utf8(lines)
    lines = tf.where(valid, lines, "")
    blank = tf.logical_not(_nonempty(normalize_whitespace_tf(lines)))
    fields = tf.strings.split(lines, "\t")
    malformed = fields.row_lengths() < needed
    columns = fields.to_tensor(default_value="", shape=[None, needed])
    src = normalize_whitespace_tf(columns[:, src_column])
    tgt = normalize_whitespace_tf(columns[:, tgt_column])
    pair = tf.where(_nonempty(src) & _nonempty(tgt), KEPT, EMPTY)
    status = tf.where(
        valid, tf.where(blank, EMPTY, tf.where(malformed, MALFORMED, pair)), INVALID_UTF8
    )
    return src, tgt, status


def _classified(batches: tf.data.Dataset, classify: Callable) -> tf.data.Dataset:
    """Batches ``{"number", "source", "target", "status"}`` (line numbers 1-based)."""

    def apply(index, raw):
        src, tgt, status = classify(*raw) if isinstance(raw, tuple) else classify(raw)
        size = tf.shape(status, out_type=tf.int64)[0]
        number = index * GRAPH_BATCH + tf.range(1, size + 1, dtype=tf.int64)
        return {"number": number, "source": src, "target": tgt, "status": tf.cast(status, tf.int32)}

    return batches.enumerate().map(apply, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _kept(batch) -> tuple[tf.Tensor, tf.Tensor]:
    keep = tf.equal(batch["status"], KEPT)
    return tf.boolean_mask(batch["source"], keep), tf.boolean_mask(batch["target"], keep)


def _decode_all(values: np.ndarray) -> list[str]:
    return [value.decode("utf-8") for value in values]


def _graph_pass(classified: Callable[[], tf.data.Dataset]):
    """A Python pass for sources only the graph reads (TFDS): the classified batches, tallied."""

    def run(tally: _Tally, keep: Keep):
        batches = classified()
        if keep == NEITHER:  # a scan: leave the texts in the graph
            batches = batches.map(
                lambda batch: {"number": batch["number"], "status": batch["status"]}
            )
        for batch in batches.prefetch(2).as_numpy_iterator():
            status = batch["status"]
            bad = status != KEPT
            for number, code in zip(batch["number"][bad], status[bad]):
                tally.skip(PROBLEMS[int(code)], int(number))
            tally.lines += len(status)
            tally.kept += int(np.sum(~bad))
            yield (
                _decode_all(batch["source"][~bad]) if keep[0] else [],
                _decode_all(batch["target"][~bad]) if keep[1] else [],
            )

    return run


# --------------------------------------------------------------------------- PairSource


class PairSource:
    """A parallel corpus read as a stream, never held in memory whole.

    Make one with ``from_text_files``, ``from_tsv``, ``from_tfds`` or
    ``from_pairs`` (an in-memory list). Then:

    * ``dataset()``: a ``tf.data.Dataset`` of the kept ``(source, target)``
      scalar strings in corpus order, cleaned in the graph (what
      ``make_dataset`` takes);
    * ``stats``: the ``ReadStats``, from one pass over the corpus made on
      first use and logged like the in-memory readers log theirs;
      ``len(source)`` and ``source.pairs`` are its kept-pair count;
    * iterating gives the kept pairs as Python ``str`` tuples,
      ``sentences(side)`` one side of them (a sized stream, e.g. to train a
      tokenizer on), ``read()`` the whole corpus in memory as ``ParallelText``
      (for small splits such as valid/test).

    Each of these reads the corpus afresh (``stats`` once).
    """

    def __init__(
        self,
        files: Iterable[str],
        graph_batches: Callable[[], tf.data.Dataset],
        python_pass: Callable,
        stats: ReadStats | None = None,
        text: ParallelText | None = None,
    ):
        """Use the ``from_*`` constructors. ``graph_batches`` builds the
        classified batches of ``dataset()``; ``python_pass(tally, keep)``
        yields kept ``(sources, targets)`` lists; ``text`` is the corpus when
        it is in memory already."""
        self.files = tuple(files)
        self._graph_batches = graph_batches
        self._python_pass = python_pass
        self._stats = stats
        self._text = text

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_text_files(cls, src_path: PathLike, tgt_path: PathLike) -> "PairSource":
        """Two line-aligned UTF-8 files, line i of one translating line i of the
        other; ``.gz`` files are read through gzip. Different line counts are a
        ``ValueError`` here, found by counting newlines in chunks."""
        src_path, tgt_path = _check_file(src_path), _check_file(tgt_path)
        src_facts, tgt_facts = _file_facts(src_path), _file_facts(tgt_path)
        if src_facts.lines != tgt_facts.lines:
            raise ValueError(_misaligned(src_path, src_facts.lines, tgt_path, tgt_facts.lines))

        def graph_batches() -> tf.data.Dataset:
            src = _line_dataset(src_path, src_facts).batch(GRAPH_BATCH)
            tgt = _line_dataset(tgt_path, tgt_facts).batch(GRAPH_BATCH)
            return _classified(tf.data.Dataset.zip((src, tgt)), _classify_pairs)

        def python_pass(tally: _Tally, keep: Keep):
            for src, tgt in zip(
                _line_batches(src_path, src_facts), _line_batches(tgt_path, tgt_facts)
            ):
                yield _text_rows(tally, src, tgt, keep)

        return cls((str(src_path), str(tgt_path)), graph_batches, python_pass)

    @classmethod
    def from_tsv(cls, path: PathLike, src_column: int = 0, tgt_column: int = 1) -> "PairSource":
        """A tab-separated file (plain or ``.gz``), one pair per row; see ``read_tsv_pairs``."""
        _check_columns(src_column, tgt_column)
        path = _check_file(path)
        facts = _file_facts(path)

        def graph_batches() -> tf.data.Dataset:
            return _classified(
                _line_dataset(path, facts).batch(GRAPH_BATCH),
                lambda lines: _classify_tsv_rows(lines, src_column, tgt_column),
            )

        def python_pass(tally: _Tally, keep: Keep):
            for lines in _line_batches(path, facts):
                yield _tsv_rows(tally, lines, keep, src_column, tgt_column)

        return cls((str(path),), graph_batches, python_pass)

    @classmethod
    def from_tfds(
        cls,
        name: str,
        split: str,
        src_key: str | None = None,
        tgt_key: str | None = None,
        data_dir: PathLike | None = None,
        *,
        download: bool = True,
    ) -> "PairSource":
        """A TFDS translation split (see ``tfds_pairs``); its line numbers count examples."""
        from keras_transformer.data.tfds_source import tfds_examples

        examples = tfds_examples(name, split, src_key, tgt_key, data_dir, download=download)

        def graph_batches() -> tf.data.Dataset:
            return _classified(examples.batch(GRAPH_BATCH), _classify_pairs)

        return cls((f"{name} {split}",), graph_batches, _graph_pass(graph_batches))

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]]) -> "PairSource":
        """In-memory ``(source, target)`` pairs, normalised like files (see ``pairs_from_list``)."""
        text = _collect_pairs(pairs)

        def python_pass(tally: _Tally, keep: Keep):
            yield text.sources, text.targets

        return cls(text.stats.files, text.to_dataset, python_pass, stats=text.stats, text=text)

    # ------------------------------------------------------------------ reading

    def dataset(self) -> tf.data.Dataset:
        """The kept ``(source, target)`` pairs as scalar strings, in corpus order."""
        if self._text is not None:
            return self._text.to_dataset()
        return (
            self._graph_batches()
            .map(_kept, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .unbatch()
        )

    @property
    def stats(self) -> ReadStats:
        """What reading keeps and skips (one pass over the corpus, made once)."""
        if self._stats is None:
            tally = _Tally(self.files)
            for _ in self._python_pass(tally, NEITHER):
                pass
            self._stats = _logged(tally.stats())
        return self._stats

    @property
    def pairs(self) -> int:
        """How many pairs reading keeps (``stats.pairs``)."""
        return self.stats.pairs

    def __len__(self) -> int:
        return self.pairs

    def _batches(self, keep: Keep = BOTH) -> Iterator[tuple[list[str], list[str]]]:
        tally = _Tally(self.files)
        yield from self._python_pass(tally, keep)
        if self._stats is None:
            self._stats = _logged(tally.stats())

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for sources, targets in self._batches():
            yield from zip(sources, targets)

    def sentences(self, side: str) -> "Sentences":
        """The ``"source"`` or ``"target"`` side of the kept pairs, streamed."""
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}.")
        return Sentences(self, SIDES.index(side))

    def read(self) -> ParallelText:
        """The whole corpus in memory (for small splits such as valid/test)."""
        if self._text is not None:
            return self._text
        tally = _Tally(self.files)
        sources: list[str] = []
        targets: list[str] = []
        for kept_sources, kept_targets in self._python_pass(tally, BOTH):
            sources += kept_sources
            targets += kept_targets
        if self._stats is None:
            self._stats = _logged(tally.stats())
        return ParallelText(tuple(sources), tuple(targets), self._stats)

    def __repr__(self) -> str:
        pairs = f", pairs={self._stats.pairs}" if self._stats is not None else ""
        return f"PairSource({' / '.join(self.files)!r}{pairs})"


class Sentences:
    """One side of a ``PairSource``'s kept pairs: a sized, re-iterable stream of
    ``str`` (``len`` is the pair count), as ``train_tokenizers`` takes it."""

    def __init__(self, source: PairSource, column: int):
        self._source = source
        self._column = column

    def __len__(self) -> int:
        return len(self._source)

    def __iter__(self) -> Iterator[str]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[str]]:
        """The sentences a list at a time (cheaper than one at a time)."""
        keep = (self._column == 0, self._column == 1)
        for batch in self._source._batches(keep):
            yield list(batch[self._column])


# --------------------------------------------------------------------------- in-memory readers


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


def read_text_file_pairs(src_path: PathLike, tgt_path: PathLike) -> ParallelText:
    """Read two line-aligned UTF-8 files (plain or ``.gz``) into memory: line i of
    one translates line i of the other. ``PairSource.from_text_files`` streams them."""
    return PairSource.from_text_files(src_path, tgt_path).read()


def read_tsv_pairs(path: PathLike, src_column: int = 0, tgt_column: int = 1) -> ParallelText:
    """Read a tab-separated file (plain or ``.gz``) into memory, one pair per row.

    Fields are split on tabs only, without CSV quoting (quotes are text, as in
    Tatoeba/ParaCrawl dumps). A blank row counts as empty, a row with fewer
    than ``max(src_column, tgt_column) + 1`` fields as malformed.
    ``PairSource.from_tsv`` streams the file.
    """
    return PairSource.from_tsv(path, src_column, tgt_column).read()


def text_file_pairs(src_path: PathLike, tgt_path: PathLike) -> tf.data.Dataset:
    """Pairs from two line-aligned files, read into memory; ``read_text_file_pairs``
    also gives the ``ReadStats``, ``PairSource.from_text_files`` streams."""
    return read_text_file_pairs(src_path, tgt_path).to_dataset()


def tsv_pairs(path: PathLike, src_column: int = 0, tgt_column: int = 1) -> tf.data.Dataset:
    """Pairs from a TSV file, read into memory; ``read_tsv_pairs`` also gives the
    ``ReadStats``, ``PairSource.from_tsv`` streams."""
    return read_tsv_pairs(path, src_column, tgt_column).to_dataset()


def tfds_pairs(
    name: str,
    split: str,
    src_key: str | None = None,
    tgt_key: str | None = None,
    data_dir: PathLike | None = None,
    *,
    download: bool = True,
) -> tf.data.Dataset:
    """Cleaned pairs from a TFDS dataset split (``split`` may be a slice, e.g. ``"train[:1%]"``),
    streamed. Without ``src_key``/``tgt_key`` the builder's ``supervised_keys`` give the
    direction (``keras_transformer.data.tfds_source``).

    ``download=False`` only reads what ``data_dir`` already holds (offline use).
    """
    return PairSource.from_tfds(
        name, split, src_key, tgt_key, data_dir, download=download
    ).dataset()


def _collect_pairs(pairs: Iterable[tuple[str, str]]) -> ParallelText:
    tally = _Tally(("<list>",))
    sources: list[str] = []
    targets: list[str] = []
    for index, pair in enumerate(pairs):
        if (
            not isinstance(pair, (tuple, list))
            or len(pair) != 2
            or not all(isinstance(text, str) for text in pair)
        ):
            raise ValueError(
                f"Item {index} is {pair!r}; pairs_from_list needs (source, target) str pairs."
            )
        tally.lines += 1
        source, target = normalize_whitespace(pair[0]), normalize_whitespace(pair[1])
        if not source or not target:
            tally.skip("empty", index + 1)
            continue
        tally.kept += 1
        sources.append(source)
        targets.append(target)
    return ParallelText(tuple(sources), tuple(targets), _logged(tally.stats()))


def pairs_from_list(pairs: Iterable[tuple[str, str]]) -> tf.data.Dataset:
    """In-memory ``(source, target)`` pairs (e.g. ``generate_pairs``), normalised like files.

    Empty pairs are skipped and logged with their 1-based positions.
    """
    return _collect_pairs(pairs).to_dataset()
