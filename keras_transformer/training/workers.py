"""Workers and replicas under ``tf.distribute``: which worker this is and how many
there are, each replica's rows of a batch (padded so that any replica count splits it
evenly), and each worker's own training input (``PerWorkerInput``)."""

from __future__ import annotations

import dataclasses
import hashlib

import keras
import tensorflow as tf

from keras_transformer.config import PAD_ID


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type == "chief" or (
        task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()
    )


def _pad_rows(tensor: tf.Tensor, replicas: int, pad_id: int = PAD_ID) -> tf.Tensor:
    """``tensor`` with rows of ``pad_id`` added up to a multiple of ``replicas``."""
    extra = (-tf.shape(tensor)[0]) % replicas
    return tf.pad(
        tensor,
        [[0, extra]] + [[0, 0]] * (len(tensor.shape) - 1),
        constant_values=tf.cast(pad_id, tensor.dtype),
    )


def replica_rows(batch, replica: int | tf.Tensor, replicas: int, pad_id: int = PAD_ID):
    """Replica ``replica``'s rows of a global batch: each tensor's rows padded
    with ``pad_id`` rows (the model's pad id) to a multiple of ``replicas``,
    then split evenly."""
    if replicas == 1:
        return batch

    def rows(tensor):
        padded = _pad_rows(tensor, replicas, pad_id)
        size = tf.shape(padded)[0] // replicas
        return padded[replica * size : (replica + 1) * size]

    return tf.nest.map_structure(rows, batch)


def pad_batches_for_replicas(
    dataset: tf.data.Dataset, replicas: int, pad_id: int = PAD_ID
) -> tf.data.Dataset:
    """``dataset`` with each batch padded with ``pad_id`` rows (the model's pad id) to a multiple of
    ``replicas``, so that ``tf.distribute`` splits it evenly (Keras 3.15's
    ``fit``/``evaluate`` fail on a first batch split unevenly: "AddN of [3, T]
    and [2, T]"). Batches whose size is statically a multiple pass unchanged."""
    sizes = [spec.shape[0] for spec in tf.nest.flatten(dataset.element_spec)]
    if replicas == 1 or all(size is not None and size % replicas == 0 for size in sizes):
        return dataset

    def pad(*batch):
        return tf.nest.map_structure(
            lambda tensor: _pad_rows(tensor, replicas, pad_id),
            batch[0] if len(batch) == 1 else batch,
        )

    return dataset.map(pad, deterministic=True)


def model_pad_id(model: keras.Model) -> int:
    """The pad id of a ``Transformer``'s config; 0 for other Keras models (the loop trains them)."""
    return getattr(getattr(model, "config", None), "pad_id", PAD_ID)


def own_rows(batch, pad_id: int, workers: int = 1):
    """This replica's rows of a batch (in a replica context): of a global batch,
    or with ``workers > 1`` of its worker's batch, split between the worker's
    replicas (a worker's replicas are consecutive in the sync group)."""
    context = tf.distribute.get_replica_context()
    replicas = context.num_replicas_in_sync // workers
    return replica_rows(batch, context.replica_id_in_sync_group % replicas, replicas, pad_id)


@dataclasses.dataclass(frozen=True)
class PerWorkerInput:
    """Training input that each worker reads for itself through a plain iterator.

    ``dataset`` is this worker's micro-batches, repeating (its part of the
    text, ``PairSource.part``, or its shard files of each preparation,
    ``sharded_dataset(..., num_input_pipelines=workers,
    input_pipeline_index=worker_index(strategy))``); ``custom_fit`` gives
    each of the worker's replicas its rows of every batch, and saves the
    iterator with the worker's backup (a resumed run continues where the
    worker was).
    """

    dataset: tf.data.Dataset


def worker_index(strategy: tf.distribute.Strategy) -> int:
    """This worker's index in the strategy's cluster, as ``tf.distribute`` numbers
    input pipelines: the chief 0, then the workers in order (0 without a cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not spec or resolver.task_type not in ("chief", "worker"):
        return 0
    if resolver.task_type == "chief":
        return 0
    return resolver.task_id + (1 if "chief" in spec else 0)


def worker_count(strategy: tf.distribute.Strategy) -> int:
    """Workers in the strategy's cluster (1 without one)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    return sum(len(spec.get(job, ())) for job in ("chief", "worker")) or 1


def same_on_every_worker(strategy: tf.distribute.Strategy, value: str, problem: str) -> None:
    """Raise ``ValueError(problem)`` on every worker unless all of them pass the
    same ``value`` (compared by a digest of it, over the strategy's collectives)."""
    if worker_count(strategy) == 1:
        return
    digest = int(hashlib.sha256(value.encode()).hexdigest()[:15], 16)  # fits an int64
    local = tf.constant([digest], tf.int64)
    values = strategy.gather(strategy.run(lambda: local), axis=0)
    if len(set(values.numpy().tolist())) > 1:
        raise ValueError(problem + ".")
