"""The file-streaming methods of ``keras_transformer.Translator``: a window of lines at a time.

``translate_iterable``, ``n_best_iterable`` and ``sample_iterable`` read a
window of lines, sort and batch it (``batching.stream_batches``), and give
its answers in input order before reading the next: a file of any length
needs a window's lines in memory. The list methods of ``Translator`` run
through the same ``_stream``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator, Sized

from keras_transformer.decoding import check_sampling
from keras_transformer.translation.batching import (
    BATCH_TOKENS,
    WINDOW,
    check_batching,
    stream_batches,
)
from keras_transformer.translation.text import check_n


class Streams:
    """``Translator``'s methods over an iterable of lines, answered by its ``_backend``."""

    def translate_iterable(
        self,
        lines: Iterable[str],
        batch_size: int | None = None,
        progress: bool = False,
        *,
        batch_tokens: int | None = BATCH_TOKENS,
        window: int | None = WINDOW,
        total: int | None = None,
        initial: int = 0,
    ) -> Iterator[str]:
        """The translations of ``lines`` as an iterator, reading ``window`` lines at a time.

        Each window of lines is sorted by length, batched (``token_batches``),
        translated, and its translations come out in input order before the next
        window is read: a file of any length needs a window's lines in memory, not
        the file's (as Marian's maxi-batch and CTranslate2's ``read_batch_size``).

        Args:
            lines: the source sentences, e.g. an open file's lines without
                their newlines.
            batch_size: the most sentences a batch (``None``: no limit but the
                token budget); with ``batch_tokens=None``, the sentences a batch.
            progress: show a progress bar on a terminal (needs ``tqdm``).
            batch_tokens: the token budget of a batch (rows × longest source);
                ``None``: ``batch_size`` sentences a batch in input order.
            window: the lines read, sorted and batched at a time (``None``: all).
            total: the lines to expect, for the progress bar (default:
                ``len(lines)`` where ``lines`` has one).
            initial: where the progress bar starts: the lines of a file translated
                before ``lines`` (a resumed run; ``total`` counts them too).

        Returns:
            An iterator of one translation a line, in input order.

        Raises:
            ValueError: a batching option is below 1 (when called, not when iterated).
        """
        check_batching(batch_tokens, batch_size, window)
        run = self._backend.translate
        return self._stream(
            lines, None, run, batch_size, progress, batch_tokens, window, total, initial
        )

    def n_best_iterable(
        self,
        lines: Iterable[str],
        n: int,
        batch_size: int | None = None,
        progress: bool = False,
        *,
        batch_tokens: int | None = BATCH_TOKENS,
        window: int | None = WINDOW,
        total: int | None = None,
        initial: int = 0,
    ) -> Iterator[list[tuple[str, float]]]:
        """The n-best lists of ``lines`` as an iterator, reading ``window`` lines at a time.

        ``n_best`` a window at a time, as ``translate_iterable`` streams ``translate``.

        Args:
            lines: the source sentences.
            n: the most hypotheses a sentence, at most the beam size.
            batch_size, progress, batch_tokens, window, total, initial: as for
                ``translate_iterable``.

        Returns:
            An iterator of one list a line of up to ``n`` ``(text, log_prob)``
            pairs, best first, in input order (as ``n_best``).

        Raises:
            ValueError: ``n`` is below 1 or above the beam size, or a batching
                option is below 1 (when called, not when iterated).
        """
        check_n(n, self.beam_size)
        check_batching(batch_tokens, batch_size, window)
        run = functools.partial(self._backend.n_best, n=n)
        return self._stream(
            lines, None, run, batch_size, progress, batch_tokens, window, total, initial
        )

    def sample_iterable(
        self,
        lines: Iterable[str],
        *,
        batch_size: int | None = None,
        progress: bool = False,
        batch_tokens: int | None = BATCH_TOKENS,
        window: int | None = WINDOW,
        top_k: int = 0,
        top_p: float = 1.0,
        temperature: float = 1.0,
        seed: int = 0,
        total: int | None = None,
        initial: int = 0,
    ) -> Iterator[str]:
        """Samples of ``lines``' translations as an iterator, reading ``window`` lines at a time.

        ``sample`` a window at a time, as ``translate_iterable`` streams
        ``translate``: a line's sample depends on the seed and the line alone.

        Args:
            lines: the source sentences.
            top_k, top_p, temperature, seed: as for ``sample``.
            batch_size, progress, batch_tokens, window, total, initial: as for
                ``translate_iterable``.

        Returns:
            An iterator of one sample a line, in input order.

        Raises:
            ValueError: a sampling parameter is out of range (named), or a
                batching option is below 1 (when called, not when iterated).
        """
        check_sampling(top_k, top_p, temperature)
        check_batching(batch_tokens, batch_size, window)
        params = (int(top_k), float(top_p), float(temperature), int(seed))
        run = functools.partial(self._backend.sample, params=params)
        return self._stream(
            lines, None, run, batch_size, progress, batch_tokens, window, total, initial
        )

    def _stream(
        self, texts, extras, run, batch_size, progress, batch_tokens, window, total=None, initial=0
    ) -> Iterator:
        """``stream_batches`` of ``texts`` with their ``extras`` (``None``: none) by the
        backend; ``total`` defaults to ``len(texts)``."""
        if total is None and isinstance(texts, Sized):
            total = len(texts)
        items = zip(texts, itertools.repeat(None) if extras is None else extras)
        options = dict(batch_size=batch_size, batch_tokens=batch_tokens, window=window)
        bar = dict(progress=progress, total=total, initial=initial)
        return stream_batches(items, self._backend.prepare, run, **options, **bar)
