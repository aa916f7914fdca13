"""The translator as a TF Serving SavedModel: strings in, translations out,
SentencePiece inside the graph, only core TensorFlow and TF Text ops.

``export_saved_model(source, out)`` writes ``out/<version>/``, the layout TF
Serving watches, atomically: the model is saved to a hidden folder beside it
and renamed in; an existing version is replaced only with ``overwrite=True``,
and then the old folder is moved aside before the new one is renamed in, so a
watching server never sees the version missing. Each version carries
``assets.extra/tf_serving_warmup_requests``; ``out/models.config`` is an
example ``--model_config_file``.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.data.normalize import normalize_whitespace_tf
from keras_transformer.data.sequences import encode_sources
from keras_transformer.decoding import (
    ConstantSteps,
    DecodeOptions,
    KernelChoice,
    check_decode_parts,
    decode,
    decode_in_parts,
    pad_for_xla,
    score_targets,
)
from keras_transformer.files import replace_directory, staging_directory, write_text_atomically
from keras_transformer.layers.masks import padding_mask, target_padding_mask
from keras_transformer.numerics import round_up
from keras_transformer.progress import progress_bar
from keras_transformer.tokenization import (
    MARIAN_SOURCE_SPM,
    MARIAN_TARGET_SPM,
    MARIAN_TARGET_VOCAB,
    MARIAN_VOCAB,
    MarianSubwordTokenizer,
    write_marian_tokenizer_files,
)
from keras_transformer.translate import n_best_texts, target_token_ids
from keras_transformer.workdir import TrainedModel, as_trained_model

log = logging.getLogger(__name__)

WARMUP_SENTENCES = ("Hello world.", "")
SIGNATURE = "serving_default"
INPUT_KEY = "inputs"
# The XLA signatures pad a batch to one of these sizes (beyond the last, to a multiple of it) and
# its sources to a multiple of XLA_LENGTH_BUCKET tokens: XLA compiles once for each shape it meets.
XLA_ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
XLA_LENGTH_BUCKET = 16
# A model whose float32 weights take at most this many bytes decodes a sentence or a few by a step
# with the decoder's weights as graph constants (decoding.ConstantSteps): a second copy of them (of
# a
# tied target embedding, a third) in the SavedModel's graph and, for each signature a server runs,
# in its memory.
CONSTANT_STEPS_MAX_BYTES = 128 * 2**20


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


class ExportedTranslator(tf.Module):
    """The ``tf.Module`` that ``export_saved_model`` saves: translation signatures for TF Serving.

    It decodes by the inference kernels, with the model's precomputed
    weights kept as variables (``kernels.FrozenWeights``) and, for a small
    model, the small-batch step's weights as constants
    (``decoding.ConstantSteps``).

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
        options: ``serving_default``'s search, a ``decoding.DecodeOptions``
            (default: beam 4, α 0.6); greedy decoding with ``beam_size=1``.
            The other signatures take its α and length limits.
        src_model_path, tgt_model_path: the SentencePiece models, shipped as
            assets.
        vocabulary_paths: a Marian tokenizer's vocabularies, shipped as
            assets, ``{file name: path}``.
        xla: also make the XLA signatures.
        step_splits, step_products: the small-batch step's splits and
            products (``decoding.ConstantSteps``).
        decode_parts: a batch decodes as this many parts
            (``decoding.decode_in_parts``).

        **option_fields: ``DecodeOptions`` fields that replace those of
            ``options`` (``beam_size=4, alpha=0.6``).

    Raises:
        ValueError: ``decode_parts`` is below 1, an option is out of range,
            or ``options`` asks for sampling (its own signature).
    """

    def __init__(
        self,
        model,
        src_tokenizer,
        tgt_tokenizer,
        *,
        max_src_length: int,
        options: DecodeOptions | None = None,
        src_model_path: Path | None = None,
        tgt_model_path: Path | None = None,
        vocabulary_paths: dict[str, Path] | None = None,
        xla: bool = False,
        step_splits: int | None = None,
        step_products: str | None = None,
        decode_parts: int | None = None,
        **option_fields,
    ):
        super().__init__(name="translator")
        options = export_options(options, **option_fields)
        decode_parts = check_decode_parts(decode_parts)
        attach_model(self, model)
        # The fused and scaled kernels of the inference kernels, made now rather than at every call.
        supported = kernels.encoding_supported(model) and kernels.decoding_step_supported(model)
        self.frozen_weights = kernels.FrozenWeights(model) if supported else None
        # Built once and held outside the module's tracked state: every signature calls the same
        # function,
        # so the SavedModel holds its constants once.
        small = 4 * model.count_params() <= CONSTANT_STEPS_MAX_BYTES  # float32 bytes
        self.__dict__["constant_steps"] = (
            ConstantSteps(
                model,
                self.frozen_weights.as_variables(),
                splits=step_splits,
                products=step_products,
            )
            if supported and small
            else None
        )
        # One decoder function for each beam size, made at its first use and called for each part of
        # a
        # batch (decode_in_parts): the SavedModel holds each decoder once.
        self.__dict__["decoders"] = {}
        self.decode_parts = decode_parts
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.max_src_length = int(max_src_length)
        self.__dict__["decode_options"] = options  # a Python value, not saved state
        self.beam_size = options.beam_size
        self.beam_size_tensor = tf.Variable(self.beam_size, trainable=False, name="beam_size")
        # The model's length limit, for clients that check prefixes and targets before a request.
        self.max_length_tensor = tf.Variable(
            int(model.config.max_length), trainable=False, name="max_length"
        )
        self.alpha = float(options.alpha)
        self.extra_length = int(options.extra_length)
        self.stopping = options.stopping
        self.xla = bool(xla)
        if self.xla:  # only then: the default export holds no XLA function at all
            strings = [tf.TensorSpec([None], tf.string, name="inputs")]
            self.translate_xla = tf.function(
                lambda inputs: self._translate(inputs, xla=True),
                input_signature=strings,
                autograph=False,
            )
            self.translate_greedy_xla = tf.function(
                lambda inputs: self._translate(inputs, beam_size=1, xla=True),
                input_signature=strings,
                autograph=False,
            )
        # The SentencePiece models also ship as assets, for clients that tokenize themselves.
        if src_model_path is not None:
            self.source_spm = tf.saved_model.Asset(str(src_model_path))
        if tgt_model_path is not None and tgt_model_path != src_model_path:
            self.target_spm = tf.saved_model.Asset(str(tgt_model_path))
        # A Marian tokenizer's vocabulary (piece -> id) ships beside its SentencePiece models.
        for name, path in sorted((vocabulary_paths or {}).items()):
            setattr(self, name.replace(".", "_"), tf.saved_model.Asset(str(path)))

    def _decoder(self, beam_size: int, kind: str = "search"):
        """The decoder of ``kind`` and ``beam_size`` as one ``tf.function``, made at its first use.

        ``"search"``: source ids → a ``DecodeOutput`` of all ``beam_size``
        hypotheses (``serving_default``, ``n_best`` and the others share it);
        ``"prefix"``: source ids, prefix ids → the best hypothesis;
        ``"sample"``: source ids, ``top_k``, ``top_p``, ``temperature``, ``seed``
        → one sample (``beam_size`` 1).
        """
        key = (kind, beam_size)
        if key not in self.decoders:
            precomputed = (
                None if self.frozen_weights is None else self.frozen_weights.as_variables()
            )

            choice = KernelChoice(precomputed=precomputed, constant_steps=self.constant_steps)
            options = self.options(beam_size)
            ids = tf.TensorSpec([None, None], tf.int32)
            search = "greedy" if beam_size == 1 else f"beam_{beam_size}"
            if kind == "search":
                options = options.replace(n_best=beam_size)

                def run(source_ids):
                    return decode(self.model, source_ids, options, choice=choice)

                signature, name = [ids], search
            elif kind == "prefix":

                def run(source_ids, prefix_ids):
                    return decode(
                        self.model, source_ids, options, prefix_ids=prefix_ids, choice=choice
                    )

                signature, name = [ids, tf.TensorSpec([None, None], tf.int32)], f"prefix_{search}"
            elif kind == "sample":
                options = options.replace(beam_size=1, sampling=True)

                def run(source_ids, top_k, top_p, temperature, seed):
                    sampling = options.replace(
                        top_k=top_k, top_p=top_p, temperature=temperature, seed=seed
                    )
                    return decode(self.model, source_ids, sampling, choice=choice)

                signature = [ids] + [
                    tf.TensorSpec([], dtype)
                    for dtype in (tf.int32, tf.float32, tf.float32, tf.int64)
                ]
                name = "sample"
            else:
                raise ValueError(f"no decoder of kind {kind!r}.")
            run.__name__ = name  # names the SavedModel's function
            self.decoders[key] = tf.function(run, input_signature=signature, autograph=False)
        return self.decoders[key]

    def options(self, beam_size: int | None = None) -> DecodeOptions:
        """The ``DecodeOptions`` of ``serving_default``, or of another beam size.

        Args:
            beam_size: the beam size (``None``: the export's).

        Returns:
            The export's ``DecodeOptions`` with that beam size, ``n_best`` 1.
        """
        return self.decode_options.replace(
            beam_size=self.beam_size if beam_size is None else beam_size, n_best=1
        )

    def _decode_all(self, source_ids, beam_size=None, kind="search", row_inputs=(), shared=()):
        """The ``DecodeOutput`` of the decoder of ``kind``, a batch decoded in parts."""
        beam_size = self.beam_size if beam_size is None else beam_size
        return decode_in_parts(
            self._decoder(beam_size, kind),
            source_ids,
            self.model.config.pad_id,
            self.decode_parts,
            beam_size,
            row_inputs=row_inputs,
            shared_inputs=shared,
        )

    def _decode(self, source_ids, beam_size=None):
        out = self._decode_all(source_ids, beam_size)
        return out.tokens[:, 0], out.scores[:, 0]

    def _decode_xla(self, source_ids, beam_size=None):
        """``_decode`` by the static-shape decoders under XLA, on a batch padded
        to bucket sizes (see ``translate_xla``); the same outputs."""
        beam_size = self.beam_size if beam_size is None else beam_size
        config = self.model.config
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
        buffer = min(
            longest_source + self.extra_length, config.max_length
        )  # every row's own limit fits

        options = self.options(beam_size)
        choice = KernelChoice(static_shapes=True, buffer_length=buffer)

        @tf.function(jit_compile=True, autograph=False)
        def run(ids):
            return decode(self.model, ids, options, choice=choice)

        out = run(ids)
        return out.tokens[:rows, 0], out.scores[:rows, 0]

    @tf.function(
        input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")], autograph=False
    )
    def translate_ids(self, source_ids):
        target_ids, scores = self._decode(source_ids)
        return {"target_ids": target_ids, "scores": scores}

    def _source_ids(self, inputs):
        text = normalize_whitespace_tf(_valid_utf8(inputs))
        ids = encode_sources(self.src_tokenizer, text, self.max_src_length).to_tensor(
            default_value=self.model.config.pad_id
        )
        return text, tf.cast(ids, tf.int32)

    def _translate(self, inputs, beam_size=None, xla: bool = False):
        text, source_ids = self._source_ids(inputs)
        target_ids, scores = (self._decode_xla if xla else self._decode)(source_ids, beam_size)
        return self._answers(text, target_ids, scores, "scores")

    def _answers(self, text, target_ids, scores, name: str) -> dict:
        """``translations`` and ``name`` (the scores) of a batch: ``""`` and 0 for a blank text."""
        translations = self.tgt_tokenizer.detokenize(target_ids)
        empty = tf.equal(tf.strings.length(text), 0)
        return {
            "translations": tf.where(empty, tf.constant(""), translations),
            name: tf.where(empty, tf.zeros_like(scores), scores),
        }

    def _target_ids(self, texts, with_eos: bool, batch, what: str):
        """``[batch, width]`` target-side ids of ``texts`` (``target_token_ids``), padded,
        without EOS for a prefix; an ``InvalidArgument`` error if ``texts`` is not one a
        sentence or a row is longer than the model's limit."""
        config = self.model.config
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

    def _translate_prefix(self, inputs, prefixes, beam_size=None):
        text, source_ids = self._source_ids(inputs)
        prefix_ids = self._target_ids(prefixes, False, tf.shape(source_ids)[0], "prefix")
        out = self._decode_all(source_ids, beam_size, "prefix", row_inputs=(prefix_ids,))
        return self._answers(text, out.tokens[:, 0], out.scores[:, 0], "scores")

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.string, name="prefixes"),
        ],
        autograph=False,
    )
    def translate_prefix(self, inputs, prefixes):
        return self._translate_prefix(inputs, prefixes)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.string, name="prefixes"),
        ],
        autograph=False,
    )
    def translate_prefix_greedy(self, inputs, prefixes):
        return self._translate_prefix(inputs, prefixes, beam_size=1)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([], tf.int32, name="n"),
        ],
        autograph=False,
    )
    def n_best(self, inputs, n):
        check = _check(
            (n >= 1) & (n <= self.beam_size),
            f"an n-best list holds 1 to the beam size ({self.beam_size}) hypotheses; n =",
            n,
        )
        with tf.control_dependencies([check]):
            n = tf.identity(n)
            text, source_ids = self._source_ids(inputs)
        out = self._decode_all(source_ids)
        texts, log_probs = n_best_texts(self.model, self.tgt_tokenizer, source_ids, out, n)
        # A blank sentence: one "" of log-probability 0, as serving_default answers it.
        blank = tf.equal(tf.strings.length(text), 0)[:, tf.newaxis]
        first = tf.equal(tf.range(tf.shape(texts)[1]), 0)[tf.newaxis, :]
        return {
            "translations": tf.where(blank, tf.constant(""), texts),
            "log_probs": tf.where(blank, tf.where(first, 0.0, float("-inf")), log_probs),
        }

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.string, name="targets"),
        ],
        autograph=False,
    )
    def score(self, inputs, targets):
        _, source_ids = self._source_ids(inputs)
        target_ids = self._target_ids(targets, True, tf.shape(source_ids)[0], "target")
        return {"log_probs": score_targets(self.model, source_ids, target_ids)}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([], tf.int32, name="top_k"),
            tf.TensorSpec([], tf.float32, name="top_p"),
            tf.TensorSpec([], tf.float32, name="temperature"),
            tf.TensorSpec([], tf.int64, name="seed"),
        ],
        autograph=False,
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
        out = self._decode_all(source_ids, 1, "sample", shared=(top_k, top_p, temperature, seed))
        return self._answers(text, out.tokens[:, 0], out.log_probs[:, 0], "log_probs")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")], autograph=False)
    def translate(self, inputs):
        return self._translate(inputs)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")], autograph=False)
    def translate_greedy(self, inputs):
        return self._translate(inputs, beam_size=1)

    @tf.function(input_signature=[tf.TensorSpec([], tf.string, name="sentence")], autograph=False)
    def cross_attention(self, sentence):
        _, source_ids = self._source_ids(sentence[tf.newaxis])
        target_ids, _ = self._decode(source_ids)
        config = self.model.config
        # Keep the target up to and including EOS; feed BOS + all but the last token.
        length = tf.reduce_sum(tf.cast(tf.not_equal(target_ids[0], config.pad_id), tf.int32))
        target = target_ids[:, :length]
        target_in = tf.concat([tf.fill([1, 1], config.bos_id), target[:, :-1]], axis=1)
        memory = self.model.encode(source_ids, training=False)
        _, weights = self.model.decoder(
            self.model.target_embedding(target_in, training=False),
            memory,
            memory_padding_mask=padding_mask(source_ids, config.pad_id),
            target_padding_mask=target_padding_mask(target_in, config),
            return_attention_weights=True,
            training=False,
        )
        return {
            "translation": self.tgt_tokenizer.detokenize(target)[0],
            "source_pieces": self.src_tokenizer.id_to_piece(source_ids[0]),
            "target_pieces": self.tgt_tokenizer.id_to_piece(target[0]),
            "weights": tf.reduce_mean(weights[-1]["cross"][0], axis=0),
        }

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


def write_tokenizer_files(trained: TrainedModel, directory: Path) -> tuple[Path, Path]:
    """The (source, target) SentencePiece models as files in ``directory``, named as
    in a workdir: ``spm_shared.model`` once for a shared vocabulary, else
    ``spm_src.model`` and ``spm_tgt.model``; for Marian tokenizers the files of
    a Marian checkpoint (``source.spm``, ``target.spm``, and ``vocab.json``,
    see ``vocabulary_files``)."""
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(trained.src_tokenizer, MarianSubwordTokenizer):
        paths = write_marian_tokenizer_files(
            trained.src_tokenizer, trained.tgt_tokenizer, directory
        )
        return paths[MARIAN_SOURCE_SPM], paths[MARIAN_TARGET_SPM]
    if trained.shared_tokenizer_model:
        path = directory / "spm_shared.model"
        path.write_bytes(trained.src_tokenizer.model_bytes)
        return path, path
    src, tgt = directory / "spm_src.model", directory / "spm_tgt.model"
    src.write_bytes(trained.src_tokenizer.model_bytes)
    tgt.write_bytes(trained.tgt_tokenizer.model_bytes)
    return src, tgt


def vocabulary_files(directory: Path) -> dict[str, Path]:
    """The Marian vocabularies ``write_tokenizer_files`` wrote into ``directory``
    (none for SentencePiece-numbered tokenizers), ``{file name: path}``."""
    return {
        name: directory / name
        for name in (MARIAN_VOCAB, MARIAN_TARGET_VOCAB)
        if (directory / name).is_file()
    }


def export_options(options: DecodeOptions | None = None, **fields) -> DecodeOptions:
    """The ``DecodeOptions`` of an export's ``serving_default``: beam 4, α 0.6 by default.

    Args:
        options: the options, or ``None`` for the default.
        **fields: ``DecodeOptions`` fields that replace those of ``options``.

    Returns:
        The checked options, ``n_best`` 1.

    Raises:
        ValueError: a field out of range, or sampling asked for (the ``sample``
            signature samples; ``serving_default`` searches).

    Example:
        >>> export_options(beam_size=2).beam_size, export_options().alpha
        (2, 0.6)
    """
    options = (options or DecodeOptions(beam_size=4)).replace(**fields)
    if options.sampling:
        raise ValueError(
            "serving_default searches (greedy or beam); the sample signature samples: "
            "export without sampling=True."
        )
    return options.replace(n_best=1)


def export_saved_model(
    source,
    out: str | os.PathLike,
    options: DecodeOptions | None = None,
    *,
    version: int | None = None,
    overwrite: bool = False,
    warmup_sentences: Sequence[str] = WARMUP_SENTENCES,
    precision: str = "fp32",
    xla: bool = False,
    step_splits: int | None = None,
    step_products: str | None = None,
    decode_parts: int | None = None,
    progress: bool = False,
    **option_fields,
) -> Path:
    """Export ``source`` as a TF Serving model version, written atomically.

    Args:
        source: a ``TrainedModel`` (a model and its tokenizers, e.g. after
            ``model.fit`` in a notebook), a ``Workdir`` or a workdir path.
        out: the model folder; versions go below it (``out/1``, ``out/2``, ...).
        options: the search of ``serving_default``, fixed in the graph: a
            ``decoding.DecodeOptions`` (default: beam 4, α 0.6; ``beam_size=1``:
            greedy). The other signatures take its α and length limits.
        version: the version number (default: the next free integer).
        overwrite: replace an existing version (atomically).
        warmup_sentences: the request TF Serving replays when it loads the model.
        precision: the graph's compute precision. fp32 runs on every server;
            bf16 is faster only on hardware with bf16 units (AVX512-BF16/AMX,
            TPU, recent GPUs). Weights are float32 either way.
        xla: also export ``translate_xla`` and ``translate_greedy_xla``, the
            decoders compiled by XLA (see ``ExportedTranslator``); the default
            signatures stay plain graphs either way.
        step_splits: the splits of the small-batch decoding step (a
            sentence or a beam): by default two, each with a half of every
            product's kernel, side by side on the server's inter-op threads;
            1 for a server that runs one inter-op thread
            (``decoding.ConstantSteps``).
        step_products: that step's products, ``"conv"`` (pointwise
            products) or ``"matmul"``: by default what suits the exporting
            process's TensorFlow (``kernels.step_products``), ``"matmul"``
            where its oneDNN rewrites are on (``kernels.onednn_rewrites``),
            else ``"conv"``. Choose for the server's CPU
            (``docs/kernels.md``).
        decode_parts: a batch of eight decoding rows or more (sentences ×
            beams) decodes as this many parts side by side, on the server's
            inter-op threads (``decoding.decode_in_parts``): by default
            ``DECODE_PARTS``, two; 1 for a server with one inter-op thread.
        progress: show a progress bar (needs ``tqdm``).
        **option_fields: ``DecodeOptions`` fields that replace those of
            ``options`` (``beam_size=4, alpha=1.4``).

    Returns:
        The version folder, ``out/<version>``.

    Raises:
        ValueError: an option out of range (a ``DecodeOptions`` field,
            ``step_splits``, ``decode_parts``, ``step_products``, ``version``).
        FileExistsError: the version exists and ``overwrite`` is off.

    Example::

        from keras_transformer.exporters import export_saved_model
        export_saved_model("runs/demo", "exports/demo", beam_size=4)  # exports/demo/1
    """
    out = Path(out)
    options = export_options(options, **option_fields)  # refused before the model is loaded
    if step_splits is not None and step_splits < 1:
        raise ValueError(f"step_splits must be >= 1 (1: no splits), got {step_splits}.")
    check_decode_parts(decode_parts)
    if step_products is not None and step_products not in kernels.PRODUCT_OPS:
        raise ValueError(
            f"step_products must be one of {', '.join(kernels.PRODUCT_OPS)}, got {step_products!r}."
        )
    if version is not None and version < 1:
        raise ValueError(
            f"version must be a positive integer (TF Serving's version folders), got {version}."
        )
    if version is None:
        existing = (
            [int(p.name) for p in out.iterdir() if p.is_dir() and p.name.isdigit()]
            if out.is_dir()
            else []
        )
        version = max(existing, default=0) + 1
    target = out / str(version)
    if target.exists() and not overwrite:  # refused before the model is loaded
        raise FileExistsError(f"{target} exists; pass overwrite (--overwrite) or another version.")
    with progress_bar(progress, total=4, desc="SavedModel", unit="step") as bar:
        bar.set_postfix_str("loading")
        trained = as_trained_model(source, precision)
        bar.update()
        staging = staging_directory(target)
        try:
            with tempfile.TemporaryDirectory(prefix="keras_transformer_spm_") as spm_dir:
                src_path, tgt_path = write_tokenizer_files(trained, Path(spm_dir))
                module = ExportedTranslator(
                    trained.model,
                    trained.src_tokenizer,
                    trained.tgt_tokenizer,
                    max_src_length=trained.max_src_length,
                    options=options,
                    src_model_path=src_path,
                    tgt_model_path=tgt_path,
                    vocabulary_paths=vocabulary_files(Path(spm_dir)),
                    xla=xla,
                    step_splits=step_splits,
                    step_products=step_products,
                    decode_parts=decode_parts,
                )
                if module.constant_steps is not None:
                    log.info(
                        "small-batch decoding step: %d split(s), %s products (%s)",
                        module.constant_steps.splits,
                        module.constant_steps.products,
                        "chosen"
                        if step_products
                        else "this TensorFlow's oneDNN rewrites are "
                        f"{'on' if kernels.onednn_rewrites() else 'off'}",
                    )
                bar.set_postfix_str("tracing and saving")
                tf.saved_model.save(module, str(staging), signatures=module.signatures())
                bar.update()
            write_warmup_requests(staging, warmup_sentences, model_name=out.name)
            bar.update()
            replace_directory(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        write_text_atomically(out / "models.config", models_config(out.name))
        bar.update()
    log.info("exported %s", target)
    return target


# TF Serving's warm-up file holds PredictionLog protos. They are encoded here
# from their field numbers (tensorflow_serving/apis/*.proto), so that an export
# needs no tensorflow-serving-api, which would pull the plain tensorflow
# distribution onto a TPU machine. tests/test_export.py checks the bytes
# against tensorflow-serving-api's own classes.
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings, bytes, messages."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def predict_request_bytes(
    sentences: Sequence[str], model_name: str, signature_name: str = SIGNATURE
) -> bytes:
    """A serialized ``tensorflow.serving.PredictRequest`` for ``serving_default``."""
    model_spec = _field(1, model_name.encode("utf-8")) + _field(3, signature_name.encode("utf-8"))
    tensor = tf.make_tensor_proto(list(sentences), dtype=tf.string).SerializeToString()
    inputs_entry = _field(1, INPUT_KEY.encode("utf-8")) + _field(
        2, tensor
    )  # map<string, TensorProto>
    return _field(1, model_spec) + _field(2, inputs_entry)


def warmup_record(sentences: Sequence[str], model_name: str) -> bytes:
    """A serialized ``PredictionLog`` whose ``predict_log.request`` is the request above."""
    predict_log = _field(1, predict_request_bytes(sentences, model_name))
    return _field(6, predict_log)


def write_warmup_requests(export_dir: Path, sentences: Sequence[str], model_name: str) -> None:
    """TF Serving replays these at load time, so the first user request does not pay for tracing."""
    extra = Path(export_dir) / "assets.extra"
    extra.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(extra / "tf_serving_warmup_requests")) as writer:
        writer.write(warmup_record(sentences, model_name))


def models_config(name: str) -> str:
    """A ``--model_config_file`` for tensorflow_model_server, with the model folder
    mounted at ``/models/NAME`` in the container."""
    return (
        "model_config_list {\n"
        "  config {\n"
        f'    name: "{name}"\n'
        f'    base_path: "/models/{name}"  # this folder, mounted into the server\'s container\n'
        '    model_platform: "tensorflow"\n'
        "  }\n"
        "}\n"
    )
