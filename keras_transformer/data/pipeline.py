"""``make_dataset``: string pairs to padded id batches for ``model.fit``.

It is two stages, public for pipelines that store the tokenized examples
(``keras_transformer.data.shards``): ``tokenize_pairs`` (steps 1-2,
``keras_transformer.data.tokenizing``) and ``batch_examples`` (steps 3-6,
``keras_transformer.data.batching``). Elements are ``((src_ids, tgt_in_ids),
tgt_out_ids)``, all int32 ``[batch, len]`` padded with the tokenizers' pad
id (``pad_id``: 0 for ``SubwordTokenizer``); the id layout
(source EOS, target BOS/EOS) is described in ``keras_transformer.data.sequences``.
Steps, in order:

1. tokenize in the graph, a thousand pairs at a time (``SubwordTokenizer``),
2. add EOS/BOS and apply the length limit (drop or truncate),
3. cache the tokenized examples (memory, or a file when ``cache`` is a path),
4. shuffle (training only; order fixed by ``seed`` together with the global
   TF seed, e.g. ``keras.utils.set_random_seed``), then repeat if asked,
5. batch: by length buckets with per-bucket sizes from ``batch_tokens`` or a
   fixed ``batch_size``; or, with ``static_shapes``, every batch padded to the
   maximum lengths with a fixed batch size (TPU/XLA need static shapes),
6. prefetch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf

from keras_transformer.data.batching import SHUFFLE_BUFFER, _BatchPlan
from keras_transformer.data.tokenizing import (
    _check_length_filter,
    _check_pairs,
    _LengthLimits,
    _tokenized_examples,
    pad_id_of,
)


def make_dataset(
    pairs: tf.data.Dataset,
    src_tokenizer,
    tgt_tokenizer,
    *,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    max_src_length: int,
    max_tgt_length: int,
    length_filter: str = "drop",
    bucket_boundaries: Sequence[int] | None = None,
    shuffle_buffer: int = SHUFFLE_BUFFER,
    seed: int | None = None,
    cache: bool | str | os.PathLike = True,
    repeat: bool = False,
    static_shapes: bool = False,
    drop_remainder: bool | None = None,
    training: bool = True,
) -> tf.data.Dataset:
    """Turns string pairs into padded id batches for ``Transformer.fit``.

    It is ``tokenize_pairs`` followed by ``batch_examples``. Batches are
    ``((src_ids, tgt_in_ids), tgt_out_ids)``, int32 ``[batch, length]``, padded
    with the tokenizers' pad id.

    Args:
        pairs: a dataset of ``(source, target)`` scalar strings (``PairSource.dataset()``).
        src_tokenizer: the source-side ``SubwordTokenizer``.
        tgt_tokenizer: the target-side one (the same one for a shared vocabulary).
        batch_tokens: ids per batch and side, padding included: each length
            bucket gets ``max(1, batch_tokens // bucket_bound)`` sentences.
        batch_size: sentences per batch instead. Give exactly one of the two.
        max_src_length: longest ``src_ids`` row, EOS included.
        max_tgt_length: most target tokens, BOS/EOS excluded; decoder rows are
            at most ``max_tgt_length + 1`` long. The model's ``max_length``
            must cover ``max(max_src_length, max_tgt_length + 1)``.
        length_filter: ``"drop"`` longer pairs or ``"truncate"`` them (EOS kept).
        bucket_boundaries: inclusive upper lengths of the buckets (length of a
            pair = its longer side); ``None`` picks ~1.1x-spaced bounds
            (``default_bucket_bounds``), ``()`` puts everything in one bucket.
        shuffle_buffer: examples in the shuffle buffer; 0 disables shuffling. A
            corpus stored in length order needs a buffer as large as the corpus.
        seed: shuffle seed; the same seed (and global TF seed) gives the same order.
        cache: cache tokenized examples in memory (``True``), in files at
            this path prefix (a path), or not at all (``False``).
        repeat: repeat forever (then pass ``steps_per_epoch`` to ``fit``).
        static_shapes: pad every batch to ``(batch_size, max_src_length)`` /
            ``(batch_size, max_tgt_length + 1)`` and drop the last partial
            batch, so ``element_spec`` is fully static (TPU/XLA). With
            ``batch_tokens``, ``batch_size = batch_tokens // longest row``.
        drop_remainder: drop partial batches; defaults to ``static_shapes``.
        training: ``False`` turns shuffling and tf.data autotuning off (evaluation).

    Returns:
        A ``tf.data.Dataset`` of ``((src_ids, tgt_in_ids), tgt_out_ids)`` batches.

    Raises:
        ValueError: ``pairs`` is not a dataset of string pairs, the tokenizers'
            pad ids differ, or an argument is out of range.
    """
    _check_pairs(pairs)
    _check_length_filter(length_filter)
    plan = _BatchPlan.from_arguments(locals(), pad_id=pad_id_of(src_tokenizer, tgt_tokenizer))
    limits = _LengthLimits(max_src_length, max_tgt_length, length_filter)
    return plan.apply(_tokenized_examples(pairs, src_tokenizer, tgt_tokenizer, limits))
