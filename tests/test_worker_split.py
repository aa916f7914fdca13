"""The training text split between workers (``PairSource.part``): two
MultiWorkerMirroredStrategy workers on loopback each read their own lines of a text
corpus, without a preparation, and together the whole corpus once; the training program
trains so, and resumes each worker at its own data position."""

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

    from training.loop import worker_count, worker_index

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
    from training.trainer import worker_batching

    options = {"max_src_length": 40, "max_tgt_length": 39, "batch_tokens": 4096}
    assert worker_batching(options, 4) == {"batch_tokens": 1024, "batch_size": None}
    sized = {**options, "batch_tokens": None, "batch_size": 64}
    assert worker_batching(sized, 4) == {"batch_tokens": None, "batch_size": 16}
    with pytest.raises(ValueError, match="over 128 workers gives each 32 tokens a batch, fewer"):
        worker_batching(options, 128)


WORKER = """
import json, sys
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
from keras_transformer.data import PairSource
from training.loop import worker_count, worker_index

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
        timeout=300,
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
def test_killed_workers_resume_each_at_its_own_data_position(tmp_path):
    """Both workers killed at the same backup, then run again: each restores its own
    input iterator (its part of the text) and they end with the same weights."""
    corpus = text_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    extra = ("training.epochs=8", "training.steps_per_epoch=4", "training.backup_every_steps=2")
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
    deadline = time.time() + 400
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
        assert "no input position" not in resumed[0]  # its own iterator, restored
    chief, other = _metrics(run)
    assert chief["optimizer_steps"] == other["optimizer_steps"] == 32
    assert chief["history"]["loss"] == other["history"]["loss"]
    assert len(chief["history"]["loss"]) == 8 - stopped_at // 4
