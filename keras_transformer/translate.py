"""Strings in, strings out: tokenize, decode, detokenize.

``Translator`` runs a Keras model in this process (``Translator.from_workdir``
loads a training run); ``Translator.from_saved_model`` runs an exported
SavedModel's signatures instead, the graph TF Serving runs, with the same
methods: ``translate`` (with target prefixes), ``n_best``, ``score`` and
``sample``. ``n_best_texts`` is the n-best list as text that both share;
``token_batches`` is how both batch a long input (sorted by length, a token
budget a batch), and ``Translator.translate_iterable`` streams a file through
them a window of lines at a time (``n_best_iterable`` and ``sample_iterable``
likewise; ``keras_transformer.translate_corpus`` writes a file's answers into
another, resumably). ``n_best_moses`` is the n-best lists' text format.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import os
import weakref
from collections.abc import Iterable, Iterator, Sequence, Sized
from pathlib import Path

import numpy as np
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.data.normalize import normalize_whitespace_tf
from keras_transformer.data.sequences import encode_sources
from keras_transformer.decoding import (
    DecodeOptions,
    DecodeOutput,
    KernelChoice,
    check_decode_parts,
    check_sampling,
    decode,
    decode_in_parts,
    pad_for_xla,
    score_targets,
)
from keras_transformer.numerics import round_up
from keras_transformer.progress import progress_bar

# How a translator batches a long input (``token_batches``): at most BATCH_TOKENS padded source
# tokens a batch (rows × longest source), the lines read WINDOW at a time by
# ``Translator.translate_iterable``; INPUT_ORDER_BATCH sentences a batch in input order when no
# token budget is asked for (``batch_tokens=None``, the batching before token budgets).
BATCH_TOKENS = 2048
WINDOW = 10_000
INPUT_ORDER_BATCH = 64
_LINE_BREAKS = str.maketrans({"\r": " ", "\n": " "})  # one_line


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


def target_token_ids(tokenizer, texts, eos_id: int) -> tf.RaggedTensor:
    """Target-side ids of ``texts`` as training makes them: whitespace normalised, then EOS.

    Args:
        tokenizer: the target ``SubwordTokenizer`` (or ``MarianSubwordTokenizer``).
        texts: a 1-D batch of strings.
        eos_id: the EOS id appended.

    Returns:
        ``RaggedTensor[batch, None]`` int32 ids, each row ending with ``eos_id``.
    """
    tokens = tf.cast(tokenizer.tokenize(normalize_whitespace_tf(texts)), tf.int32)
    eos = tf.fill([tokens.nrows(), 1], tf.constant(eos_id, tf.int32))
    return tf.concat([tokens, tf.RaggedTensor.from_tensor(eos)], axis=1)


def n_best_texts(model, tgt_tokenizer, source_ids, out: DecodeOutput, n):
    """A search's hypotheses as an n-best list of distinct texts with their log-probabilities.

    Each hypothesis is detokenized. Its log-probability is the search's where
    the text tokenizes back to the same ids, else ``score_targets`` of the
    text's own ids, so that it always equals the score of the text. A text
    that an earlier hypothesis of its sentence already gave is dropped, and
    the rest keep the search's order.

    Args:
        model: the ``Transformer`` the search ran.
        tgt_tokenizer: its target tokenizer.
        source_ids: ``[batch, src_len]`` the search's source ids.
        out: the search's ``DecodeOutput``, ``k`` hypotheses a sentence.
        n: the most texts a sentence (at most ``k``; an int or a scalar tensor).

    Returns:
        ``(texts [batch, n] string, log_probs [batch, n] float32)``; a
        sentence with fewer than ``n`` distinct texts ends with ``""`` and
        ``-inf``.
    """
    config = model.config
    batch, k = tf.shape(out.tokens)[0], tf.shape(out.tokens)[1]
    flat = tf.reshape(out.tokens, [batch * k, -1])
    texts = tgt_tokenizer.detokenize(flat)  # [batch·k]
    canonical = target_token_ids(tgt_tokenizer, texts, config.eos_id)
    canonical = canonical.to_tensor(default_value=config.pad_id)
    # Both as wide as the wider (by tf.pad: in a graph the width is a tensor, not a shape).
    width = tf.maximum(tf.shape(flat)[1], tf.shape(canonical)[1])

    def widened(ids):
        return tf.pad(ids, [[0, 0], [0, width - tf.shape(ids)[1]]], constant_values=config.pad_id)

    canonical, hypothesis = widened(canonical), widened(flat)
    same = tf.reduce_all(tf.equal(canonical, hypothesis), axis=1)
    log_probs = tf.reshape(out.log_probs, [-1])
    missing = tf.math.is_inf(log_probs)
    log_probs = tf.cond(
        tf.reduce_all(same | missing),
        lambda: log_probs,
        lambda: tf.where(
            same | missing,
            log_probs,
            score_targets(model, tf.repeat(source_ids, k, axis=0), canonical),
        ),
    )
    texts, log_probs = tf.reshape(texts, [batch, k]), tf.reshape(log_probs, [batch, k])
    missing = tf.reshape(missing, [batch, k])
    # A text equal to an earlier hypothesis' of the same sentence is a duplicate.
    earlier = tf.range(k)[tf.newaxis, :] < tf.range(k)[:, tf.newaxis]  # [k (this), k (other)]
    equal = tf.equal(texts[:, :, tf.newaxis], texts[:, tf.newaxis, :]) & ~missing[:, tf.newaxis, :]
    dropped = missing | tf.reduce_any(equal & earlier[tf.newaxis], axis=2)
    order = tf.argsort(tf.cast(dropped, tf.int32) * k + tf.range(k)[tf.newaxis, :], axis=1)
    order = order[:, :n]
    dropped = tf.gather(dropped, order, batch_dims=1)
    return (
        tf.where(dropped, "", tf.gather(texts, order, batch_dims=1)),
        tf.where(dropped, float("-inf"), tf.gather(log_probs, order, batch_dims=1)),
    )


def n_best_lists(texts, log_probs) -> list[list[tuple[str, float]]]:
    """``n_best_texts``' arrays as Python lists, one a sentence, without the missing entries.

    Args:
        texts: ``[batch, n]`` UTF-8 bytes.
        log_probs: ``[batch, n]`` floats, ``-inf`` where an entry is missing.

    Returns:
        One list a sentence of ``(text, log_prob)`` pairs, in order.

    Example:
        >>> n_best_lists(np.array([[b"a", b""]]), np.array([[-1.5, -np.inf]]))
        [[('a', -1.5)]]
    """
    return [
        [
            (text.decode("utf-8"), float(log_prob))
            for text, log_prob in zip(row_texts, row_log_probs)
            if np.isfinite(log_prob)
        ]
        for row_texts, row_log_probs in zip(texts, log_probs)
    ]


def one_line(text: str) -> str:
    """``text`` with each carriage return and line feed made a space: one line of output.

    A translation written a line a sentence must hold no line break, or every
    line after it would be misaligned with its input.

    Args:
        text: a translation.

    Returns:
        ``text`` with each ``"\\r"`` and ``"\\n"`` replaced by ``" "``.

    Example:
        >>> one_line("two\\nlines")
        'two lines'
    """
    return text.translate(_LINE_BREAKS)


def n_best_moses(index: int, hypotheses: Iterable[tuple[str, float]]) -> str:
    """A sentence's n-best list in the Moses format, ``INDEX ||| TEXT ||| LOG_PROB`` a line.

    The format ``python -m export.translate --n-best`` and ``translate_corpus``
    write: the log-probability to four decimals, each text on one line
    (``one_line``).

    Args:
        index: the sentence's line number, from 0.
        hypotheses: its ``(text, log_prob)`` pairs, best first (an item of
            ``Translator.n_best``).

    Returns:
        One line a hypothesis, each ending with ``"\\n"``.

    Example:
        >>> n_best_moses(7, [("ein Hund", -1.25), ("", 0.0)])
        '7 ||| ein Hund ||| -1.2500\\n7 |||  ||| 0.0000\\n'
    """
    return "".join(
        f"{index} ||| {one_line(text)} ||| {log_prob:.4f}\n" for text, log_prob in hypotheses
    )


def _check_pairs(name: str, first: Sequence, second: Sequence | None, other: str) -> None:
    """A ``ValueError`` unless ``second`` is ``None`` or as long as ``first``."""
    if second is not None and len(second) != len(first):
        one = {"prefixes": "prefix"}.get(other, other[:-1])
        raise ValueError(
            f"{len(first)} {name} but {len(second)} {other}: give one {one} a sentence."
        )


class Translator(tf.Module):
    """Translates Python strings with a Keras model in this process, or an exported SavedModel.

    Tokenizes, decodes as its ``DecodeOptions`` say (greedy decoding, beam
    search) and detokenizes; ``n_best``, ``score`` and ``sample`` give n-best
    lists, forced-decoding scores and samples, and ``translate`` takes target
    prefixes. Each decoder is traced once, for batches of any shape, and a
    batch of many sentences decodes as ``decode_parts`` parts side by side
    (``decoding.decode_in_parts``). Every method sorts its sentences by
    length and batches them by a token budget (``token_batches``);
    ``translate_iterable``, ``n_best_iterable`` and ``sample_iterable`` do so a
    window of lines at a time, for files. A sentence gives the same answer in
    any batch. ``jit_compile=True`` compiles ``translate`` (without prefixes)
    by the static-shape decoders with XLA instead: each source length is
    padded to a multiple of ``length_bucket`` and each batch to the rows its
    bucket may hold (``decoding.pad_for_xla``, ``batch_capacity``), so a file costs one
    compilation per length bucket and then decodes faster; translations are
    the same. ``Translator.from_saved_model(path)`` gives a translator with
    the same methods over an export's signatures.

    Args:
        model: a ``keras_transformer.Transformer``.
        src_tokenizer, tgt_tokenizer: its tokenizers
            (``keras_transformer.SubwordTokenizer``).
        options: the ``decoding.DecodeOptions`` of ``translate`` and
            ``n_best`` (default: greedy).
        max_src_length: sources are cut to this many subwords, EOS kept
            (default: the model's ``max_length``).
        jit_compile: decode ``translate`` with the static-shape decoders under XLA.
        length_bucket: with ``jit_compile``, sources are padded to a
            multiple of this length.
        decode_parts: a batch decodes as this many parts (``None``:
            ``decoding.DECODE_PARTS``; 1: whole).
        **option_fields: ``DecodeOptions`` fields that replace those of
            ``options`` (``beam_size=4, alpha=0.6``).

    Raises:
        ValueError: ``length_bucket`` or ``decode_parts`` is below 1, or an
            option is out of range (``DecodeOptions``).

    Example::

        translator = Translator.from_workdir("runs/demo", beam_size=4, alpha=0.6)
        translator = Translator.from_saved_model("exports/demo")  # the newest version
        translator.translate(["the boy sees 3 cats"])
        translator.translate(["the boy sees 3 cats"], prefixes=["the boy"])
        translator.n_best(["the boy sees 3 cats"], 4)  # [[(text, log-probability), ...]]
        translator.score(["the boy sees 3 cats"], ["der Junge sieht 3 Katzen"])
        translator.sample(["the boy sees 3 cats"], top_k=10, seed=1)
        with open("test.de") as lines, open("test.en", "w") as out:  # a window at a time
            for translation in translator.translate_iterable(line.rstrip("\\n") for line in lines):
                print(translation, file=out)
    """

    def __init__(
        self,
        model,
        src_tokenizer,
        tgt_tokenizer,
        options: DecodeOptions | None = None,
        *,
        max_src_length: int | None = None,
        jit_compile: bool = False,
        length_bucket: int = 16,
        decode_parts: int | None = None,
        **option_fields,
    ):
        super().__init__()
        if length_bucket < 1:
            raise ValueError(f"length_bucket must be >= 1, got {length_bucket}.")
        options = options or DecodeOptions()
        self.options = options.replace(**option_fields) if option_fields else options
        self.decode_parts = check_decode_parts(decode_parts)
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.max_src_length = max_src_length or model.config.max_length
        self.jit_compile = bool(jit_compile)
        self.length_bucket = int(length_bucket)
        self._compiled: dict[int, tf.types.experimental.GenericFunction] = {}
        self._functions: dict[str, tf.types.experimental.GenericFunction] = {}

    @property
    def beam_size(self) -> int:
        """The beam size: 1 for greedy decoding."""
        return self.options.beam_size

    def _identity(self) -> dict:
        """What makes this translator's answers, as JSON values: ``model`` (a digest of the
        weights and tokenizers, the compute dtype, the source cut) and ``search`` (the
        ``DecodeOptions``). ``translate_corpus`` resumes a file only under the same."""
        digest = hashlib.blake2b(digest_size=16)
        for weight in self.model.weights:
            value = np.ascontiguousarray(weight.numpy())
            digest.update(f"{weight.path}:{value.dtype}:{value.shape};".encode())
            digest.update(value.tobytes())
        for tokenizer in (self.src_tokenizer, self.tgt_tokenizer):
            digest.update(bytes(tokenizer.model_bytes))
            digest.update(repr(getattr(tokenizer, "vocabulary", None)).encode())
        model = {
            "weights_and_tokenizers": digest.hexdigest(),
            "compute_dtype": str(self.model.compute_dtype),
            "max_src_length": self.max_src_length,
        }
        return {"model": model, "search": dataclasses.asdict(self.options)}

    @classmethod
    def from_workdir(
        cls,
        path: str | os.PathLike,
        options: DecodeOptions | None = None,
        precision: str = "fp32",
        **fields,
    ) -> Translator:
        """A translator for the model a training run ended with (``WORKDIR/model.keras``).

        Args:
            path: the ``--workdir`` of ``python -m training.train``.
            options: the ``DecodeOptions`` (default: greedy).
            precision: compute precision (``fp32``, ``bf16``, ``fp16``).
            **fields: ``Translator``'s other arguments (``jit_compile``, ...)
                and ``DecodeOptions`` fields (``beam_size=4, alpha=0.6``).

        Returns:
            A ``Translator`` over the run's model and tokenizers.
        """
        from keras_transformer.workdir import Workdir

        trained = Workdir(path).load(precision)
        return cls.from_trained_model(trained, options, **fields)

    @classmethod
    def from_trained_model(
        cls, trained, options: DecodeOptions | None = None, **fields
    ) -> Translator:
        """A translator for a ``keras_transformer.TrainedModel`` (a model and its tokenizers).

        Args:
            trained: the ``TrainedModel``.
            options: the ``DecodeOptions``.
            **fields: as for ``from_workdir``.

        Returns:
            A ``Translator`` whose sources are cut to the length trained on.
        """
        return cls(
            trained.model,
            trained.src_tokenizer,
            trained.tgt_tokenizer,
            options,
            max_src_length=trained.max_src_length,
            **fields,
        )

    @staticmethod
    def from_saved_model(path: str | os.PathLike, beam_size: int | None = None) -> Translator:
        """A translator over an exported SavedModel's signatures (``export_saved_model``).

        It runs the graph TF Serving runs, tokenization inside it, and has
        the methods every translator has, and ``cross_attention``.

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

    # --- the decoders, traced once each -----------------------------------------------

    def _function(self, kind: str):
        """The ``tf.function`` of ``kind``: ``"best"``, ``"prefix"``, ``"n_best"`` or ``"sample"``.

        Each takes ``source_ids [batch, len]`` and its kind's inputs and returns a
        ``DecodeOutput``, a batch decoded as ``decode_parts`` parts.
        """
        if kind in self._functions:
            return self._functions[kind]
        model, pad = self.model, self.model.config.pad_id
        ids = tf.TensorSpec([None, None], tf.int32)
        options = self.options.replace(n_best=1)
        row_specs: list = []
        shared_specs: list = []
        if kind == "n_best":
            options = self.options.replace(n_best=self.options.beam_size)
        elif kind == "prefix":
            row_specs = [tf.TensorSpec([None, None], tf.int32)]
        elif kind == "sample":
            options = self.options.replace(beam_size=1, n_best=1, sampling=True)
            shared_specs = [
                tf.TensorSpec([], tf.int32),
                tf.TensorSpec([], tf.float32),
                tf.TensorSpec([], tf.float32),
                tf.TensorSpec([], tf.int64),
            ]

        def run(source_ids, *inputs):
            if kind == "prefix":
                return decode(model, source_ids, options, prefix_ids=inputs[0])
            if kind == "sample":
                top_k, top_p, temperature, seed = inputs
                sampling = options.replace(
                    top_k=top_k, top_p=top_p, temperature=temperature, seed=seed
                )
                return decode(model, source_ids, sampling)
            return decode(model, source_ids, options)

        signature = [ids, *row_specs, *shared_specs]
        inner = tf.function(run, input_signature=signature, autograph=False)
        rows = len(row_specs) + 1

        def in_parts(source_ids, *inputs):
            return decode_in_parts(
                inner,
                source_ids,
                pad,
                self.decode_parts,
                options.beam_size,
                row_inputs=inputs[: rows - 1],
                shared_inputs=inputs[rows - 1 :],
            )

        self._functions[kind] = tf.function(in_parts, input_signature=signature, autograph=False)
        return self._functions[kind]

    def _decode(self, ids: tf.Tensor, capacity: int):
        """``(tokens, scores)`` of a batch of ids; under XLA padded to ``capacity`` rows first."""
        if not self.jit_compile:
            out = self._function("best")(tf.cast(ids, tf.int32))
            return out.tokens[:, 0], out.scores[:, 0]
        rows, length = ids.shape
        bucket = round_up(length, self.length_bucket)
        padded = pad_for_xla(ids, capacity, self.length_bucket, self.model.config.pad_id)
        if bucket not in self._compiled:
            choice = KernelChoice(
                static_shapes=True, buffer_length=bucket + self.options.extra_length
            )
            options = self.options.replace(n_best=1)
            self._compiled[bucket] = tf.function(
                lambda ids: decode(self.model, ids, options, choice=choice),
                jit_compile=True,
                autograph=False,
            )
        out = self._compiled[bucket](padded)
        return out.tokens[:rows, 0], out.scores[:rows, 0]

    # --- the methods ------------------------------------------------------------------

    def translate(
        self,
        sentences: Sequence[str],
        batch_size: int | None = None,
        progress: bool = False,
        *,
        prefixes: Sequence[str] | None = None,
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
            prefixes: target-side text, one a sentence: each translation begins
                with its prefix (tokenized as targets are), continued by the
                search. ``""`` leaves a sentence free.
            batch_tokens: the token budget of a batch (rows × longest source);
                ``None``: ``batch_size`` (default 64) sentences a batch in input order.
            window: sort and batch this many sentences at a time (``None``: all).

        Returns:
            One translation a sentence, in input order.

        Raises:
            ValueError: a batching option is below 1, ``prefixes`` is not one a
                sentence, or a prefix is longer than the model's limit.
        """
        if prefixes is None:
            return list(
                self.translate_iterable(
                    sentences, batch_size, progress, batch_tokens=batch_tokens, window=window
                )
            )
        _check_pairs("sentences", sentences, prefixes, "prefixes")
        check_batching(batch_tokens, batch_size, window)
        prefix_ids = self._target_ids(prefixes, "prefix", with_eos=False)
        return self._run(
            sentences, prefix_ids, self._prefix_rows, batch_size, progress, batch_tokens, window
        )

    def n_best(
        self,
        sentences: Sequence[str],
        n: int,
        batch_size: int | None = None,
        progress: bool = False,
        *,
        batch_tokens: int | None = BATCH_TOKENS,
    ) -> list[list[tuple[str, float]]]:
        """The ``n`` best distinct translations of each sentence, with their log-probabilities.

        The hypotheses come in the beam's order (its length penalty applied);
        each log-probability is the float32 sum of log p over the text's
        tokens and EOS, without length penalty: ``score`` of the same text.
        ``n_best(s, n)[i][0][0]`` is ``translate(s)[i]``.

        Args:
            sentences: the source sentences.
            n: the most hypotheses a sentence, at most the beam size.
            batch_size, progress, batch_tokens: as for ``translate``.

        Returns:
            One list a sentence of up to ``n`` ``(text, log_prob)`` pairs, best
            first (fewer where the search finished fewer distinct texts; a
            blank sentence gives ``[("", 0.0)]``).

        Raises:
            ValueError: ``n`` is below 1 or above the beam size, or a batching
                option is below 1.
        """
        return list(
            self.n_best_iterable(
                sentences, n, batch_size, progress, batch_tokens=batch_tokens, window=None
            )
        )

    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        batch_size: int | None = None,
        progress: bool = False,
        *,
        batch_tokens: int | None = BATCH_TOKENS,
    ) -> list[float]:
        """The log-probability of each target given its source (forced decoding).

        The float32 sum of log p over the target's tokens (tokenized as
        training tokenizes targets) and EOS, without length penalty: the
        number ``n_best`` gives the same text. An empty target is scored as
        EOS alone.

        Args:
            sources: the source sentences.
            targets: one target a source.
            batch_size, progress, batch_tokens: as for ``translate``.

        Returns:
            One log-probability a pair, in input order.

        Raises:
            ValueError: the lists differ in length, a target is longer than
                the model's limit, or a batching option is below 1.
        """
        _check_pairs("sources", sources, targets, "targets")
        check_batching(batch_tokens, batch_size)
        target_ids = self._target_ids(targets, "target", with_eos=True)
        return self._run(
            sources, target_ids, self._score_rows, batch_size, progress, batch_tokens, None
        )

    def sample(
        self,
        sentences: Sequence[str],
        *,
        top_k: int = 0,
        top_p: float = 1.0,
        temperature: float = 1.0,
        seed: int = 0,
        batch_size: int | None = None,
        progress: bool = False,
        batch_tokens: int | None = BATCH_TOKENS,
    ) -> list[str]:
        """A translation of each sentence sampled token by token (back-translation's decoding).

        Each token is drawn from the model's softmax at ``temperature``,
        restricted to the ``top_k`` likeliest tokens and then to the nucleus
        of probability ``top_p``. The noise is stateless, keyed by ``seed``
        and the sentence: the same seed and sentence give the same sample in
        any batch, here and in the SavedModel.

        Args:
            sentences: the source sentences.
            top_k: sample among the ``top_k`` likeliest tokens (0: all; 1: greedy).
            top_p: the nucleus' probability, in (0, 1] (1: all tokens).
            temperature: above 0; below 1 sharpens, above 1 flattens.
            seed: an integer.
            batch_size, progress, batch_tokens: as for ``translate``.

        Returns:
            One sample a sentence, in input order.

        Raises:
            ValueError: a parameter is out of range (named), or a batching
                option is below 1.
        """
        return list(
            self.sample_iterable(
                sentences,
                top_k=top_k,
                top_p=top_p,
                temperature=temperature,
                seed=seed,
                batch_size=batch_size,
                progress=progress,
                batch_tokens=batch_tokens,
                window=None,
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
        return self._iterate(
            lines, self._best_rows, batch_size, progress, batch_tokens, window, total, initial
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
        self._check_n(n)
        check_batching(batch_tokens, batch_size, window)
        run = functools.partial(self._n_best_rows, n=n)
        return self._iterate(lines, run, batch_size, progress, batch_tokens, window, total, initial)

    def sample_iterable(
        self,
        lines: Iterable[str],
        *,
        top_k: int = 0,
        top_p: float = 1.0,
        temperature: float = 1.0,
        seed: int = 0,
        batch_size: int | None = None,
        progress: bool = False,
        batch_tokens: int | None = BATCH_TOKENS,
        window: int | None = WINDOW,
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
        run = functools.partial(self._sample_rows, params=params)
        return self._iterate(lines, run, batch_size, progress, batch_tokens, window, total, initial)

    # --- batching ---------------------------------------------------------------------

    def _iterate(
        self, lines, run, batch_size, progress, batch_tokens, window, total, initial
    ) -> Iterator:
        """``_stream`` over ``lines`` without extras; ``total`` defaults to ``len(lines)``."""
        if total is None and isinstance(lines, Sized):
            total = len(lines)
        items = ((line, None) for line in lines)
        return self._stream(items, run, batch_size, progress, batch_tokens, window, total, initial)

    def _run(self, texts, extras, run, batch_size, progress, batch_tokens, window) -> list:
        """``_stream`` over ``texts`` with their ``extras`` (``None``: none), as a list."""
        items = zip(texts, itertools.repeat(None) if extras is None else extras)
        return list(
            self._stream(items, run, batch_size, progress, batch_tokens, window, len(texts))
        )

    def _stream(
        self, items, run, batch_size, progress, batch_tokens, window, total, initial=0
    ) -> Iterator:
        """``run(prepared, extras, rows, capacity)`` over ``(text, extra)`` items, a window
        sorted and batched at a time, the answers in input order; the progress bar (if
        any) starts at ``initial``."""
        items = iter(items)
        bar = progress_bar(progress, total=total, desc="translating", unit="sent", initial=initial)
        with bar:
            while chunk := list(itertools.islice(items, window)):
                lengths, prepared = self._prepare([text for text, _ in chunk])
                extras = [extra for _, extra in chunk]
                outputs: list = [None] * len(chunk)
                for batch in token_batches(lengths, batch_tokens, batch_size):
                    longest = max(lengths[index] for index in batch)
                    rows = batch_capacity(longest, batch_tokens, batch_size)
                    answers = run(prepared, [extras[index] for index in batch], batch, rows)
                    for index, answer in zip(batch, answers):
                        outputs[index] = answer
                    bar.update(len(batch))
                yield from outputs

    def _check_n(self, n: int) -> None:
        if not 1 <= n <= self.beam_size:
            raise ValueError(
                f"n={n}: an n-best list holds 1 to the beam size ({self.beam_size}) "
                "hypotheses; ask for fewer or decode with a larger beam."
            )

    def _target_ids(self, texts: Sequence[str], what: str, with_eos: bool) -> list[list[int]]:
        """Each text's target ids, with or without EOS, checked against the model's limit."""
        if not len(texts):
            return []
        ids = target_token_ids(
            self.tgt_tokenizer, tf.constant(list(texts), tf.string), self.model.config.eos_id
        ).to_list()
        limit = self.model.config.max_length
        for index, row in enumerate(ids):
            length = len(row) if with_eos else len(row) - 1
            if length > (limit if with_eos else limit - 1):
                raise ValueError(
                    f"{what} {index} is {length} tokens, longer than the model's limit "
                    f"({limit} with EOS): shorten it."
                )
        return ids if with_eos else [row[:-1] for row in ids]

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

    def _source_batch(self, prepared, rows: list[int]) -> tf.Tensor:
        ids, _ = prepared
        return tf.cast(
            tf.gather(ids, rows).to_tensor(default_value=self.model.config.pad_id), tf.int32
        )

    def _texts(self, prepared, rows: list[int], tokens) -> list[str]:
        """Detokenized ``tokens`` of ``rows``, ``""`` for a blank source."""
        _, blank = prepared
        texts = self.tgt_tokenizer.detokenize(tokens).numpy()
        return ["" if blank[row] else text.decode("utf-8") for row, text in zip(rows, texts)]

    def _padded(self, rows_ids: list[list[int]]) -> tf.Tensor:
        pad = self.model.config.pad_id
        width = max(1, max(len(row) for row in rows_ids))
        return tf.constant([row + [pad] * (width - len(row)) for row in rows_ids], tf.int32)

    def _best_rows(self, prepared, extras, rows: list[int], capacity: int) -> list[str]:
        tokens, _ = self._decode(self._source_batch(prepared, rows), capacity)
        return self._texts(prepared, rows, tokens)

    def _prefix_rows(self, prepared, prefixes, rows: list[int], capacity: int) -> list[str]:
        out = self._function("prefix")(self._source_batch(prepared, rows), self._padded(prefixes))
        return self._texts(prepared, rows, out.tokens[:, 0])

    def _n_best_rows(self, prepared, extras, rows: list[int], capacity: int, n: int) -> list:
        source_ids = self._source_batch(prepared, rows)
        out = self._function("n_best")(source_ids)
        texts, log_probs = n_best_texts(self.model, self.tgt_tokenizer, source_ids, out, n)
        # A blank sentence answers one "" of log-probability 0, as the SavedModel's signature does.
        blank = np.array([prepared[1][row] for row in rows])[:, np.newaxis]
        first = np.arange(log_probs.shape[1]) == 0
        return n_best_lists(
            np.where(blank, b"", texts.numpy()),
            np.where(blank, np.where(first, 0.0, -np.inf), log_probs.numpy()),
        )

    def _score_rows(self, prepared, targets, rows: list[int], capacity: int) -> list[float]:
        if "score" not in self._functions:
            ids = tf.TensorSpec([None, None], tf.int32)
            self._functions["score"] = tf.function(
                lambda source_ids, target_ids: score_targets(self.model, source_ids, target_ids),
                input_signature=[ids, ids],
                autograph=False,
            )
        scores = self._functions["score"](self._source_batch(prepared, rows), self._padded(targets))
        return [float(score) for score in scores.numpy()]

    def _sample_rows(self, prepared, extras, rows: list[int], capacity: int, params) -> list[str]:
        top_k, top_p, temperature, seed = params
        out = self._function("sample")(
            self._source_batch(prepared, rows),
            tf.constant(top_k, tf.int32),
            tf.constant(top_p, tf.float32),
            tf.constant(temperature, tf.float32),
            tf.constant(seed, tf.int64),
        )
        return self._texts(prepared, rows, out.tokens[:, 0])


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


def _export_files(path: Path) -> dict:
    """The export's graph and variables index: ``{name: [size, mtime_ns]}``."""
    files = {}
    for name in ("saved_model.pb", "variables/variables.index"):
        if (path / name).is_file():
            stat = (path / name).stat()
            files[name] = [stat.st_size, stat.st_mtime_ns]
    return files


# SavedModels loaded in this process, by version folder and files, while a translator holds one.
_LOADED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _load_saved_model(path: Path):
    """``tf.saved_model.load(path)``, shared with the translators over the same files (a greedy
    and a beam translator of one export load it once); an export written again loads anew."""
    key = (str(path.resolve()), repr(sorted(_export_files(path).items())))
    loaded = _LOADED.get(key)
    if loaded is None:
        loaded = tf.saved_model.load(str(path))
        _LOADED[key] = loaded
    return loaded


class _SavedModelTranslator(Translator):
    """``Translator.from_saved_model``'s translator: an export's signatures, run in this process.

    The graph is the one TF Serving runs, with tokenization inside it (only
    TensorFlow and TF Text run). ``beam_size`` is the export's
    (``serving_default``, ``translate_prefix``, ``n_best``) unless 1 is asked
    for (``translate_greedy``, ``translate_prefix_greedy``; ``n_best`` of one
    is then the greedy translation, its log-probability by ``score``); other
    beam sizes need a new export. ``score`` and ``sample`` run their
    signatures. Prefixes and targets are checked against the model's limit
    here, by the export's target SentencePiece model, before any request;
    the graph checks them again.
    """

    def __init__(self, path: str | os.PathLike, beam_size: int | None = None):
        tf.Module.__init__(self)  # no Keras model: Translator's own set-up does not apply
        # The graph's SentencePiece ops are registered: keras_transformer.tokenization imports TF
        # Text.
        self.path = saved_model_version(path)
        self.saved_model = _load_saved_model(self.path)
        self.exported_beam_size = int(self.saved_model.beam_size_tensor.numpy())
        if beam_size not in (None, 1, self.exported_beam_size):
            raise ValueError(
                f"beam size {beam_size}: {self.path} decodes with beam {self.exported_beam_size}; "
                f"use 1 (greedy) or {self.exported_beam_size}, or re-export with beam {beam_size}."
            )
        self._beam_size = self.exported_beam_size if beam_size is None else beam_size
        self._greedy = self._beam_size == 1 and self.exported_beam_size != 1
        name = "translate_greedy" if self._beam_size == 1 else "serving_default"
        self._signature = self.saved_model.signatures[name]
        self._count_pieces = None  # by the export's source SentencePiece model, at first use
        self._count_target_pieces = None  # and its target one

    @property
    def beam_size(self) -> int:
        return self._beam_size

    def _identity(self) -> dict:
        """The export (its version folder, and its graph's and variables' sizes and times)
        and the beam size: see ``Translator._identity``."""
        model = {"saved_model": str(self.path.resolve()), "files": _export_files(self.path)}
        return {"model": model, "search": {"beam_size": self.beam_size}}

    def _signature_of(self, name: str):
        """The export's signature ``name``; an export made before it has none: one line."""
        signatures = self.saved_model.signatures
        if name not in signatures:
            raise ValueError(
                f"{self.path} has no {name} signature (an older export): export it again with "
                "python -m export.saved_model."
            )
        return signatures[name]

    def _spm_counter(self, asset_name: str):
        """``texts → piece counts`` by the export's SentencePiece asset, or ``None``."""
        asset = getattr(self.saved_model, asset_name, None)
        if asset is None:
            return None
        model = spm.SentencePieceProcessor(model_file=asset.asset_path.numpy().decode())
        return lambda batch: [len(ids) for ids in model.encode(batch)]

    def _prepare(self, texts: list[str]) -> tuple[list[int], list[str]]:
        """Each text's source pieces + EOS (by the export's SentencePiece model), and the texts."""
        if self._count_pieces is None:
            # Not one of our exports: words for pieces.
            self._count_pieces = self._spm_counter("source_spm") or (
                lambda batch: [len(text.split()) for text in batch]
            )
        return [pieces + 1 for pieces in self._count_pieces(texts)], texts

    def _target_ids(self, texts: Sequence[str], what: str, with_eos: bool) -> list[str]:
        """The texts themselves (the signatures tokenize them), each checked against the
        model's limit by the export's target SentencePiece model (no check without one:
        the graph answers)."""
        texts = list(texts)
        limit = getattr(self.saved_model, "max_length_tensor", None)
        if not texts or limit is None:
            return texts
        if self._count_target_pieces is None:
            self._count_target_pieces = (
                self._spm_counter("target_spm")
                or self._spm_counter("source_spm")
                or (lambda batch: [0] * len(batch))
            )
        limit = int(limit.numpy())
        normalized = [
            text.decode("utf-8")
            for text in normalize_whitespace_tf(tf.constant(texts, tf.string)).numpy()
        ]
        for index, pieces in enumerate(self._count_target_pieces(normalized)):
            length = pieces + 1 if with_eos else pieces
            if length > (limit if with_eos else limit - 1):
                raise ValueError(
                    f"{what} {index} is {length} tokens, longer than the model's limit "
                    f"({limit} with EOS): shorten it."
                )
        return texts

    def _inputs(self, texts: list[str], rows: list[int]) -> tf.Tensor:
        return tf.constant([texts[row] for row in rows], dtype=tf.string)

    def _best_rows(self, texts: list[str], extras, rows: list[int], capacity: int) -> list[str]:
        translations = self._signature(inputs=self._inputs(texts, rows))["translations"].numpy()
        return [text.decode("utf-8") for text in translations]

    def _prefix_rows(self, texts: list[str], prefixes, rows: list[int], capacity: int) -> list:
        name = "translate_prefix_greedy" if self._greedy else "translate_prefix"
        out = self._signature_of(name)(
            inputs=self._inputs(texts, rows), prefixes=tf.constant(prefixes, tf.string)
        )
        return [text.decode("utf-8") for text in out["translations"].numpy()]

    def _n_best_rows(self, texts: list[str], extras, rows: list[int], capacity: int, n) -> list:
        inputs = self._inputs(texts, rows)
        if self._greedy:  # the greedy translation, and the log-probability of its text
            translations = self._signature(inputs=inputs)["translations"]
            scored = self._signature_of("score")(inputs=inputs, targets=translations)
            blank = (tf.strings.length(normalize_whitespace_tf(inputs)) == 0).numpy()
            out_texts = translations.numpy()[:, np.newaxis]
            out_log_probs = np.where(blank, 0.0, scored["log_probs"].numpy())[:, np.newaxis]
        else:
            out = self._signature_of("n_best")(inputs=inputs, n=tf.constant(n, tf.int32))
            out_texts = out["translations"].numpy()
            out_log_probs = out["log_probs"].numpy()
        return n_best_lists(out_texts, out_log_probs)

    def _score_rows(self, texts: list[str], targets, rows: list[int], capacity: int) -> list:
        out = self._signature_of("score")(
            inputs=self._inputs(texts, rows), targets=tf.constant(targets, tf.string)
        )
        return [float(log_prob) for log_prob in out["log_probs"].numpy()]

    def _sample_rows(self, texts: list[str], extras, rows: list[int], capacity: int, params):
        top_k, top_p, temperature, seed = params
        out = self._signature_of("sample")(
            inputs=self._inputs(texts, rows),
            top_k=tf.constant(top_k, tf.int32),
            top_p=tf.constant(top_p, tf.float32),
            temperature=tf.constant(temperature, tf.float32),
            seed=tf.constant(seed, tf.int64),
        )
        return [text.decode("utf-8") for text in out["translations"].numpy()]

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
