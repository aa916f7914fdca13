"""The exported translator: a ``tf.Module`` whose signatures take strings (or
ids) and return translations, using only TensorFlow and TF Text ops."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from keras_transformer.data.normalize import normalize_whitespace_tf
from keras_transformer.data.sequences import encode_sources
from keras_transformer.translate import best_ids


def raw_variables(model) -> list[tf.Variable]:
    """The tf.Variables behind a Keras 3 model's variables, for a module to track.

    Without such a list a SavedModel restores under ``tf.saved_model.load`` but
    not under the session-based loader of TF Serving and saved_model_cli
    ("Could not find variable ..."), and the TFLite converter cannot freeze the
    variables read inside a while loop: Keras 3 variables wrap the tf.Variable.
    """
    return [variable.value for variable in model.variables]


class ExportedTranslator(tf.Module):
    """What ``export.saved_model`` saves.

    Signatures:
        ``serving_default``: ``inputs`` string ``[batch]`` → ``translations``
            string ``[batch]`` and ``scores`` float32 ``[batch]`` (length-penalised
            log-probability with beam search, log-probability with greedy).
        ``translate_greedy``: as ``serving_default`` with greedy decoding.
        ``translate_ids``: ``source_ids`` int32 ``[batch, len]`` (subword ids +
            EOS, padded with 0, as ``keras_transformer.data.encode_sources``
            makes them) → ``target_ids`` int32 ``[batch, len]`` (EOS, then 0) and
            ``scores``.
        ``cross_attention``: one sentence (string scalar) → its translation,
            ``source_pieces``, ``target_pieces`` and ``weights`` ``[target,
            source]``: the last decoder layer's cross-attention, averaged over
            heads (for plotting alignments).

    Input handling: invalid UTF-8 bytes become U+FFFD; whitespace is normalised
    as in training; an empty sentence translates to ""; sources longer than
    ``max_src_length`` subwords are truncated (EOS kept).
    """

    def __init__(self, model, src_tokenizer, tgt_tokenizer, *, max_src_length: int,
                 beam_size: int = 4, alpha: float = 0.6, extra_length: int = 50,
                 src_model_path: Path | None = None, tgt_model_path: Path | None = None):
        super().__init__(name="translator")
        self.model = model
        self.model_variables = raw_variables(model)
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.max_src_length = int(max_src_length)
        self.beam_size = int(beam_size)
        self.beam_size_tensor = tf.Variable(self.beam_size, trainable=False, name="beam_size")
        self.alpha = float(alpha)
        self.extra_length = int(extra_length)
        # The SentencePiece models also ship as assets, for clients that tokenize themselves.
        if src_model_path is not None:
            self.source_spm = tf.saved_model.Asset(str(src_model_path))
        if tgt_model_path is not None and tgt_model_path != src_model_path:
            self.target_spm = tf.saved_model.Asset(str(tgt_model_path))

    def _decode(self, source_ids, beam_size=None):
        beam_size = self.beam_size if beam_size is None else beam_size
        return best_ids(self.model, source_ids, beam_size, self.alpha, self.extra_length)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")])
    def translate_ids(self, source_ids):
        target_ids, scores = self._decode(source_ids)
        return {"target_ids": target_ids, "scores": scores}

    def _source_ids(self, inputs):
        text = tf.strings.unicode_transcode(inputs, "UTF-8", "UTF-8", errors="replace",
                                            replacement_char=0xFFFD)
        text = normalize_whitespace_tf(text)
        ids = encode_sources(self.src_tokenizer, text, self.max_src_length).to_tensor()
        return text, tf.cast(ids, tf.int32)

    def _translate(self, inputs, beam_size=None):
        text, source_ids = self._source_ids(inputs)
        target_ids, scores = self._decode(source_ids, beam_size)
        translations = self.tgt_tokenizer.detokenize(target_ids)
        empty = tf.equal(tf.strings.length(text), 0)
        return {
            "translations": tf.where(empty, tf.constant(""), translations),
            "scores": tf.where(empty, tf.zeros_like(scores), scores),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate(self, inputs):
        return self._translate(inputs)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate_greedy(self, inputs):
        return self._translate(inputs, beam_size=1)

    @tf.function(input_signature=[tf.TensorSpec([], tf.string, name="sentence")])
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
            self.model.target_embedding(target_in, training=False), memory,
            memory_padding_mask=tf.not_equal(source_ids, config.pad_id),
            return_attention_weights=True, training=False)
        return {
            "translation": self.tgt_tokenizer.detokenize(target)[0],
            "source_pieces": self.src_tokenizer.id_to_piece(source_ids[0]),
            "target_pieces": self.tgt_tokenizer.id_to_piece(target[0]),
            "weights": tf.reduce_mean(weights[-1]["cross"][0], axis=0),
        }
