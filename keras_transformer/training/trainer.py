"""The training program's work, behind ``kt train``, in four phases: prepare the data
(corpus, tokenizers, input), build (the model, compiled under the strategy), train
(``model.fit`` or the custom loop, with the per-epoch callbacks) and finish (the final
weights, the scores, ``metrics.json`` and the learning curves: ``training.finish``).

Training counts optimizer updates (``training.steps.StepPlan``): ``max_steps``
and/or ``epochs × steps_per_epoch`` bound the run, an epoch is the interval
of validation (loss and BLEU, with any number of replicas), logs and the
checkpoints kept for averaging, and ``accumulate_steps`` micro-batches of
``batch_tokens`` make one update.

Re-running the same command after an interruption resumes from the last
backup (``TrainingBackup``, written every ``backup_every_steps`` updates or at
each epoch end, replaced whole so a kill never leaves a broken one): at the
backup's step, with its weights and optimizer state (so the learning-rate
schedule too), on the batches an uninterrupted run would have used next,
from the input position saved with it (either loop: no batch before it is
read again), ``fit`` finishing an interrupted epoch first so that later
epochs end at the same steps (``training.loop`` says more); the time budget
goes on from the time the backup recorded. The backup is deleted once
``metrics.json`` is written: a run killed while it scores resumes at its
last step and only scores.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.files import write_text_atomically
from keras_transformer.precision import dtype_policy, resolve_precision
from keras_transformer.training.backup import TrainingBackup
from keras_transformer.training.batches import (
    Prepared,
    batching_for_replicas,
    check_training_input,
    datasets,
    train_texts,
)
from keras_transformer.training.build import (
    build_tokenizers,
    model_config,
    start_from,
    starting_point,
)
from keras_transformer.training.callbacks import (
    EarlyStopping,
    EpochHistory,
    TimeBudget,
    ValidationBleu,
)
from keras_transformer.training.corpora import SourceMix, load_corpus
from keras_transformer.training.epochs import EpochRecord
from keras_transformer.training.finish import finish
from keras_transformer.training.loop import custom_fit, fit_in_steps
from keras_transformer.training.phases import (
    EpochCallbacks,
    RunSetup,
    Trained,
    TrainingData,
)
from keras_transformer.training.prepared import (
    describe_prepared,
    find_prepared,
    training_input_identity,
)
from keras_transformer.training.run_config import RunConfig, TrainingSection
from keras_transformer.training.snapshots import KeepSnapshots
from keras_transformer.training.steps import StepPlan
from keras_transformer.training.strategy import make_strategy
from keras_transformer.training.workers import (
    is_chief,
    pad_batches_for_replicas,
    same_on_every_worker,
    worker_count,
    worker_index,
)
from keras_transformer.translate import Translator
from keras_transformer.workdir import Workdir

log = logging.getLogger("training")


class _TrainingBatches:
    """The training batches from the start, as a new dataset on each call (``train_model``
    says why); the first call returns ``first`` (not read yet), the later ones ``make()``."""

    def __init__(self, first: tf.data.Dataset, make: Callable[[], tf.data.Dataset]):
        self._make = make
        self._unread = [first]

    def __call__(self) -> tf.data.Dataset:
        return self._unread.pop() if self._unread else self._make()


def training_loop(options: TrainingSection, strategy) -> str:
    """``fit`` or ``custom``: ``training.loop``, where ``auto`` is ``custom``
    under ``MultiWorkerMirroredStrategy`` (Keras 3.15's ``fit`` fails there)."""
    if options.loop == "auto":
        multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        return "custom" if multi_worker else "fit"
    return options.loop


def keras_steps_per_execution(plan: StepPlan, strategy, loop: str) -> int:
    """``compile``'s ``steps_per_execution``: Keras counts micro-batches, so an
    execution of N updates is N × ``accumulate_steps`` of them; 1 for ``fit``
    under a ``MirroredStrategy`` of several replicas, where Keras 3.15's
    multi-step function fails ("You must feed a value for placeholder tensor
    'while/cond/Placeholder'")."""
    if (
        loop == "fit"
        and strategy.num_replicas_in_sync > 1
        and isinstance(strategy, tf.distribute.MirroredStrategy)
    ):
        if plan.steps_per_execution * plan.accumulate_steps > 1:
            log.warning(
                "fit runs one batch per call under MirroredStrategy (Keras 3.15 fails with more); "
                "training.loop: custom runs training.steps_per_execution"
            )
        return 1
    return plan.steps_per_execution * plan.accumulate_steps


def start(config: RunConfig, workdir: Path) -> RunSetup:
    """Makes the strategy (first: ``MultiWorkerMirroredStrategy`` must exist before other
    TensorFlow ops run), sets the seed and the precision, and saves the config in the
    workdir (with ``model.init_from``'s architecture and tokenizer, when set)."""
    options = config.training
    strategy = make_strategy(options.strategy)
    run_workdir = Path(workdir)
    chief = is_chief(strategy)
    if not chief:
        # Every worker trains; only the chief's outputs are the run's.
        workdir = Workdir(run_workdir).worker(strategy.cluster_resolver.task_id).path
    keras.utils.set_random_seed(options.seed)
    precision = resolve_precision(options.mixed_precision)
    log.info("mixed precision: %s (%s)", precision.precision, precision.reason)
    keras.config.set_dtype_policy(dtype_policy(precision.precision))
    if options.native_ops:  # opt-in; false leaves KERAS_TRANSFORMER_NATIVE_OPS's choice
        kt.native.set_enabled(True)
    source = starting_point(config)
    if source is not None:
        config = start_from(config, source)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    Workdir(workdir).save_config(config.to_dict())
    return RunSetup(config, strategy, workdir, run_workdir, chief, precision, source)


def load_checked_corpus(config: RunConfig) -> dict[str, Any]:
    """The corpus (``load_corpus``), its sizes logged, checked against the settings that
    need a validation split and against ``training_input``'s cache and shuffle checks."""
    corpus = load_corpus(config.data)
    log.info("pairs: %s", {split: len(pairs) for split, pairs in corpus.items()})  # scans train
    if isinstance(corpus["train"], SourceMix):
        for row in corpus["train"].describe():
            log.info(
                "training corpus %s: %d pairs, weight %g: %.1f%% of the sampled pairs%s",
                row["name"],
                row["pairs"],
                row["weight"],
                100 * row["share"],
                f", tagged {row['tag']}" if row["tag"] else "",
            )
    setting = config.needs_validation()
    if setting and not corpus["valid"]:
        raise ValueError(
            f"{setting} needs a validation split, and the corpus has none: add one "
            "(data: valid) or turn the setting off."
        )
    check_training_input(config.training, corpus)  # a bad cache/shuffle setting fails first
    return corpus


def worker_part(strategy, loop: str) -> tuple[int, int] | None:
    """``(index, count)``: this worker's part of the training data, or ``None`` to read
    global batches. Under the custom loop with several workers, each reads its own part
    (its shard files, or its lines of the text) through a plain iterator that its backup
    saves; one worker reads global batches, which its replicas split."""
    workers = worker_count(strategy)
    if (
        workers > 1
        and loop == "custom"
        and isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    ):  # one process per worker (a TPU pod's one client reads for all its hosts)
        return (worker_index(strategy), workers)
    return None


def log_input(corpus, prepared: Prepared | None, part: tuple[int, int] | None) -> None:
    """Logs what training reads: the prepared shards, or each worker's part of the text."""
    if prepared is not None:
        log.info(
            "training on %s%s",
            describe_prepared(prepared),
            ", split over the workers by file" if part is not None else "",
        )
    elif part is not None:
        for text in train_texts(corpus):
            log.info(
                "worker %d of %d reads its part of the training text: %s",
                part[0] + 1,
                part[1],
                " / ".join(text.part(*part).files),
            )


def prepare_data(setup: RunSetup) -> TrainingData:
    """The first phase: the corpus checked, the tokenizers (trained or reused), the
    prepared shards when there are any, and the training and validation input, the
    same on every worker."""
    config, strategy = setup.config, setup.strategy
    corpus = load_checked_corpus(config)
    src_tok, tgt_tok = build_tokenizers(config, corpus, setup.workdir, setup.source)
    options = batching_for_replicas(config.training, strategy.num_replicas_in_sync)
    prepared = find_prepared(
        config,
        setup.workdir,
        corpus,
        src_tok,
        tgt_tok,
        run_workdir=None if setup.chief else setup.run_workdir,
    )
    loop = training_loop(config.training, strategy)
    part = worker_part(strategy, loop)
    log_input(corpus, prepared, part)
    same_on_every_worker(
        strategy,
        training_input_identity(prepared, corpus),
        "the workers would train on different data (some on prepared shards, some on the text, "
        "on different preparations or on different text); give every worker the same corpus "
        "and W/prepared (kt prepare on each machine, or a shared workdir), or "
        "--set data.prepare=false on all of them",
    )

    def make():
        return datasets(options, corpus, src_tok, tgt_tok, prepared, part=part)

    train, valid = make()
    batches = _TrainingBatches(train, lambda: make()[0])
    return TrainingData(corpus, src_tok, tgt_tok, loop, batches, valid)


def log_plan(plan: StepPlan, options: TrainingSection) -> None:
    """Logs where the run ends when both bounds are set, and an update's size."""
    if (
        plan.max_steps is not None
        and plan.epochs is not None
        and plan.max_steps != plan.epochs * plan.steps_per_epoch
    ):
        log.info(
            "training ends at step %d, the first of max_steps=%d and epochs × steps_per_epoch = %d",
            plan.total,
            plan.max_steps,
            plan.epochs * plan.steps_per_epoch,
        )
    if plan.accumulate_steps > 1:
        per_update = (
            f"{options.batch_tokens * plan.accumulate_steps:,} tokens"
            if options.batch_tokens
            else f"{options.batch_size * plan.accumulate_steps:,} sentences"
        )
        log.info("%d micro-batches per update: %s per update", plan.accumulate_steps, per_update)


def build_model(setup: RunSetup, data: TrainingData) -> kt.Transformer:
    """The second phase: the model, built and compiled under the strategy (from
    ``model.init_from``'s weights when set), its ``model_config.json`` written."""
    config, options = setup.config, setup.config.training
    plan = StepPlan.from_options(options)
    log_plan(plan, options)
    with setup.strategy.scope():
        model = kt.Transformer(model_config(config, data.src_tok, data.tgt_tok))
        model.build()
        if setup.source is not None:  # a resumed run's backup then replaces these weights
            model.load_weights(setup.source.model_path)
            log.info("starting from the weights of %s", setup.source.model_path)
        schedule = kt.TransformerSchedule(
            model.config.d_model, options.warmup_steps, scale=options.learning_rate_scale
        )
        accumulate = plan.accumulate_steps if plan.accumulate_steps > 1 else None
        model.compile(
            optimizer=kt.paper_adam(schedule, gradient_accumulation_steps=accumulate),
            loss=kt.MaskedLabelSmoothedCrossEntropy(
                options.label_smoothing, pad_id=model.config.pad_id
            ),
            metrics=[kt.MaskedAccuracy(pad_id=model.config.pad_id)],
            jit_compile=bool(options.jit),
            steps_per_execution=keras_steps_per_execution(plan, setup.strategy, data.loop),
        )
    write_text_atomically(setup.run_dir.model_config_path, model.config.to_json())
    log.info("model: %s parameters", f"{model.count_params():,}")
    return model


def make_callbacks(
    config: RunConfig, run_dir: Workdir, translator: Translator, valid_pairs, metric: str | None
) -> EpochCallbacks:
    """The per-epoch callbacks of a run and the ``TrainingBackup`` that saves their states:
    validation BLEU, early stopping, the kept snapshots, the time budget and the history."""
    options = config.training
    backup = TrainingBackup(run_dir.backup_dir)
    keep_best = options.keep_best or (1 if options.early_stopping else 0)
    # The callbacks share the epoch's results and time through one record.
    record = EpochRecord()
    keeper = KeepSnapshots(
        run_dir.checkpoints_dir,
        last=options.average_last if options.average == "last" else 0,
        best=keep_best,
        metric=metric,
        protect=lambda: {
            name for state in backup.saved_states("snapshots") for name in state.get("kept", ())
        },
        record=record,
    )
    backup.track("snapshots", keeper)
    bleu_sentences = config.evaluation.bleu_sentences
    bleu = None
    if bleu_sentences and valid_pairs:
        bleu = ValidationBleu(
            translator, valid_pairs[:bleu_sentences], run_dir.logs_dir, record=record
        )
    stopper = None
    if options.early_stopping:
        stopper = EarlyStopping(
            options.early_stopping, options.patience, options.min_delta, record=record
        )
        backup.track("early_stopping", stopper)
    # Without max_minutes it only counts: the time used goes on across restarts either way.
    budget = TimeBudget(options.max_minutes or None, record=record)
    backup.track("time_budget", budget)
    history = EpochHistory(record=record)
    backup.track("history", history)
    return EpochCallbacks(backup, keeper, bleu, stopper, budget, history)


def train_model(
    model,
    strategy,
    train_data: Callable[[], tf.data.Dataset],
    valid_ds,
    options: TrainingSection,
    run_dir: Workdir,
    epoch_callbacks: list[keras.callbacks.Callback],
    backup: TrainingBackup | None = None,
) -> dict:
    """``model.fit`` (one machine, mirrored, TPU) or ``custom_fit`` (multi-worker,
    or ``training.loop: custom``) over ``StepPlan.from_options(options)``; both
    run ``model.train_step``, validate ``valid_ds`` at each epoch end (with any
    number of replicas), run the same per-epoch callbacks and resume from
    ``run_dir.backup_dir`` (left in place: ``run`` deletes it at the end).
    ``train_data()`` builds the training batches anew (``fit_in_steps`` says
    why). ``backup``: the ``TrainingBackup`` (with the callbacks' states it
    tracks), by default one in ``run_dir.backup_dir``. Returns the per-epoch
    history."""
    loop = training_loop(options, strategy)
    plan = StepPlan.from_options(options)
    backup = backup if backup is not None else TrainingBackup(run_dir.backup_dir)
    if loop == "custom":
        return custom_fit(
            model,
            strategy,
            train_data(),
            plan,
            validation_data=valid_ds,
            backup=backup,
            summary_dir=run_dir.logs_dir,
            callbacks=epoch_callbacks,
        )
    replicas = strategy.num_replicas_in_sync
    if valid_ds is not None:
        valid_ds = pad_batches_for_replicas(valid_ds, replicas, model.config.pad_id)
    callbacks = [
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.TensorBoard(str(run_dir.logs_dir), update_freq=100),
        *epoch_callbacks,
    ]
    return fit_in_steps(
        model,
        lambda: pad_batches_for_replicas(train_data(), replicas, model.config.pad_id),
        plan,
        validation_data=valid_ds,
        backup=backup,
        callbacks=callbacks,
        verbose=options.verbose,
    )


def train(setup: RunSetup, data: TrainingData, model: kt.Transformer) -> Trained:
    """The third phase: ``train_model`` with the run's per-epoch callbacks, resumed from
    the workdir's backup when there is one."""
    config = setup.config
    translator = Translator(
        model, data.src_tok, data.tgt_tok, max_src_length=config.training.max_src_length
    )
    metric = config.validation_metric(bool(data.corpus["valid"]))
    callbacks = make_callbacks(config, setup.run_dir, translator, data.corpus["valid"], metric)
    history = train_model(
        model,
        setup.strategy,
        data.train_data,
        data.valid,
        config.training,
        setup.run_dir,
        callbacks.as_list(),
        callbacks.backup,
    )
    return Trained(model, translator, callbacks, metric, callbacks.history.whole(history))


def run(config: RunConfig, workdir: Path) -> dict[str, Any]:
    """Trains a model as ``config`` says, in ``workdir`` (resuming from its backup).

    Args:
        config: the resolved config (``load_config``).
        workdir: the run's folder (``keras_transformer.Workdir``).

    Returns:
        What ``metrics.json`` holds.

    Raises:
        ValueError: the corpus, the prepared shards or a setting does not fit the run;
            the message says what to fix.
    """
    started = time.time()
    setup = start(config, workdir)
    data = prepare_data(setup)
    model = build_model(setup, data)
    trained = train(setup, data, model)
    return finish(setup, data, trained, started)
