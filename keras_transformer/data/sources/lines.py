"""Lines of a corpus file (plain or gzip): split on ``\\n`` only, whole or a part.

A first pass over a file (``_file_facts``) finds its line count, a leading
byte-order mark, carriage returns and, for a plain file, a line index, so
that a part of the file (``PairSource.part``) is read from its first byte
without reading the lines before it. Lines come as Python lists of bytes
(``_line_batches``) or as a ``tf.data.Dataset`` of scalar strings
(``_line_dataset``, ``_part_line_dataset``), uncleaned.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tensorflow as tf

logger = logging.getLogger("keras_transformer.data")

PathLike = str | os.PathLike
BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark
PYTHON_BATCH = 65536  # lines per batch of the Python passes
READ_CHUNK = 1 << 22  # bytes read at a time
LINE_INDEX_EVERY = 1 << 16  # a plain file's line index: the byte offset of every this many lines
RANGE_RECORD = 1 << 20  # bytes per read of a part of a plain file (PairSource.part)


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
