"""The training data split between workers: two MultiWorkerMirroredStrategy workers on
loopback each read their own lines of a text corpus (``PairSource.part``), without a
preparation, and together the whole corpus once; the training program trains so, and
resumes each worker at its own data position. On prepared shards the custom loop resumes so
too, from the input position saved with the backup: one worker of two replicas reading
global batches, or two workers each reading its own shard files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hang_guard import HANG_TIMEOUT
from loopback import free_ports, run_workers

from keras_transformer.data import PairSource, demo_splits, write_parallel_files

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent


def text_corpus(directory: Path, train: int = 301) -> Path:
    """A text corpus of the demo language pair (train/valid/test .src/.tgt), an odd size."""
    for split, pairs in demo_splits(train=train, valid=4, test=4, seed=7).items():
        write_parallel_files(pairs, directory, split)
    return directory


def test_worker_index_numbers_workers_as_tf_distribute_numbers_input_pipelines():
    from types import SimpleNamespace

    import tensorflow as tf
    from tensorflow.python.distribute import multi_worker_util

    from keras_transformer.training.workers import worker_count, worker_index

    def strategy(spec, task_type, task_id):
        resolver = SimpleNamespace(
            cluster_spec=lambda: tf.train.ClusterSpec(spec), task_type=task_type, task_id=task_id
        )
        return SimpleNamespace(cluster_resolver=resolver)

    with_chief = {"chief": ["a:1"], "worker": ["b:1", "c:1"]}
    workers = {"worker": ["a:1", "b:1", "c:1"]}
    for spec, task_type, task_id in [
        (with_chief, "chief", 0),
        (with_chief, "worker", 0),
        (with_chief, "worker", 1),
        (workers, "worker", 2),
    ]:
        expected = multi_worker_util.id_in_cluster(spec, task_type, task_id)
        assert worker_index(strategy(spec, task_type, task_id)) == expected
        assert worker_count(strategy(spec, task_type, task_id)) == 3
    assert worker_index(SimpleNamespace()) == 0 and worker_count(SimpleNamespace()) == 1


def test_each_worker_gets_its_share_of_the_batch():
    import dataclasses

    from keras_transformer.training.batches import worker_batching
    from keras_transformer.training.run_config import TrainingSection

    options = TrainingSection(max_src_length=40, max_tgt_length=39, batch_tokens=4096)
    assert worker_batching(options, 4) == {"batch_tokens": 1024, "batch_size": None}
    sized = dataclasses.replace(options, batch_tokens=None, batch_size=64)
    assert worker_batching(sized, 4) == {"batch_tokens": None, "batch_size": 16}
    with pytest.raises(ValueError, match="over 128 workers gives each 32 tokens a batch, fewer"):
        worker_batching(options, 128)


WORKER = """
import json, sys
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
from keras_transformer.data import PairSource
from keras_transformer.training.workers import worker_count, worker_index

corpus, out = sys.argv[1:]
source = PairSource.from_text_files(f"{corpus}/train.src", f"{corpus}/train.tgt")
part = source.part(worker_index(strategy), worker_count(strategy))
pairs = [[s.decode(), t.decode()] for s, t in part.dataset().as_numpy_iterator()]
with open(out, "w") as handle:
    json.dump({"index": worker_index(strategy), "files": part.files, "pairs": pairs}, handle)
"""


@pytest.mark.slow  # two worker processes
def test_two_workers_on_loopback_read_disjoint_parts_that_make_the_corpus(tmp_path):
    corpus = text_corpus(tmp_path / "corpus")
    run_workers(
        lambda index: [
            sys.executable,
            "-c",
            WORKER,
            str(corpus),
            str(tmp_path / f"worker{index}.json"),
        ],
        CHECKOUT,
        timeout=HANG_TIMEOUT,
    )
    seen = [json.loads((tmp_path / f"worker{index}.json").read_text()) for index in range(2)]
    assert [worker["index"] for worker in seen] == [0, 1]
    whole = [
        list(pair)
        for pair in PairSource.from_text_files(corpus / "train.src", corpus / "train.tgt")
    ]
    first, second = seen[0]["pairs"], seen[1]["pairs"]
    assert len(whole) == 301 and len(first) == 150 and len(second) == 151
    assert first + second == whole  # disjoint, in order, the corpus once
    assert seen[0]["files"][0].endswith("train.src lines 1-150")
    assert seen[1]["files"][1].endswith("train.tgt lines 151-301")


def _train_command(workdir: Path, corpus: Path, *extra: str) -> list[str]:
    sets = [
        f"data.dir={corpus}",
        "data.kind=text",
        "tokenizer.vocab_size=120",
        "model.d_model=32",
        "model.d_ff=64",
        "training.steps_per_execution=1",
        "training.batch_tokens=256",
        "evaluation.max_sentences=3",
        *extra,
    ]
    return [
        sys.executable,
        *("-m", "training.train", "--config", "demo", "--workdir", str(workdir)),
        "--strategy",
        "multi_worker",
        *(argument for value in sets for argument in ("--set", value)),
    ]


def _parts_read(outputs: list[str]) -> list[tuple[int, int]]:
    """The lines (1-based, inclusive) each worker's log says it reads, checked alike for
    the source and target files."""
    ranges = []
    for index, output in enumerate(outputs):
        line = next(
            line
            for line in output.splitlines()
            if f"worker {index + 1} of 2 reads its part of the training text" in line
        )
        spans = {tuple(map(int, span)) for span in re.findall(r"lines (\d+)-(\d+)", line)}
        assert len(spans) == 1, line  # the same lines of train.src and train.tgt
        ranges.append(spans.pop())
    return ranges


def _metrics(run: Path) -> list[dict]:
    return [json.loads((path / "metrics.json").read_text()) for path in (run, run / "worker_1")]


@pytest.mark.slow  # two worker processes training
def test_multi_worker_training_on_text_reads_each_workers_own_lines(tmp_path):
    import keras
    import numpy as np

    import keras_transformer  # noqa: F401

    corpus = text_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    outputs = run_workers(
        lambda index: _train_command(
            run, corpus, "training.epochs=2", "training.steps_per_epoch=3"
        ),
        CHECKOUT,
    )
    assert _parts_read(outputs) == [(1, 150), (151, 301)]  # disjoint, the corpus once
    assert not (run / "prepared").exists() and all("prepared" not in out for out in outputs)
    chief, other = _metrics(run)
    assert chief["optimizer_steps"] == other["optimizer_steps"] == 6
    assert chief["history"]["loss"] == other["history"]["loss"]  # global metrics
    assert len(chief["history"]["val_loss"]) == 2
    chief_weights = keras.models.load_model(run / "model.keras").get_weights()
    other_weights = keras.models.load_model(run / "worker_1" / "model.keras").get_weights()
    for a, b in zip(chief_weights, other_weights):
        np.testing.assert_array_equal(a, b)


def _backup_step(workdir: Path) -> int | None:
    path = workdir / "backup" / "training_metadata.json"
    try:
        return json.loads(path.read_text())["step"]
    except (OSError, ValueError, KeyError):
        return None


@pytest.mark.slow  # two worker processes, killed, then resumed
@pytest.mark.parametrize("prepared", [False, True], ids=["text", "prepared"])
def test_killed_workers_resume_each_at_its_own_data_position(tmp_path, prepared):
    """Both workers killed at the same backup, then run again: each restores its own
    input iterator (its part of the text, or its shard files of the preparation each
    made on its first run) and they end with the same weights."""
    corpus = text_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    extra = ("training.epochs=8", "training.steps_per_epoch=4", "training.backup_every_steps=2")
    if prepared:
        extra += ("data.prepare=true", "data.examples_per_shard=75")
    ports = free_ports(2)
    workers = []
    for index in range(2):
        tf_config = {
            "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
            "task": {"type": "worker", "index": index},
        }
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": json.dumps(tf_config)}
        workers.append(
            subprocess.Popen(
                _train_command(run, corpus, *extra),
                cwd=CHECKOUT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    workdirs = (run, run / "worker_1")
    deadline = time.time() + HANG_TIMEOUT
    stopped_at = None
    try:
        while time.time() < deadline and all(worker.poll() is None for worker in workers):
            steps = [_backup_step(workdir) for workdir in workdirs]
            if steps[0] is not None and steps[0] >= 2:
                for worker in workers:  # freeze both, then look again: a backup may be mid-write
                    worker.send_signal(signal.SIGSTOP)
                time.sleep(0.5)
                steps = [_backup_step(workdir) for workdir in workdirs]
                if steps[0] == steps[1]:
                    stopped_at = steps[0]
                    break
                for worker in workers:
                    worker.send_signal(signal.SIGCONT)
            time.sleep(0.2)
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    assert stopped_at is not None, "the workers did not reach a common backup in time"
    assert not (run / "metrics.json").exists(), "the run finished before it was killed"
    outputs = run_workers(lambda index: _train_command(run, corpus, *extra), CHECKOUT)
    for output in outputs:
        resumed = [line for line in output.splitlines() if "resumed from" in line]
        assert resumed and f"at step {stopped_at}" in resumed[0], output[-3000:]
        assert "the input continues at its saved position" in resumed[0]  # its own iterator
        assert ("split over the workers by file" in output) == prepared
    chief, other = _metrics(run)
    assert chief["optimizer_steps"] == other["optimizer_steps"] == 32
    assert chief["history"]["loss"] == other["history"]["loss"]
    assert len(chief["history"]["loss"]) == 8 - stopped_at // 4


# --------------------------------------------------------------- prepared shards, resumed

RESUME_ON_SHARDS = """
import hashlib, json, logging, os, sys
import tensorflow as tf
mode, directory, out = sys.argv[1:]
if mode == "mirrored":  # one worker of two replicas
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
import keras_transformer as kt
from keras_transformer.data import PreparedShards
from keras_transformer.training.backup import TrainingBackup
from keras_transformer.training.batches import datasets
from keras_transformer.training.run_config import TrainingSection
from keras_transformer.training.loop import StepPlan, custom_fit, optimizer_step
from keras_transformer.training.workers import PerWorkerInput, worker_count, worker_index
from keras_transformer.training.strategy import make_strategy

messages = []
class Messages(logging.Handler):
    def emit(self, record):
        messages.append(record.getMessage())
for name in ("training", "keras_transformer.data"):
    logging.getLogger(name).addHandler(Messages())
    logging.getLogger(name).setLevel(logging.INFO)

strategy = make_strategy(mode)
workers = worker_count(strategy)
part = (worker_index(strategy), workers) if workers > 1 else None  # as the trainer decides
index = 0 if part is None else part[0]
options = TrainingSection(max_src_length=16, max_tgt_length=16, batch_tokens=128,
                          shuffle_buffer=64, seed=3)
prepared = PreparedShards.load(directory)
# Epochs of 2 updates of 2 micro-batches, backups every 3 updates: killed at the end of step 4,
# resumed at step 3, mid-epoch.
plan = StepPlan(steps_per_epoch=2, max_steps=8, accumulate_steps=2, backup_every_steps=3)

class Killed(keras.callbacks.Callback):  # on every worker at the same step
    def on_epoch_end(self, epoch, logs=None):
        if optimizer_step(self.model) == 4:
            raise RuntimeError("killed")

def train(name, kill=False):
    seen = {}
    def record(replica, src):
        array = src.numpy()
        digest = hashlib.sha256(array.tobytes() + str(array.shape).encode()).hexdigest()[:16]
        seen.setdefault(int(replica), []).append(digest)

    class Fingerprinting(kt.Transformer):
        def train_step(self, data):
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            tf.py_function(record, [replica, data[0][0]], [])
            return super().train_step(data)

    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = Fingerprinting(kt.TransformerConfig.from_preset(
            "tiny", vocab_size=300, d_model=16, d_ff=32, num_layers=1, dropout=0.0))
        model.build()
        model.compile(optimizer=kt.paper_adam(kt.TransformerSchedule(16, 5), epsilon=1.0,
                                              gradient_accumulation_steps=2),
                      loss=kt.MaskedLabelSmoothedCrossEntropy(0.1), steps_per_execution=2)
    train_input, _ = datasets(options, {"train": None, "valid": []}, None, None, prepared,
                              part=part)
    assert isinstance(train_input, PerWorkerInput) == (part is not None), type(train_input)
    backup = TrainingBackup(os.path.join(os.path.dirname(out), f"worker{index}", name))
    try:
        custom_fit(model, strategy, train_input, plan, backup=backup,
                   callbacks=[Killed()] if kill else [])
    except RuntimeError as error:
        assert kill and "killed" in str(error), error
    saved = (backup.directory / "iterator" / "state.index").is_file()
    return model, {str(key): value for key, value in sorted(seen.items())}, saved

full, full_seen, _ = train("uninterrupted")
_, killed_seen, saved = train("killed", kill=True)
resumed, resumed_seen, _ = train("killed")
with open(out, "w") as handle:
    json.dump({
        "workers": workers, "replicas": strategy.num_replicas_in_sync,
        "full": full_seen, "killed": killed_seen, "resumed": resumed_seen, "saved": saved,
        "steps": [optimizer_step(full), optimizer_step(resumed)],
        "weight_gap": max(float(np.abs(a - b).max())
                          for a, b in zip(full.get_weights(), resumed.get_weights())),
        "resumes": [m for m in messages if m.startswith("resumed from")],
        "files": [m.split(": ")[-1].split(", ") for m in messages if "shard files: " in m],
    }, handle)
"""


@pytest.fixture(scope="module")
def prepared_shards(tmp_path_factory):
    """A prepared demo corpus of 5 shard files (tokenizers of 300 pieces, lengths up to 16)."""
    from keras_transformer.data import prepare_shards
    from keras_transformer.tokenization import SubwordTokenizer, train_tokenizers

    pairs = demo_splits(train=300, valid=0, test=0, seed=3)["train"]
    folder = tmp_path_factory.mktemp("shards")
    paths = train_tokenizers(
        [s for s, _ in pairs], [t for _, t in pairs], tmp_path_factory.mktemp("spm"), vocab_size=300
    )
    return prepare_shards(
        PairSource.from_pairs(pairs).dataset(),
        *(SubwordTokenizer.from_file(path) for path in paths),
        folder / "prepared",
        max_src_length=16,
        max_tgt_length=16,
        examples_per_shard=60,
        seed=5,
        source={"corpus": "demo"},
    )


def test_too_few_shard_files_for_the_workers_is_an_error(prepared_shards):
    from keras_transformer.training.batches import prepared_batches
    from keras_transformer.training.run_config import TrainingSection

    options = TrainingSection(max_src_length=16, max_tgt_length=16, batch_tokens=128)
    files = len(prepared_shards.files)
    with pytest.raises(ValueError, match=f"fewer than the {files + 1} input pipelines"):
        prepared_batches(prepared_shards, options, part=(0, files + 1))


@pytest.mark.slow  # three short trainings (two processes of them with multi_worker)
@pytest.mark.parametrize("mode", ["mirrored", "multi_worker"])
def test_a_run_on_prepared_shards_resumes_at_its_saved_data_position(
    prepared_shards, tmp_path, mode
):
    """The custom loop on prepared shards with two replicas: one worker reading global
    batches of all the files (``mirrored`` over two logical CPUs), or two workers on
    loopback each reading its own files (split by file) into batches of half the size.
    Killed after step 4, its backup from step 3: the resumed run restores the input
    iterator (its log says so; no batch read and dropped) and each replica trains on
    exactly the micro-batches it would have without the kill, to the same weights."""
    argv = [sys.executable, "-c", RESUME_ON_SHARDS, str(prepared_shards.directory)]
    if mode == "mirrored":
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        result = subprocess.run(
            [*argv[:3], mode, *argv[3:], str(tmp_path / "worker0.json")],
            cwd=CHECKOUT,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_TIMEOUT,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        count = 1
    else:
        run_workers(
            lambda index: [*argv[:3], mode, *argv[3:], str(tmp_path / f"worker{index}.json")],
            CHECKOUT,
        )
        count = 2
    seen = [json.loads((tmp_path / f"worker{index}.json").read_text()) for index in range(count)]
    for worker in seen:
        assert (worker["workers"], worker["replicas"]) == (count, 2)
        assert worker["saved"] and worker["steps"] == [8, 8]
        assert len(worker["resumes"]) == 1, worker["resumes"]
        assert worker["resumes"][0].endswith(
            "at step 3: the input continues at its saved position"
        ), worker["resumes"][0]
        # This worker's replicas: 8 updates of 2 micro-batches each, uninterrupted; 4 before
        # the kill; from step 3 on after it.
        assert len(worker["full"]) == 2 // count
        for replica, full in worker["full"].items():
            assert len(full) == 16 and len(set(full)) > 8
            assert worker["killed"][replica] == full[:8]
            assert worker["resumed"][replica] == full[6:]
        assert worker["weight_gap"] < 1e-6, worker["weight_gap"]
    files = list(prepared_shards.files)
    if count == 1:
        assert all(worker["files"] == [] for worker in seen)  # one pipeline: every file
    else:  # each worker read its own files, all three runs: disjoint, the corpus together
        read = [worker["files"] for worker in seen]
        assert all(len(runs) == 3 and runs[0] == runs[1] == runs[2] for runs in read)
        first, second = read[0][0], read[1][0]
        assert not set(first) & set(second) and sorted(first + second) == sorted(files)
        assert first == files[0::2] and second == files[1::2]
