"""A training loop that runs under every ``tf.distribute`` strategy.

``model.fit`` fails under ``MultiWorkerMirroredStrategy`` in Keras 3.15
(keras-team/keras#20585: a ``PerReplica`` value reaches ``convert_to_tensor`` in
the trainer's symbolic build). This loop calls the model's own
``train_step`` through ``strategy.run`` on a distributed dataset, so the
train step (loss, gradients, optimizer, metrics) is the one ``fit`` uses,
written once. Backups use the same weights file format as
``keras.callbacks.BackupAndRestore`` and hold the optimizer state; the epoch and
step to resume from are derived from ``optimizer.iterations``.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import keras
import tensorflow as tf

from keras_transformer.files import write_through_temp

log = logging.getLogger("training")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type == "chief" or (task_type == "worker" and task_id == 0 and
                                    "chief" not in resolver.cluster_spec().as_dict())


def optimizer_step(model: keras.Model) -> int:
    iterations = model.optimizer.iterations
    value = iterations.numpy() if hasattr(iterations, "numpy") else iterations.value.numpy()
    return int(value)


def custom_fit(
    model: keras.Model,
    strategy: tf.distribute.Strategy,
    dataset: tf.data.Dataset,
    *,
    epochs: int,
    steps_per_epoch: int,
    backup_path: Path | None = None,
    backup_every_steps: int | None = None,
    steps_per_execution: int = 1,
    summary_dir: Path | None = None,
    callbacks: list[keras.callbacks.Callback] = (),
) -> dict[str, list[float]]:
    """Train ``epochs × steps_per_epoch`` optimizer steps; returns per-epoch metrics.

    The model must be compiled under ``strategy.scope()``. ``dataset`` yields
    global batches (it is distributed here). On restart with an existing
    ``backup_path`` the weights and optimizer state are restored, the data
    skips the batches already consumed, and training continues at the saved step.
    """
    if steps_per_epoch % steps_per_execution:
        raise ValueError(
            f"steps_per_epoch={steps_per_epoch} must be a multiple of "
            f"steps_per_execution={steps_per_execution}."
        )
    with strategy.scope():
        # Optimizer slots must exist before the first step: creating them
        # lazily inside a replica context fails.
        model.optimizer.build(model.trainable_variables)
    if backup_path is not None and backup_path.exists():
        model.load_weights(backup_path)
        log.info("resumed from %s at step %d", backup_path, optimizer_step(model))
    done = optimizer_step(model)
    total = epochs * steps_per_epoch
    if done % steps_per_execution:
        raise ValueError(f"Backup at step {done} is not a multiple of steps_per_execution.")

    iterator = iter(strategy.experimental_distribute_dataset(dataset.skip(done)))

    @tf.function
    def run_steps(iterator):
        for _ in tf.range(steps_per_execution):
            strategy.run(model.train_step, args=(next(iterator),))

    for callback in callbacks:
        callback.set_model(model)
    chief = is_chief(strategy)
    writer = tf.summary.create_file_writer(str(summary_dir)) if summary_dir and chief else None
    history: dict[str, list[float]] = {}
    model.stop_training = False
    epoch_started = time.time()
    while done < total:
        run_steps(iterator)
        done += steps_per_execution
        at_backup = bool(backup_path is not None and backup_every_steps and done % backup_every_steps == 0)
        if not (at_backup or done % steps_per_epoch == 0):
            continue
        results = {name: float(value) for name, value in model.get_metrics_result().items()}
        if not math.isfinite(results.get("loss", 0.0)):
            # TerminateOnNaN's job, and never back up diverged weights.
            raise FloatingPointError(f"loss is {results['loss']} at step {done}; training stopped.")
        if at_backup and chief:
            _save_weights(model, backup_path)
        if done % steps_per_epoch == 0:
            epoch = done // steps_per_epoch
            seconds = time.time() - epoch_started
            for callback in callbacks:
                callback.on_epoch_end(epoch - 1, results)
            stop = bool(getattr(model, "stop_training", False))
            log.info("epoch %d/%d - %.0fs - %.0fms/step - %s", epoch, epochs, seconds,
                     1000 * seconds / steps_per_epoch,
                     " - ".join(f"{k}: {v:.4f}" for k, v in results.items()))
            for name, value in results.items():
                history.setdefault(name, []).append(value)
                if writer is not None:
                    with writer.as_default():
                        tf.summary.scalar(name, value, step=done)
            for metric in model.metrics:
                metric.reset_state()
            if backup_path is not None and chief and not backup_every_steps:
                _save_weights(model, backup_path)
            epoch_started = time.time()
            if stop:
                log.info("stopped by a callback after epoch %d", epoch)
                break
    return history


def _save_weights(model: keras.Model, path: Path) -> None:
    write_through_temp(path, model.save_weights)
