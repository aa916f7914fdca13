"""The SavedModel's signatures: ``ExportedTranslator``, text in and out around a
``TranslationGraph``.

The signatures add what a served request needs around the graph's decoders:
tokenization and detokenization ops, whitespace normalisation, blank
sentences, and the checks that fail a bad request with one line.
``exporters.saved_model.export_saved_model`` saves it.
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.data.normalize import normalize_whitespace_tf
from keras_transformer.data.sequences import encode_sources
from keras_transformer.decoding import (
    Beam,
    ConstantSteps,
    Greedy,
    KernelChoice,
    Limits,
    Sample,
    Search,
    check_decode_parts,
    pad_for_xla,
)
from keras_transformer.exporters.serving_files import SIGNATURE
from keras_transformer.numerics import round_up
from keras_transformer.translation.graph import TranslationGraph, search_and_limits
from keras_transformer.translation.text import blank_answers, target_token_ids

# The XLA signatures pad a batch to one of these sizes (beyond the last, to a multiple of it) and
# its sources to a multiple of XLA_LENGTH_BUCKET tokens: XLA compiles once for each shape it meets.
XLA_ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
XLA_LENGTH_BUCKET = 16
# A model whose float32 weights take at most this many bytes decodes a sentence or a few by a step
# with the decoder's weights as graph constants (decoding.ConstantSteps): a second copy of them (of
# a tied target embedding, a third) in the SavedModel's graph and, for each signature a server
# runs, in its memory.
CONSTANT_STEPS_MAX_BYTES = 128 * 2**20
STRINGS = tf.TensorSpec([None], tf.string, name="inputs")


def raw_variables(model) -> list[tf.Variable]:
    """The tf.Variables behind a Keras 3 model's variables, for a module to track.

    Without such a list a SavedModel restores under ``tf.saved_model.load`` but
    not under the session-based loader of TF Serving and saved_model_cli
    ("Could not find variable ..."), and the TFLite converter cannot freeze the
    variables read inside a while loop: Keras 3 variables wrap the tf.Variable.
    """
    return [variable.value for variable in model.variables]


def attach_model(module: tf.Module, model) -> None:
    """``module.model = model`` for export, tracking only ``raw_variables(model)``
    (as ``module.model_variables``): tracking the Keras model too would save
    every weight a second time (its Keras variables serialize their values)."""
    module.__dict__["model"] = model
    module.model_variables = raw_variables(model)


def _signature(*specs):
    """A signature function's decorator: ``tf.function`` of ``specs``, no AutoGraph."""
    return tf.function(input_signature=list(specs), autograph=False)


class ExportedTranslator(tf.Module):
    """The ``tf.Module`` that ``export_saved_model`` saves: translation signatures for TF Serving.

    Its decoders are a ``TranslationGraph``'s, by the inference kernels, with
    the model's precomputed weights kept as variables
    (``kernels.FrozenWeights``) and, for a small model, the small-batch
    step's weights as constants (``decoding.ConstantSteps``).

    Signatures:
        ``serving_default``: ``inputs`` string ``[batch]`` → ``translations``
            string ``[batch]`` and ``scores`` float32 ``[batch]`` (length-penalised
            log-probability with beam search, log-probability with greedy).
        ``translate_greedy``: as ``serving_default`` with greedy decoding.
        ``translate_ids``: ``source_ids`` int32 ``[batch, len]`` (subword ids +
            EOS, padded with the model's ``pad_id`` (0 for models trained here),
            as ``keras_transformer.data.encode_sources`` makes them) →
            ``target_ids`` int32 ``[batch, len]`` (EOS, then ``pad_id``) and
            ``scores``.
        ``cross_attention``: one sentence (string scalar) → its translation,
            ``source_pieces``, ``target_pieces`` and ``weights`` ``[target,
            source]``: the last decoder layer's cross-attention, averaged over
            heads (for plotting alignments).
        ``translate_prefix``: ``inputs`` and ``prefixes`` string ``[batch]`` →
            ``translations`` and ``scores``: ``serving_default``'s decoding with
            each translation beginning with its prefix (tokenized as targets
            are), continued by the search; ``""`` leaves a sentence free.
        ``translate_prefix_greedy``: as ``translate_prefix`` with greedy decoding.
        ``n_best``: ``inputs`` string ``[batch]`` and ``n`` int32 scalar →
            ``translations`` string ``[batch, n]`` and ``log_probs`` float32
            ``[batch, n]``: beam search with the export's beam size, its
            hypotheses as distinct texts in the beam's order, each with the
            log-probability of its text (``translate.n_best_texts``); a
            sentence with fewer texts ends with ``""`` and ``-inf``.
        ``score``: ``inputs`` and ``targets`` string ``[batch]`` → ``log_probs``
            float32 ``[batch]``: each target's log-probability given its
            source (forced decoding, no length penalty, EOS included; an empty
            target is EOS alone; a blank source is scored as EOS alone).
        ``sample``: ``inputs`` string ``[batch]``, ``top_k`` int32, ``top_p``
            float32, ``temperature`` float32 and ``seed`` int64 (scalars) →
            ``translations`` and ``log_probs`` (the sample's log-probability
            under the model, unfiltered, temperature 1): each token drawn
            from the softmax at ``temperature``, among the ``top_k`` likeliest
            tokens (0: all) and then the nucleus of probability ``top_p``; the
            same seed and sentence give the same sample in any batch.
        ``translate_xla``, ``translate_greedy_xla`` (with ``xla=True`` only):
            ``serving_default`` and ``translate_greedy`` with the decoder
            compiled by XLA (``jit_compile``): the static-shape decoders, the
            batch padded to ``XLA_ROW_BUCKETS`` rows (copies of its first
            sentence) and the sources to a multiple of ``XLA_LENGTH_BUCKET``
            tokens, so XLA compiles once for each such shape it meets. The
            same translations. They need a server that runs XLA on its
            device (TF Serving: ``--xla_cpu_compilation_enabled`` on a CPU);
            the other signatures never do.

    Errors: an ``InvalidArgument`` answer, before any decoding, when ``n`` is
    not in 1 to the beam size; when ``top_k < 0``, ``top_p`` is not in
    (0, 1] or ``temperature`` is not a finite number above 0 (the graph
    asserts rather than clamps); when the batches of ``inputs`` and
    ``prefixes`` or ``targets`` differ in size; or when a prefix has more than
    ``max_length - 1`` subwords or a target more than ``max_length`` with EOS
    (the model's limit; nothing is cut).

    Input handling: invalid UTF-8 bytes become U+FFFD (in prefixes and targets
    too); whitespace is normalised as in training; an empty or blank sentence
    translates to "" (score 0; in ``n_best`` one ``""`` of log-probability
    0); sources longer than ``max_src_length`` subwords are truncated (EOS
    kept).

    Args:
        model: a ``keras_transformer.Transformer``.
        src_tokenizer, tgt_tokenizer: its tokenizers.
        max_src_length: sources are cut to this many subwords.
        search: ``serving_default``'s search, ``decoding.Beam(...)`` (default:
            ``Beam()``, beam 4, α 0.6) or ``decoding.Greedy()``.
        limits: the output ``decoding.Limits`` of every signature.
        src_model_path, tgt_model_path: the SentencePiece models, shipped as
            assets.
        vocabulary_paths: a Marian tokenizer's vocabularies, shipped as
            assets, ``{file name: path}``.
        xla: also make the XLA signatures.
        step_splits, step_products: the small-batch step's splits and
            products (``decoding.ConstantSteps``).
        decode_parts: a batch decodes as this many parts
            (``decoding.decode_in_parts``).

        **fields: shortcuts that replace the search's and the limits' fields
            (``beam_size=4, alpha=0.6``; ``translation.graph.search_and_limits``).

    Raises:
        ValueError: ``decode_parts`` is below 1, an option is out of range,
            or ``search`` is a ``Sample`` (sampling has its own signature).
    """

    def __init__(
        self,
        model,
        src_tokenizer,
        tgt_tokenizer,
        *,
        max_src_length: int,
        search: Search | None = None,
        limits: Limits | None = None,
        src_model_path: Path | None = None,
        tgt_model_path: Path | None = None,
        vocabulary_paths: dict[str, Path] | None = None,
        xla: bool = False,
        step_splits: int | None = None,
        step_products: str | None = None,
        decode_parts: int | None = None,
        **fields,
    ):
        super().__init__(name="translator")
        search, limits = export_options(search, limits, **fields)
        decode_parts = check_decode_parts(decode_parts)
        attach_model(self, model)
        # The fused and scaled kernels of the inference kernels, made now rather than at every call.
        supported = kernels.encoding_supported(model) and kernels.decoding_step_supported(model)
        self.frozen_weights = kernels.FrozenWeights(model) if supported else None
        small = 4 * model.count_params() <= CONSTANT_STEPS_MAX_BYTES  # float32 bytes
        precomputed = None if self.frozen_weights is None else self.frozen_weights.as_variables()
        # Held outside the module's tracked state: every signature calls the graph's decoders, each
        # made once, so the SavedModel holds each decoder (and the constant steps) once.
        constant_steps = (
            ConstantSteps(model, precomputed, splits=step_splits, products=step_products)
            if supported and small
            else None
        )
        choice = KernelChoice(precomputed=precomputed, constant_steps=constant_steps)
        self.__dict__["graph"] = TranslationGraph(
            model, tgt_tokenizer, search, limits, choice=choice, decode_parts=decode_parts
        )
        self.__dict__["constant_steps"] = constant_steps
        self.decode_parts = decode_parts
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.max_src_length = int(max_src_length)
        self.beam_size = search.hypotheses
        self.beam_size_tensor = tf.Variable(self.beam_size, trainable=False, name="beam_size")
        # The model's length limit, for clients that check prefixes and targets before a request.
        self.max_length_tensor = tf.Variable(
            int(model.config.max_length), trainable=False, name="max_length"
        )
        self.xla = bool(xla)
        if self.xla:  # only then: the default export holds no XLA function at all
            self.translate_xla = _signature(STRINGS)(
                lambda inputs: self._translate(inputs, xla=True)
            )
            self.translate_greedy_xla = _signature(STRINGS)(
                lambda inputs: self._translate(inputs, Greedy(), xla=True)
            )
        # The SentencePiece models also ship as assets, for clients that tokenize themselves.
        if src_model_path is not None:
            self.source_spm = tf.saved_model.Asset(str(src_model_path))
        if tgt_model_path is not None and tgt_model_path != src_model_path:
            self.target_spm = tf.saved_model.Asset(str(tgt_model_path))
        # A Marian tokenizer's vocabulary (piece -> id) ships beside its SentencePiece models.
        for name, path in sorted((vocabulary_paths or {}).items()):
            setattr(self, name.replace(".", "_"), tf.saved_model.Asset(str(path)))

    def _decode_xla(self, source_ids, search):
        """The best hypotheses by the static-shape decoders under XLA, on a batch padded
        to bucket sizes (see ``translate_xla``); the same outputs."""
        config = self.graph.model.config
        rows = tf.shape(source_ids)[0]
        buckets = tf.constant(XLA_ROW_BUCKETS)
        largest = XLA_ROW_BUCKETS[-1]
        padded_rows = tf.where(
            rows > largest,
            round_up(rows, largest),
            tf.gather(buckets, tf.argmax(tf.cast(buckets >= rows, tf.int32))),
        )
        ids = pad_for_xla(source_ids, padded_rows, XLA_LENGTH_BUCKET, config.pad_id)
        longest_source = round_up(self.max_src_length, XLA_LENGTH_BUCKET)
        # Every row's own limit fits.
        buffer = min(longest_source + self.graph.limits.extra_length, config.max_length)
        out = self.graph.xla_decoder(buffer, search)(ids)
        return out.tokens[:rows, 0], out.scores[:rows, 0]

    def _source_ids(self, inputs):
        text = normalize_whitespace_tf(_valid_utf8(inputs))
        ids = encode_sources(self.src_tokenizer, text, self.max_src_length).to_tensor(
            default_value=self.graph.model.config.pad_id
        )
        return text, tf.cast(ids, tf.int32)

    def _best(self, source_ids, search=None):
        out = self.graph.decode("search", source_ids, search=search)
        return out.tokens[:, 0], out.scores[:, 0]

    def _answers(self, text, target_ids, scores, name: str) -> dict:
        """``translations`` and ``name`` (the scores) of a batch: ``""`` and 0 for a blank text."""
        translations, scores = blank_answers(
            text, self.tgt_tokenizer.detokenize(target_ids), scores
        )
        return {"translations": translations, name: scores}

    def _translate(self, inputs, search=None, xla: bool = False):
        text, source_ids = self._source_ids(inputs)
        target_ids, scores = (self._decode_xla if xla else self._best)(source_ids, search)
        return self._answers(text, target_ids, scores, "scores")

    def _target_ids(self, texts, with_eos: bool, batch, what: str):
        """``[batch, width]`` target-side ids of ``texts`` (``target_token_ids``), padded,
        without EOS for a prefix; an ``InvalidArgument`` error if ``texts`` is not one a
        sentence or a row is longer than the model's limit."""
        config = self.graph.model.config
        ids = target_token_ids(self.tgt_tokenizer, _valid_utf8(texts), config.eos_id)
        if not with_eos:
            ids = ids[:, :-1]
        limit = config.max_length if with_eos else config.max_length - 1
        plural = {"prefix": "prefixes"}.get(what, what + "s")
        rows, lengths = ids.nrows(out_type=tf.int32), tf.cast(ids.row_lengths(), tf.int32)
        checks = [
            _check(
                tf.equal(rows, batch),
                f"give one {what} a sentence; sentences and {plural}:",
                batch,
                rows,
            ),
            _check(
                tf.reduce_all(lengths <= limit),
                f"a {what} is longer than the model allows ({config.max_length} subwords "
                f"with EOS): shorten it; {what} lengths:",
                lengths,
            ),
        ]
        with tf.control_dependencies(checks):
            # At least one column: a batch of empty prefixes is a batch of no prefix.
            padded = ids.to_tensor(default_value=config.pad_id)
            return tf.pad(padded, [[0, 0], [0, 1]], constant_values=config.pad_id)

    def _translate_prefix(self, inputs, prefixes, search=None):
        text, source_ids = self._source_ids(inputs)
        prefix_ids = self._target_ids(prefixes, False, tf.shape(source_ids)[0], "prefix")
        out = self.graph.decode("prefix", source_ids, prefix_ids, search=search)
        return self._answers(text, out.tokens[:, 0], out.scores[:, 0], "scores")

    @_signature(STRINGS)
    def translate(self, inputs):
        return self._translate(inputs)

    @_signature(STRINGS)
    def translate_greedy(self, inputs):
        return self._translate(inputs, Greedy())

    @_signature(tf.TensorSpec([None, None], tf.int32, name="source_ids"))
    def translate_ids(self, source_ids):
        target_ids, scores = self._best(source_ids)
        return {"target_ids": target_ids, "scores": scores}

    @_signature(tf.TensorSpec([], tf.string, name="sentence"))
    def cross_attention(self, sentence):
        _, source_ids = self._source_ids(sentence[tf.newaxis])
        target, weights = self.graph.cross_attention(source_ids)
        return {
            "translation": self.tgt_tokenizer.detokenize(target)[0],
            "source_pieces": self.src_tokenizer.id_to_piece(source_ids[0]),
            "target_pieces": self.tgt_tokenizer.id_to_piece(target[0]),
            "weights": weights,
        }

    @_signature(STRINGS, tf.TensorSpec([None], tf.string, name="prefixes"))
    def translate_prefix(self, inputs, prefixes):
        return self._translate_prefix(inputs, prefixes)

    @_signature(STRINGS, tf.TensorSpec([None], tf.string, name="prefixes"))
    def translate_prefix_greedy(self, inputs, prefixes):
        return self._translate_prefix(inputs, prefixes, Greedy())

    @_signature(STRINGS, tf.TensorSpec([], tf.int32, name="n"))
    def n_best(self, inputs, n):
        check = _check(
            (n >= 1) & (n <= self.beam_size),
            f"an n-best list holds 1 to the beam size ({self.beam_size}) hypotheses; n =",
            n,
        )
        with tf.control_dependencies([check]):
            n = tf.identity(n)
            text, source_ids = self._source_ids(inputs)
        texts, log_probs = blank_answers(text, *self.graph.n_best(source_ids, n))
        return {"translations": texts, "log_probs": log_probs}

    @_signature(STRINGS, tf.TensorSpec([None], tf.string, name="targets"))
    def score(self, inputs, targets):
        _, source_ids = self._source_ids(inputs)
        target_ids = self._target_ids(targets, True, tf.shape(source_ids)[0], "target")
        return {"log_probs": self.graph.score(source_ids, target_ids)}

    @_signature(
        STRINGS,
        tf.TensorSpec([], tf.int32, name="top_k"),
        tf.TensorSpec([], tf.float32, name="top_p"),
        tf.TensorSpec([], tf.float32, name="temperature"),
        tf.TensorSpec([], tf.int64, name="seed"),
    )
    def sample(self, inputs, top_k, top_p, temperature, seed):
        checks = [
            _check(top_k >= 0, "top_k must be >= 0 (0: no limit, 1: greedy), got", top_k),
            _check((top_p > 0.0) & (top_p <= 1.0), "top_p must be in (0, 1], got", top_p),
            _check(
                (temperature > 0.0) & tf.math.is_finite(temperature),
                "temperature must be a finite number above 0, got",
                temperature,
            ),
        ]
        with tf.control_dependencies(checks):
            text, source_ids = self._source_ids(tf.identity(inputs))
        out = self.graph.decode("sample", source_ids, top_k, top_p, temperature, seed)
        return self._answers(text, out.tokens[:, 0], out.log_probs[:, 0], "log_probs")

    def signatures(self) -> dict:
        """The functions to save as the SavedModel's signatures.

        Returns:
            A dict from signature name to concrete-able ``tf.function``: ``serving_default``,
            ``translate_greedy``, ``translate_ids``, ``cross_attention``,
            ``translate_prefix``, ``translate_prefix_greedy``, ``n_best``, ``score`` and
            ``sample``, plus the two XLA decoders when the export asks for them.
        """
        signatures = {
            SIGNATURE: self.translate,
            "translate_greedy": self.translate_greedy,
            "translate_ids": self.translate_ids,
            "cross_attention": self.cross_attention,
            "translate_prefix": self.translate_prefix,
            "translate_prefix_greedy": self.translate_prefix_greedy,
            "n_best": self.n_best,
            "score": self.score,
            "sample": self.sample,
        }
        if self.xla:
            signatures.update(
                translate_xla=self.translate_xla, translate_greedy_xla=self.translate_greedy_xla
            )
        return signatures


def _check(condition, message: str, *values):
    """An op that fails a request (``InvalidArgument``: ``message values``) unless ``condition``."""
    return tf.debugging.Assert(condition, [message, *values])


def _valid_utf8(texts):
    """``texts`` with invalid UTF-8 bytes replaced by U+FFFD."""
    return tf.strings.unicode_transcode(
        texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )


def export_options(
    search: Search | None = None, limits: Limits | None = None, **fields
) -> tuple[Search, Limits]:
    """The search and limits of an export's ``serving_default``: beam 4, α 0.6 by default.

    Args:
        search: ``Beam(...)`` or ``Greedy()``, or ``None`` for ``Beam()``.
        limits: the ``Limits`` (``None``: ``Limits()``).
        **fields: shortcuts that replace their fields (``beam_size=2, min_length=1``;
            ``translation.graph.search_and_limits``).

    Returns:
        ``(search, limits)``, checked.

    Raises:
        ValueError: a field out of range, or a ``Sample`` (the ``sample``
            signature samples; ``serving_default`` searches).

    Example:
        >>> export_options(beam_size=2)[0].size, export_options()[0].alpha
        (2, 0.6)
    """
    if isinstance(search, Sample):
        raise ValueError(
            "serving_default searches (greedy or beam); the sample signature samples: "
            "export with Greedy() or Beam(...)."
        )
    return search_and_limits(search, limits, default=Beam(), **fields)
