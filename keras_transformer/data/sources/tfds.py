"""TensorFlow Datasets translation corpora as ``(source, target)`` string pairs.

TFDS translation builders (``ted_hrlr_translate/pt_to_en``,
``wmt14_translate/de-en``, ...) store one text feature per language and
declare ``supervised_keys = (source_language, target_language)``. Without
explicit keys the builder's direction is used (``as_supervised=True``);
``src_key``/``tgt_key`` pick features by name, e.g. to train the reverse
direction. Texts are cleaned like files (``keras_transformer.data.sources``):
whitespace normalised, pairs with an empty side or invalid UTF-8 dropped;
``PairSource.from_tfds`` also counts them (one scan over the split).
``tensorflow_datasets`` is imported on first use only (it is slow to import).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import tensorflow as tf

from keras_transformer.data.sources.cleaning import (
    GRAPH_BATCH,
    _classified,
    _classify_pairs,
    _graph_pass,
)


def _scalar_string(spec) -> bool:
    return isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string and spec.shape.rank == 0


def tfds_examples(
    name: str,
    split: str,
    src_key: str | None = None,
    tgt_key: str | None = None,
    data_dir: str | os.PathLike | None = None,
    *,
    download: bool = True,
) -> tf.data.Dataset:
    """The raw ``(source, target)`` strings of a TFDS split, uncleaned (``PairSource.from_tfds``
    cleans them)."""
    import tensorflow_datasets as tfds

    if (src_key is None) != (tgt_key is None):
        raise ValueError(
            f"Got src_key={src_key!r} and tgt_key={tgt_key!r}; pass both (feature names) "
            "or neither (use the dataset's supervised_keys)."
        )
    builder = tfds.builder(name, data_dir=None if data_dir is None else os.fspath(data_dir))
    features = list(builder.info.features.keys())
    supervised = src_key is None
    if supervised:
        keys = builder.info.supervised_keys
        if not (
            isinstance(keys, tuple) and len(keys) == 2 and all(isinstance(k, str) for k in keys)
        ):
            raise ValueError(
                f"{name} declares supervised_keys={keys!r}, not a (source, target) feature pair; "
                f"pass src_key= and tgt_key= from its features {features}."
            )
    else:
        unknown = [key for key in (src_key, tgt_key) if key not in features]
        if unknown:
            raise ValueError(
                f"{name} has no feature(s) {unknown}; choose src_key/tgt_key from {features}."
            )
        if src_key == tgt_key:
            raise ValueError(
                f"src_key and tgt_key are both {src_key!r}; pick two different features."
            )
    if download:
        builder.download_and_prepare()
    dataset = builder.as_dataset(split=split, as_supervised=supervised, shuffle_files=False)
    if not supervised:
        dataset = dataset.map(
            lambda example: (example[src_key], example[tgt_key]),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2 and all(_scalar_string(s) for s in spec)):
        raise ValueError(
            f"{name} gives elements {spec}, not two scalar strings; pass src_key/tgt_key naming "
            f"text features among {features}."
        )
    return dataset


def _tfds_reader(
    name: str,
    split: str,
    src_key: str | None,
    tgt_key: str | None,
    data_dir: str | os.PathLike | None,
    *,
    download: bool,
) -> tuple[tuple[str, ...], Callable, None]:
    """The split's label, its reader and ``None`` (its length is unknown before a
    pass) for ``PairSource.from_tfds``; TFDS examples are cleaned in the graph only."""
    examples = tfds_examples(name, split, src_key, tgt_key, data_dir, download=download)

    def reader(first: int, stop: int | None):
        def graph_batches() -> tf.data.Dataset:
            part = examples if stop is None else examples.skip(first).take(stop - first)
            return _classified(part.batch(GRAPH_BATCH), _classify_pairs, first)

        return graph_batches, _graph_pass(graph_batches)

    return (f"{name} {split}",), reader, None
