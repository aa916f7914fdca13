"""``PairSource``: a parallel corpus read as a stream, cleaned alike whatever its format.

Its constructors (``from_text_files``, ``from_tsv``, ``from_tfds``,
``from_pairs``) take the format's reader; reading (``dataset()``, ``stats``,
iteration, ``sentences``, ``read()``) and splitting (``part``) are the same
for all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import tensorflow as tf

from keras_transformer.data.sources.cleaning import BOTH, NEITHER, Keep, _kept
from keras_transformer.data.sources.lines import PathLike
from keras_transformer.data.sources.readers import (
    _collect_pairs,
    _list_part,
    _text_files_reader,
    _tsv_reader,
)
from keras_transformer.data.sources.stats import ParallelText, ReadStats, _logged, _Tally
from keras_transformer.data.sources.tfds import _tfds_reader

SIDES = ("source", "target")


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

        >>> from pathlib import Path
        >>> _ = Path("a.src").write_text("the cat\\n\\na dog\\n")
        >>> _ = Path("a.tgt").write_text("die Katze\\nverwaist\\nein Hund\\n")
        >>> text = PairSource.from_text_files("a.src", "a.tgt").read()
        >>> text.sources, text.stats.empty_lines
        (('the cat', 'a dog'), (2,))
        """
        return cls._from_reader(*_text_files_reader(src_path, tgt_path))

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

        >>> from pathlib import Path
        >>> _ = Path("c.tsv").write_text("1\\tthe cat\\tdie Katze\\n2\\tonly one\\n")
        >>> text = PairSource.from_tsv("c.tsv", src_column=1, tgt_column=2).read()
        >>> text.sources, text.stats.malformed
        (('the cat',), 1)
        """
        return cls._from_reader(*_tsv_reader(path, src_column, tgt_column))

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
        return cls._from_reader(
            *_tfds_reader(name, split, src_key, tgt_key, data_dir, download=download)
        )

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

        def part_of(first: int, stop: int) -> PairSource:
            return cls._in_memory(_list_part(text, kept, first, stop), first_line=first)

        return cls._in_memory(text, part_of)

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
