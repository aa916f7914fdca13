"""Strings in, strings out: ``Translator``, a batching and text front over a backend.

``Translator`` runs a Keras model in this process (its ``TranslationGraph``
and Python tokenizers; ``Translator.from_workdir`` loads a training run);
``Translator.from_saved_model`` runs an exported SavedModel's signatures
instead, the graph TF Serving runs, with the same methods: ``translate``
(with target prefixes), ``n_best``, ``score`` and ``sample``. Every method
sorts and batches its sentences by ``token_batches``;
``Translator.translate_iterable`` streams a file through them a window of
lines at a time (``n_best_iterable`` and ``sample_iterable`` likewise;
``keras_transformer.translate_corpus`` writes a file's answers into another,
resumably). The jobs live in ``keras_transformer.translation``: the graph,
the two backends, batching, and the n-best lists' texts (``n_best_moses``
is their text format); their names are importable from here too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from keras_transformer.decoding import Limits, Search
from keras_transformer.translation.batching import (
    BATCH_TOKENS,
    INPUT_ORDER_BATCH,
    WINDOW,
    batch_capacity,
    check_batching,
    check_pairs,
    token_batches,
)
from keras_transformer.translation.graph import TranslationGraph, search_and_limits
from keras_transformer.translation.in_process import InProcessBackend
from keras_transformer.translation.served import (
    SavedModelBackend,
    saved_model_version,
)
from keras_transformer.translation.streams import Streams
from keras_transformer.translation.text import (
    n_best_lists,
    n_best_moses,
    n_best_texts,
    one_line,
    target_token_ids,
)

__all__ = [
    "BATCH_TOKENS",
    "INPUT_ORDER_BATCH",
    "WINDOW",
    "TranslationGraph",
    "Translator",
    "batch_capacity",
    "check_batching",
    "n_best_lists",
    "n_best_moses",
    "n_best_texts",
    "one_line",
    "saved_model_version",
    "target_token_ids",
    "token_batches",
]


class Translator(Streams):
    """Translates Python strings with a Keras model in this process, or an exported SavedModel.

    Tokenizes, decodes as its search says (``Greedy()``, ``Beam(...)``) and
    detokenizes; ``n_best``, ``score`` and ``sample`` give n-best lists,
    forced-decoding scores and samples, and ``translate`` takes target
    prefixes. The answers come from a backend: the model's
    ``TranslationGraph`` (each decoder traced once, for batches of any shape,
    a batch of many sentences decoded as ``decode_parts`` parts side by side,
    ``decoding.decode_in_parts``) or, by ``Translator.from_saved_model(path)``,
    an export's signatures. Every method sorts its sentences by length and
    batches them by a token budget (``token_batches``);
    ``translate_iterable``, ``n_best_iterable`` and ``sample_iterable`` do so a
    window of lines at a time, for files. A sentence gives the same answer in
    any batch. ``jit_compile=True`` compiles ``translate`` (without prefixes)
    by the static-shape decoders with XLA instead: each source length is
    padded to a multiple of ``length_bucket`` and each batch to the rows its
    bucket may hold (``decoding.pad_for_xla``, ``batch_capacity``), so a file
    costs one compilation per length bucket and then decodes faster;
    translations are the same.

    Args:
        model: a ``keras_transformer.Transformer``.
        src_tokenizer, tgt_tokenizer: its tokenizers
            (``keras_transformer.SubwordTokenizer``).
        search: the search of ``translate`` and ``n_best``: ``decoding.Greedy()``
            (the default), ``decoding.Beam(...)`` or ``decoding.Sample(...)``.
        limits: the output ``decoding.Limits`` (default: ``Limits()``).
        max_src_length: sources are cut to this many subwords, EOS kept
            (default: the model's ``max_length``).
        jit_compile: decode ``translate`` with the static-shape decoders under XLA.
        length_bucket: with ``jit_compile``, sources are padded to a
            multiple of this length.
        decode_parts: a batch decodes as this many parts (``None``:
            ``decoding.DECODE_PARTS``; 1: whole).
        **fields: shortcuts that replace the search's ``beam_size``,
            ``alpha`` and ``stopping`` and the limits' ``max_length``,
            ``extra_length`` and ``min_length`` (``beam_size=4, alpha=0.6``;
            ``search_and_limits``).

    Raises:
        ValueError: ``length_bucket`` or ``decode_parts`` is below 1, or an
            option is out of range.
        TypeError: a shortcut that is not one, or a search that is not one.

    Example::

        translator = Translator.from_workdir("runs/demo", beam_size=4, alpha=0.6)
        translator = Translator(model, src_tokenizer, tgt_tokenizer, Beam(size=4), Limits())
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
        search: Search | None = None,
        limits: Limits | None = None,
        *,
        max_src_length: int | None = None,
        jit_compile: bool = False,
        length_bucket: int = 16,
        decode_parts: int | None = None,
        **fields,
    ):
        search, limits = search_and_limits(search, limits, **fields)
        self._use(
            InProcessBackend(
                model,
                src_tokenizer,
                tgt_tokenizer,
                search,
                limits,
                max_src_length=max_src_length,
                jit_compile=jit_compile,
                length_bucket=length_bucket,
                decode_parts=decode_parts,
            )
        )

    def _use(self, backend) -> None:
        """Answer by ``backend``: the front's only state (an ``InProcessBackend`` or a
        ``SavedModelBackend``)."""
        self._backend = backend

    @classmethod
    def _over(cls, backend) -> Translator:
        """A translator answering by ``backend`` (``from_saved_model``)."""
        translator = cls.__new__(cls)
        translator._use(backend)
        return translator

    def __getattr__(self, name: str):
        # The backend's attributes are the translator's: model, src_tokenizer, tgt_tokenizer,
        # max_src_length, search and limits in this process; saved_model and path of an export.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._backend, name)

    @property
    def beam_size(self) -> int:
        """The beam size: 1 for greedy decoding."""
        return self._backend.beam_size

    def _identity(self) -> dict:
        """What makes this translator's answers, as JSON values (``model`` and ``search``):
        ``translate_corpus`` resumes a file only under the same."""
        return self._backend.identity()

    def _prepare(self, texts: list[str]):
        """Each text's source length as batched, and what the backend's batches need."""
        return self._backend.prepare(texts)

    @classmethod
    def from_workdir(
        cls,
        path: str | os.PathLike,
        search: Search | None = None,
        precision: str = "fp32",
        **fields,
    ) -> Translator:
        """A translator for the model a training run ended with (``WORKDIR/model.keras``).

        Args:
            path: the ``--workdir`` of ``kt train``.
            search: the search (default: greedy).
            precision: compute precision (``fp32``, ``bf16``, ``fp16``).
            **fields: ``Translator``'s other arguments (``limits``,
                ``jit_compile``, ...) and shortcuts (``beam_size=4, alpha=0.6``).

        Returns:
            A ``Translator`` over the run's model and tokenizers.
        """
        from keras_transformer.workdir import Workdir

        trained = Workdir(path).load(precision)
        return cls.from_trained_model(trained, search, **fields)

    @classmethod
    def from_trained_model(cls, trained, search: Search | None = None, **fields) -> Translator:
        """A translator for a ``keras_transformer.TrainedModel`` (a model and its tokenizers).

        Args:
            trained: the ``TrainedModel``.
            search: the search (default: greedy).
            **fields: as for ``from_workdir``.

        Returns:
            A ``Translator`` whose sources are cut to the length trained on.
        """
        return cls(
            trained.model,
            trained.src_tokenizer,
            trained.tgt_tokenizer,
            search,
            max_src_length=trained.max_src_length,
            **fields,
        )

    @classmethod
    def from_saved_model(cls, path: str | os.PathLike, beam_size: int | None = None) -> Translator:
        """A translator over an exported SavedModel's signatures (``export_saved_model``).

        It runs the graph TF Serving runs, tokenization inside it, and has
        the methods every translator has, and ``cross_attention``.

        Args:
            path: a version folder (``exports/demo/1``) or the model folder
                above it (``exports/demo``: its highest version).
            beam_size: ``None`` for the beam fixed at export, or 1 for greedy.

        Returns:
            A ``Translator`` over the SavedModel (a ``SavedModelBackend``).

        Raises:
            FileNotFoundError: no SavedModel at ``path`` or in a version folder below it.
            ValueError: ``beam_size`` is neither 1 nor the export's beam.
        """
        return cls._over(SavedModelBackend(path, beam_size=beam_size))

    def cross_attention(self, sentence: str) -> dict:
        """One sentence's translation and the last decoder layer's cross-attention.

        Args:
            sentence: the source sentence.

        Returns:
            ``translation``, ``source_pieces``, ``target_pieces`` and
            ``weights`` ``[target, source]`` (the last decoder layer's
            cross-attention, averaged over heads), as Python values.
        """
        return self._backend.cross_attention(sentence)

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
        return self._paired(
            sentences, prefixes, "prefix", batch_size, progress, batch_tokens, window
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
        return self._paired(sources, targets, "target", batch_size, progress, batch_tokens, None)

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

    def _paired(self, texts, others, what, batch_size, progress, batch_tokens, window) -> list:
        """Answers of ``texts`` with a prefix or a target each (``what``), all checked first."""
        plural = {"prefix": "prefixes", "target": "targets"}[what]
        check_pairs("sentences" if what == "prefix" else "sources", texts, others, plural)
        check_batching(batch_tokens, batch_size, window)
        ids = self._backend.target_ids(others, what, with_eos=what == "target")
        run = self._backend.prefix if what == "prefix" else self._backend.score
        return list(self._stream(texts, ids, run, batch_size, progress, batch_tokens, window))
