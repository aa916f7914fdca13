"""Step-based training, the same under ``model.fit`` and a custom loop.

A *step* is one optimizer update. ``StepPlan`` fixes how many a run makes and
where its epochs end; an *epoch* is the interval between validations (loss,
BLEU), the per-epoch logs and history, the checkpoints kept for averaging, the
time-budget checks and, with ``backup_every_steps: epoch``, the backups:

* ``steps_per_epoch`` updates make an epoch; the run makes ``max_steps``
  updates, or ``epochs × steps_per_epoch`` when ``max_steps`` is null. With
  both set, the run ends at the first of the two (``max_minutes`` may end it
  earlier still). When the total is not a multiple of ``steps_per_epoch``, the
  last epoch is shorter, and is validated and checkpointed where it ends.
* ``accumulate_steps`` micro-batches make an update (Keras' optimizer
  ``gradient_accumulation_steps``): the dataset yields micro-batches, and every
  count above (``max_steps``, ``steps_per_epoch``, ``steps_per_execution``,
  ``backup_every_steps``, the learning-rate schedule, ``optimizer.iterations``)
  counts updates. Each micro-batch's loss is its own mean over target tokens
  and the update averages the micro-batch gradients: N micro-batches make the
  update of one N times as large when their token counts are equal; otherwise
  each micro-batch weighs the same, so a token of a shorter one weighs more
  (as for the replicas' shares of a batch under ``tf.distribute``).
* Backups hold the weights, the optimizer state (its step included) and the
  step (``TrainingBackup``); they are written every ``backup_every_steps``
  updates, or at each epoch end.

Two loops run this plan:

``fit_in_steps`` calls ``model.fit`` (one machine, mirrored, TPU). A resumed
run continues at the backup's step with the batches an uninterrupted run would
have used next, without reading the ones before: ``fit`` reads its batches
through a ``ResumableInput`` (``training.inputs``), one ``tf.data`` iterator
on the host for the whole run whose state (tf.data's buffers, the shuffle buffer, the files'
offsets) is saved with each backup, together with the few micro-batches
``fit`` had read ahead of training; a resumed run restores both and goes on
from there, in the same time wherever in the data the backup was written. A
backup without that state (written before it existed, or from an input that
cannot be saved, such as a ``from_generator`` stage) is resumed by reading
and dropping the micro-batches already used (a pass over them). Keras' own
``BackupAndRestore`` restores only the epoch: it re-runs an interrupted epoch
from its first update on the data from the start, so a mid-epoch backup
replays data and shifts every later epoch. Here the rest of an interrupted
epoch is one ``fit`` call of its own, so epochs end at the same steps as in an
uninterrupted run.

``custom_fit`` runs ``model.train_step`` through ``strategy.run`` in one
``tf.function`` (every strategy, ``MultiWorkerMirroredStrategy`` included,
where ``model.fit`` fails in Keras 3.15: keras-team/keras#20585). It reads the
global batches through one plain ``tf.data`` iterator per worker and hands
each replica its slice of every batch (``training.workers.replica_rows``);
that iterator is saved with each backup (``tf.train.Checkpoint``; ``tf.distribute``'s own
multi-device iterators are not checkpointable), so a resumed run reads no
batch twice and skips none, at no extra cost. Every worker then reads the
whole input stream (the batches are split between replicas, not the data
between workers) and keeps its own backup. Given a ``PerWorkerInput``
(the data split between workers: the text by ``PairSource.part``, prepared
shards by file through ``sharded_dataset``'s input pipelines), each worker
reads its own part of the data into batches for its own replicas, through a
plain iterator saved with its own backup as above: a resumed run continues at
each worker's own position, whatever the input.

Both split batches between replicas evenly: a batch whose rows are not a
multiple of the replica count gets rows of padding (all ``pad_id``, which the
masked loss and accuracy ignore), so validation loss and accuracy are exact
with any number of replicas.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import keras
import tensorflow as tf

from keras_transformer.training.inputs import ResumableInput, skip_batches
from keras_transformer.training.steps import StepPlan
from keras_transformer.training.workers import (
    PerWorkerInput,
    is_chief,
    model_pad_id,
    own_rows,
    same_on_every_worker,
    worker_count,
)

log = logging.getLogger("training")


def optimizer_step(model: keras.Model) -> int:
    """Updates made so far (``optimizer.iterations``: under gradient
    accumulation, micro-batches // ``accumulate_steps``)."""
    iterations = model.optimizer.iterations
    value = iterations.numpy() if hasattr(iterations, "numpy") else iterations.value.numpy()
    return int(value)


class _Advance(keras.callbacks.Callback):
    """Tells a ``ResumableInput`` after each ``fit`` batch how many micro-batches are
    trained (the updates × ``accumulate_steps``: never more than ``fit`` used)."""

    def __init__(self, stream: ResumableInput, accumulate_steps: int):
        super().__init__()
        self.stream, self.accumulate_steps = stream, accumulate_steps

    def on_train_batch_end(self, batch, logs=None):
        self.stream.advance(optimizer_step(self.model) * self.accumulate_steps)


class StopAtStep(keras.callbacks.Callback):
    """Ends ``model.fit`` once the optimizer has made ``step`` updates: at the
    end of that batch (``at_batch_end``; the epoch then ends as usual, with
    validation and the epoch callbacks), or at the end of the epoch it falls
    in. Placed last, it first notes whether another callback ended the run at
    that epoch end (``stopped_by_others``)."""

    def __init__(self, step: int, at_batch_end: bool = True):
        super().__init__()
        self.step = step
        self.at_batch_end = at_batch_end
        self.stopped_by_others = False

    def on_train_batch_end(self, batch, logs=None):
        if self.at_batch_end and optimizer_step(self.model) >= self.step:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        reached = optimizer_step(self.model) >= self.step
        # At the step, a stop at the batch end was this callback's own.
        self.stopped_by_others = bool(self.model.stop_training) and not (
            self.at_batch_end and reached
        )
        if reached:
            self.model.stop_training = True


def fit_in_steps(
    model: keras.Model,
    make_dataset: Callable[[], tf.data.Dataset],
    plan: StepPlan,
    *,
    validation_data: tf.data.Dataset | None = None,
    backup=None,
    callbacks: list[keras.callbacks.Callback] = (),
    verbose="auto",
) -> dict[str, list[float]]:
    """``model.fit`` over ``plan``; returns the per-epoch history.

    ``model`` is compiled with ``steps_per_execution = plan.steps_per_execution
    × plan.accumulate_steps`` (Keras counts micro-batches) and, to accumulate,
    an optimizer with ``gradient_accumulation_steps = plan.accumulate_steps``.
    ``make_dataset()`` returns the training micro-batches from their start,
    repeating forever; it is called once, and every ``fit`` call of the run
    reads on in that one stream (a ``ResumableInput``). With a
    ``backup`` (``TrainingBackup``) that exists, training resumes at its step,
    the stream restored to the micro-batch after the last one trained (or, from
    a backup without the input's position, reached by reading and dropping the
    micro-batches before it); new backups, written as the plan says
    (``StepBackup``, after the other callbacks at an epoch end), hold the
    stream's position. The backup is left in place: the caller deletes it once
    the run's outputs are written.
    """
    done = 0
    if backup is not None and backup.exists():
        restored = backup.restore(model, accumulate_steps=plan.accumulate_steps)
        done = restored["step"]
        if restored.get("stopped"):
            log.info(_STOPPED, backup.restored_from, done)
            return {}
    micro = plan.accumulate_steps
    data = ResumableInput(make_dataset())
    if done:
        if backup.restore_input(data, done * micro):
            log.info(
                "resumed from %s at step %d: the input continues at its saved position",
                backup.restored_from,
                done,
            )
        else:
            log.info(
                "resumed from %s at step %d: the backup has no input position; reading and "
                "dropping the %d batches already used",
                backup.restored_from,
                done,
                done * micro,
            )
            data.skip(done * micro)
    callbacks = [_Advance(data, micro), *callbacks]
    if backup is not None:
        callbacks.append(StepBackup(backup, plan, data))
    history: dict[str, list[float]] = {}
    while done < plan.total:
        epoch = done // plan.steps_per_epoch
        if done % plan.steps_per_epoch:  # resumed mid-epoch: the rest of that epoch alone
            segment_end = plan.epoch_end(done)
            steps = segment_end - done
            stop = StopAtStep(segment_end, at_batch_end=False)
            log.info("finishing epoch %d (steps %d to %d) first", epoch + 1, done + 1, segment_end)
        else:  # the rest of the run; StopAtStep ends a shorter last epoch
            segment_end, steps = plan.total, plan.steps_per_epoch
            stop = StopAtStep(plan.total)
        data.advance(done * micro)
        result = model.fit(
            data.dataset(),
            validation_data=validation_data,
            callbacks=[*callbacks, stop],
            shuffle=False,
            verbose=verbose,
            initial_epoch=epoch,
            epochs=plan.epochs_in_total,
            steps_per_epoch=steps * micro,
        )
        for name, values in result.history.items():
            history.setdefault(name, []).extend(values)
        done = optimizer_step(model)
        if done >= plan.total or stop.stopped_by_others:  # finished, or a callback ended the run
            break
        if done < segment_end:
            if not model.stop_training:
                log.warning("the training data ran out at step %d of %d", done, plan.total)
            break
    return history


_STOPPED = (
    "resumed from %s at step %d, where a callback (early stopping, the time budget) had ended "
    "the run: nothing left to train"
)


class StepBackup(keras.callbacks.Callback):
    """Writes ``backup`` (a ``TrainingBackup``) during ``model.fit`` at the
    steps ``plan.backs_up_at`` names: at a batch end, or at an epoch end after
    the epoch's other callbacks (so a kill never leaves a backup past an epoch
    whose checkpoint was not written), and at the epoch end where a callback
    ended the run (a resumed run then trains no further), with ``stream``'s
    position (the ``ResumableInput`` that ``fit`` reads). Diverged
    (non-finite) weights are never backed up."""

    def __init__(self, backup, plan: StepPlan, stream: ResumableInput | None = None):
        super().__init__()
        self.backup = backup
        self.plan = plan
        self.stream = stream
        self.saved = None

    def on_train_begin(self, logs=None):
        # Where ``fit`` runs one micro-batch per call, the step stays the same
        # for the rest of an accumulation: save once, at the update itself.
        self.saved = optimizer_step(self.model)

    def _save(self, step: int, logs) -> None:
        loss = (logs or {}).get("loss")
        if step == self.saved or (loss is not None and not math.isfinite(float(loss))):
            return
        if self.stream is not None:  # at an update: exactly the micro-batches fit used
            self.stream.advance(step * self.plan.accumulate_steps)
        self.backup.save(
            self.model,
            step=step,
            epoch=step // self.plan.steps_per_epoch,
            accumulate_steps=self.plan.accumulate_steps,
            stream=self.stream,
            stopped=bool(getattr(self.model, "stop_training", False)),
        )
        self.saved = step

    def on_train_batch_end(self, batch, logs=None):
        step = optimizer_step(self.model)
        if self.plan.backs_up_at(step) and not self.plan.is_epoch_end(step):
            self._save(step, logs)

    def on_epoch_end(self, epoch, logs=None):
        step = optimizer_step(self.model)
        if self.plan.backs_up_at(step) or self.model.stop_training:
            if self.model.stop_training:
                self.saved = None  # saved again at this step, now saying that the run ended
            self._save(step, logs)


def evaluator(
    model: keras.Model, strategy: tf.distribute.Strategy
) -> Callable[[tf.data.Dataset], dict]:
    """A function that evaluates ``model`` (compiled under ``strategy``) on a
    finite dataset of global batches with ``model.test_step``, each replica on
    its rows of each batch (``replica_rows``), and returns the metrics. It
    resets the model's metrics before and after (the training ones, too)."""

    @tf.function
    def run(iterator):
        for batch in iterator:
            strategy.run(
                lambda batch: model.test_step(own_rows(batch, model_pad_id(model))), args=(batch,)
            )

    def evaluate(dataset: tf.data.Dataset) -> dict:
        model.reset_metrics()
        run(iter(dataset))
        results = {name: float(value) for name, value in model.get_metrics_result().items()}
        model.reset_metrics()
        return results

    return evaluate


def custom_fit(
    model: keras.Model,
    strategy: tf.distribute.Strategy,
    dataset: tf.data.Dataset | PerWorkerInput,
    plan: StepPlan,
    *,
    validation_data: tf.data.Dataset | None = None,
    backup=None,
    summary_dir: Path | None = None,
    callbacks: list[keras.callbacks.Callback] = (),
) -> dict[str, list[float]]:
    """Train ``plan.total`` updates with ``model.train_step``; returns per-epoch metrics.

    The model must be compiled under ``strategy.scope()`` (to accumulate, with
    an optimizer whose ``gradient_accumulation_steps`` is
    ``plan.accumulate_steps``). ``dataset`` yields global batches (repeating
    forever), and each replica trains on its slice of each (``replica_rows``);
    or it is a ``PerWorkerInput``, each worker's own batches (its part of the
    text or its shard files), of which each of its replicas takes its slice.
    Either way each worker reads through one plain iterator. At each epoch end
    ``validation_data`` (finite) is evaluated with ``model.test_step`` into
    ``val_*`` metrics, then the ``callbacks``' ``on_epoch_end`` run. With a
    ``backup`` (``TrainingBackup``) that exists, the weights, optimizer state
    and input position are restored and training continues at the saved step,
    the iterator where it was (reading none of the batches before; from a
    backup without the position, by reading and dropping them); backups are
    written as the plan says, each with the input iterator's state, and left
    in place at the end.
    """
    with strategy.scope():
        # Optimizer slots must exist before the first step: creating them
        # lazily inside a replica context fails.
        model.optimizer.build(model.trainable_variables)
    done = 0
    stopped = False
    if backup is not None and backup.exists():
        restored = backup.restore(model, accumulate_steps=plan.accumulate_steps)
        done, stopped = restored["step"], bool(restored.get("stopped"))
    # Each worker restores its own backup: one that fell back to its previous one
    # would train from another step.
    same_on_every_worker(
        strategy,
        f"{done} {stopped}",
        f"the workers' backups are at different steps (this one: step {done}); resume every "
        "worker from the same step (delete the backups that differ)",
    )
    if stopped:
        log.info(_STOPPED, backup.restored_from, done)
        return {}
    workers = 1
    if isinstance(dataset, PerWorkerInput):
        dataset, workers = dataset.dataset, worker_count(strategy)
    iterator = iter(dataset)
    if done and backup.restore_iterator(iterator):
        log.info(
            "resumed from %s at step %d: the input continues at its saved position",
            backup.restored_from,
            done,
        )
    elif done:
        log.info(
            "resumed from %s at step %d: the backup has no input position; reading and "
            "dropping the %d batches already used",
            backup.restored_from,
            done,
            done * plan.accumulate_steps,
        )
        skip_batches(iterator, done * plan.accumulate_steps)
    micro_steps = plan.steps_per_execution * plan.accumulate_steps
    pad_id = model_pad_id(model)

    def train_step(batch):  # this replica's rows of a global or of its worker's batch
        return model.train_step(own_rows(batch, pad_id, workers))

    @tf.function
    def run_steps(iterator):
        for _ in tf.range(micro_steps):
            strategy.run(train_step, args=(next(iterator),))

    evaluate = evaluator(model, strategy) if validation_data is not None else None

    for callback in callbacks:
        callback.set_model(model)
    chief = is_chief(strategy)
    writer = tf.summary.create_file_writer(str(summary_dir)) if summary_dir and chief else None
    history: dict[str, list[float]] = {}
    model.stop_training = False
    epoch_started = time.time()
    while done < plan.total:
        run_steps(iterator)
        done += plan.steps_per_execution
        epoch_end, at_backup = (
            plan.is_epoch_end(done),
            backup is not None and plan.backs_up_at(done),
        )
        if not (epoch_end or at_backup):
            continue
        results = {name: float(value) for name, value in model.get_metrics_result().items()}
        if not math.isfinite(results.get("loss", 0.0)):
            # TerminateOnNaN's job, and never back up diverged weights.
            raise FloatingPointError(f"loss is {results['loss']} at step {done}; training stopped.")
        stop = False
        if epoch_end:
            epoch = plan.epoch_number(done)
            if evaluate is not None:
                results.update(
                    {f"val_{name}": value for name, value in evaluate(validation_data).items()}
                )
            seconds = time.time() - epoch_started
            for callback in callbacks:
                callback.on_epoch_end(epoch - 1, results)
            stop = bool(getattr(model, "stop_training", False))
            log.info(
                "epoch %d/%d - step %d - %.0fs - %s",
                epoch,
                plan.epochs_in_total,
                done,
                seconds,
                " - ".join(f"{k}: {v:.4f}" for k, v in results.items()),
            )
            for name, value in results.items():
                history.setdefault(name, []).append(value)
                if writer is not None:
                    with writer.as_default():
                        tf.summary.scalar(name, value, step=done)
            model.reset_metrics()
            epoch_started = time.time()
        if backup is not None and (at_backup or stop):  # a stop is saved: a resumed run ends too
            backup.save(
                model,
                step=done,
                epoch=done // plan.steps_per_epoch,
                accumulate_steps=plan.accumulate_steps,
                iterator=iterator,
                stopped=stop,
            )
        if stop:
            log.info("stopped by a callback after epoch %d", plan.epoch_number(done))
            break
    return history
