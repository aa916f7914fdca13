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

``PairSource`` is the one way in: make one with ``PairSource.from_text_files``
(plain or ``.gz``), ``from_tsv``, ``from_tfds`` or ``from_pairs`` (an
in-memory list), then take its ``dataset()`` (a ``tf.data.Dataset`` of
``(source, target)`` strings, for ``make_dataset``), its ``stats``, its
sentences (to train a tokenizer) or ``read()`` (the whole corpus in memory,
a ``ParallelText``). ``dataset()`` cleans in the graph, the other readers in
Python; the tests keep the two equal.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

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
LINE_INDEX_EVERY = 1 << 16  # a plain file's line index: the byte offset of every this many lines
RANGE_RECORD = 1 << 20  # bytes per read of a part of a plain file (PairSource.part)
SIDES = ("source", "target")
Keep = tuple[bool, bool]  # which sides a Python pass hands out
NEITHER, BOTH = (False, False), (True, True)

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
    join the words around such a one); and, for a plain (not gzip) file, its
    size and line index: the byte offset where lines ``0, LINE_INDEX_EVERY,
    2 * LINE_INDEX_EVERY, ...`` start (line 0 after the byte-order mark), so
    that a part of the file is found without reading the lines before it."""

    lines: int
    bom: bool
    carriage_return: bool
    lone_carriage_return: bool
    size: int = 0
    index: tuple[int, ...] = ()


def _file_facts(path: Path) -> _FileFacts:
    indexed = not _is_gzip(path)
    every = LINE_INDEX_EVERY
    with _open_binary(path) as stream:
        head = b""
        while len(head) < len(BOM):
            more = stream.read(len(BOM) - len(head))
            if not more:
                break
            head += more
        bom = head == BOM
        chunk = b"" if bom else head
        position = len(head) - len(chunk)  # where `chunk` starts in the file
        index = [position]
        lines = carriage_returns = crlf = 0
        previous_cr, last = False, b""
        while True:
            if chunk:
                newlines = chunk.count(b"\n")
                if indexed and lines + newlines >= len(index) * every:
                    # Line m starts after the file's m-th newline.
                    ends = np.flatnonzero(np.frombuffer(chunk, np.uint8) == ord("\n"))
                    while lines + newlines >= len(index) * every:
                        index.append(position + int(ends[len(index) * every - lines - 1]) + 1)
                lines += newlines
                carriage_returns += chunk.count(b"\r")
                crlf += chunk.count(b"\r\n") + (previous_cr and chunk[:1] == b"\n")
                previous_cr, last = chunk[-1:] == b"\r", chunk[-1:]
                position += len(chunk)
            chunk = stream.read(READ_CHUNK)
            if not chunk:
                break
    if last and last != b"\n":
        lines += 1  # a last line without a newline
    lone = carriage_returns - crlf - previous_cr  # a \r ending the file ends its last line
    return _FileFacts(
        lines=lines,
        bom=bom,
        carriage_return=carriage_returns > 0,
        lone_carriage_return=lone > 0,
        size=position,
        index=tuple(start for start in index if start < position) if indexed else (),
    )


def _line_offset(path: Path, facts: _FileFacts, line: int) -> int:
    """Where line ``line`` (0-based) of a plain file starts; the file's size for
    ``line >= facts.lines``. Reads from the nearest indexed line on, at most
    ``LINE_INDEX_EVERY`` lines."""
    if line >= facts.lines:
        return facts.size
    every = LINE_INDEX_EVERY
    offset, left = facts.index[line // every], line % every
    with open(path, "rb") as stream:
        stream.seek(offset)
        while left:
            chunk = stream.read(READ_CHUNK)
            if not chunk:
                raise ValueError(f"{path} changed while it was read: it has fewer lines now.")
            newlines = chunk.count(b"\n")
            if newlines >= left:
                ends = np.flatnonzero(np.frombuffer(chunk, np.uint8) == ord("\n"))
                return offset + int(ends[left - 1]) + 1
            offset += len(chunk)
            left -= newlines
    return offset


def _split_lines(chunks: Iterator[bytes], carriage_return: bool) -> Iterator[list[bytes]]:
    """Byte chunks to lists of lines: split on ``\\n`` only, one ``\\r`` before it
    dropped (when the file has any), a last line without a newline kept."""
    rest = b""
    for chunk in chunks:
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        if carriage_return:
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
        yield lines
    if rest:
        yield [rest[:-1] if carriage_return and rest.endswith(b"\r") else rest]


def _byte_chunks(path: Path, facts: _FileFacts, start: int, end: int | None) -> Iterator[bytes]:
    """The bytes ``[start, end)`` of the file (``end=None``: to its end), a chunk at a time;
    a start of 0 skips the byte-order mark."""
    with _open_binary(path) as stream:
        if start == 0 and facts.bom:
            start = len(BOM)
        if start:
            stream.seek(start)
        left = None if end is None else end - start
        while left is None or left > 0:
            chunk = stream.read(READ_CHUNK if left is None else min(READ_CHUNK, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk


def _line_batches(
    path: Path,
    facts: _FileFacts,
    size: int = PYTHON_BATCH,
    lines: tuple[int, int] | None = None,
) -> Iterator[list[bytes]]:
    """The file's raw lines, ``size`` at a time: split on ``\\n`` only, one
    ``\\r`` before it dropped, the byte-order mark skipped. ``lines=(first,
    stop)`` gives only lines ``[first, stop)``: a plain file is read from the
    first one's byte on, a gzip file read and the lines before it passed over."""
    passed_over = lines is not None and _is_gzip(path)  # a part of a gzip file
    if lines is None or passed_over:
        chunks = _byte_chunks(path, facts, 0, None)
    else:
        chunks = _byte_chunks(path, facts, *(_line_offset(path, facts, end) for end in lines))
    number, pending = 0, []  # number: the lines split so far
    for batch in _split_lines(chunks, facts.carriage_return):
        start = number
        number += len(batch)
        if passed_over:
            first, stop = lines
            batch = batch[max(0, first - start) : max(0, stop - start)]
        pending += batch
        while len(pending) >= size:
            yield pending[:size]
            pending = pending[size:]
        if passed_over and number >= lines[1]:
            break
    if pending:
        yield pending


def _line_dataset(path: Path, facts: _FileFacts) -> tf.data.Dataset:
    """The file's raw lines (byte-order mark dropped) as scalar strings, streamed."""
    if facts.lines == 0:
        return _no_lines()
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


def _no_lines() -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(tf.constant([], tf.string))


def _byte_range_lines(path: Path, facts: _FileFacts, start: int, end: int) -> tf.data.Dataset:
    """The lines of bytes ``[start, end)`` of a plain file (``start`` a line's first byte,
    ``end`` one after a newline or the file's end), cleaned as ``_line_batches`` cleans
    them, read from ``start`` on in records of ``RANGE_RECORD`` bytes."""
    length = end - start
    if length <= 0:
        return _no_lines()
    whole, rest = divmod(length, RANGE_RECORD)
    reads = []
    name = os.fspath(path)
    if whole:
        reads.append(
            tf.data.FixedLengthRecordDataset(
                name,
                RANGE_RECORD,
                header_bytes=start,
                footer_bytes=facts.size - start - whole * RANGE_RECORD,
                buffer_size=RANGE_RECORD,
            )
        )
    if rest:
        reads.append(
            tf.data.FixedLengthRecordDataset(
                name, rest, header_bytes=end - rest, footer_bytes=facts.size - end
            )
        )
    chunks = reads[0] if len(reads) == 1 else reads[0].concatenate(reads[1])
    last = tf.data.Dataset.from_tensors((tf.constant(b""), True))
    flagged = chunks.map(lambda chunk: (chunk, False)).concatenate(last)
    carriage_return = facts.carriage_return

    def split(rest, item):
        chunk, final = item

        def more():
            parts = tf.strings.split(tf.strings.join([rest, chunk]), "\n")
            return parts[-1], parts[:-1]

        def end_of_range():  # the last line, when the range does not end with a newline
            return tf.constant(b""), tf.reshape(rest, [1])[: tf.cast(rest != "", tf.int32)]

        rest, lines = tf.cond(final, end_of_range, more)
        if carriage_return:
            lines = tf.strings.regex_replace(lines, "\r$", "")
        return rest, lines

    return flagged.scan(tf.constant(b""), split).unbatch()


def _part_line_dataset(path: Path, facts: _FileFacts, first: int, stop: int) -> tf.data.Dataset:
    """Lines ``[first, stop)`` of the file as scalar strings: a plain file read
    from the first one's byte on (``_byte_range_lines``), a gzip file read
    whole with the other lines passed over (gzip cannot seek)."""
    if stop <= first:
        return _no_lines()
    if _is_gzip(path):
        return _line_dataset(path, facts).skip(first).take(stop - first)
    return _byte_range_lines(
        path, facts, _line_offset(path, facts, first), _line_offset(path, facts, stop)
    )


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
    number = tally.first_line + tally.lines
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
    number = tally.first_line + tally.lines
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


def _classified(
    batches: tf.data.Dataset, classify: Callable, first_line: int = 0
) -> tf.data.Dataset:
    """Batches ``{"number", "source", "target", "status"}`` (line numbers 1-based,
    after ``first_line`` lines not read)."""

    def apply(index, raw):
        src, tgt, status = classify(*raw) if isinstance(raw, tuple) else classify(raw)
        size = tf.shape(status, out_type=tf.int64)[0]
        number = first_line + index * GRAPH_BATCH + tf.range(1, size + 1, dtype=tf.int64)
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
    """A parallel corpus of ``(source, target)`` pairs, read as a stream.

    Make one with ``from_text_files``, ``from_tsv``, ``from_tfds`` or
    ``from_pairs``; the corpus is never held in memory whole unless
    ``read()`` is asked for. Every reader cleans alike (see the module).
    Then:

    * ``dataset()``: a ``tf.data.Dataset`` of the kept ``(source, target)``
      scalar strings in corpus order (what ``make_dataset`` takes);
    * ``stats``: the ``ReadStats``, from one pass made on first use and
      logged; ``len(source)`` and ``source.pairs`` are its kept-pair count;
    * iterating gives the kept pairs as Python ``str`` tuples;
      ``sentences(side)`` one side of them (a sized stream, e.g. to train a
      tokenizer on); ``read()`` the whole corpus in memory (``ParallelText``);
    * ``part(index, count)``: one of ``count`` disjoint parts of the corpus,
      a ``PairSource`` of its own (what each worker of a multi-worker run reads).

    Each of these reads the corpus afresh (``stats`` once).

    Example:

    >>> source = PairSource.from_pairs([("the cat", "die Katze"), ("a  dog", "ein Hund")])
    >>> len(source)
    2
    >>> [(s.decode(), t.decode()) for s, t in source.dataset().as_numpy_iterator()]
    [('the cat', 'die Katze'), ('a dog', 'ein Hund')]
    >>> list(source.sentences("target"))
    ['die Katze', 'ein Hund']
    """

    def __init__(
        self,
        files: Iterable[str],
        graph_batches: Callable[[], tf.data.Dataset],
        python_pass: Callable,
        stats: ReadStats | None = None,
        text: ParallelText | None = None,
        *,
        lines: int | None = None,
        first_line: int = 0,
        part_of: Callable[[int, int], PairSource] | None = None,
    ):
        """Builds a source from its two readers; use the ``from_*`` constructors instead.

        Args:
            files: the files read, for ``ReadStats`` and the log.
            graph_batches: builds the classified batches of ``dataset()``.
            python_pass: ``python_pass(tally, keep)`` yields the kept
                ``(sources, targets)`` lists of one pass.
            stats: the ``ReadStats``, when already known.
            text: the corpus, when it is in memory already.
            lines: the lines (rows, examples) read, kept or not, when known
                without a pass (else ``stats.lines``).
            first_line: the lines of a larger corpus before these (a part of it).
            part_of: ``part_of(first, stop)`` builds the source of lines
                ``[first, stop)``; ``None``: ``part`` is refused (a part itself).
        """
        self.files = tuple(files)
        self._graph_batches = graph_batches
        self._python_pass = python_pass
        self._stats = stats
        self._text = text
        self._lines = lines
        self._first_line = first_line
        self._part_of = part_of

    @classmethod
    def _from_reader(cls, files: tuple[str, ...], reader: Callable, lines: int | None):
        """A source whose ``reader(first, stop)`` gives the two readers of lines
        ``[first, stop)`` (``stop=None``: the whole corpus), and its parts."""

        def part_of(first: int, stop: int) -> PairSource:
            return cls(
                tuple(f"{name} lines {first + 1}-{stop}" for name in files),
                *reader(first, stop),
                lines=stop - first,
                first_line=first,
            )

        return cls(files, *reader(0, None), lines=lines, part_of=part_of)

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_text_files(cls, src_path: PathLike, tgt_path: PathLike) -> PairSource:
        """Reads two line-aligned UTF-8 files: line i of one translates line i of the other.

        Args:
            src_path: the source-language file (plain, or gzip when it ends in ``.gz``).
            tgt_path: the target-language file, with as many lines.

        Returns:
            A ``PairSource`` that streams the files.

        Raises:
            ValueError: a file does not exist, or the files have different line counts
                (every pair after the first missing line would be misaligned).

        Example:

        >>> _ = Path("a.src").write_text("the cat\\n\\na dog\\n")
        >>> _ = Path("a.tgt").write_text("die Katze\\nverwaist\\nein Hund\\n")
        >>> text = PairSource.from_text_files("a.src", "a.tgt").read()
        >>> text.sources, text.stats.empty_lines
        (('the cat', 'a dog'), (2,))
        """
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

        return cls._from_reader((str(src_path), str(tgt_path)), reader, src_facts.lines)

    @classmethod
    def from_tsv(cls, path: PathLike, src_column: int = 0, tgt_column: int = 1) -> PairSource:
        """Reads a tab-separated file, one pair per row.

        Fields are split on tabs only, without CSV quoting (quotes are text, as
        in Tatoeba/ParaCrawl dumps). A blank row counts as empty, a row with
        fewer than ``max(src_column, tgt_column) + 1`` fields as malformed.

        Args:
            path: the file (plain, or gzip when it ends in ``.gz``).
            src_column: the 0-based column of the source sentence.
            tgt_column: the 0-based column of the target sentence.

        Returns:
            A ``PairSource`` that streams the file.

        Raises:
            ValueError: the file does not exist, or the columns are negative or equal.

        Example:

        >>> _ = Path("c.tsv").write_text("1\\tthe cat\\tdie Katze\\n2\\tonly one\\n")
        >>> text = PairSource.from_tsv("c.tsv", src_column=1, tgt_column=2).read()
        >>> text.sources, text.stats.malformed
        (('the cat',), 1)
        """
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

        return cls._from_reader((str(path),), reader, facts.lines)

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
    ) -> PairSource:
        """Reads a TensorFlow Datasets translation split (needs the ``[tfds]`` extra).

        Without ``src_key``/``tgt_key`` the builder's ``supervised_keys`` give
        the direction; the ``ReadStats`` line numbers count examples.

        Args:
            name: the TFDS builder, e.g. ``"ted_hrlr_translate/pt_to_en"``.
            split: the split, or a slice of it such as ``"train[:1%]"``.
            src_key: the feature holding the source text (with ``tgt_key``).
            tgt_key: the feature holding the target text (with ``src_key``).
            data_dir: where TFDS keeps its data (its default when ``None``).
            download: ``False`` reads only what ``data_dir`` already holds (offline).

        Returns:
            A ``PairSource`` that streams the split.

        Raises:
            ValueError: only one of ``src_key``/``tgt_key`` is given, they do not
                name two text features, or the builder has no ``supervised_keys``.
        """
        from keras_transformer.data.tfds_source import tfds_examples

        examples = tfds_examples(name, split, src_key, tgt_key, data_dir, download=download)

        def reader(first: int, stop: int | None):
            def graph_batches() -> tf.data.Dataset:
                part = examples if stop is None else examples.skip(first).take(stop - first)
                return _classified(part.batch(GRAPH_BATCH), _classify_pairs, first)

            return graph_batches, _graph_pass(graph_batches)

        return cls._from_reader((f"{name} {split}",), reader, None)

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]]) -> PairSource:
        """Takes in-memory ``(source, target)`` pairs, cleaned like a file's lines.

        Empty pairs are skipped and logged with their 1-based positions.

        Args:
            pairs: ``(source, target)`` string pairs, e.g. from ``generate_pairs``.

        Returns:
            A ``PairSource`` over the cleaned pairs (held in memory).

        Raises:
            ValueError: an item is not a pair of ``str``.

        Example:

        >>> PairSource.from_pairs([(" a\\u00a0 b ", "c  d"), ("e", "f")]).read().sources
        ('a b', 'e')
        """
        text, kept = _collect_pairs(pairs)
        return cls._in_memory(text, lambda first, stop: _list_part(text, kept, first, stop))

    @classmethod
    def _in_memory(cls, text: ParallelText, part_of=None, first_line: int = 0) -> PairSource:
        """A source over ``text`` held in memory; ``part_of`` as ``__init__`` takes it."""

        def python_pass(tally: _Tally, keep: Keep):
            yield text.sources, text.targets

        return cls(
            text.stats.files,
            text.to_dataset,
            python_pass,
            stats=text.stats,
            text=text,
            lines=text.stats.lines,
            first_line=first_line,
            part_of=part_of,
        )

    # ------------------------------------------------------------------ reading

    def dataset(self) -> tf.data.Dataset:
        """The kept pairs as a ``tf.data.Dataset``, streamed and cleaned in the graph.

        Returns:
            A dataset of ``(source, target)`` scalar strings, in corpus order.
        """
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
            tally = _Tally(self.files, self._first_line)
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

    @property
    def lines(self) -> int:
        """How many lines (rows, examples, items) the corpus has, kept or skipped.

        What ``part`` splits; known from the files' first pass, else ``stats.lines``.
        """
        return self.stats.lines if self._lines is None else self._lines

    def part(self, index: int, count: int) -> PairSource:
        """Part ``index`` of ``count`` disjoint, contiguous parts of the corpus.

        Part ``i`` holds lines ``[i * N // count, (i + 1) * N // count)`` of the
        ``N = self.lines`` lines (rows, examples, items; kept or skipped), so
        the parts cover the corpus, each pair in exactly one, in corpus order.
        Its ``dataset()`` reads a plain file from its first line's byte on and
        stops after its last, never reading the other parts; a gzip file or a
        TFDS split is read from its start, the lines before the part passed
        over uncleaned (neither can seek). Its ``stats`` count its own lines,
        numbered as in the whole corpus. ``part(0, 1)`` is the source itself.

        Args:
            index: which part, ``0 <= index < count`` (e.g. a worker's index).
            count: how many parts (e.g. the workers).

        Returns:
            The part, a ``PairSource`` (which cannot be split further).

        Raises:
            ValueError: ``index``/``count`` are out of range, the source is a
                part already, or the corpus has fewer lines than ``count``.

        Example:

        >>> source = PairSource.from_pairs([("a", "b"), ("c", "d"), ("e", "f")])
        >>> [part.read().sources for part in (source.part(0, 2), source.part(1, 2))]
        [('a',), ('c', 'e')]
        """
        for name, value, minimum in (("count", count, 1), ("index", index, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
        if index >= count:
            raise ValueError(f"index={index} must be below count={count}.")
        if count == 1:
            return self
        if self._part_of is None:
            raise ValueError(f"{self!r} is a part of a corpus already; split the corpus itself.")
        lines = self.lines
        if lines < count:
            raise ValueError(
                f"{' / '.join(self.files)} has {lines} line(s), fewer than the {count} parts "
                "asked for: every part needs one."
            )
        return self._part_of(index * lines // count, (index + 1) * lines // count)

    def _batches(self, keep: Keep = BOTH) -> Iterator[tuple[list[str], list[str]]]:
        tally = _Tally(self.files, self._first_line)
        yield from self._python_pass(tally, keep)
        if self._stats is None:
            self._stats = _logged(tally.stats())

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for sources, targets in self._batches():
            yield from zip(sources, targets)

    def sentences(self, side: str) -> Sentences:
        """One side of the kept pairs, streamed.

        Args:
            side: ``"source"`` or ``"target"``.

        Returns:
            A ``Sentences`` stream (sized: its length is the pair count).

        Raises:
            ValueError: ``side`` is neither.
        """
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}.")
        return Sentences(self, SIDES.index(side))

    def read(self) -> ParallelText:
        """Reads the whole corpus into memory (for small splits such as valid/test).

        Returns:
            The kept sentences and their ``ReadStats``, as a ``ParallelText``.
        """
        if self._text is not None:
            return self._text
        tally = _Tally(self.files, self._first_line)
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
    """One side of a ``PairSource``'s kept pairs, as a sized, re-iterable stream of ``str``.

    ``len`` is the pair count; ``train_tokenizers`` takes it as training text.
    Make one with ``PairSource.sentences``.

    Args:
        source: the pairs.
        column: 0 for the source side, 1 for the target side.
    """

    def __init__(self, source: PairSource, column: int):
        self._source = source
        self._column = column

    def __len__(self) -> int:
        return len(self._source)

    def __iter__(self) -> Iterator[str]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[str]]:
        """The sentences a list at a time (cheaper than one at a time).

        Returns:
            An iterator of lists of sentences.
        """
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


def _list_part(text: ParallelText, kept: np.ndarray, first: int, stop: int) -> PairSource:
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
    part = ParallelText(text.sources[low:high], text.targets[low:high], stats)
    return PairSource._in_memory(part, first_line=first)
