"""Cleaning read lines, alike in Python and in the graph: UTF-8, whitespace, empty sides.

The Python cleaners (``_text_rows``, ``_tsv_rows``) serve ``stats``,
iteration and ``read()``; the graph cleaners (``_classify_pairs``,
``_classify_tsv_rows``) serve ``dataset()``. Both apply the rules of
``keras_transformer.data.sources``; the tests keep the two equal.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from keras_transformer.data.normalize import normalize_whitespace, normalize_whitespace_tf
from keras_transformer.data.sources.stats import (
    EMPTY,
    INVALID_UTF8,
    KEPT,
    MALFORMED,
    PROBLEMS,
    _Tally,
)

GRAPH_BATCH = 4096  # lines cleaned per op call in dataset()
Keep = tuple[bool, bool]  # which sides a Python pass hands out
NEITHER, BOTH = (False, False), (True, True)


def _blank(text: str) -> bool:
    """``normalize_whitespace(text) == ""``, without building the normalised text."""
    return not text or text.isspace()


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
