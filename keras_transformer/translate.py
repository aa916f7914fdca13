"""Strings in, strings out: tokenize, decode (greedy or beam search), detokenize.

``Translator`` runs a Keras model in this process (``Translator.from_workdir``
loads a training run); ``Translator.from_saved_model`` runs an exported
SavedModel's signatures instead, the graph TF Serving runs, with the same
``translate``. ``best_ids``, ``decode_in_parts`` and ``pad_for_xla`` are the
decoding calls they and the SavedModel exporter share; ``token_batches`` is how
both translators batch a long input (sorted by length, a token budget a batch),
and ``Translator.translate_iterable`` streams a file through them a window of
lines at a time.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Sequence, Sized
from pathlib import Path

import sentencepiece as spm
import tensorflow as tf

from keras_transformer.beam_search import beam_search, check_stopping
from keras_transformer.data.normalize import normalize_whitespace_tf
from keras_transformer.data.sequences import encode_sources
from keras_transformer.decoding import greedy_decode
from keras_transformer.numerics import round_up
from keras_transformer.progress import progress_bar


def best_ids(
    model,
    source_ids,
    beam_size: int = 1,
    alpha: float = 0.6,
    extra_length: int = 50,
    buffer_length: int | None = None,
    stopping: str = "heuristic",
    precomputed=None,
    constant_steps=None,
):
    """The best hypothesis of each sentence: greedy decoding, or beam search's top beam.

    Args:
        model: a ``keras_transformer.Transformer``.
        source_ids: ``[batch, src_len]`` int ids, padded with ``pad_id``.
        beam_size: 1 for greedy decoding, else the beam of ``beam_search``.
        alpha: beam search's length penalty.
        extra_length: each output's limit is its source length plus this.
        buffer_length: selects the static-shape decoders (XLA), with buffers
            of this length; the outputs are the same.
        stopping: beam search's stopping rule (``beam_search``).
        precomputed: the model's precomputed weights
            (``kernels.FrozenWeights.as_variables()``).
        constant_steps: a ``decoding.ConstantSteps`` of the model (dynamic
            shapes only).

    Returns:
        ``(tokens [batch, len] int32, scores [batch] float32)``: the
        log-probability for greedy decoding, the length-penalised score for
        beam search.

    Example:
        >>> import keras_transformer as kt
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=1))
        >>> model.build()
        >>> tokens, scores = best_ids(model, tf.constant([[5, 6, 3]]), extra_length=2)
        >>> tokens.shape[0], scores.shape
        (1, TensorShape([1]))
    """
    static = dict(
        static_shapes=buffer_length is not None,
        buffer_length=buffer_length,
        precomputed=precomputed,
        constant_steps=constant_steps,
    )
    if beam_size > 1:
        out = beam_search(
            model,
            source_ids,
            beam_size=beam_size,
            alpha=alpha,
            extra_length=extra_length,
            stopping=stopping,
            **static,
        )
        return out.tokens[:, 0, :], out.scores[:, 0]
    return greedy_decode(model, source_ids, extra_length=extra_length, **static)


def pad_for_xla(source_ids, rows, length_multiple: int, pad_id: int) -> tf.Tensor:
    """``source_ids`` padded to the fixed shapes an XLA decoder compiles for.

    Args:
        source_ids: ``[batch, len]`` int ids, padded with ``pad_id``.
        rows: the padded batch size, at least ``batch`` (an int or a scalar tensor).
        length_multiple: the padded length is ``len`` rounded up to a multiple of it.
        pad_id: the id the new columns hold.

    Returns:
        ``[rows, round_up(len, length_multiple)]``: the batch, then copies of its
        first sentence, which end when it does and so add no decoding steps.

    Example:
        >>> pad_for_xla(tf.constant([[5, 6, 3]]), 2, 4, 0).numpy().tolist()
        [[5, 6, 3, 0], [5, 6, 3, 0]]
    """
    length = tf.shape(source_ids)[1]
    ids = tf.pad(
        source_ids,
        [[0, 0], [0, round_up(length, length_multiple) - length]],
        constant_values=pad_id,
    )
    return tf.concat([ids, tf.repeat(ids[:1], rows - tf.shape(ids)[0], axis=0)], axis=0)


# A batch of at least PARTS_MIN_ROWS decoding rows (sentences × beams) decodes as DECODE_PARTS
# parts side by side (``decode_in_parts``).
DECODE_PARTS = 2
PARTS_MIN_ROWS = 8


def check_decode_parts(parts: int | None) -> int:
    """``parts`` (``None``: ``DECODE_PARTS``) if it is at least 1, else a ``ValueError``."""
    if parts is None:
        return DECODE_PARTS
    if parts < 1:
        raise ValueError(f"decode_parts must be >= 1 (1: a batch decodes whole), got {parts}.")
    return int(parts)


def decode_in_parts(decode, source_ids, pad_id: int, parts: int | None = None, beam_size: int = 1):
    """``decode`` run as ``parts`` independent decodes of a share of the batch each.

    TensorFlow's executor runs the parts side by side on its inter-op
    threads; the outputs are ``decode(source_ids)``'s, in the batch's order
    (a sentence decodes the same in any batch). The sentences are sorted by
    source length and dealt in turn, so that the parts end at about the same
    step, and each part's sources are cut to its longest. A batch of fewer
    than ``PARTS_MIN_ROWS`` decoding rows (``beam_size`` rows a sentence), or
    of fewer sentences than parts, decodes whole. Dynamic shapes only: an
    XLA decoder pads its batch to fixed sizes instead (``pad_for_xla``).
    ``docs/kernels.md`` says why.

    Args:
        decode: ``source_ids → (tokens [batch, len], scores [batch])``, best
            a ``tf.function`` of one input signature (``[None, None]``
            int32): a graph then holds the decoder once, called for each part.
        source_ids: ``[batch, src_len]`` int32 ids, padded with ``pad_id``.
        pad_id: the padding id (of the sources, and of the joined tokens).
        parts: the number of parts (``None``: ``DECODE_PARTS``); 1: one
            decode, for a server that runs one inter-op thread.
        beam_size: the decoding rows a sentence takes.

    Returns:
        ``(tokens [batch, len], scores [batch])``, as ``decode`` gives them.

    Raises:
        ValueError: ``parts`` is below 1.

    Example:
        >>> import keras_transformer as kt
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=2))
        >>> model.build()
        >>> decode = tf.function(lambda ids: best_ids(model, ids, extra_length=3),
        ...                      input_signature=[tf.TensorSpec([None, None], tf.int32)])
        >>> ids = tf.constant([[5, 6, 3], [7, 3, 0]] * 4)
        >>> tokens, _ = decode_in_parts(decode, ids, model.config.pad_id)
        >>> bool(tf.reduce_all(tokens == decode(ids)[0]))
        True
    """
    parts = check_decode_parts(parts)
    if parts == 1:
        return decode(source_ids)
    source_ids = tf.convert_to_tensor(source_ids)
    rows = tf.shape(source_ids)[0]

    def in_parts():
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, pad_id), tf.int32), axis=1)
        order = tf.argsort(lengths, stable=True)
        shares = [order[i::parts] for i in range(parts)]  # [rows / parts] each, shortest first
        outputs = [
            decode(tf.gather(source_ids, share)[:, : tf.reduce_max(tf.gather(lengths, share))])
            for share in shares
        ]
        width = tf.reduce_max(tf.stack([tf.shape(tokens)[1] for tokens, _ in outputs]))
        tokens = tf.concat(
            [
                tf.pad(tokens, [[0, 0], [0, width - tf.shape(tokens)[1]]], constant_values=pad_id)
                for tokens, _ in outputs
            ],
            axis=0,
        )
        scores = tf.concat([scores for _, scores in outputs], axis=0)
        back = tf.math.invert_permutation(
            tf.concat(shares, axis=0)
        )  # each sentence's row in the parts
        return tf.gather(tokens, back), tf.gather(scores, back)

    def whole():
        return decode(source_ids)

    in_parts = tf.function(in_parts, experimental_attributes={"_noinline": True})
    return tf.cond(
        tf.logical_and(rows >= parts, rows * beam_size >= PARTS_MIN_ROWS), in_parts, whole
    )


# How a translator batches a long input (``token_batches``): at most BATCH_TOKENS padded source
# tokens a batch (rows × longest source), the lines read WINDOW at a time by
# ``Translator.translate_iterable``; INPUT_ORDER_BATCH sentences a batch in input order when no
# token budget is asked for (``batch_tokens=None``, the batching before token budgets).
BATCH_TOKENS = 2048
WINDOW = 10_000
INPUT_ORDER_BATCH = 64


def check_batching(
    batch_tokens: int | None, batch_size: int | None = None, window: int | None = None
) -> None:
    """Raise a ``ValueError`` unless each batching option is ``None`` or at least 1.

    Args:
        batch_tokens: the token budget of a batch (``token_batches``).
        batch_size: the most sentences a batch.
        window: the lines read and sorted at a time (``Translator.translate_iterable``).

    Raises:
        ValueError: an option is below 1, named in the message.
    """
    for name, value in (("batch_tokens", batch_tokens), ("batch_size", batch_size)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}.")
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1 (lines read at a time), got {window}.")


def batch_capacity(length: int, batch_tokens: int | None, batch_size: int | None = None) -> int:
    """The most sentences a batch whose longest source has ``length`` tokens may hold.

    Args:
        length: the batch's longest source, in tokens (EOS included).
        batch_tokens: the token budget (rows × longest source); ``None``: none.
        batch_size: the most sentences a batch; ``None``: no limit but the budget
            (``INPUT_ORDER_BATCH`` when there is no budget either).

    Returns:
        ``batch_tokens // length`` (at least 1: a source longer than the budget goes
        alone), capped at ``batch_size``.

    Example:
        >>> batch_capacity(10, 64), batch_capacity(100, 64), batch_capacity(10, 64, 4)
        (6, 1, 4)
    """
    if batch_tokens is None:
        return batch_size or INPUT_ORDER_BATCH
    rows = max(1, batch_tokens // max(1, length))
    return rows if batch_size is None else min(rows, batch_size)


def token_batches(
    lengths: Sequence[int], batch_tokens: int | None = BATCH_TOKENS, batch_size: int | None = None
) -> list[list[int]]:
    """The batches of a window of sources: sorted by length, filled up to a token budget.

    Sentences are taken shortest first (a stable sort) and a batch is closed when
    one more would put its rows × longest source over ``batch_tokens`` or its
    rows over ``batch_size`` (``batch_capacity``); a source longer than the
    budget is a batch alone. Every index appears in exactly one batch. With
    ``batch_tokens=None`` the batches are ``batch_size`` (default
    ``INPUT_ORDER_BATCH``) sentences in input order instead. Both translators
    batch with it (``Translator.translate_iterable``).

    Args:
        lengths: each source's length in tokens (EOS included).
        batch_tokens: the token budget of a batch; ``None``: input order.
        batch_size: the most sentences a batch (``None``: no limit but the budget).

    Returns:
        Lists of indices into ``lengths``, one a batch.

    Raises:
        ValueError: ``batch_tokens`` or ``batch_size`` is below 1.

    Example:
        >>> token_batches([5, 2, 9, 2, 3], batch_tokens=8)
        [[1, 3], [4], [0], [2]]
        >>> token_batches([5, 2, 9, 2, 3], batch_tokens=None, batch_size=2)
        [[0, 1], [2, 3], [4]]
    """
    check_batching(batch_tokens, batch_size)
    if batch_tokens is None:
        size = batch_size or INPUT_ORDER_BATCH
        starts = range(0, len(lengths), size)
        return [list(range(start, min(start + size, len(lengths)))) for start in starts]
    batches: list[list[int]] = []
    batch: list[int] = []
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        # Shortest first: the new source is the batch's longest.
        if batch and len(batch) + 1 > batch_capacity(lengths[index], batch_tokens, batch_size):
            batches.append(batch)
            batch = []
        batch.append(index)
    if batch:
        batches.append(batch)
    return batches


class Translator(tf.Module):
    """Translates Python strings with a Keras model in this process, or an exported SavedModel.

    Tokenizes, decodes (greedy for ``beam_size=1``, else beam search) and
    detokenizes. The decoder is traced once, for batches of any shape, and a
    batch of many sentences decodes as ``decode_parts`` parts side by side
    (``decode_in_parts``). ``translate`` and ``translate_iterable`` sort the
    sentences by length and batch them by a token budget (``token_batches``),
    the latter a window of lines at a time, for files. ``jit_compile=True``
    compiles the static-shape decoders with XLA instead: each source length is
    padded to a multiple of ``length_bucket`` and each batch to the rows its
    bucket may hold (``pad_for_xla``, ``batch_capacity``), so a file costs one
    compilation per length bucket and then decodes faster. Translations are the
    same either way. ``Translator.from_saved_model(path)`` gives a translator
    with the same ``translate`` over an export's signatures.

    Args:
        model: a ``keras_transformer.Transformer``.
        src_tokenizer, tgt_tokenizer: its tokenizers
            (``keras_transformer.SubwordTokenizer``).
        max_src_length: sources are cut to this many subwords, EOS kept
            (default: the model's ``max_length``).
        extra_length: each output's limit is its source length plus this.
        beam_size: 1 for greedy decoding, else the beam size.
        alpha: beam search's length penalty.
        jit_compile: decode with the static-shape decoders under XLA.
        length_bucket: with ``jit_compile``, sources are padded to a
            multiple of this length.
        stopping: beam search's stopping rule, ``"heuristic"`` or ``"exact"``
            (``beam_search``).
        decode_parts: a batch decodes as this many parts (``None``:
            ``DECODE_PARTS``; 1: whole).

    Raises:
        ValueError: ``length_bucket`` or ``decode_parts`` is below 1, or
            ``stopping`` names no rule.

    Example::

        translator = Translator.from_workdir("runs/demo", beam_size=4, alpha=0.6)
        translator = Translator.from_saved_model("exports/demo")  # the newest version
        translator.translate(["the boy sees 3 cats"])
        with open("test.de") as lines, open("test.en", "w") as out:  # a window at a time
            for translation in translator.translate_iterable(line.rstrip("\n") for line in lines):
                print(translation, file=out)
    """

    def __init__(
        self,
        model,
        src_tokenizer,
        tgt_tokenizer,
        max_src_length: int | None = None,
        extra_length: int = 50,
        beam_size: int = 1,
        alpha: float = 0.6,
        jit_compile: bool = False,
        length_bucket: int = 16,
        stopping: str = "heuristic",
        decode_parts: int | None = None,
    ):
        super().__init__()
        if length_bucket < 1:
            raise ValueError(f"length_bucket must be >= 1, got {length_bucket}.")
        decode_parts = check_decode_parts(decode_parts)
        check_stopping(stopping)
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.max_src_length = max_src_length or model.config.max_length
        self.jit_compile = bool(jit_compile)
        self.length_bucket = int(length_bucket)
        self._options = dict(
            beam_size=beam_size, alpha=alpha, extra_length=extra_length, stopping=stopping
        )
        self._compiled: dict[int, tf.types.experimental.GenericFunction] = {}
        signature = [tf.TensorSpec([None, None], tf.int32)]  # any batch: one trace
        decode = tf.function(
            lambda ids: best_ids(model, ids, **self._options), input_signature=signature
        )
        self._decode_dynamic = tf.function(
            lambda ids: decode_in_parts(decode, ids, model.config.pad_id, decode_parts, beam_size),
            input_signature=signature,
        )

    @property
    def beam_size(self) -> int:
        """The beam size: 1 for greedy decoding."""
        return self._options["beam_size"]

    @classmethod
    def from_workdir(
        cls,
        path: str | os.PathLike,
        beam_size: int = 1,
        alpha: float = 0.6,
        precision: str = "fp32",
        **options,
    ) -> Translator:
        """A translator for the model a training run ended with (``WORKDIR/model.keras``).

        Args:
            path: the ``--workdir`` of ``python -m training.train``.
            beam_size: 1 = greedy, else beam search with length penalty ``alpha``.
            alpha: beam search's length penalty.
            precision: compute precision (``fp32``, ``bf16``, ``fp16``).
            **options: ``Translator``'s other arguments (``jit_compile``, ...).

        Returns:
            A ``Translator`` over the run's model and tokenizers.
        """
        from keras_transformer.workdir import Workdir

        trained = Workdir(path).load(precision)
        return cls.from_trained_model(trained, beam_size=beam_size, alpha=alpha, **options)

    @classmethod
    def from_trained_model(
        cls, trained, beam_size: int = 1, alpha: float = 0.6, **options
    ) -> Translator:
        """A translator for a ``keras_transformer.TrainedModel`` (a model and its tokenizers).

        Args:
            trained: the ``TrainedModel``.
            beam_size, alpha: as for ``Translator``.
            **options: ``Translator``'s other arguments.

        Returns:
            A ``Translator`` whose sources are cut to the length trained on.
        """
        return cls(
            trained.model,
            trained.src_tokenizer,
            trained.tgt_tokenizer,
            max_src_length=trained.max_src_length,
            beam_size=beam_size,
            alpha=alpha,
            **options,
        )

    @staticmethod
    def from_saved_model(path: str | os.PathLike, beam_size: int | None = None) -> Translator:
        """A translator over an exported SavedModel's signatures (``export_saved_model``).

        It runs the graph TF Serving runs, tokenization inside it, and has
        ``translate`` as every translator has, and ``cross_attention``.

        Args:
            path: a version folder (``exports/demo/1``) or the model folder
                above it (``exports/demo``: its highest version).
            beam_size: ``None`` for the beam fixed at export, or 1 for greedy.

        Returns:
            A ``Translator`` (of a private subclass) over the SavedModel.

        Raises:
            FileNotFoundError: no SavedModel at ``path`` or in a version folder below it.
            ValueError: ``beam_size`` is neither 1 nor the export's beam.
        """
        return _SavedModelTranslator(path, beam_size=beam_size)

    def _decode(self, ids: tf.Tensor, capacity: int):
        """``(tokens, scores)`` of a batch of ids; under XLA padded to ``capacity`` rows first."""
        if not self.jit_compile:
            return self._decode_dynamic(tf.cast(ids, tf.int32))
        rows, length = ids.shape
        bucket = round_up(length, self.length_bucket)
        padded = pad_for_xla(ids, capacity, self.length_bucket, self.model.config.pad_id)
        if bucket not in self._compiled:
            buffer = bucket + self._options["extra_length"]
            self._compiled[bucket] = tf.function(
                lambda ids: best_ids(self.model, ids, buffer_length=buffer, **self._options),
                jit_compile=True,
            )
        tokens, scores = self._compiled[bucket](padded)
        return tokens[:rows], scores[:rows]

    def translate(
        self,
        sentences: Sequence[str],
        batch_size: int | None = None,
        progress: bool = False,
        *,
        batch_tokens: int | None = BATCH_TOKENS,
        window: int | None = None,
    ) -> list[str]:
        """Translations of ``sentences``, in their order, batched by length (``token_batches``).

        The sentences are sorted by source length and batched up to
        ``batch_tokens`` padded source tokens a batch; a sentence translates the
        same in any batch, so only the speed depends on the batching.

        Args:
            sentences: the source sentences.
            batch_size: the most sentences a batch (``None``: no limit but the
                token budget); with ``batch_tokens=None``, the sentences a batch.
            progress: show a progress bar on a terminal (needs ``tqdm``).
            batch_tokens: the token budget of a batch (rows × longest source);
                ``None``: ``batch_size`` (default 64) sentences a batch in input order.
            window: sort and batch this many sentences at a time (``None``: all).

        Returns:
            One translation a sentence, in input order.

        Raises:
            ValueError: a batching option is below 1.
        """
        return list(
            self.translate_iterable(
                sentences, batch_size, progress, batch_tokens=batch_tokens, window=window
            )
        )

    def translate_iterable(
        self,
        lines: Iterable[str],
        batch_size: int | None = None,
        progress: bool = False,
        *,
        batch_tokens: int | None = BATCH_TOKENS,
        window: int | None = WINDOW,
        total: int | None = None,
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

        Returns:
            An iterator of one translation a line, in input order.

        Raises:
            ValueError: a batching option is below 1 (when called, not when iterated).
        """
        check_batching(batch_tokens, batch_size, window)
        if total is None and isinstance(lines, Sized):
            total = len(lines)
        return self._stream(iter(lines), batch_size, progress, batch_tokens, window, total)

    def _stream(self, lines, batch_size, progress, batch_tokens, window, total) -> Iterator[str]:
        with progress_bar(progress, total=total, desc="translating", unit="sent") as bar:
            while chunk := list(itertools.islice(lines, window)):
                lengths, prepared = self._prepare(chunk)
                outputs = [""] * len(chunk)
                for batch in token_batches(lengths, batch_tokens, batch_size):
                    longest = max(lengths[index] for index in batch)
                    rows = batch_capacity(longest, batch_tokens, batch_size)
                    for index, text in zip(batch, self._translate_rows(prepared, batch, rows)):
                        outputs[index] = text
                    bar.update(len(batch))
                yield from outputs

    def _prepare(self, texts: list[str]) -> tuple[list[int], tuple[tf.RaggedTensor, list[bool]]]:
        """Each text's source length as batched (XLA: rounded up to its bucket), the ids, blanks.

        The text is read as the SavedModel reads it: whitespace normalised, and a text with
        nothing left (blank) translates to ``""``.
        """
        text = normalize_whitespace_tf(tf.constant(texts, tf.string))
        ids = encode_sources(self.src_tokenizer, text, self.max_src_length)
        lengths = ids.row_lengths().numpy().tolist()
        if self.jit_compile:  # a batch is decoded padded to its bucket: budget the padded length
            lengths = [round_up(length, self.length_bucket) for length in lengths]
        return lengths, (ids, (tf.strings.length(text) == 0).numpy().tolist())

    def _translate_rows(self, prepared, rows: list[int], capacity: int) -> list[str]:
        """The translations of ``rows`` of ``_prepare``'s output, padded to ``capacity`` rows."""
        ids, blank = prepared
        batch = tf.gather(ids, rows).to_tensor(default_value=self.model.config.pad_id)
        tokens, _ = self._decode(batch, capacity)
        texts = self.tgt_tokenizer.detokenize(tokens).numpy()
        return ["" if blank[row] else text.decode("utf-8") for row, text in zip(rows, texts)]


def saved_model_version(path: str | os.PathLike) -> Path:
    """``path`` if it holds a SavedModel, else its highest numbered version folder."""
    path = Path(path)
    if (path / "saved_model.pb").is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"No SavedModel at {path}: the path does not exist.")
    versions = [p for p in path.iterdir() if p.name.isdigit() and (p / "saved_model.pb").is_file()]
    if not versions:
        raise FileNotFoundError(
            f"No SavedModel at {path}: no saved_model.pb in it or in a version folder "
            "below it (export one with python -m export.saved_model)."
        )
    return max(versions, key=lambda p: int(p.name))


class _SavedModelTranslator(Translator):
    """``Translator.from_saved_model``'s translator: an export's signatures, run in this process.

    The graph is the one TF Serving runs, with tokenization inside it (only
    TensorFlow and TF Text run). ``beam_size`` is the export's
    (``serving_default``) unless 1 is asked for (``translate_greedy``); other
    beam sizes need a new export.
    """

    def __init__(self, path: str | os.PathLike, beam_size: int | None = None):
        tf.Module.__init__(self)  # no Keras model: Translator's own set-up does not apply
        # The graph's SentencePiece ops are registered: keras_transformer.tokenization imports TF
        # Text.
        self.path = saved_model_version(path)
        self.saved_model = tf.saved_model.load(str(self.path))
        self.exported_beam_size = int(self.saved_model.beam_size_tensor.numpy())
        if beam_size not in (None, 1, self.exported_beam_size):
            raise ValueError(
                f"beam size {beam_size}: {self.path} decodes with beam {self.exported_beam_size}; "
                f"use 1 (greedy) or {self.exported_beam_size}, or re-export with beam {beam_size}."
            )
        self._beam_size = self.exported_beam_size if beam_size is None else beam_size
        name = "translate_greedy" if self._beam_size == 1 else "serving_default"
        self._signature = self.saved_model.signatures[name]
        self._count_pieces = None  # by the export's source SentencePiece model, at first use

    @property
    def beam_size(self) -> int:
        return self._beam_size

    def _prepare(self, texts: list[str]) -> tuple[list[int], list[str]]:
        """Each text's source pieces + EOS (by the export's SentencePiece model), and the texts."""
        if self._count_pieces is None:
            asset = getattr(self.saved_model, "source_spm", None)
            if asset is None:  # not one of our exports: words for pieces
                self._count_pieces = lambda batch: [len(text.split()) for text in batch]
            else:
                model = spm.SentencePieceProcessor(model_file=asset.asset_path.numpy().decode())
                self._count_pieces = lambda batch: [len(ids) for ids in model.encode(batch)]
        return [pieces + 1 for pieces in self._count_pieces(texts)], texts

    def _translate_rows(self, texts: list[str], rows: list[int], capacity: int) -> list[str]:
        inputs = tf.constant([texts[row] for row in rows], dtype=tf.string)
        translations = self._signature(inputs=inputs)["translations"].numpy()
        return [text.decode("utf-8") for text in translations]

    def cross_attention(self, sentence: str) -> dict:
        """The ``cross_attention`` signature's outputs for one sentence, as Python values.

        Returns:
            ``translation``, ``source_pieces``, ``target_pieces`` and
            ``weights`` ``[target, source]`` (the last decoder layer's
            cross-attention, averaged over heads).
        """
        out = self.saved_model.signatures["cross_attention"](sentence=tf.constant(sentence))
        return {
            "translation": out["translation"].numpy().decode("utf-8"),
            "source_pieces": [p.decode("utf-8") for p in out["source_pieces"].numpy()],
            "target_pieces": [p.decode("utf-8") for p in out["target_pieces"].numpy()],
            "weights": out["weights"].numpy(),
        }
