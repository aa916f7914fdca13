"""Reading prepared corpora back as batches: ``sharded_dataset`` and ``sharded_dataset_fn``.

The shard files are split over the input pipelines (workers) by file, read
interleaved, decoded a record (a block of examples) at a time and batched
with ``make_dataset``'s batching (``keras_transformer.data.batching``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

import tensorflow as tf

from keras_transformer.data.batching import SHUFFLE_BUFFER, _BatchPlan, _check_positive
from keras_transformer.data.shards.manifest import PathLike, PreparedShards
from keras_transformer.data.shards.mixing import _check_mix, _mixed, _on_its_own
from keras_transformer.data.shards.records import _decoder
from keras_transformer.data.tokenizing import _examples

logger = logging.getLogger("keras_transformer.data")


def _load_all(
    prepared: PreparedShards | PathLike | Sequence[PreparedShards | PathLike],
) -> list[PreparedShards]:
    """``prepared`` as a list of ``PreparedShards`` (one, or several corpora)."""
    if isinstance(prepared, (PreparedShards, str, os.PathLike)):
        prepared = [prepared]
    corpora = [
        one if isinstance(one, PreparedShards) else PreparedShards.load(one) for one in prepared
    ]
    if not corpora:
        raise ValueError("sharded_dataset needs one prepared corpus or more, got none.")
    return corpora


def _shard_examples(
    prepared: PreparedShards,
    *,
    num_input_pipelines: int,
    input_pipeline_index: int,
    training: bool,
    seed: int | None,
    cycle_length: int,
) -> tf.data.Dataset:
    """This pipeline's examples of ``prepared``, unbatched: its shard files, in a
    new seeded order each pass when training, interleaved."""
    if len(prepared.files) < num_input_pipelines:
        raise ValueError(
            f"{prepared.directory} holds {len(prepared.files)} shard file(s), fewer than the "
            f"{num_input_pipelines} input pipelines that split them by file: prepare it again with "
            f"examples_per_shard <= {max(1, prepared.examples // num_input_pipelines)}."
        )
    paths = [str(path) for path in prepared.paths[input_pipeline_index::num_input_pipelines]]
    if num_input_pipelines > 1:
        logger.info(
            "input pipeline %d of %d reads %d of the %d shard files: %s",
            input_pipeline_index + 1,
            num_input_pipelines,
            len(paths),
            len(prepared.files),
            ", ".join(prepared.files[input_pipeline_index::num_input_pipelines]),
        )
    if len(prepared.files) % num_input_pipelines:
        logger.warning(
            "%d shard files over %d input pipelines: some read one file more than others.",
            len(prepared.files),
            num_input_pipelines,
        )
    files = tf.data.Dataset.from_tensor_slices(paths)
    if training and len(paths) > 1:
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    records = files.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(cycle_length, len(paths)),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    blocks = records.map(
        _decoder(tf.as_dtype(prepared.id_dtype), prepared.special_ids),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return _examples(blocks)


def sharded_dataset(
    prepared: PreparedShards | PathLike | Sequence[PreparedShards | PathLike],
    *,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    bucket_boundaries=None,
    shuffle_buffer: int = SHUFFLE_BUFFER,
    seed: int | None = None,
    repeat: bool = False,
    static_shapes: bool = False,
    drop_remainder: bool | None = None,
    training: bool = True,
    num_input_pipelines: int = 1,
    input_pipeline_index: int = 0,
    cycle_length: int = 4,
    weights: Sequence[float] | None = None,
) -> tf.data.Dataset:
    """Reads a prepared corpus back as batches, the same batches ``make_dataset`` gives.

    The shard files are split over the input pipelines (workers) by file:
    pipeline ``i`` reads files ``i, i + n, i + 2n, ...``, so pipelines see
    disjoint parts that together are the corpus, once per pass. Each pass
    reads its files in a new order (seeded; training only), ``cycle_length``
    at a time interleaved, through a shuffle buffer, then batches with
    ``batch_examples``, the prepared length limits giving the buckets and
    static shapes. With ``num_input_pipelines > 1`` tf.distribute's
    auto-sharding is turned off (the files are split here already); for
    ``strategy.distribute_datasets_from_function`` use ``sharded_dataset_fn``.

    Several prepared corpora (a sequence, with ``weights``) are each read so,
    on their own: corpus ``k``'s files split over the pipelines, shuffled with
    ``seed + k`` through its own buffer and, with ``repeat``, repeated on its
    own (a small corpus never runs out); ``tf.data.Dataset.sample_from_datasets``
    (``seed``) then draws each example from corpus ``k`` with probability
    ``weights[k] / sum(weights)``, and the draws are batched as one stream.
    Without ``repeat`` each corpus is read once (by weight while all last).
    They must share length limits, special ids and tokenizers.

    Args:
        prepared: a ``PreparedShards`` or the folder ``prepare_shards`` wrote;
            or a sequence of them (several corpora, with ``weights``).
        batch_tokens: as in ``make_dataset`` (per pipeline).
        batch_size: as in ``make_dataset`` (per pipeline).
        bucket_boundaries: as in ``make_dataset``.
        shuffle_buffer: examples in the shuffle buffer (each corpus's); 0 disables it.
        seed: the order of files and examples (with the global TF seed).
        repeat: repeat forever (then pass ``steps_per_epoch`` to ``fit``).
        static_shapes: as in ``make_dataset``.
        drop_remainder: as in ``make_dataset``.
        training: as in ``make_dataset``.
        num_input_pipelines: how many pipelines read the corpus
            (``tf.distribute.InputContext.num_input_pipelines``).
        input_pipeline_index: which one this is
            (``tf.distribute.InputContext.input_pipeline_id``).
        cycle_length: files read at once (per corpus).
        weights: the corpora's shares of the examples drawn, one positive
            number per corpus (relative); needed with several, optional with one.

    Returns:
        A ``tf.data.Dataset`` of ``((src_ids, tgt_in_ids), tgt_out_ids)`` batches.

    Raises:
        PreparationError: ``prepared`` is a folder without a usable preparation.
        ValueError: an argument is out of range, this pipeline has no file of a
            corpus, or several corpora lack weights or were prepared unalike.
    """
    corpora = _load_all(prepared)
    weights = _check_mix(corpora, weights)
    _check_positive("num_input_pipelines", num_input_pipelines)
    _check_positive("input_pipeline_index", input_pipeline_index, minimum=0)
    _check_positive("cycle_length", cycle_length)
    if input_pipeline_index >= num_input_pipelines:
        raise ValueError(
            f"input_pipeline_index={input_pipeline_index} must be below "
            f"num_input_pipelines={num_input_pipelines}."
        )
    first = corpora[0]
    plan = _BatchPlan.from_arguments(
        locals(),
        max_src_length=first.max_src_length,
        max_tgt_length=first.max_tgt_length,
        cache=False,
        pad_id=first.special_ids["pad_id"],
    )
    streams = []
    for index, corpus in enumerate(corpora):
        own_seed = seed if seed is None or len(corpora) == 1 else seed + index
        examples = _shard_examples(
            corpus,
            num_input_pipelines=num_input_pipelines,
            input_pipeline_index=input_pipeline_index,
            training=training,
            seed=own_seed,
            cycle_length=cycle_length,
        )
        streams.append(examples if len(corpora) == 1 else _on_its_own(examples, plan, own_seed))
    dataset = plan.apply(streams[0]) if len(corpora) == 1 else _mixed(streams, weights, plan)
    if num_input_pipelines > 1:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        dataset = dataset.with_options(options)
    return dataset


def sharded_dataset_fn(
    prepared: PreparedShards | PathLike | Sequence[PreparedShards | PathLike],
    *,
    batch_tokens: int | None = None,
    batch_size: int | None = None,
    **kwargs,
) -> Callable:
    """Builds a ``dataset_fn(input_context)`` for ``strategy.distribute_datasets_from_function``.

    ``batch_tokens`` / ``batch_size`` are global: each replica gets batches of
    ``batch_tokens // replicas`` tokens (a budget, rounded down), or of
    ``batch_size / replicas`` sentences (which must divide: see
    ``input_context.get_per_replica_batch_size``). Each input pipeline (one per
    worker under ``MultiWorkerMirroredStrategy``, one per host on TPUs) reads
    its own files (``sharded_dataset``; of each corpus, for several with ``weights``).

    Args:
        prepared: a ``PreparedShards`` or the folder ``prepare_shards`` wrote,
            or a sequence of them (several corpora: pass ``weights``).
        batch_tokens: tokens per global batch and side.
        batch_size: sentences per global batch instead.
        **kwargs: further ``sharded_dataset`` arguments.

    Returns:
        The ``dataset_fn``, which returns this pipeline's ``sharded_dataset``.

    Example::

        dataset = strategy.distribute_datasets_from_function(
            sharded_dataset_fn("runs/big/prepared", batch_tokens=25_000, seed=0, repeat=True))
    """
    prepared = _load_all(prepared)
    for name in ("num_input_pipelines", "input_pipeline_index"):
        if name in kwargs:
            raise ValueError(
                f"sharded_dataset_fn takes {name} from the InputContext; do not pass it."
            )

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = {}
        if batch_tokens is not None:
            replicas = input_context.num_replicas_in_sync
            if batch_tokens < replicas:
                raise ValueError(
                    f"batch_tokens={batch_tokens} is fewer than one token for each of the "
                    f"{replicas} replicas; raise it."
                )
            per_replica["batch_tokens"] = batch_tokens // replicas
        if batch_size is not None:
            per_replica["batch_size"] = input_context.get_per_replica_batch_size(batch_size)
        return sharded_dataset(
            prepared,
            num_input_pipelines=input_context.num_input_pipelines,
            input_pipeline_index=input_context.input_pipeline_id,
            **per_replica,
            **kwargs,
        )

    return dataset_fn
