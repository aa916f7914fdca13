"""The per-epoch callbacks share one ``EpochRecord`` instead of depending on their
order in the list: in every order they score validation BLEU once per epoch, keep
the same best epoch, stop early or on the time budget after the same epoch (the
budget counting every callback's time), and record the same logs, history and
backup states. The BLEU is scripted (a hand-written ``score``), so the tests check
the bookkeeping, not a model."""

import itertools

import numpy as np
import pytest

# Validation BLEU after each epoch: 5.0 at epoch 2 is the last improvement by more than
# 0.5, so with patience 2 early stopping ends the run after epoch 4; epoch 3 (5.3) is the
# best snapshot.
BLEU = [1.0, 5.0, 5.3, 4.0, 9.0, 9.0]
TRAIN_SECONDS, SCORE_SECONDS = 100.0, 30.0
KEYS = ["loss", "val_loss", "val_bleu", "val_chrf", "epoch_seconds"]
NAMES = ("bleu", "stopper", "keeper", "budget", "history")


class FakeModel:
    """What the callbacks use of a model: its weights (the epoch) and ``stop_training``."""

    def __init__(self):
        self.epoch = 0
        self.stop_training = False

    def get_weights(self):
        return [np.full((2,), float(self.epoch), "float32")]


def _callbacks(directory, clock, model, minutes):
    """The trainer's epoch callbacks on one record, BLEU scored by ``BLEU``, each
    scoring taking ``SCORE_SECONDS`` on ``clock``; returns them by name and the
    list of the epochs scored."""
    from keras_transformer.training.callbacks import (
        EarlyStopping,
        EpochHistory,
        TimeBudget,
        ValidationBleu,
    )
    from keras_transformer.training.epochs import EpochRecord
    from keras_transformer.training.snapshots import KeepSnapshots

    record = EpochRecord()
    scored = []
    bleu = ValidationBleu(translator=None, pairs=[("a b", "a b")], record=record)

    def score():
        scored.append(model.epoch)
        clock[0] += SCORE_SECONDS
        return {"bleu": BLEU[model.epoch - 1], "chrf": 50.0 + model.epoch}

    bleu.score = score
    built = {
        "bleu": bleu,
        "stopper": EarlyStopping("bleu", patience=2, min_delta=0.5, record=record),
        "keeper": KeepSnapshots(directory, last=1, best=1, metric="bleu", record=record),
        "budget": TimeBudget(minutes, record=record),
        "history": EpochHistory(record=record),
    }
    return built, scored


def _run(directory, order, monkeypatch, minutes=None):
    """Train a fake run of at most ``len(BLEU)`` epochs with the callbacks in ``order``,
    as ``model.fit``'s callback list calls them; returns what the run decided."""
    from keras_transformer.training import epochs

    clock = [1000.0]
    monkeypatch.setattr(epochs.time, "time", lambda: clock[0])
    model = FakeModel()
    built, scored = _callbacks(directory, clock, model, minutes)
    callbacks = [built[name] for name in order]
    for callback in callbacks:
        callback.set_model(model)
    logs_seen = []
    for epoch in range(len(BLEU)):
        clock[0] += TRAIN_SECONDS
        model.epoch = epoch + 1
        logs = {"loss": 3.0 - 0.25 * epoch, "val_loss": 2.0 + epoch}
        for callback in callbacks:
            callback.on_epoch_end(epoch, logs)
        logs_seen.append(list(logs.items()))
        if model.stop_training:
            break
    keeper = built["keeper"]
    return {
        "epochs": len(logs_seen),
        "scored": scored,
        "logs": logs_seen,
        "best_snapshot": keeper.best_epoch(),
        "kept": keeper.kept_epochs(),
        "files": sorted(path.name for path in directory.iterdir()),
        "states": {
            name: built[name].get_state() for name in ("stopper", "keeper", "budget", "history")
        },
        "train_seconds": built["budget"].seconds(),
    }


def test_early_stopping_and_snapshots_do_not_depend_on_the_order(tmp_path, monkeypatch):
    results = {
        order: _run(tmp_path / "-".join(order), order, monkeypatch)
        for order in itertools.permutations(NAMES)
    }
    first = results[NAMES]
    # The trainer's old order, checked against the script.
    assert first["epochs"] == 4 and first["scored"] == [1, 2, 3, 4]
    assert first["states"]["stopper"] == {
        "best": 5.0,
        "best_epoch": 2,
        "wait": 2,
        "stopped_epoch": 4,
    }
    assert first["best_snapshot"] == 3 and first["kept"] == [3, 4]
    assert first["files"] == ["epoch_0003.npz", "epoch_0004.npz"]
    assert [[key for key, _ in logs] for logs in first["logs"]] == [KEYS] * 4
    assert first["logs"][1] == [
        ("loss", 2.75),
        ("val_loss", 3.0),
        ("val_bleu", 5.0),
        ("val_chrf", 52.0),
        ("epoch_seconds", TRAIN_SECONDS + SCORE_SECONDS),
    ]
    history = first["states"]["history"]["history"]
    assert list(history) == KEYS and history["val_bleu"] == BLEU[:4]
    assert history["epoch_seconds"] == [TRAIN_SECONDS + SCORE_SECONDS] * 4
    assert first["train_seconds"] == 4 * (TRAIN_SECONDS + SCORE_SECONDS)
    for order, result in results.items():
        assert result == first, order


def test_the_time_budget_counts_every_callback_in_any_order(tmp_path, monkeypatch):
    """6 minutes: epochs of 100 s of training and 30 s of scoring end at 130 and 260 s,
    and a third would end at 390 s: the run stops after epoch 2. Without the scoring
    time it would go on to epoch 3."""
    results = {
        order: _run(tmp_path / "-".join(order), order, monkeypatch, minutes=6)
        for order in itertools.permutations(NAMES)
    }
    first = results[NAMES]
    assert first["epochs"] == 2 and first["scored"] == [1, 2]
    assert first["states"]["budget"] == {"seconds": 260.0, "epoch_seconds": 0.0}
    assert first["states"]["stopper"]["stopped_epoch"] is None
    for order, result in results.items():
        assert result == first, order


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_a_real_loop_gives_the_same_run_in_either_order(tmp_path, loop):
    """``fit_in_steps`` and ``custom_fit`` pass one logs dict to every callback: with
    the history and the budget first and early stopping before the BLEU, the run stops
    at the same epoch with the same history as in the trainer's old order."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.training.loop import StepPlan, custom_fit, fit_in_steps, optimizer_step

    x = np.linspace(-1, 1, 24, dtype="float32").reshape(8, 3)
    y = np.ones((8, 1), "float32")

    def train(order, directory):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(
            optimizer=kt.paper_adam(kt.TransformerSchedule(4, warmup_steps=3)), loss="mse"
        )
        clock = [0.0]
        fake = FakeModel()
        built, scored = _callbacks(directory, clock, fake, minutes=None)

        def score():  # the epoch from the optimizer's step: 2 steps an epoch
            epoch = optimizer_step(model) // 2
            scored.append(epoch)
            return {"bleu": BLEU[epoch - 1], "chrf": 0.0}

        built["bleu"].score = score
        callbacks = [built[name] for name in order]
        plan = StepPlan(steps_per_epoch=2, epochs=len(BLEU))

        def data():
            return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(2)

        if loop == "fit":
            history = fit_in_steps(model, data, plan, callbacks=callbacks, verbose=0)
        else:
            strategy = tf.distribute.get_strategy()
            history = custom_fit(model, strategy, data(), plan, callbacks=callbacks)
        recorded = built["history"].get_state()["history"]
        return history, recorded, scored, built["stopper"].get_state(), built["keeper"]

    forward = train(NAMES, tmp_path / "forward")
    backward = train(("history", "budget", "stopper", "keeper", "bleu"), tmp_path / "backward")
    for history, recorded, scored, stopper, keeper in (forward, backward):
        assert scored == [1, 2, 3, 4] and stopper["stopped_epoch"] == 4
        assert list(history) == list(recorded) and list(recorded)[-3:] == KEYS[2:]
        assert history["val_bleu"] == recorded["val_bleu"] == BLEU[:4]
        assert keeper.best_epoch() == 3

    def untimed(history):  # the seconds are the machine's
        return {name: values for name, values in history.items() if name != "epoch_seconds"}

    assert untimed(forward[0]) == untimed(backward[0])
    assert untimed(forward[1]) == untimed(backward[1])
