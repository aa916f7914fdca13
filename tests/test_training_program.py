"""The training program: configs, strategies, and an end-to-end micro run."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from keras_transformer.hardware import cpu_record
from keras_transformer import Workdir
from training.config import apply_override, config_path, load_config
from training.strategy import make_strategy

CHECKOUT = Path(__file__).resolve().parent.parent
MICRO = [
    "--set", "data.synthetic={train: 300, valid: 20, test: 20, seed: 1}",
    "--set", "tokenizer.vocab_size=200",
    "--set", "model.d_model=32", "--set", "model.d_ff=64",
    "--set", "training.epochs=2", "--set", "training.steps_per_epoch=3",
    "--set", "training.steps_per_execution=1", "--set", "training.batch_tokens=256",
]


def test_configs_load_and_overrides_are_typed(tmp_path):
    config = load_config("demo", ["training.epochs=3", "training.jit=true", "model.norm_first=true",
                                  "training.label_smoothing=0.2"])
    assert config["training"]["epochs"] == 3 and config["training"]["jit"] is True
    assert config["model"]["norm_first"] is True
    assert config["training"]["label_smoothing"] == 0.2
    Workdir(tmp_path).save_config(config)
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == config
    assert config_path(str(tmp_path / "config.yaml")) == tmp_path / "config.yaml"


@pytest.mark.parametrize("override, message", [
    ("training.epocs=3", "no key 'epocs'"),
    ("nosuch.key=1", "not a config section"),
    ("training.epochs", "section.key=value"),
])
def test_bad_overrides_say_what_is_wrong(override, message):
    config = load_config("demo")
    with pytest.raises(ValueError, match=message):
        apply_override(config, override)


def test_unknown_config_lists_the_known_ones():
    with pytest.raises(ValueError, match="demo"):
        config_path("nonexistent")


def test_strategy_names_are_checked(monkeypatch):
    with pytest.raises(ValueError, match="choose one of"):
        make_strategy("horovod")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG"):
        make_strategy("multi_worker")
    assert make_strategy("default").num_replicas_in_sync == 1


def _run(args, timeout=600):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, *args], cwd=CHECKOUT, capture_output=True, text=True,
                            env=env, timeout=timeout)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-4000:])
    return result


def test_train_then_evaluate_end_to_end(tmp_path):
    workdir = tmp_path / "run"
    trained = _run(["-m", "training.train", "--config", "demo", "--workdir", str(workdir), *MICRO,
                    "--set", "training.average_last=2", "--set", "evaluation.bleu_sentences=5"])
    assert "ran out of data" not in trained.stderr  # Keras' warning for a validation set of unknown length
    for name in ("config.yaml", "model_config.json", "model.keras", "metrics.json",
                 "tokenizer/spm_shared.model"):
        assert (workdir / name).exists(), name
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert len(metrics["history"]["loss"]) == 2
    assert 0.0 <= metrics["test"]["exact_match"] <= 1.0 and "bleu" in metrics["test"]
    assert len(metrics["history"]["val_bleu"]) == 2  # validation BLEU after each epoch
    assert metrics["averaged_checkpoints"] == ["epoch_0001.npz", "epoch_0002.npz"]
    assert "bleu" in metrics["test_last_checkpoint"]
    assert not (workdir / "backup").exists() or not any((workdir / "backup").iterdir())
    assert (workdir / "learning_curves.png").stat().st_size > 0
    assert metrics["cpu"] == cpu_record()  # its seconds are this CPU's

    from keras_transformer.data import demo_splits, write_parallel_files

    pairs = demo_splits(train=300, valid=20, test=20, seed=1)["test"]
    write_parallel_files(pairs, tmp_path, "test")
    _run(["-m", "training.evaluate", "--workdir", str(workdir), "--src", str(tmp_path / "test.src"),
          "--ref", str(tmp_path / "test.tgt")])
    scores = json.loads((workdir / "eval.json").read_text())
    assert scores["sentences"] == 20 and scores["decoding"] == "greedy" and scores["cpu"]["model"]
    _run(["-m", "training.evaluate", "--workdir", str(workdir), "--src", str(tmp_path / "test.src"),
          "--ref", str(tmp_path / "test.tgt"), "--beam", "3", "--out", str(tmp_path / "beam.json")])
    assert json.loads((tmp_path / "beam.json").read_text())["decoding"] == "beam3"

    from training import tune_decoding

    tune_decoding.main(["--workdir", str(workdir), "--src", str(tmp_path / "test.src"),
                        "--ref", str(tmp_path / "test.tgt"), "--beams", "1", "2", "--alphas", "0.6", "1.0"])
    grid = json.loads((workdir / "decoding_grid.json").read_text())
    assert [(row["beam"], row["alpha"]) for row in grid["grid"]].count((1, 0.0)) == 1 and len(grid["grid"]) == 3
    assert grid["best"] == grid["grid"][0] and grid["best"]["bleu"] == max(row["bleu"] for row in grid["grid"])


def test_mixed_precision_and_xla_switches(tmp_path):
    workdir = tmp_path / "bf16"
    _run(["-m", "training.train", "--config", "demo", "--workdir", str(workdir), *MICRO,
          "--mixed-precision", "bf16", "--jit", "--set", "training.static_shapes=true",
          "--set", "training.max_src_length=48", "--set", "training.max_tgt_length=48"])
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    assert config["training"]["mixed_precision"] == "bf16" and config["training"]["jit"] is True
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert all(value == value for value in metrics["history"]["loss"])  # finite, not NaN


def test_mirrored_strategy_on_two_logical_cpus(tmp_path):
    script = f"""
import sys, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from pathlib import Path
from training.config import load_config
from training import trainer
config = load_config("demo", {MICRO[1::2]!r} + ["training.strategy=mirrored"])
strategy = trainer.make_strategy("mirrored")
assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
metrics = trainer.run(config, Path({str(tmp_path / 'mirrored')!r}))
print("replicas", strategy.num_replicas_in_sync, "loss", metrics["history"]["loss"])
"""
    result = _run(["-c", script])
    assert "replicas 2" in result.stdout


def _free_ports(count):
    import socket

    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _train_command(workdir, *extra):
    return [sys.executable, "-m", "training.train", "--config", "demo", "--workdir", str(workdir),
            *MICRO, *extra]


def test_multi_worker_training_on_loopback_ends_with_identical_weights(tmp_path):
    import keras
    import numpy as np

    import keras_transformer  # noqa: F401

    ports = _free_ports(2)
    workers = []
    for index in range(2):
        tf_config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                     "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": json.dumps(tf_config)}
        workers.append(subprocess.Popen(
            _train_command(tmp_path / "run", "--strategy", "multi_worker",
                           "--set", "evaluation.max_sentences=4"),
            cwd=CHECKOUT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [worker.communicate(timeout=600)[0] for worker in workers]
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output[-4000:]
    chief, other = tmp_path / "run", tmp_path / "run" / "worker_1"
    chief_metrics = json.loads((chief / "metrics.json").read_text())
    other_metrics = json.loads((other / "metrics.json").read_text())
    assert chief_metrics["optimizer_steps"] == other_metrics["optimizer_steps"] == 6
    assert chief_metrics["history"]["loss"] == other_metrics["history"]["loss"]  # global metrics
    chief_weights = keras.models.load_model(chief / "model.keras").get_weights()
    other_weights = keras.models.load_model(other / "model.keras").get_weights()
    for a, b in zip(chief_weights, other_weights):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_killed_run_resumes_where_it_stopped(tmp_path, loop):
    import signal
    import time

    workdir = tmp_path / "run"
    command = _train_command(workdir, "--set", f"training.loop={loop}", "--set", "training.epochs=20",
                             "--set", "training.steps_per_epoch=4", "--set", "evaluation.max_sentences=4")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    backup = workdir / "backup" / ("training_metadata.json" if loop == "fit" else "custom_loop.weights.h5")
    process = subprocess.Popen(command, cwd=CHECKOUT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while not backup.exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    assert backup.exists(), "no backup written before the deadline"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (workdir / "metrics.json").exists(), "the run finished before it was killed"

    result = _run(command[1:])
    if loop == "fit":
        first_epoch = next(line for line in result.stdout.splitlines() if line.startswith("Epoch "))
        assert first_epoch != "Epoch 1/20", first_epoch
    else:
        assert "resumed from" in result.stderr  # the programs log to stderr
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["optimizer_steps"] == 80
    assert len(metrics["history"]["loss"]) < 20  # only the epochs after the restart ran


def test_backup_killed_while_written_still_restores(tmp_path):
    """A kill during the weights write must leave the previous backup loadable
    (Keras' own BackupAndRestore truncates latest.weights.h5 in place; CI once
    hit exactly that in the test above)."""
    import keras
    import numpy as np

    from training.callbacks import AtomicBackupAndRestore

    def tiny_model():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(optimizer="adam", loss="mse")
        return model

    x, y = np.ones((8, 3), "float32"), np.zeros((8, 2), "float32")
    model = tiny_model()
    backup = AtomicBackupAndRestore(str(tmp_path), delete_checkpoint=False)
    model.fit(x, y, batch_size=4, epochs=2, callbacks=[backup], verbose=0)
    saved = [w.copy() for w in model.get_weights()]

    class Killed(BaseException):
        pass

    def dies_halfway(filepath, overwrite=True):
        Path(filepath).write_bytes(b"\x89HDF\r\n\x1a\n truncated")
        raise Killed

    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # the weights move on
    model.save_weights = dies_halfway
    with pytest.raises(Killed):
        backup.on_epoch_end(2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.weights.h5", "training_metadata.json"]
    assert json.loads((tmp_path / "training_metadata.json").read_text())["epoch"] == 2

    resumed = tiny_model()
    history = resumed.fit(x, y, batch_size=4, epochs=3, verbose=0,
                          callbacks=[AtomicBackupAndRestore(str(tmp_path), delete_checkpoint=False)])
    assert history.epoch == [2]  # epochs 1 and 2 were restored, not re-run
    assert int(resumed.optimizer.iterations.numpy()) == 6
    restored = tiny_model()
    restored.build((None, 3))
    restored.optimizer.build(restored.trainable_variables)
    restored.load_weights(tmp_path / "latest.weights.h5")
    assert not np.allclose(restored.get_weights()[0], saved[0])  # the third epoch's backup


def test_average_weights_is_the_elementwise_mean(tmp_path):
    import io

    import numpy as np

    from training.callbacks import average_weights

    rng = np.random.default_rng(0)
    sets = [[rng.normal(size=(3, 4)).astype("float32"), rng.normal(size=5).astype("float32")]
            for _ in range(3)]
    paths = []
    for i, weights in enumerate(sets):
        buffer = io.BytesIO()
        np.savez(buffer, *weights)
        paths.append(tmp_path / f"epoch_{i}.npz")
        paths[-1].write_bytes(buffer.getvalue())
    averaged = average_weights(paths)
    for j in range(2):
        np.testing.assert_allclose(averaged[j], np.mean([w[j] for w in sets], axis=0), rtol=1e-6)
    with pytest.raises(ValueError, match="No checkpoints"):
        average_weights([])


def test_time_budget_stops_before_an_epoch_that_would_not_fit(monkeypatch):
    from training import callbacks

    clock = [1000.0]
    monkeypatch.setattr(callbacks.time, "time", lambda: clock[0])
    budget = callbacks.TimeBudget(minutes=10)  # 600 s
    budget.set_model(type("FakeModel", (), {"stop_training": False})())
    stops = []
    for epoch in range(6):
        clock[0] += 200 if epoch == 0 else 150  # first epoch slower (tracing)
        logs = {}
        budget.on_epoch_end(epoch, logs)
        stops.append(budget.model.stop_training)
        if budget.model.stop_training:
            break
    # ends at 200, 350 and 500 s: a fourth 150 s epoch would end at 650 > 600.
    assert stops == [False, False, True] and logs["epoch_seconds"] == 150
    with pytest.raises(ValueError, match="max_minutes"):
        callbacks.TimeBudget(0)


def test_custom_loop_honours_stop_training():
    import keras
    import numpy as np
    import tensorflow as tf

    from training.loop import custom_fit

    class StopAfterSecondEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = epoch == 1

    strategy = tf.distribute.get_strategy()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    data = tf.data.Dataset.from_tensor_slices((np.ones((8, 3), "float32"), np.ones((8, 1), "float32")))
    history = custom_fit(model, strategy, data.batch(2).repeat(), epochs=5, steps_per_epoch=2,
                         callbacks=[StopAfterSecondEpoch()])
    assert len(history["loss"]) == 2 and int(model.optimizer.iterations.numpy()) == 4


def test_learning_curve_plot(tmp_path):
    from training.curves import plot_learning_curves

    history = {"loss": [5.0, 4.0, 3.5], "val_loss": [4.5, 3.9, 3.7], "val_bleu": [10.0, 20.0, 25.0]}
    path = plot_learning_curves(history, tmp_path / "curves.png", title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    with pytest.raises(ValueError, match="loss"):
        plot_learning_curves({}, tmp_path / "none.png")


def test_training_split_is_shuffled_whole_by_default(tmp_path):
    """A corpus stored in length order (Tatoeba's is) must not reach the model short-first."""
    import itertools

    from training.corpus import load_corpus
    from training.trainer import build_tokenizers, datasets

    from keras_transformer.data import PairSource

    config = load_config("demo", ["data.synthetic={train: 600, valid: 10, test: 10, seed: 1}",
                                  "tokenizer.vocab_size=200", "training.batch_tokens=256",
                                  "training.shuffle_buffer=null"])
    corpus = load_corpus(config["data"])
    corpus["train"] = PairSource.from_pairs(sorted(corpus["train"], key=lambda pair: len(pair[0])))
    src_tok, tgt_tok = build_tokenizers(config, corpus, tmp_path)

    def longest_source_in_first_batches(shuffle_buffer):
        config["training"]["shuffle_buffer"] = shuffle_buffer
        train, _ = datasets(config, corpus, src_tok, tgt_tok)
        return max(int((src.numpy() != 0).sum(axis=1).max())
                   for (src, _), _ in itertools.islice(train, 4))

    whole = longest_source_in_first_batches(None)
    window = longest_source_in_first_batches(8)
    lengths = sorted(len(src_tok.tokenize([s]).flat_values) + 1 for s, _ in corpus["train"])  # + EOS
    # A small window yields the shortest pairs first; the whole split reaches the long tail at once.
    assert whole >= lengths[3 * len(lengths) // 4] and whole > 1.5 * window, (window, whole, lengths[::60])


def test_corpus_from_tsv_and_text_files(tmp_path):
    import gzip

    from keras_transformer.data import PairSource
    from training.corpus import load_corpus

    (tmp_path / "train.tsv").write_text("ein Haus\ta house\nzwei\ttwo\n\tempty source\n", encoding="utf-8")
    (tmp_path / "valid.tsv").write_text("drei\tthree\n", encoding="utf-8")
    corpus = load_corpus({"kind": "tsv", "tsv": {"train": "train.tsv", "valid": "valid.tsv"}}, base_dir=tmp_path)
    assert isinstance(corpus["train"], PairSource)  # streamed; valid/test are lists
    assert list(corpus["train"]) == [("ein Haus", "a house"), ("zwei", "two")] and len(corpus["train"]) == 2
    assert corpus["valid"] == [("drei", "three")] and corpus["test"] == []
    (tmp_path / "train.src").write_text("ein  Haus \n", encoding="utf-8")
    (tmp_path / "train.tgt").write_text("a house\n", encoding="utf-8")
    corpus = load_corpus({"kind": "text", "dir": str(tmp_path)})
    assert list(corpus["train"]) == [("ein Haus", "a house")] and corpus["valid"] == []
    packed = tmp_path / "gz"
    packed.mkdir()
    for name, text in (("train.src.gz", "eins\nzwei\n"), ("train.tgt.gz", "one\ntwo\n"),
                       ("test.src.gz", "drei\n"), ("test.tgt.gz", "three\n")):
        (packed / name).write_bytes(gzip.compress(text.encode()))
    corpus = load_corpus({"kind": "text", "dir": str(packed)})
    assert list(corpus["train"]) == [("eins", "one"), ("zwei", "two")] and corpus["test"] == [("drei", "three")]
    (packed / "train.tgt.gz").write_bytes(gzip.compress(b"one\n"))
    with pytest.raises(ValueError, match="not aligned"):
        load_corpus({"kind": "text", "dir": str(packed)})
    with pytest.raises(ValueError, match="data.kind must be one of"):
        load_corpus({"kind": "csv"})
    with pytest.raises(ValueError, match="data.tsv.train"):
        load_corpus({"kind": "tsv"})


def test_corpus_from_tfds_offline():
    import tensorflow_datasets as tfds

    from training.corpus import load_corpus

    with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
        corpus = load_corpus({"kind": "tfds", "tfds": {"name": "ted_hrlr_translate/pt_to_en",
                                                        "train": "train", "valid": "validation",
                                                        "test": None}})
    assert 0 < len(corpus["train"]) <= 6 and corpus["test"] == []
    assert all(isinstance(s, str) and isinstance(t, str) for s, t in corpus["train"])


def test_large_training_splits_are_neither_cached_nor_shuffled_whole():
    from training.trainer import IN_MEMORY_PAIRS, training_input

    small, large = IN_MEMORY_PAIRS, IN_MEMORY_PAIRS + 1
    assert training_input({"cache": "auto", "shuffle_buffer": None}, small) == {"cache": True, "shuffle_buffer": small}
    assert training_input({"shuffle_buffer": 50}, large) == {"cache": False, "shuffle_buffer": 50}
    assert training_input({"cache": "/tmp/x", "shuffle_buffer": 5}, large)["cache"] == "/tmp/x"
    assert training_input({"cache": False, "shuffle_buffer": None}, 10)["cache"] is False
    with pytest.raises(ValueError, match=r"training.shuffle_buffer=null .* 1,000,001 pairs.*shuffle_buffer=200000"):
        training_input({"shuffle_buffer": None}, large)
    with pytest.raises(ValueError, match="training.cache must be"):
        training_input({"cache": 3, "shuffle_buffer": 5}, 10)
    for name in ("demo", "multi30k", "base", "big", "wmt14_ende"):  # every key can be --set
        config = load_config(name, ["training.shuffle_buffer=7", "training.cache=false",
                                    "tokenizer.max_sentences=null"])
        assert config["training"]["shuffle_buffer"] == 7 and config["tokenizer"]["max_sentences"] is None
    assert load_config("base")["training"]["shuffle_buffer"] == load_config("big")["training"]["shuffle_buffer"]


def test_text_corpus_streams_into_tokenizers_and_batches(tmp_path, monkeypatch):
    """A text corpus goes from files to batches without a list of its pairs: tokenizers from
    the stream (the same model as from the in-memory pairs), batches from dataset()."""
    from keras_transformer.data import demo_splits, make_dataset, read_text_file_pairs, write_parallel_files
    from keras_transformer.tokenization import train_sentencepiece
    from training import trainer
    from training.corpus import load_corpus

    splits = demo_splits(train=300, valid=10, test=0, seed=2)
    for split in ("train", "valid"):
        write_parallel_files(splits[split], tmp_path / "data", split)
    config = load_config("demo", [f"data={{kind: text, dir: {tmp_path / 'data'}}}", "tokenizer.vocab_size=200",
                                  "training.batch_tokens=256", "training.shuffle_buffer=32"])
    corpus = load_corpus(config["data"])
    src_tok, tgt_tok = trainer.build_tokenizers(config, corpus, tmp_path / "run")
    text = read_text_file_pairs(tmp_path / "data" / "train.src", tmp_path / "data" / "train.tgt")
    unlimited = train_sentencepiece(text.sources + text.targets, tmp_path / "old" / "spm", vocab_size=200)
    assert src_tok.model_bytes == unlimited.read_bytes()  # the sample is the whole (small) corpus
    monkeypatch.setattr(trainer, "IN_MEMORY_PAIRS", 100)  # 300 pairs are now "large": no cache
    calls = []

    def recorded(pairs, *args, **options):
        calls.append(options)
        return make_dataset(pairs, *args, **options)

    monkeypatch.setattr(trainer, "make_dataset", recorded)
    train, valid = trainer.datasets(config, corpus, src_tok, tgt_tok)
    assert (calls[0]["cache"], calls[0]["shuffle_buffer"]) == (False, 32)
    sentences = sum(int(src.shape[0]) for (src, _), _ in train.take(100))
    assert sentences > 300  # repeats: more than one pass over the files
    assert valid is not None and corpus["valid"] == [(s, t) for s, t in splits["valid"]]
    config["training"]["shuffle_buffer"] = None
    with pytest.raises(ValueError, match="set a bound"):
        trainer.datasets(config, corpus, src_tok, tgt_tok)


@pytest.mark.parametrize("name", ["demo", "multi30k", "base", "big", "wmt14_ende"])
def test_shipped_configs_build_valid_models(name):
    import keras_transformer as kt

    config = load_config(name)
    model = dict(config["model"])
    preset = model.pop("preset")
    kt.TransformerConfig.from_preset(preset, vocab_size=config["tokenizer"]["vocab_size"], **model)
    training = config["training"]
    assert training["steps_per_epoch"] % training["steps_per_execution"] == 0


def test_auto_precision_says_what_it_picked_and_why(tmp_path):
    from keras_transformer.hardware import has_bf16_units

    workdir = tmp_path / "auto"
    result = _run(["-m", "training.train", "--config", "demo", "--workdir", str(workdir), *MICRO,
                   "--set", "training.epochs=1", "--mixed-precision", "auto"])
    expected = "bf16" if has_bf16_units() else "fp32"  # no GPU or TPU on the test machines
    assert f"mixed precision: {expected} (no GPU or TPU; the CPU has" in result.stderr
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["precision"]["config"] == "auto" and metrics["precision"]["used"] == expected
    assert Workdir(workdir).precision == expected


def test_fp16_scales_the_loss_and_the_demo_task_learns_as_fp32_does(tmp_path):
    """What a Colab T4 user gets (auto picks fp16 there): Keras' dynamic loss
    scaling, no step with a NaN loss, and a model that learns the demo pair as
    the same run in float32 does."""
    runs = {}
    for precision in ("fp16", "fp32"):
        workdir = tmp_path / precision
        _run(["-m", "training.train", "--config", "demo", "--workdir", str(workdir), *MICRO,
              "--mixed-precision", precision, "--set", "training.epochs=3", "--set", "training.steps_per_epoch=30",
              "--set", "training.steps_per_execution=15", "--set", "training.warmup_steps=30",
              "--set", "evaluation.max_sentences=5"])
        runs[precision] = json.loads((workdir / "metrics.json").read_text())
    fp16, fp32 = runs["fp16"], runs["fp32"]
    assert fp16["precision"]["used"] == "fp16" and "loss_scale" not in fp32
    # Scaled: the dynamic scale starts at 2^15 and moves by factors of two.
    assert fp16["loss_scale"] > 1 and math.log2(fp16["loss_scale"]).is_integer()
    assert fp16["optimizer_steps"] >= 80  # of 90: at most the first steps' overflows skipped
    losses, accuracy = fp16["history"]["loss"], fp16["history"]["masked_accuracy"]
    assert all(math.isfinite(loss) for loss in losses)  # an epoch's mean: every step in it was finite
    assert losses == sorted(losses, reverse=True) and accuracy[-1] > accuracy[0] + 0.01, (losses, accuracy)
    assert abs(losses[-1] - fp32["history"]["loss"][-1]) < 0.03 * fp32["history"]["loss"][-1], (
        losses, fp32["history"]["loss"])
