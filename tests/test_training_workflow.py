"""The practitioner's training workflow: early stopping on a validation metric, the
best epochs' snapshots, an average that never makes the model worse than a single
snapshot, resuming with all of that state, and a backup that falls back to the
previous one when it cannot be read. The validation metric is scripted (a callback
that writes the epoch's value into the logs, or a patched ``ValidationBleu.score``),
so each test checks the bookkeeping, not a model's quality."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hang_guard import HANG_TIMEOUT

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
X, Y = np.linspace(-1, 1, 24, dtype="float32").reshape(8, 3), np.ones((8, 1), "float32")


class Killed(Exception):
    pass


def _tiny_model():
    import keras

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=kt.paper_adam(kt.TransformerSchedule(4, warmup_steps=3)), loss="mse")
    return model


def _scripted(values, key="val_bleu", kill_at=None):
    """A callback that puts ``values[epoch]`` in the epoch's logs as ``key`` (what
    ``ValidationBleu`` or the validation pass does), and raises ``Killed`` at the
    end of epoch ``kill_at`` (1-based) before the others see it."""
    import keras

    class Scripted(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch + 1 == kill_at:
                raise Killed(f"killed at the end of epoch {epoch + 1}")
            logs[key] = values[epoch]

    return Scripted()


def _train(loop, workdir, values, *, kill_at=None, patience=2, min_delta=0.5, epochs=8):
    """Train the tiny model in ``loop`` for at most ``epochs`` epochs of 2 steps with
    early stopping on the scripted BLEU ``values``, the 2 best snapshots kept and a
    backup at each epoch end; returns (model, history, stopper, keeper)."""
    import tensorflow as tf

    from keras_transformer.training.backup import TrainingBackup
    from keras_transformer.training.callbacks import EarlyStopping
    from keras_transformer.training.loop import StepPlan, custom_fit, fit_in_steps
    from keras_transformer.training.snapshots import KeepSnapshots

    model = _tiny_model()
    plan = StepPlan(steps_per_epoch=2, epochs=epochs)
    backup = TrainingBackup(workdir / "backup")
    stopper = EarlyStopping("bleu", patience=patience, min_delta=min_delta)
    keeper = KeepSnapshots(
        workdir / "checkpoints",
        last=1,
        best=2,
        metric="bleu",
        protect=lambda: {n for state in backup.saved_states("snapshots") for n in state["kept"]},
    )
    backup.track("early_stopping", stopper)
    backup.track("snapshots", keeper)
    callbacks = [_scripted(values, kill_at=kill_at), stopper, keeper]

    def data():
        return tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(2)

    if loop == "fit":
        history = fit_in_steps(model, data, plan, backup=backup, callbacks=callbacks, verbose=0)
    else:
        strategy = tf.distribute.get_strategy()
        history = custom_fit(model, strategy, data(), plan, backup=backup, callbacks=callbacks)
    return model, history, stopper, keeper


# BLEU after each epoch: 5.0 at epoch 2 is the last improvement by more than 0.5 (5.3 is
# higher, but by less), so with patience 2 the run stops after epoch 4.
SCRIPT = [1.0, 5.0, 5.3, 4.0, 9.0, 9.0, 9.0, 9.0]


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_early_stopping_stops_where_the_metric_says(tmp_path, loop):
    from keras_transformer.training.loop import optimizer_step

    model, history, stopper, keeper = _train(loop, tmp_path, SCRIPT)
    assert stopper.stopped_epoch == 4 and optimizer_step(model) == 8
    assert len(history["loss"]) == 4
    assert (stopper.best, stopper.best_epoch, stopper.wait) == (5.0, 2, 2)
    # The snapshots: the 2 best by value (5.3, then 5.0) and the last; the others deleted
    # once no backup needs them.
    assert keeper.best_epochs() == [3, 2] and keeper.kept_epochs() == [2, 3, 4]
    metadata = json.loads((tmp_path / "backup" / "training_metadata.json").read_text())
    assert metadata["stopped"] is True and metadata["step"] == 8
    assert metadata["state"]["early_stopping"]["stopped_epoch"] == 4
    keeper.protect = lambda: set()  # the run's end: the backups are gone
    keeper.collect()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "epoch_0002.npz",
        "epoch_0003.npz",
        "epoch_0004.npz",
    ]

    # Re-run after the stop (killed while it scored): nothing more is trained.
    again, history, stopper, _ = _train(loop, tmp_path, SCRIPT)
    assert history == {} and optimizer_step(again) == 8 and stopper.stopped_epoch == 4


def test_loss_stops_when_it_no_longer_falls():
    from keras_transformer.training.callbacks import EarlyStopping

    class Model:
        stop_training = False

    stopper = EarlyStopping("loss", patience=1, min_delta=0.01)
    stopper.set_model(Model())
    for epoch, value in enumerate([3.0, 2.5, 2.495]):
        stopper.on_epoch_end(epoch, {"val_loss": value})
    assert stopper.model.stop_training and (stopper.best_epoch, stopper.stopped_epoch) == (2, 3)


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_a_resumed_run_keeps_the_early_stopping_state(tmp_path, loop):
    """Killed at the end of epoch 3 (the backup holds epoch 2: best 5.0 at epoch 2, no
    validation without improvement yet), the re-run resumes there and stops after
    epoch 4 with the state of the uninterrupted run."""
    from keras_transformer.training.loop import optimizer_step

    _, _, full_stopper, full_keeper = _train(loop, tmp_path / "full", SCRIPT)
    with pytest.raises(Killed):
        _train(loop, tmp_path / "killed", SCRIPT, kill_at=3)
    metadata = json.loads((tmp_path / "killed" / "backup" / "training_metadata.json").read_text())
    assert metadata["step"] == 4 and metadata["state"]["early_stopping"]["best_epoch"] == 2
    model, history, stopper, keeper = _train(loop, tmp_path / "killed", SCRIPT)
    assert optimizer_step(model) == 8 and len(history["loss"]) == 2  # epochs 3 and 4
    assert stopper.get_state() == full_stopper.get_state()
    assert keeper.get_state() == full_keeper.get_state()
    for epoch in keeper.kept_epochs():
        with np.load(keeper.path(epoch)) as got, np.load(full_keeper.path(epoch)) as want:
            for name in want.files:
                np.testing.assert_allclose(got[name], want[name], rtol=1e-6)


def _snapshots(tmp_path, values, metric="bleu", last=1, best=3):
    """A ``KeepSnapshots`` whose epoch ``e`` snapshot holds the tiny model's weights + e,
    with ``values[e - 1]`` as its metric; returns it and the model."""
    from keras_transformer.training.epochs import METRICS
    from keras_transformer.training.snapshots import KeepSnapshots

    model = _tiny_model()
    start = model.get_weights()
    keeper = KeepSnapshots(tmp_path / "checkpoints", last=last, best=best, metric=metric)
    keeper.set_model(model)
    for epoch, value in enumerate(values):
        model.set_weights([w + epoch + 1 for w in start])
        keeper.on_epoch_end(epoch, {METRICS[metric][0]: value})
    return keeper, model, start


def test_the_best_epochs_are_averaged(tmp_path):
    from keras_transformer.training.finish import choose_final_weights

    keeper, model, start = _snapshots(tmp_path, [2.0, 7.0, 3.0, 6.0, 1.0, 5.0])
    assert keeper.best_epochs() == [2, 4, 6] and keeper.kept_epochs() == [2, 4, 6]
    assert sorted(p.name for p in keeper.directory.iterdir()) == [
        "epoch_0002.npz",
        "epoch_0004.npz",
        "epoch_0006.npz",
    ]
    record = choose_final_weights(model, keeper, keeper.best_epochs(), "best", "bleu", lambda: 8.0)
    assert record["kept"] == "average" and record["averaged_value"] == 8.0
    assert record["single"] == "epoch_0002.npz" and record["single_value"] == 7.0
    assert record["snapshots"] == ["epoch_0002.npz", "epoch_0004.npz", "epoch_0006.npz"]
    for got, first in zip(model.get_weights(), start):
        np.testing.assert_allclose(got, first + (2 + 4 + 6) / 3, rtol=1e-6)


@pytest.mark.parametrize(
    "metric, values, averaged_value, kept",
    [
        ("bleu", [2.0, 7.0, 3.0, 6.0], 6.9, "best"),  # the average scores lower: the best epoch
        ("bleu", [2.0, 7.0, 3.0, 6.0], 7.0, "average"),  # a tie keeps the average
        ("loss", [2.0, 1.0, 3.0, 1.5], 1.2, "best"),  # the average's loss is higher
        ("loss", [2.0, 1.0, 3.0, 1.5], 0.9, "average"),
    ],
)
def test_the_average_is_kept_only_when_it_is_not_worse(
    tmp_path, metric, values, averaged_value, kept
):
    from keras_transformer.training.finish import choose_final_weights

    keeper, model, start = _snapshots(tmp_path, values, metric=metric, last=3, best=1)
    averaged = keeper.last_epochs(3)
    record = choose_final_weights(model, keeper, averaged, "last", metric, lambda: averaged_value)
    assert record["kept"] == kept and record["averaged_value"] == averaged_value
    assert record["single"] == "epoch_0002.npz"  # the best by the metric
    shift = 2 if kept == "best" else (2 + 3 + 4) / 3
    for got, first in zip(model.get_weights(), start):
        np.testing.assert_allclose(got, first + shift, rtol=1e-6)


def test_without_best_epochs_the_average_is_checked_against_the_last(tmp_path):
    from keras_transformer.training.finish import choose_final_weights

    # The slow-CPU Multi30k run: val BLEU 5.29, 9.76, 12.20, 20.21, the average of the last 3
    # far below the last epoch.
    keeper, model, start = _snapshots(tmp_path, [5.29, 9.76, 12.20, 20.21], last=3, best=0)
    record = choose_final_weights(model, keeper, keeper.last_epochs(), "last", "bleu", lambda: 13.6)
    assert (record["kept"], record["snapshots"], record["single_value"]) == (
        "last",
        ["epoch_0004.npz"],
        20.21,
    )
    for got, first in zip(model.get_weights(), start):
        np.testing.assert_allclose(got, first + 4, rtol=1e-6)
    # No validation metric: nothing to check against, the average stays.
    record = choose_final_weights(model, keeper, keeper.last_epochs(), "last", None, None)
    assert record["kept"] == "average" and record["averaged_value"] is None


def test_a_truncated_backup_falls_back_to_the_previous_one(tmp_path, caplog):
    from keras_transformer.training.backup import TrainingBackup
    from keras_transformer.training.loop import optimizer_step
    from keras_transformer.training.snapshots import KeepSnapshots
    from keras_transformer.training.steps import BackupError

    model = _tiny_model()
    backup = TrainingBackup(tmp_path / "backup")
    keeper = KeepSnapshots(
        tmp_path / "checkpoints",
        last=1,
        protect=lambda: {n for state in backup.saved_states("snapshots") for n in state["kept"]},
    )
    keeper.set_model(model)
    backup.track("snapshots", keeper)
    saved = {}
    for epoch in range(3):
        model.fit(X, Y, batch_size=4, epochs=1, verbose=0)  # 2 steps an epoch
        keeper.on_epoch_end(epoch, {})
        backup.save(model, step=optimizer_step(model), epoch=epoch + 1)
        saved[optimizer_step(model)] = [w.copy() for w in model.get_weights()]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "backup",
        "backup.previous",
        "checkpoints",
    ]
    # Only the last epoch is kept, but epoch 2's snapshot stays for the previous backup
    # (epoch 1's went with the backup that needed it, at the next collection).
    keeper.collect()
    assert sorted(p.name for p in keeper.directory.iterdir()) == [
        "epoch_0002.npz",
        "epoch_0003.npz",
    ]

    weights = tmp_path / "backup" / TrainingBackup.WEIGHTS
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a full disk
    resumed, resumed_keeper = _tiny_model(), KeepSnapshots(tmp_path / "checkpoints", last=1)
    fallback = TrainingBackup(tmp_path / "backup")
    fallback.track("snapshots", resumed_keeper)
    with caplog.at_level(logging.WARNING, logger="training"):
        assert fallback.restore(resumed)["step"] == 4 == optimizer_step(resumed)
    assert "truncated" in caplog.text and "resuming from the previous one" in caplog.text
    assert fallback.restored_from == tmp_path / "backup.previous"
    for got, want in zip(resumed.get_weights(), saved[4]):
        np.testing.assert_array_equal(got, want)
    assert resumed_keeper.kept_epochs() == [2] and resumed_keeper.path(2).exists()

    # The next save drops the unreadable backup: the good one stays the previous.
    fallback.save(resumed, step=4, epoch=2)
    assert TrainingBackup.check_folder(tmp_path / "backup.previous")["step"] == 4
    assert TrainingBackup.check_folder(tmp_path / "backup")["step"] == 4
    (tmp_path / "backup.previous" / TrainingBackup.METADATA).write_text("{trunc")
    (tmp_path / "backup" / TrainingBackup.WEIGHTS).write_bytes(b"")
    with pytest.raises(
        BackupError, match="No backup can be resumed from.*truncated.*cannot be read"
    ):
        TrainingBackup(tmp_path / "backup").restore(_tiny_model())


def test_an_incomplete_backup_folder_never_replaces_the_previous_one(tmp_path):
    from keras_transformer.training.backup import TrainingBackup

    model = _tiny_model()
    backup = TrainingBackup(tmp_path / "backup")
    backup.save(model, step=0, epoch=0)
    backup.save(model, step=0, epoch=0)
    (tmp_path / "backup" / TrainingBackup.METADATA).unlink()  # as if its write never ended
    backup.save(model, step=0, epoch=0)
    assert (tmp_path / "backup.previous" / TrainingBackup.METADATA).exists()
    assert TrainingBackup.check_folder(tmp_path / "backup")["step"] == 0
    backup.delete()
    assert not backup.exists() and sorted(tmp_path.iterdir()) == []


def _program(*args, timeout=HANG_TIMEOUT):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "-m", "training.train", "--config", "demo", *args],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "training.early_stopping=accuracy",
            "training.early_stopping='accuracy': expected bleu, loss or null",
        ),
        ("training.early_stopping=bleu", "needs validation BLEU: set evaluation.bleu_sentences"),
        ("training.patience=0", "training.patience=0: use an integer >= 1"),
        ("training.keep_best=0", "training.keep_best=0: use an integer >= 1"),
        ("training.min_delta=-1", "training.min_delta=-1: use a number >= 0"),
        ("training.average=mean", "training.average='mean': expected last or best"),
        ("training.average=best", "training.average=best averages the training.keep_best best"),
    ],
)
def test_bad_settings_are_one_line(tmp_path, override, message):
    result = _program("--workdir", str(tmp_path / "run"), "--set", override)
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        result.stderr.strip().splitlines() == [result.stderr.strip()]
        and "Traceback" not in result.stderr
    )
    assert message in result.stderr and not (tmp_path / "run").exists()


def test_early_stopping_without_a_validation_split_is_one_line(tmp_path):
    result = _program(
        "--workdir",
        str(tmp_path / "run"),
        "--set",
        "data.synthetic={train: 50, valid: 0, test: 5, seed: 1}",
        "--set",
        "training.early_stopping=loss",
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("kt train: error: training.early_stopping=loss needs")
    assert "validation split" in last


@pytest.mark.slow  # a training of the micro model and its resumption (about 2 minutes on 2 cores)
def test_the_program_stops_early_resumes_and_records_the_choice(tmp_path, monkeypatch, caplog):
    """The whole program with a scripted validation BLEU (by epoch: 3, 8, 6, 5, ...).
    Killed while it validates epoch 3, its backup (epoch 2) truncated, the re-run
    falls back to the previous backup (epoch 1), stops after epoch 4 as the script
    says, records the best epoch and the choice in metrics.json, and model.keras holds
    the chosen snapshot's weights: the average of epochs 2-4 scores 1.0, below the
    best epoch's 8.0."""
    import keras

    from keras_transformer.training import callbacks, finish, trainer
    from keras_transformer.training.backup import TrainingBackup
    from keras_transformer.training.loop import optimizer_step
    from keras_transformer.training.run_config import load_config

    script = {1: 3.0, 2: 8.0, 3: 6.0, 4: 5.0}
    state = {"kill_at": 3, "final": False}

    def scripted_score(self):
        epoch = optimizer_step(self.translator.model) // 2  # 2 steps an epoch
        if state["final"]:
            return {"bleu": 1.0, "chrf": 0.0}  # the average
        if epoch == state["kill_at"]:
            raise Killed(f"killed while validating epoch {epoch}")
        return {"bleu": script.get(epoch, 9.0), "chrf": 0.0}

    choose = finish.choose_final_weights

    def choose_final_weights(*args, **kwargs):
        state["final"] = True
        return choose(*args, **kwargs)

    monkeypatch.setattr(callbacks.ValidationBleu, "score", scripted_score)
    monkeypatch.setattr(finish, "choose_final_weights", choose_final_weights)
    config = load_config(
        "demo",
        [
            "data.synthetic={train: 300, valid: 20, test: 10, seed: 1}",
            "tokenizer.vocab_size=200",
            "model.d_model=32",
            "model.d_ff=64",
            "training.epochs=8",
            "training.steps_per_epoch=2",
            "training.steps_per_execution=1",
            "training.batch_tokens=256",
            "training.verbose=0",
            "training.early_stopping=bleu",
            "training.patience=2",
            "training.average_last=3",
            "evaluation.bleu_sentences=5",
            "evaluation.max_sentences=4",
        ],
    )
    workdir = tmp_path / "run"
    with pytest.raises(Killed):
        trainer.run(config, workdir)
    assert TrainingBackup.check_folder(workdir / "backup")["step"] == 4
    assert TrainingBackup.check_folder(workdir / "backup.previous")["step"] == 2
    weights = workdir / "backup" / TrainingBackup.WEIGHTS
    weights.write_bytes(weights.read_bytes()[:1000])  # the disk filled up

    state["kill_at"] = None
    with caplog.at_level(logging.INFO, logger="training"):
        metrics = trainer.run(config, workdir)
    assert "is truncated" in caplog.text and "resuming from the previous one" in caplog.text
    assert "at step 2" in caplog.text
    assert metrics["stopped_early"] is True and metrics["optimizer_steps"] == 8  # 4 epochs
    # Epochs 1 to 4: the backup it fell back to (step 2) holds the history of epoch 1.
    assert len(metrics["history"]["loss"]) == 4
    assert (metrics["best_epoch"], metrics["best_value"]) == (2, 8.0)
    averaging = metrics["averaging"]
    assert averaging["averaged"] == ["epoch_0002.npz", "epoch_0003.npz", "epoch_0004.npz"]
    assert (averaging["averaged_value"], averaging["single_value"]) == (1.0, 8.0)
    assert averaging["kept"] == "best" and averaging["snapshots"] == ["epoch_0002.npz"]
    assert "stopping after epoch 4" in caplog.text
    assert "kept the best epoch 2" in caplog.text
    saved = json.loads((workdir / "metrics.json").read_text())
    assert saved["averaging"] == averaging and saved["stopped_early"] is True
    assert not (workdir / "backup").exists() and not (workdir / "backup.previous").exists()
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == [
        "epoch_0002.npz",
        "epoch_0003.npz",
        "epoch_0004.npz",
    ]
    final = keras.models.load_model(workdir / "model.keras").get_weights()
    with np.load(workdir / "checkpoints" / "epoch_0002.npz") as best:
        for got, want in zip(final, (best[f"arr_{i}"] for i in range(len(best.files)))):
            np.testing.assert_array_equal(got, want)
