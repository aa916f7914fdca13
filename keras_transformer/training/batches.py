"""The training and validation input: one corpus or several (``data.sources``), streamed
from the text or read from prepared shards, in global batches or in one worker's part."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import tensorflow as tf

from keras_transformer.data import (
    PairSource,
    PreparedShards,
    batch_examples,
    count_tokens,
    make_dataset,
    pad_id_of,
    sharded_dataset,
    tokenize_pairs,
)
from keras_transformer.training.corpora import SourceMix
from keras_transformer.training.run_config import TrainingSection
from keras_transformer.training.workers import PerWorkerInput

log = logging.getLogger("training")
# A training split of at most this many pairs is small: its tokenized examples are cached in
# memory (training.cache: auto) and it may be shuffled whole (training.shuffle_buffer: null).
IN_MEMORY_PAIRS = 1_000_000
# A training split on prepared shards: one preparation, or one per corpus of data.sources.
Prepared = PreparedShards | tuple[PreparedShards, ...]


def train_source(corpus) -> PairSource:
    """The training split of a single-corpus ``corpus`` as a ``PairSource``."""
    train = corpus["train"]
    return train if isinstance(train, PairSource) else PairSource.from_pairs(train)


def train_texts(corpus) -> list[PairSource]:
    """The training corpora: the one, or each of ``data.sources``."""
    train = corpus["train"]
    if isinstance(train, SourceMix):
        return [source.pairs for source in train.sources]
    return [train_source(corpus)]


def tagged_pairs(pairs: PairSource, tag: str | None) -> tf.data.Dataset:
    """``pairs.dataset()`` with ``tag`` and a space put before each source sentence
    (unchanged without a tag): what a tagged corpus of ``data.sources`` trains on."""
    dataset = pairs.dataset()
    if not tag:
        return dataset
    constant = tf.constant(tag)
    return dataset.map(lambda src, tgt: (tf.strings.join([constant, src], " "), tgt))


def worker_batching(options: TrainingSection, workers: int) -> dict[str, Any]:
    """``batch_tokens`` / ``batch_size`` of one worker's batches when each of
    ``workers`` reads its own part of the text: the global ones divided by
    ``workers`` (rounded down). A ``ValueError`` when a worker's token budget
    cannot hold the longest row."""
    if options.batch_size:
        return {"batch_tokens": None, "batch_size": max(1, options.batch_size // workers)}
    tokens = options.batch_tokens // workers
    longest = max(options.max_src_length, options.max_tgt_length + 1)
    if tokens < longest:
        raise ValueError(
            f"training.batch_tokens={options.batch_tokens} over {workers} workers gives each "
            f"{tokens} tokens a batch, fewer than the longest row ({longest}); raise "
            "training.batch_tokens or lower the max lengths."
        )
    return {"batch_tokens": tokens, "batch_size": None}


def batching_for_replicas(options: TrainingSection, replicas: int) -> TrainingSection:
    """``options`` with a static batch size (``training.batch_size``, or the one
    ``static_shapes`` derives from ``batch_tokens``) rounded down to a multiple
    of ``replicas`` (at least ``replicas``), so each replica gets as many rows;
    the config itself is left unchanged (the saved config is the one asked for)."""
    if replicas == 1:
        return options
    if options.batch_size:
        size = options.batch_size
        rounded = max(replicas, size // replicas * replicas)
        if rounded != size:
            log.info(
                "training.batch_size %d rounded to %d, a multiple of the %d replicas",
                size,
                rounded,
                replicas,
            )
        return dataclasses.replace(options, batch_size=rounded)
    if options.static_shapes and options.batch_tokens:
        longest = max(options.max_src_length, options.max_tgt_length + 1)
        size = options.batch_tokens // longest
        rounded = max(replicas, size // replicas * replicas)
        if rounded != size:
            log.info(
                "static batches of %d sentences rounded to %d, a multiple of the %d replicas "
                "(batch_tokens %d used as %d)",
                size,
                rounded,
                replicas,
                options.batch_tokens,
                rounded * longest,
            )
            return dataclasses.replace(options, batch_tokens=rounded * longest)
    return options


def training_input(options: TrainingSection, pairs: int) -> dict[str, Any]:
    """``make_dataset``'s ``cache`` and ``shuffle_buffer`` for a training split of ``pairs`` pairs.

    ``training.cache``: ``auto`` caches the tokenized split in memory when it is
    small (at most ``IN_MEMORY_PAIRS``) and not at all otherwise (each pass
    re-reads the files); ``true``/``false``, or a path prefix for a file cache.
    ``training.shuffle_buffer``: examples in the buffer; ``null`` is the whole
    split (a corpus stored in length order, as Tatoeba's is, read through a
    smaller window trains on short, then long sentences), allowed only for a
    small split: a large one needs a bound (a ``ValueError`` says so).
    """
    cache = options.cache
    if cache == "auto":
        cache = pairs <= IN_MEMORY_PAIRS
    shuffle_buffer = options.shuffle_buffer
    if shuffle_buffer is None:
        if pairs > IN_MEMORY_PAIRS:
            raise ValueError(
                "training.shuffle_buffer=null shuffles the whole training split, but it has "
                f"{pairs:,} "
                f"pairs (at most {IN_MEMORY_PAIRS:,} are shuffled whole, in memory); set a bound, "
                "e.g. "
                "--set training.shuffle_buffer=200000 (shuffle the corpus file itself if it is "
                "sorted)."
            )
        shuffle_buffer = pairs
    return {"cache": cache, "shuffle_buffer": shuffle_buffer}


def check_training_input(options: TrainingSection, corpus) -> None:
    """``training_input``'s checks for the training split, each corpus of a ``SourceMix``."""
    train = corpus["train"]
    sizes = [len(s.pairs) for s in train.sources] if isinstance(train, SourceMix) else [len(train)]
    for pairs in sizes:
        training_input(options, pairs)


def prepared_batches(
    prepared: Prepared,
    options: TrainingSection,
    *,
    part: tuple[int, int] | None = None,
    weights: list[float] | None = None,
) -> tf.data.Dataset:
    """Training batches of ``prepared`` (repeating), one plain dataset: global
    batches, or with ``part=(index, count)`` worker ``index``'s own, of its
    shard files (``sharded_dataset``'s input pipeline ``index`` of ``count``:
    files ``index``, ``index + count``, ... of each preparation, so the
    workers' parts are disjoint and together the corpus once per pass) in
    batches of ``1 / count`` of the configured size (``worker_batching``).
    Several preparations (``data.sources``) are sampled by ``weights``."""
    shuffle_buffer = options.shuffle_buffer
    if part is None:
        batching = {"batch_tokens": options.batch_tokens, "batch_size": options.batch_size}
        pipelines = {}
    else:
        batching = worker_batching(options, part[1])
        pipelines = {"num_input_pipelines": part[1], "input_pipeline_index": part[0]}
    return sharded_dataset(
        prepared,
        **batching,
        **pipelines,
        **({} if shuffle_buffer is None else {"shuffle_buffer": shuffle_buffer}),
        seed=options.seed,
        repeat=True,
        training=True,
        static_shapes=bool(options.static_shapes),
        **({} if isinstance(prepared, PreparedShards) else {"weights": weights}),
    )


def mixed_batches(
    mix: SourceMix,
    src_tok,
    tgt_tok,
    options: TrainingSection,
    part: tuple[int, int] | None = None,
    **common,
):
    """Training batches (repeating) of several corpora, each pair drawn from corpus i with
    probability ``mix.shares[i]``.

    Each corpus is streamed, tagged (its tag and a space before every source sentence),
    tokenized with the length filter, cached and shuffled as ``training_input`` says for
    its size (shuffle seed ``seed + i``) and repeated on its own, so a small corpus never
    runs out; ``tf.data.Dataset.sample_from_datasets`` with the run's seed then draws the
    pairs, and they are batched as one stream. The same seed gives the same stream, and
    its iterator's state (the sampler's included) is what a backup saves as the input's
    position. With ``part=(index, count)`` each corpus is read from its part ``index``
    of ``count`` only (``PairSource.part``: a worker's own lines)."""
    seed = options.seed
    streams = []
    for index, source in enumerate(mix.sources):
        text = source.pairs if part is None else source.pairs.part(*part)
        pairs = tagged_pairs(text, source.tag)
        examples = tokenize_pairs(
            pairs,
            src_tok,
            tgt_tok,
            max_src_length=common["max_src_length"],
            max_tgt_length=common["max_tgt_length"],
        )
        setting = training_input(options, len(source.pairs))
        cache = setting["cache"]
        if isinstance(cache, str):
            examples = examples.cache(f"{cache}.source{index}")
        elif cache:
            examples = examples.cache()
        if setting["shuffle_buffer"] > 0:
            examples = examples.shuffle(
                setting["shuffle_buffer"], seed=seed + index, reshuffle_each_iteration=True
            )
        streams.append(examples.repeat())
    mixed = tf.data.Dataset.sample_from_datasets(streams, weights=mix.shares, seed=seed)
    return batch_examples(
        mixed,
        **common,
        shuffle_buffer=0,  # each corpus is shuffled on its own
        seed=seed,
        cache=False,
        training=True,
        static_shapes=bool(options.static_shapes),
        pad_id=pad_id_of(src_tok, tgt_tok),
    )


def datasets(
    options: TrainingSection,
    corpus,
    src_tok,
    tgt_tok,
    prepared: Prepared | None = None,
    *,
    part: tuple[int, int] | None = None,
):
    """The training input (repeating) and the validation dataset (``None``
    without a valid split). The training batches come from ``prepared``
    (``find_prepared``, ``prepared_batches``) or are streamed from
    ``corpus["train"]``: all of it in global batches, or with
    ``part=(index, count)`` a ``PerWorkerInput`` of worker ``index``'s part
    (its shard files of each preparation, or its lines of each training
    corpus: ``PairSource.part``) in batches of ``1 / count`` of the
    configured size (``worker_batching``).

    Args:
        options: the config's ``training`` section.
        corpus: ``load_corpus``'s splits.
        src_tok: the source tokenizer.
        tgt_tok: the target tokenizer.
        prepared: the prepared training split, or ``None`` to read the text.
        part: ``(index, count)``: worker ``index``'s part of ``count``.

    Returns:
        ``(train, valid)``.
    """
    common = dict(
        max_src_length=options.max_src_length,
        max_tgt_length=options.max_tgt_length,
        batch_tokens=options.batch_tokens,
        batch_size=options.batch_size,
    )
    train_common = common if part is None else {**common, **worker_batching(options, part[1])}
    if prepared is not None:
        weights = corpus["train"].shares if isinstance(corpus["train"], SourceMix) else None
        train = prepared_batches(prepared, options, part=part, weights=weights)
    elif isinstance(corpus["train"], SourceMix):
        train = mixed_batches(corpus["train"], src_tok, tgt_tok, options, part, **train_common)
    else:
        source = train_source(corpus)
        train = make_dataset(
            (source if part is None else source.part(*part)).dataset(),
            src_tok,
            tgt_tok,
            **train_common,
            **training_input(options, len(source)),
            seed=options.seed,
            repeat=True,
            training=True,
            static_shapes=bool(options.static_shapes),
        )
    if part is not None:
        train = PerWorkerInput(train)
    valid = None
    if corpus["valid"]:
        valid = make_dataset(
            PairSource.from_pairs(corpus["valid"]).dataset(),
            src_tok,
            tgt_tok,
            **common,
            training=False,
            length_filter="truncate",
        )
        # Bucketing hides the batch count, and Keras ends the first validation pass over a
        # dataset of unknown length with "Your input ran out of data; interrupting training".
        # Counted once (the split is in memory), the warning is gone.
        valid = valid.apply(tf.data.experimental.assert_cardinality(count_tokens(valid).batches))
    return train, valid
