"""Translate a corpus file into another, a window at a time, resumable after a crash.

``translate_corpus(translator, source, output)`` writes one translation a
line of ``source`` (the best one, an n-best list, or a sample) to ``output``
by the translator's windowed, length-sorted batching
(``Translator.translate_iterable``, ``n_best_iterable``, ``sample_iterable``).
After each window it appends the window's lines to ``output``, syncs them to
disk, then records its progress in a small state file beside it,
``OUTPUT.progress.json``, replaced atomically. A run that stops (a crash,
Ctrl-C, a lost machine) is finished by calling it again with the same
arguments: it checks the state against the source, the settings and the
output, cuts anything written after the last record, and goes on from there.
``kt translate-corpus`` is the program over it.

``text_lines`` is how it reads a file (plain or gzip, split on ``\\n``
only, invalid UTF-8 as U+FFFD) and ``lines_in`` how it counts one for the
progress bar.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import gzip
import hashlib
import inspect
import itertools
import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from keras_transformer.data.sources.lines import BOM, READ_CHUNK, _split_lines
from keras_transformer.files import write_through_temp
from keras_transformer.translate import (
    BATCH_TOKENS,
    WINDOW,
    Translator,
    check_batching,
    n_best_moses,
    one_line,
)

logger = logging.getLogger("keras_transformer.corpus")

GZIP_MAGIC = b"\x1f\x8b"
STATE_SUFFIX = ".progress.json"  # OUTPUT.progress.json records how far OUTPUT has got
STATE_FORMAT = 1
FINGERPRINT_BYTES = 1 << 20  # a source is known by its size and its first and last MiB
OVERWRITE_HINT = "start again with --overwrite (overwrite=True)"


@dataclasses.dataclass(frozen=True)
class CorpusTranslation:
    """What a ``translate_corpus`` call did; its output then holds every line's translation.

    Args:
        source: the source file.
        output: the output file.
        state: the state file beside it, ``OUTPUT.progress.json``.
        lines: the source's lines, all translated now.
        translated: the lines this call translated.
        resumed_from: the line this call began at (0: the start; ``lines``
            when it found the output complete).
        output_bytes: the output's size.
        already_complete: the output was complete before the call, which did nothing.
    """

    source: Path
    output: Path
    state: Path
    lines: int
    translated: int
    resumed_from: int
    output_bytes: int
    already_complete: bool


def lines_in(stream) -> int | None:
    """The lines of an open regular file from its offset on, without moving the offset.

    A last line without its newline counts. The progress bars of
    ``kt translate`` and ``translate_corpus`` use it for their
    total.

    Args:
        stream: an open file (text or binary).

    Returns:
        The line count, or ``None`` for a pipe, a terminal or anything without
        a regular file behind it.
    """
    try:
        fd = stream.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        lines, offset, last = 0, os.lseek(fd, 0, os.SEEK_CUR), b"\n"
        while chunk := os.pread(fd, 1 << 20, offset):
            lines, offset, last = lines + chunk.count(b"\n"), offset + len(chunk), chunk[-1:]
        return lines + (last != b"\n")  # a last line without its newline counts too
    except (OSError, ValueError, AttributeError):
        return None


def _is_gzip(path: str | os.PathLike) -> bool:
    """Whether a file is gzip-compressed, by its first two bytes (not its name).

    Args:
        path: the file.

    Returns:
        ``True`` when it begins with gzip's magic bytes ``1f 8b``.
    """
    with open(path, "rb") as file:
        return file.read(len(GZIP_MAGIC)) == GZIP_MAGIC


def text_lines(stream: BinaryIO) -> Iterator[str]:
    """The lines of a binary stream as strings, read a chunk at a time.

    Lines are split on ``b"\\n"`` only: a ``"\\r"`` or U+2028 inside a line
    stays in it, and one ``"\\r"`` ending a line (CRLF) is dropped. A UTF-8
    byte-order mark at the start is dropped. Each line is decoded as UTF-8
    with ``errors="replace"``: an invalid byte becomes U+FFFD. A last line
    without its newline counts; an empty stream has no lines.

    Args:
        stream: a file opened for reading bytes (``open(path, "rb")``,
            ``gzip.open``, ``sys.stdin.buffer``).

    Returns:
        An iterator of the lines, without their line ends.

    Example:
        >>> import io
        >>> list(text_lines(io.BytesIO(b"a\\rb\\r\\n\\nc\\xff")))
        ['a\\rb', '', 'c�']
    """
    # read1: what a pipe has now, not a whole chunk first (--window 1 answers line by line).
    chunks = iter(functools.partial(getattr(stream, "read1", stream.read), READ_CHUNK), b"")
    first = True
    for batch in _split_lines(chunks, carriage_return=True):
        if first and batch:
            batch[0], first = batch[0].removeprefix(BOM), False
        for line in batch:
            yield line.decode("utf-8", errors="replace")


def _file_lines(path: Path, start: int) -> Iterator[str]:
    """``text_lines`` of a plain or gzip file from line ``start`` on (the file opened when
    the first line is asked for, closed at the end)."""
    with gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb") as stream:
        yield from itertools.islice(text_lines(stream), start, None)


def _one_line(index: int, translation: str) -> str:
    """Line ``index`` of an output of one line a line (``n_best_moses``' signature)."""
    return one_line(translation) + "\n"


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _fingerprint(path: Path) -> dict:
    """A cheap identity of a file as stored (compressed, for gzip): its size and a digest
    of its first and of its last MiB."""
    size = path.stat().st_size
    with open(path, "rb") as file:
        head = file.read(FINGERPRINT_BYTES)
        file.seek(max(0, size - FINGERPRINT_BYTES))
        tail = file.read(FINGERPRINT_BYTES)
    return {"size": size, "head": _digest(head), "tail": _digest(tail)}


def _flat(value, prefix: str = "") -> dict:
    """A nested mapping's leaves by their dotted key."""
    if not isinstance(value, dict):
        return {prefix: value}
    return {
        key: leaf
        for name, item in value.items()
        for key, leaf in _flat(item, f"{prefix}.{name}" if prefix else name).items()
    }


def _differences(settings: dict, recorded: dict) -> str:
    """What differs between two settings, in words: ``another model`` or
    ``search.beam_size 4 (recorded: 2)``."""
    now, then = _flat(settings), _flat(recorded)
    if now.get("mode") != then.get("mode"):
        return f"mode {now.get('mode')} (recorded: {then.get('mode')})"
    keys = sorted(key for key in now.keys() | then.keys() if now.get(key) != then.get(key))
    words = ["another model"] if any(key.startswith("model.") for key in keys) else []
    words += [
        f"{key} {now.get(key)} (recorded: {then.get(key)})"
        for key in keys
        if not key.startswith("model.")
    ]
    return ", ".join(words)


def _read_state(path: Path) -> dict | None:
    """The state file's record, or ``None`` where there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        state = json.loads(text)
        int(state["lines_done"]), int(state["output_bytes"]), bool(state["complete"])
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(
            f"{path} is not a readable progress record ({error}): {OVERWRITE_HINT}."
        ) from error
    return state


def _write_state(path: Path, state: dict) -> None:
    """Replace the state file in one step (a temporary file synced, renamed over it, the
    folder synced): a crash leaves the old record or the new one."""

    def write(temp: Path) -> None:
        with open(temp, "w", encoding="utf-8") as file:
            json.dump(state, file, indent=1)
            file.write("\n")
            file.flush()
            os.fsync(file.fileno())

    write_through_temp(path, write)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _check_paths(source: Path, output: Path) -> None:
    if not source.is_file():
        raise FileNotFoundError(f"The source {source} does not exist or is not a file.")
    if output.is_dir():
        raise FileExistsError(f"The output {output} is a folder: name a file.")
    if not output.parent.is_dir():
        raise FileNotFoundError(
            f"The output's folder {output.parent} does not exist: create it first."
        )
    if output.exists() and output.resolve() == source.resolve():
        raise ValueError(f"The output {output} is the source: name another file.")


def _mode(translator, n_best, sample, sampling, stream_options) -> tuple[str, dict, object]:
    """The mode's name, its settings as JSON values, and ``answers(lines, total, initial)``:
    the translator's stream of the mode, checked when made."""
    given = [name for name, value in sampling.items() if value is not None]
    if given and not sample:
        raise ValueError(f"{', '.join(given)}: sampling parameters need sample=True (--sample).")
    if sample and n_best is not None:
        raise ValueError("n_best and sample do not go together: choose one.")
    identity = translator._identity()
    if sample:
        defaults = inspect.signature(Translator.sample_iterable).parameters
        params = {
            name: type(defaults[name].default)(defaults[name].default if value is None else value)
            for name, value in sampling.items()
        }
        stream = functools.partial(translator.sample_iterable, **params, **stream_options)
        return "sample", {"mode": "sample", **params, "model": identity["model"]}, stream
    settings = {"search": identity["search"], "model": identity["model"]}
    if n_best is not None:
        stream = functools.partial(translator.n_best_iterable, n=n_best, **stream_options)
        return "n_best", {"mode": "n_best", "n": n_best, **settings}, stream
    stream = functools.partial(translator.translate_iterable, **stream_options)
    return "translate", {"mode": "translate", **settings}, stream


def translate_corpus(
    translator,
    source: str | os.PathLike,
    output: str | os.PathLike,
    *,
    n_best: int | None = None,
    sample: bool = False,
    top_k: int | None = None,
    top_p: float | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    batch_tokens: int | None = BATCH_TOKENS,
    window: int | None = WINDOW,
    overwrite: bool = False,
    progress: bool = False,
) -> CorpusTranslation:
    """Translate a text file line by line into another, resumably, a window of lines at a time.

    ``source`` is plain text or gzip (known by its first bytes, whatever its
    name), read as ``text_lines`` reads it: split on ``\\n`` only (a
    ``\\r`` or U+2028 inside a line stays in it; a CRLF line loses its
    ``\\r``), a byte-order mark dropped, each line decoded as UTF-8 with
    ``errors="replace"`` (an invalid byte becomes U+FFFD, the string the
    translator is given for that line). Each line's answer is what the
    translator gives that string alone: its ``translate`` (beam or greedy as
    the translator is set; an empty line gives an empty line, a line longer
    than the translator's source limit is cut as ``translate`` cuts it),
    ``n_best(lines, n_best)`` as Moses lines ``INDEX ||| TEXT ||| LOG_PROB``
    (``n_best_moses``; an empty line gives ``INDEX |||  ||| 0.0000``), or
    ``sample`` with ``top_k``, ``top_p``, ``temperature`` and ``seed``. A
    line break a tokenizer might put in a translation becomes a space
    (``one_line``), so the output stays aligned with the source.

    The lines are read ``window`` at a time, sorted and batched by
    ``batch_tokens`` (``Translator.translate_iterable``). After each window
    the output is appended, flushed and synced, then the state file
    ``OUTPUT.progress.json`` is replaced atomically: it records the source's
    fingerprint (size and a digest of its first and last MiB), the settings
    (the mode and its parameters, the search options, and the model: a
    digest of a Keras model's weights and tokenizers, or an export's folder
    and its files' sizes and times), the lines done and the output bytes
    they fill, and at the end ``complete``. The batching options are not
    part of the settings: they change the speed, not the translations.

    Called again with the same source and settings, it resumes: the output
    must be at least as long as recorded (anything after the record, a
    window cut short by a crash, is truncated) and, one line a line, hold
    as many lines as recorded; the rest is translated and appended. On a
    complete output it does nothing (``already_complete``); the state file
    stays, as the record of what made the output. ``overwrite=True`` starts
    afresh (the state is reset before the output is emptied). One process at
    a time may write an output (it holds a lock on it).

    Args:
        translator: a ``Translator`` (``Translator.from_workdir``, ...) or
            ``Translator.from_saved_model``'s.
        source: the text file to translate, one sentence a line.
        output: the file to write; its folder must exist.
        n_best: write the ``n_best`` best translations a line (at most the
            beam size), Moses n-best lines.
        sample: write a sample a line (``Translator.sample``).
        top_k, top_p, temperature, seed: the sampling parameters (``None``:
            ``sample``'s defaults 0, 1.0, 1.0, 0); only with ``sample``.
        batch_size, batch_tokens, window: the batching, as for
            ``Translator.translate_iterable``.
        overwrite: start again from the first line, whatever the output holds.
        progress: show a progress bar on a terminal (tqdm), from the line
            resumed at; its total is the source's line count for a plain file.

    Returns:
        A ``CorpusTranslation``: the lines, those translated by this call, the
        line it resumed from, the output's size.

    Raises:
        FileNotFoundError: the source or the output's folder does not exist.
        FileExistsError: the output exists without a state file (not an
            output of this function to resume), or is a folder.
        ValueError: an option is out of range (``n_best`` above the beam
            size, ``n_best`` with ``sample``, a sampling parameter without
            ``sample``); or the output cannot be resumed: its state records
            another source or other settings, is unreadable, or does not match
            the output (shorter than recorded, another line count); or another
            process is writing it. Each message names the fix: ``--overwrite``
            (``overwrite=True``) to start again.

    Example::

        translator = kt.Translator.from_workdir("runs/teacher", beam_size=4, alpha=0.6)
        done = kt.translate_corpus(translator, "train.src", "distilled.tgt")  # again: resumes
        kt.translate_corpus(translator, "mono.tgt.gz", "bt.src", sample=True, top_k=10, seed=1)
        kt.translate_corpus(translator, "test.src", "nbest.txt", n_best=4)
    """
    source, output = Path(source), Path(output)
    check_batching(batch_tokens, batch_size, window)
    sampling = {"top_k": top_k, "top_p": top_p, "temperature": temperature, "seed": seed}
    stream_options = {"batch_size": batch_size, "batch_tokens": batch_tokens, "window": window}
    mode, settings, answers = _mode(translator, n_best, sample, sampling, stream_options)
    _check_paths(source, output)
    state_path = output.with_name(output.name + STATE_SUFFIX)
    fingerprint = _fingerprint(source)
    state = None if overwrite else _read_state(state_path)
    if state is None and output.exists() and not overwrite:
        raise FileExistsError(
            f"{output} exists but has no {state_path.name}: it is not an output being "
            f"translated to resume; {OVERWRITE_HINT}, or name another output."
        )
    if state is not None:
        _check_record(state, state_path, source, fingerprint, settings)
        if state["complete"]:
            return _completed(source, output, state_path, state)
    start = 0 if state is None else int(state["lines_done"])
    total = None
    if progress and not _is_gzip(source):
        with open(source, "rb") as file:
            total = lines_in(file)
    stream = answers(_file_lines(source, start), progress=progress, total=total, initial=start)
    line = _one_line if n_best is None else n_best_moses
    record = {
        "format": STATE_FORMAT,
        "source": str(source),
        "fingerprint": fingerprint,
        "settings": settings,
    }
    with open(output, "ab") as out:
        try:
            fcntl.flock(out.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"{output} is being written by another process: let it finish."
            ) from None
        if state is None:
            done, written = 0, 0
            _write_state(
                state_path, {**record, "lines_done": 0, "output_bytes": 0, "complete": False}
            )
            out.truncate(0)
        else:
            done, written = start, int(state["output_bytes"])
            _resume_output(out, output, state_path, mode, done, written)
            logger.info("%s: resuming at line %d (%d bytes written).", output, done, written)

        def commit(pending: list[str], complete: bool) -> None:
            nonlocal done, written
            data = "".join(pending).encode("utf-8")
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
            done, written = done + len(pending), written + len(data)
            pending.clear()
            progress_record = {"lines_done": done, "output_bytes": written, "complete": complete}
            _write_state(state_path, {**record, **progress_record})

        pending: list[str] = []
        for answer in stream:
            pending.append(line(done + len(pending), answer))
            if window is not None and len(pending) == window:  # a window done: commit it
                commit(pending, complete=False)
        commit(pending, complete=True)
    return CorpusTranslation(
        source=source,
        output=output,
        state=state_path,
        lines=done,
        translated=done - start,
        resumed_from=start,
        output_bytes=written,
        already_complete=False,
    )


def _check_record(state: dict, path: Path, source: Path, fingerprint: dict, settings: dict):
    """A ``ValueError`` unless the state records this source and these settings."""
    if state.get("format") != STATE_FORMAT:
        raise ValueError(
            f"{path} is a progress record of another format ({state.get('format')!r}): "
            f"{OVERWRITE_HINT}."
        )
    if state.get("fingerprint") != fingerprint:
        raise ValueError(
            f"{source} is not the source {path.name} records ({state.get('source')}: its size or "
            f"bytes differ): translate it into another output, or {OVERWRITE_HINT}."
        )
    if state.get("settings") != settings:
        raise ValueError(
            f"{path.name} records other settings: {_differences(settings, state['settings'])}; "
            f"rerun with the recorded ones, or {OVERWRITE_HINT}."
        )


def _completed(source: Path, output: Path, state_path: Path, state: dict) -> CorpusTranslation:
    """The result of a call on a complete output, checked to be as recorded."""
    lines, size = int(state["lines_done"]), int(state["output_bytes"])
    actual = output.stat().st_size if output.exists() else None
    if actual != size:
        raise ValueError(
            f"{output} changed after it was completed ({actual} bytes, {size} recorded in "
            f"{state_path.name}): {OVERWRITE_HINT}."
        )
    return CorpusTranslation(
        source=source,
        output=output,
        state=state_path,
        lines=lines,
        translated=0,
        resumed_from=lines,
        output_bytes=size,
        already_complete=True,
    )


def _resume_output(out, output: Path, state_path: Path, mode: str, lines: int, size: int):
    """Check an output to resume against its record and cut what came after the record."""
    actual = os.fstat(out.fileno()).st_size
    if actual < size:
        raise ValueError(
            f"{output} is shorter ({actual} bytes) than {state_path.name} records ({size}): "
            f"{OVERWRITE_HINT}."
        )
    if actual > size:
        logger.info("%s: cutting %d bytes written after the last record.", output, actual - size)
    out.truncate(size)
    if mode != "n_best":  # a line a line: as many lines as done
        with open(output, "rb") as file:
            found = lines_in(file)
        if found != lines:
            raise ValueError(
                f"{output} holds {found} lines but {state_path.name} records {lines}: "
                f"{OVERWRITE_HINT}."
            )
