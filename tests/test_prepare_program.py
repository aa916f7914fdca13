"""python -m training.prepare, and training on what it wrote (data.prepare: auto / true / false)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hang_guard import HANG_TIMEOUT

from keras_transformer import Workdir
from keras_transformer.cli import prepare
from keras_transformer.data import PreparedShards, StalePreparationError
from keras_transformer.training import batches
from keras_transformer.training.batches import datasets
from keras_transformer.training.build import build_tokenizers
from keras_transformer.training.corpora import load_corpus
from keras_transformer.training.prepared import find_prepared, preparation
from keras_transformer.training.run_config import load_config

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
TINY = [
    "data.synthetic={train: 200, valid: 10, test: 10, seed: 1}",
    "tokenizer.vocab_size=150",
    "data.examples_per_shard=50",
    "training.batch_tokens=256",
    "training.max_src_length=24",
    "training.max_tgt_length=24",
]


def _arguments(workdir, *overrides):
    sets = [argument for override in (*TINY, *overrides) for argument in ("--set", override)]
    return ["--config", "demo", "--workdir", str(workdir), *sets]


@pytest.fixture
def shard_reads(monkeypatch):
    """The prepared folders that batches.datasets reads its training batches from."""
    reads = []

    def recorded(prepared, **kwargs):
        reads.append(prepared.directory)
        return sharded_dataset(prepared, **kwargs)

    sharded_dataset = batches.sharded_dataset
    monkeypatch.setattr(batches, "sharded_dataset", recorded)
    return reads


def test_prepare_then_train_on_the_shards(tmp_path, capsys, shard_reads):
    workdir = tmp_path / "run"
    assert prepare.main(_arguments(workdir)) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    prepared = PreparedShards.load(Workdir(workdir).prepared_dir)
    assert (
        summary["shards"] == len(prepared.files) == 4 and summary["examples"] == prepared.examples
    )
    assert summary["pairs_read"] == 200 == prepared.examples + prepared.dropped_too_long
    assert (workdir / "tokenizer" / "spm_shared.model").is_file()
    manifest = prepared.directory / "manifest.json"
    written = manifest.stat().st_mtime_ns
    assert prepare.main(_arguments(workdir)) == 0 and manifest.stat().st_mtime_ns == written  # kept

    def train_batches(*overrides):
        config = load_config("demo", [*TINY, *overrides])
        corpus = load_corpus(config.data)
        src_tok, tgt_tok = build_tokenizers(config, corpus, workdir)  # the workdir's, reused
        prepared = find_prepared(config, workdir, corpus, src_tok, tgt_tok)
        train, _ = datasets(config.training, corpus, src_tok, tgt_tok, prepared)
        return train

    (src, _), tgt_out = next(iter(train_batches()))
    assert shard_reads == [prepared.directory] and src.shape[1] <= 24 and src.dtype == "int32"
    train_batches("data.prepare=false")
    assert len(shard_reads) == 1  # the text, not the shards
    with pytest.raises(
        StalePreparationError, match="max_src_length: prepared with 24, now 32.*kt prepare"
    ):
        train_batches("training.max_src_length=32")
    with pytest.raises(StalePreparationError, match="source"):
        train_batches("data.synthetic={train: 300, valid: 10, test: 10, seed: 1}")
    train_batches("training.max_src_length=32", "data.prepare=true")  # prepared again
    assert PreparedShards.load(prepared.directory).max_src_length == 32 and len(shard_reads) == 2

    # The training program says the same in one line.
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-m", "training.train", *_arguments(workdir)],
        cwd=CHECKOUT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-3000:]
    assert (
        errors[0].startswith("kt train: error: the prepared corpus in")
        and "prepared with 32, now 24" in errors[0]
        and "Traceback" not in result.stderr
    )


def test_training_prepares_on_the_first_run_with_prepare_true(tmp_path, shard_reads):
    config = load_config("demo", [*TINY, "data.prepare=true"])
    corpus = load_corpus(config.data)
    src_tok, tgt_tok = build_tokenizers(config, corpus, tmp_path)
    datasets(
        config.training,
        corpus,
        src_tok,
        tgt_tok,
        find_prepared(config, tmp_path, corpus, src_tok, tgt_tok),
    )
    assert shard_reads == [Workdir(tmp_path).prepared_dir]
    PreparedShards.load(shard_reads[0]).check(
        src_tok,
        tgt_tok,
        max_src_length=24,
        max_tgt_length=24,
        source=preparation(config)["source"],
    )


def test_bad_input_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        prepare.main(_arguments(tmp_path / "run", "data.examples_per_shard=0"))
    lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert exit.value.code == 2
    assert lines == ["kt prepare: error: examples_per_shard must be an integer >= 1, got 0."]
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit):
        prepare.main(_arguments(tmp_path / "file"))
    assert "is a file, not a folder" in capsys.readouterr().err
