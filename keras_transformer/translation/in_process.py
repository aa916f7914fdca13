"""The in-process backend of ``keras_transformer.Translator``: its graph and Python tokenizers.

A backend answers one batch of a window at a time: ``prepare`` reads a
window's texts (their lengths for batching and what the batches need), and
``translate``, ``prefix``, ``n_best``, ``score`` and ``sample`` answer the
rows of one batch, ``(prepared, rows, extras, capacity)`` → one answer a row.
``translation.served`` is the other backend, over a SavedModel's signatures.
"""

from __future__ import annotations

import hashlib

import numpy as np
import tensorflow as tf

from keras_transformer.data.normalize import normalize_whitespace_tf
from keras_transformer.data.sequences import encode_sources
from keras_transformer.decoding import Limits, Search, pad_for_xla
from keras_transformer.numerics import round_up
from keras_transformer.translation.graph import TranslationGraph, search_identity
from keras_transformer.translation.text import (
    blank_answers,
    check_target_lengths,
    n_best_lists,
    target_token_ids,
)


def _decoded(texts) -> list[str]:
    return [text.decode("utf-8") for text in texts.numpy()]


class InProcessBackend:
    """A ``TranslationGraph`` over a Keras model, with its tokenizers run in Python.

    Args:
        model: a ``keras_transformer.Transformer``.
        src_tokenizer, tgt_tokenizer: its tokenizers.
        search: the search of ``translate`` and ``n_best``.
        limits: the output ``Limits``.
        max_src_length: sources are cut to this many subwords (``None``: the
            model's ``max_length``).
        jit_compile: decode ``translate`` by the static-shape decoders under
            XLA, sources padded to a multiple of ``length_bucket``.
        length_bucket: see ``jit_compile``.
        decode_parts: a batch decodes as this many parts (``TranslationGraph``).

    Raises:
        ValueError: ``length_bucket`` or ``decode_parts`` is below 1.
    """

    def __init__(
        self,
        model,
        src_tokenizer,
        tgt_tokenizer,
        search: Search,
        limits: Limits,
        *,
        max_src_length: int | None = None,
        jit_compile: bool = False,
        length_bucket: int = 16,
        decode_parts: int | None = None,
    ):
        if length_bucket < 1:
            raise ValueError(f"length_bucket must be >= 1, got {length_bucket}.")
        self.graph = TranslationGraph(
            model, tgt_tokenizer, search, limits, decode_parts=decode_parts
        )
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.search, self.limits = search, limits
        self.decode_parts = self.graph.decode_parts
        self.max_src_length = max_src_length or model.config.max_length
        self.jit_compile = bool(jit_compile)
        self.length_bucket = int(length_bucket)
        self.compiled: dict[int, tf.types.experimental.GenericFunction] = {}  # by length bucket

    @property
    def beam_size(self) -> int:
        """The hypotheses the search keeps a sentence: 1 for greedy decoding and sampling."""
        return self.search.hypotheses

    def identity(self) -> dict:
        """What makes the answers, as JSON values: ``model`` (a digest of the weights and
        tokenizers, the compute dtype, the source cut) and ``search``
        (``search_identity``). ``translate_corpus`` resumes a file only under the same."""
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
        return {"model": model, "search": search_identity(self.search, self.limits)}

    def prepare(self, texts: list[str]):
        """Each text's source length as batched (XLA: rounded up to its bucket), and
        ``(ids, text)``: the texts read as the SavedModel reads them, whitespace normalised."""
        text = normalize_whitespace_tf(tf.constant(texts, tf.string))
        ids = encode_sources(self.src_tokenizer, text, self.max_src_length)
        lengths = ids.row_lengths().numpy().tolist()
        if self.jit_compile:  # a batch is decoded padded to its bucket: budget the padded length
            lengths = [round_up(length, self.length_bucket) for length in lengths]
        return lengths, (ids, text)

    def target_ids(self, texts, what: str, with_eos: bool) -> list[list[int]]:
        """Each text's target ids, with or without EOS, checked against the model's limit."""
        if not len(texts):
            return []
        config = self.model.config
        ids = target_token_ids(
            self.tgt_tokenizer, tf.constant(list(texts), tf.string), config.eos_id
        ).to_list()
        check_target_lengths([len(row) - 1 for row in ids], config.max_length, what, with_eos)
        return ids if with_eos else [row[:-1] for row in ids]

    def _sources(self, prepared, rows: list[int]) -> tuple[tf.Tensor, tf.Tensor]:
        """The rows' padded source ids and normalised texts."""
        ids, text = prepared
        padded = tf.gather(ids, rows).to_tensor(default_value=self.model.config.pad_id)
        return tf.cast(padded, tf.int32), tf.gather(text, rows)

    def _padded(self, rows_ids: list[list[int]]) -> tf.Tensor:
        pad = self.model.config.pad_id
        width = max(1, max(len(row) for row in rows_ids))
        return tf.constant([row + [pad] * (width - len(row)) for row in rows_ids], tf.int32)

    def _texts(self, text, out) -> list[str]:
        """The best hypothesis of ``out`` a row, detokenized; ``""`` for a blank text."""
        tokens = out.tokens[:, 0]
        translations, _ = blank_answers(
            text, self.tgt_tokenizer.detokenize(tokens), out.scores[:, 0]
        )
        return _decoded(translations)

    def _xla(self, ids: tf.Tensor, capacity: int):
        """The best hypotheses of a batch by the XLA decoders, padded to ``capacity`` rows."""
        rows, length = ids.shape
        bucket = round_up(length, self.length_bucket)
        padded = pad_for_xla(ids, capacity, self.length_bucket, self.model.config.pad_id)
        if bucket not in self.compiled:
            buffer = bucket + self.limits.extra_length
            self.compiled[bucket] = self.graph.xla_decoder(buffer)
        out = self.compiled[bucket](padded)
        return type(out)(*(field[:rows] for field in out[:3]), out.steps)

    def translate(self, prepared, rows: list[int], extras, capacity: int) -> list[str]:
        ids, text = self._sources(prepared, rows)
        out = self._xla(ids, capacity) if self.jit_compile else self.graph.function("search")(ids)
        return self._texts(text, out)

    def prefix(self, prepared, rows: list[int], prefixes, capacity: int) -> list[str]:
        ids, text = self._sources(prepared, rows)
        return self._texts(text, self.graph.function("prefix")(ids, self._padded(prefixes)))

    def n_best(self, prepared, rows: list[int], extras, capacity: int, n: int) -> list:
        ids, text = self._sources(prepared, rows)
        texts, log_probs = self.graph.function("n_best")(ids, tf.constant(n, tf.int32))
        return n_best_lists(*(part.numpy() for part in blank_answers(text, texts, log_probs)))

    def score(self, prepared, rows: list[int], targets, capacity: int) -> list[float]:
        ids, _ = self._sources(prepared, rows)
        scores = self.graph.function("score")(ids, self._padded(targets))
        return [float(score) for score in scores.numpy()]

    def sample(self, prepared, rows: list[int], extras, capacity: int, params) -> list[str]:
        ids, text = self._sources(prepared, rows)
        specs = (tf.int32, tf.float32, tf.float32, tf.int64)
        params = [tf.constant(value, dtype) for value, dtype in zip(params, specs)]
        return self._texts(text, self.graph.function("sample")(ids, *params))

    def cross_attention(self, sentence: str) -> dict:
        """See ``Translator.cross_attention``."""
        text = normalize_whitespace_tf(tf.constant([sentence]))
        source_ids = tf.cast(
            encode_sources(self.src_tokenizer, text, self.max_src_length).to_tensor(), tf.int32
        )
        target, weights = self.graph.cross_attention(source_ids)
        pieces = (
            self.src_tokenizer.id_to_piece(source_ids[0]),
            self.tgt_tokenizer.id_to_piece(target[0]),
        )
        return {
            "translation": self.tgt_tokenizer.detokenize(target)[0].numpy().decode("utf-8"),
            "source_pieces": [p.decode("utf-8") for p in pieces[0].numpy()],
            "target_pieces": [p.decode("utf-8") for p in pieces[1].numpy()],
            "weights": weights.numpy(),
        }
