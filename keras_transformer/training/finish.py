"""A run's last phase: the final weights (an average of epoch snapshots or a single one,
whichever validates better), the test scores, ``metrics.json`` and the learning curves."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import keras

from keras_transformer.files import write_text_atomically, write_through_temp
from keras_transformer.hardware import cpu_record
from keras_transformer.training.corpora import SourceMix
from keras_transformer.training.curves import plot_learning_curves
from keras_transformer.training.epochs import better, metric_name, metric_value
from keras_transformer.training.loop import evaluator, optimizer_step
from keras_transformer.training.phases import RunSetup, Trained, TrainingData
from keras_transformer.training.scoring import score_translations
from keras_transformer.training.snapshots import KeepSnapshots, average_weights
from keras_transformer.training.workers import is_chief
from keras_transformer.translate import Translator

log = logging.getLogger("training")


def score_split(translator: Translator, pairs, show: int = 0) -> dict[str, Any]:
    """Greedy-translate ``pairs`` and score them; log the first ``show`` examples."""
    started = time.time()
    hypotheses = translator.translate([source for source, _ in pairs], batch_size=128)
    scores = score_translations(hypotheses, [target for _, target in pairs])
    scores["decode_seconds"] = round(time.time() - started, 1)
    for (source, reference), hypothesis in list(zip(pairs, hypotheses))[:show]:
        log.info(
            "\n  source:     %s\n  reference:  %s\n  translated: %s", source, reference, hypothesis
        )
    return scores


def choose_final_weights(
    model, keeper: KeepSnapshots, averaged: list[int], average: str, metric, measure
) -> dict[str, Any]:
    """Set ``model``'s final weights: the average of the ``averaged`` epochs'
    snapshots or a single one (the best epoch when best epochs are kept, else
    the last), whichever scores better on validation (``metric``; the average
    wins a tie), so averaging never makes the model worse than that single
    snapshot. ``measure()`` gives the metric of the model's weights now (a
    single snapshot's is the one its epoch recorded). Without a validation
    metric the average is kept unchecked. Returns what ``metrics.json`` records
    under ``averaging`` (and logs it)."""
    single_role = "best" if keeper.best else "last"
    single = keeper.best_epoch() if keeper.best else (keeper.last_epochs(1) or [None])[0]

    def names(epochs):
        return [keeper.path(epoch).name for epoch in epochs]

    candidates = []  # (what it is, its epochs): the average first, it wins ties
    if averaged:
        kind = "average" if len(averaged) > 1 else ("best" if average == "best" else "last")
        candidates.append((kind, list(averaged)))
    if single is not None and [single] != list(averaged):
        candidates.append((single_role, [single]))
    record: dict[str, Any] = {
        "metric": metric,
        "averaged": names(averaged),
        "averaged_value": None,
        "single": None if single is None else keeper.path(single).name,
        "single_value": None if single is None else keeper.values.get(single),
        "kept": None,
        "snapshots": [],
    }
    if not candidates:
        return record

    def describe(kind, epochs):
        if kind == "average":
            return "the average of epochs " + ", ".join(map(str, sorted(epochs)))
        return f"the {kind} epoch {epochs[0]}"

    kind, epochs = candidates[0]
    model.set_weights(average_weights(keeper.paths(epochs)))
    if len(candidates) == 2:
        other_kind, other = candidates[1]
        if metric is None:
            log.info(
                "final model: %s (no validation to check it against %s)",
                describe(kind, epochs),
                describe(other_kind, other),
            )
        else:
            value = measure() if kind == "average" else keeper.values.get(epochs[0])
            record["averaged_value"] = value
            keep_first = not better(metric, record["single_value"], value)
            log.info(
                "final model: %s (%s %s) against %s (%s): kept %s",
                describe(kind, epochs),
                metric_name(metric),
                metric_value(metric, value),
                describe(other_kind, other),
                metric_value(metric, record["single_value"]),
                describe(kind, epochs) if keep_first else describe(other_kind, other),
            )
            if not keep_first:
                kind, epochs = other_kind, other
                model.set_weights(average_weights(keeper.paths(epochs)))
    else:
        log.info("final model: %s", describe(kind, epochs))
    record.update(kept=kind, snapshots=names(epochs))
    return record


def training_metrics(setup: RunSetup, data: TrainingData, trained: Trained) -> dict[str, Any]:
    """``metrics.json``'s record of the training itself: the corpora, the time, the steps,
    the precision, the per-epoch history and the best epoch."""
    model, callbacks = trained.model, trained.callbacks
    train = data.corpus["train"]
    metrics: dict[str, Any] = {
        **({"sources": train.describe()} if isinstance(train, SourceMix) else {}),
        "train_seconds": round(callbacks.budget.seconds(), 1),
        "optimizer_steps": optimizer_step(model),
        "precision": {
            "config": setup.config.training.mixed_precision,
            "used": setup.precision.precision,
            "reason": setup.precision.reason,
        },
        "history": {
            key: [round(float(v), 4) for v in values] for key, values in trained.history.items()
        },
    }
    if isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer):  # fp16: a scaled loss
        metrics["loss_scale"] = float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale))
    best = callbacks.keeper.best_epoch()
    metrics["validation_metric"] = trained.metric
    metrics["best_epoch"] = best
    metrics["best_value"] = None if best is None else callbacks.keeper.values[best]
    stopper = callbacks.stopper
    metrics["stopped_early"] = stopper is not None and stopper.stopped_epoch is not None
    return metrics


def draw_curves(setup: RunSetup, history: dict[str, list[float]]) -> None:
    """``learning_curves.png`` in the workdir (the chief's), when matplotlib is installed."""
    if not (is_chief(setup.strategy) and history.get("loss")):
        return
    workdir = setup.workdir
    try:
        plot_learning_curves(history, workdir / "learning_curves.png", title=f"{workdir.name}")
    except ImportError:
        log.info("learning_curves.png not drawn: install matplotlib (the [plots] extra) for it")


def final_weights(setup: RunSetup, data: TrainingData, trained: Trained, pairs, split: str):
    """Set the model's final weights (``choose_final_weights``); with an average of several
    epochs, the last epoch's scores on ``pairs`` first. Returns those metrics."""
    options, keeper = setup.config.training, trained.callbacks.keeper
    model, metric = trained.model, trained.metric
    if options.average == "last":
        averaged = keeper.last_epochs(options.average_last)
    else:
        averaged = keeper.best_epochs(options.keep_best)
    metrics: dict[str, Any] = {}
    if len(averaged) > 1 and pairs:
        metrics[f"{split}_last_checkpoint"] = score_split(trained.translator, pairs)

    def measure() -> float:
        """The validation metric of the model's weights now."""
        if metric == "bleu":
            return float(trained.callbacks.bleu.score()["bleu"])
        return float(evaluator(model, setup.strategy)(data.valid)["loss"])

    metrics["averaging"] = choose_final_weights(
        model, keeper, averaged, options.average, metric, measure
    )
    if len(averaged) > 1:
        metrics["averaged_checkpoints"] = metrics["averaging"]["averaged"]
    return metrics


def finish(setup: RunSetup, data: TrainingData, trained: Trained, started: float) -> dict:
    """The last phase: the final weights saved as ``model.keras``, the test split (or the
    validation split without one) scored, ``metrics.json`` and the learning curves
    written, the backup deleted (the next run starts afresh).

    Returns:
        What ``metrics.json`` holds.
    """
    metrics = training_metrics(setup, data, trained)
    draw_curves(setup, trained.history)
    split = "test" if data.corpus["test"] else "valid"
    pairs = data.corpus[split][: setup.config.evaluation.max_sentences]
    metrics.update(final_weights(setup, data, trained, pairs, split))
    run_dir = setup.run_dir
    write_through_temp(run_dir.model_path, trained.model.save)
    if pairs:
        metrics[split] = score_split(trained.translator, pairs, show=5)
    metrics["total_seconds"] = round(time.time() - started, 1)
    metrics["cpu"] = cpu_record()  # the seconds (and a bf16 run's speed) depend on it
    write_text_atomically(run_dir.metrics_path, json.dumps(metrics, indent=2))
    trained.callbacks.backup.delete()
    trained.callbacks.keeper.collect()  # the kept snapshots stay in W/checkpoints
    log.info("metrics: %s", json.dumps({k: v for k, v in metrics.items() if k != "history"}))
    return metrics
