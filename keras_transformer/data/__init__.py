"""Data for training and the offline demo.

Read parallel text with ``PairSource`` (files, TSV, TFDS or a list), turn it
into padded id batches with ``make_dataset`` (or, for a corpus tokenized once,
``prepare_shards`` and ``sharded_dataset``), and generate the demo language
pair with ``generate_pairs`` / ``demo_splits``.
"""

from keras_transformer.data.batching import (
    batch_examples,
    bucket_batch_sizes,
    default_bucket_bounds,
)
from keras_transformer.data.normalize import normalize_whitespace, normalize_whitespace_tf
from keras_transformer.data.pipeline import make_dataset
from keras_transformer.data.sequences import encode_sources, source_ids, target_ids
from keras_transformer.data.shards.manifest import (
    PreparationError,
    PreparedShards,
    StalePreparationError,
    preparation_fingerprint,
)
from keras_transformer.data.shards.prepare import prepare_shards
from keras_transformer.data.shards.reading import sharded_dataset, sharded_dataset_fn
from keras_transformer.data.sources.pair_source import PairSource, Sentences
from keras_transformer.data.sources.stats import ParallelText, ReadStats
from keras_transformer.data.synthetic.generator import (
    demo_splits,
    generate_pairs,
    sample_sentence,
    write_parallel_files,
)
from keras_transformer.data.synthetic.grammar import Clause, NounPhrase, Pronoun, Sentence
from keras_transformer.data.token_counts import TokenCounts, count_tokens
from keras_transformer.data.tokenizing import pad_id_of, tokenize_pairs

__all__ = [
    "Clause",
    "NounPhrase",
    "PairSource",
    "ParallelText",
    "PreparationError",
    "PreparedShards",
    "Pronoun",
    "ReadStats",
    "Sentence",
    "StalePreparationError",
    "Sentences",
    "TokenCounts",
    "batch_examples",
    "bucket_batch_sizes",
    "count_tokens",
    "default_bucket_bounds",
    "demo_splits",
    "encode_sources",
    "generate_pairs",
    "make_dataset",
    "normalize_whitespace",
    "normalize_whitespace_tf",
    "pad_id_of",
    "preparation_fingerprint",
    "prepare_shards",
    "sample_sentence",
    "sharded_dataset",
    "sharded_dataset_fn",
    "source_ids",
    "target_ids",
    "tokenize_pairs",
    "write_parallel_files",
]
