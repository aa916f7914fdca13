"""Data for training and the offline demo.

Read parallel text with ``PairSource`` (files, TSV, TFDS or a list), turn it
into padded id batches with ``make_dataset`` (or, for a corpus tokenized once,
``prepare_shards`` and ``sharded_dataset``), and generate the demo language
pair with ``generate_pairs`` / ``demo_splits``.
"""

from keras_transformer.data.batching import bucket_batch_sizes, default_bucket_bounds
from keras_transformer.data.normalize import normalize_whitespace, normalize_whitespace_tf
from keras_transformer.data.pipeline import (
    TokenCounts,
    batch_examples,
    count_tokens,
    make_dataset,
    pad_id_of,
    tokenize_pairs,
)
from keras_transformer.data.sequences import encode_sources, source_ids, target_ids
from keras_transformer.data.shards import (
    PreparationError,
    PreparedShards,
    StalePreparationError,
    preparation_fingerprint,
    prepare_shards,
    sharded_dataset,
    sharded_dataset_fn,
)
from keras_transformer.data.sources import (
    PairSource,
    ParallelText,
    ReadStats,
    Sentences,
)
from keras_transformer.data.synthetic import (
    Clause,
    NounPhrase,
    Pronoun,
    Sentence,
    demo_splits,
    generate_pairs,
    sample_sentence,
    write_parallel_files,
)

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
