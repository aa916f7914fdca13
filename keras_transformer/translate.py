"""Strings in, strings out with a trained model: tokenize, decode (greedy or
beam search), detokenize."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from keras_transformer.beam_search import beam_search
from keras_transformer.data.sequences import encode_sources
from keras_transformer.decoding import greedy_decode


def best_ids(model, source_ids, beam_size: int = 1, alpha: float = 0.6, extra_length: int = 50,
             buffer_length: int | None = None):
    """``(tokens [batch, len], scores [batch])`` of the best hypothesis: greedy
    for ``beam_size=1`` (log-probability), else beam search's top beam
    (length-penalised score). ``buffer_length`` selects the static-shape
    decoders (XLA) with buffers of that length; outputs are the same."""
    static = dict(static_shapes=buffer_length is not None, buffer_length=buffer_length)
    if beam_size > 1:
        out = beam_search(model, source_ids, beam_size=beam_size, alpha=alpha, extra_length=extra_length,
                          **static)
        return out.tokens[:, 0, :], out.scores[:, 0]
    return greedy_decode(model, source_ids, extra_length=extra_length, **static)


class Translator(tf.Module):
    """Batched translation of Python strings: greedy (``beam_size=1``) or beam
    search with length penalty ``alpha``.

    The decoder is traced once per batch shape (``tf.function``), so
    translating a file costs one trace for each distinct padded length.
    ``jit_compile=True`` compiles the static-shape decoders with XLA instead:
    each batch is padded to ``batch_size`` rows and its source length to a
    multiple of ``length_bucket``, so a file costs one compilation per length
    bucket (tens of seconds each on a small CPU) and then decodes faster.
    Translations are the same either way.
    """

    def __init__(self, model, src_tokenizer, tgt_tokenizer, max_src_length: int | None = None,
                 extra_length: int = 50, beam_size: int = 1, alpha: float = 0.6,
                 jit_compile: bool = False, length_bucket: int = 16):
        super().__init__()
        if length_bucket < 1:
            raise ValueError(f"length_bucket must be >= 1, got {length_bucket}.")
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.max_src_length = max_src_length or model.config.max_length
        self.jit_compile = bool(jit_compile)
        self.length_bucket = int(length_bucket)
        self._options = dict(beam_size=beam_size, alpha=alpha, extra_length=extra_length)
        self._compiled: dict[int, tf.types.experimental.GenericFunction] = {}
        self._decode_dynamic = tf.function(
            lambda ids: best_ids(model, ids, **self._options), reduce_retracing=True)

    def _decode(self, ids: tf.Tensor, batch_size: int):
        if not self.jit_compile:
            return self._decode_dynamic(ids)
        rows, length = ids.shape
        bucket = -(-length // self.length_bucket) * self.length_bucket
        padded = tf.pad(ids, [[0, batch_size - rows], [0, bucket - length]],
                        constant_values=self.model.config.pad_id)
        if bucket not in self._compiled:
            buffer = bucket + self._options["extra_length"]
            self._compiled[bucket] = tf.function(
                lambda ids: best_ids(self.model, ids, buffer_length=buffer, **self._options), jit_compile=True)
        tokens, scores = self._compiled[bucket](padded)
        return tokens[:rows], scores[:rows]

    def translate(self, sentences: Sequence[str], batch_size: int = 64) -> list[str]:
        outputs: list[str] = []
        for start in range(0, len(sentences), batch_size):
            chunk = tf.constant(list(sentences[start:start + batch_size]))
            ids = encode_sources(self.src_tokenizer, chunk, self.max_src_length).to_tensor()
            tokens, _ = self._decode(ids, batch_size)
            texts = self.tgt_tokenizer.detokenize(tokens).numpy()
            outputs.extend(text.decode("utf-8") for text in texts)
        return outputs
