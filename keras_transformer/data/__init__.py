"""Data for training and the offline demo."""

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
    "Pronoun",
    "Sentence",
    "demo_splits",
    "generate_pairs",
    "sample_sentence",
    "write_parallel_files",
]
