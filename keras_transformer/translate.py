"""Strings in, strings out with a trained model: tokenize, decode (greedy or
beam search), detokenize."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from keras_transformer.beam_search import beam_search
from keras_transformer.data.sequences import encode_sources
from keras_transformer.decoding import greedy_decode


def best_ids(model, source_ids, beam_size: int = 1, alpha: float = 0.6, extra_length: int = 50):
    """``(tokens [batch, len], scores [batch])`` of the best hypothesis: greedy
    for ``beam_size=1`` (log-probability), else beam search's top beam
    (length-penalised score)."""
    if beam_size > 1:
        out = beam_search(model, source_ids, beam_size=beam_size, alpha=alpha, extra_length=extra_length)
        return out.tokens[:, 0, :], out.scores[:, 0]
    return greedy_decode(model, source_ids, extra_length=extra_length)


class Translator(tf.Module):
    """Batched translation of Python strings: greedy (``beam_size=1``) or beam
    search with length penalty ``alpha``.

    The decode step is traced once per batch shape (``tf.function``), so
    translating a file costs one trace for each distinct padded length.
    """

    def __init__(self, model, src_tokenizer, tgt_tokenizer, max_src_length: int | None = None,
                 extra_length: int = 50, beam_size: int = 1, alpha: float = 0.6):
        super().__init__()
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.max_src_length = max_src_length or model.config.max_length
        self._decode = tf.function(
            lambda ids: best_ids(model, ids, beam_size, alpha, extra_length), reduce_retracing=True)

    def translate(self, sentences: Sequence[str], batch_size: int = 64) -> list[str]:
        outputs: list[str] = []
        for start in range(0, len(sentences), batch_size):
            chunk = tf.constant(list(sentences[start:start + batch_size]))
            ids = encode_sources(self.src_tokenizer, chunk, self.max_src_length).to_tensor()
            tokens, _ = self._decode(ids)
            texts = self.tgt_tokenizer.detokenize(tokens).numpy()
            outputs.extend(text.decode("utf-8") for text in texts)
        return outputs
