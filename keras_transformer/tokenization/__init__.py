"""Subword tokenizers: train SentencePiece models, run them inside the TF graph.

Three jobs, one module each:

* ``sentencepiece_trainer``: train SentencePiece models with the reserved ids
  (``train_sentencepiece``, ``train_tokenizers``);
* ``sentencepiece_tokenizer``: a trained model as TensorFlow ops
  (``SubwordTokenizer``), for ``tf.data``, ``tf.function`` and SavedModels;
* ``marian_tokenizer``: Hugging Face's ``MarianTokenizer`` as TensorFlow ops
  (``MarianSubwordTokenizer``) and its checkpoint files
  (``load_marian_tokenizers``, ``write_marian_tokenizer_files``).

Every name below is importable from ``keras_transformer.tokenization``.
"""

from keras_transformer.tokenization.marian_tokenizer import (
    MARIAN_CONFIG,
    MARIAN_FILES,
    MARIAN_SOURCE_SPM,
    MARIAN_TARGET_SPM,
    MARIAN_TARGET_VOCAB,
    MARIAN_VOCAB,
    MarianSubwordTokenizer,
    load_marian_tokenizers,
    write_marian_tokenizer_files,
)
from keras_transformer.tokenization.sentencepiece_tokenizer import SubwordTokenizer
from keras_transformer.tokenization.sentencepiece_trainer import (
    DEFAULT_MAX_SENTENCES,
    MODEL_TYPES,
    RESERVED_PIECES,
    sample_sentences,
    tag_piece,
    tokenizer_paths,
    train_sentencepiece,
    train_tokenizers,
)

__all__ = [
    "DEFAULT_MAX_SENTENCES",
    "MARIAN_CONFIG",
    "MARIAN_FILES",
    "MARIAN_SOURCE_SPM",
    "MARIAN_TARGET_SPM",
    "MARIAN_TARGET_VOCAB",
    "MARIAN_VOCAB",
    "MODEL_TYPES",
    "RESERVED_PIECES",
    "MarianSubwordTokenizer",
    "SubwordTokenizer",
    "load_marian_tokenizers",
    "sample_sentences",
    "tag_piece",
    "tokenizer_paths",
    "train_sentencepiece",
    "train_tokenizers",
    "write_marian_tokenizer_files",
]
