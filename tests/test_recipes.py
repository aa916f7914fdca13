"""The paper's WMT14 recipe, end to end on TFDS mock data: streamed from TFDS, prepared into
shards on the first run, trained for a number of updates of accumulated micro-batches,
averaged, scored, and loadable as a workdir."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hang_guard import HANG_TIMEOUT

from keras_transformer import Workdir
from keras_transformer.training.run_config import load_config

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent

TINY = [
    "model.preset=tiny",
    "model.max_length=64",
    "tokenizer.vocab_size=60",
    "tokenizer.max_sentences=100",
    "training.jit=false",
    "training.batch_tokens=128",
    "training.accumulate_steps=2",
    "training.epochs=null",
    "training.max_steps=4",
    "training.steps_per_epoch=2",
    "training.steps_per_execution=1",
    "training.backup_every_steps=epoch",
    "training.warmup_steps=4",
    "training.max_src_length=32",
    "training.max_tgt_length=31",
    "training.shuffle_buffer=100",
    "training.average_last=2",
    "data.examples_per_shard=16",
    "evaluation.bleu_sentences=4",
    "evaluation.max_sentences=8",
]
# tfds.testing.mock_data replaces the download with random strings of the builder's features.
SCRIPT = """
import sys
import tensorflow_datasets as tfds
from keras_transformer.cli import train
with tfds.testing.mock_data(num_examples=40, policy=tfds.testing.MockPolicy.USE_CODE):
    sys.exit(train.main(sys.argv[1:]))
"""


def test_the_recipe_is_the_papers():
    config = load_config("wmt14_ende")
    data, training = config.data, config.to_dict()["training"]
    assert data.tfds["name"] == "wmt14_translate/de-en"
    assert (data.tfds["src_key"], data.tfds["tgt_key"]) == ("en", "de")  # English → German
    assert (data.tfds["valid"], data.tfds["test"]) == (
        "validation",
        "test",
    )  # newstest2013, 2014
    assert config.tokenizer.vocab_size == 37000 and config.tokenizer.shared
    assert config.model.preset == "base"
    assert training["batch_tokens"] * training["accumulate_steps"] == 25000
    steps = training["max_steps"] or training["epochs"] * training["steps_per_epoch"]
    assert steps == 100000 and training["average_last"] == 5
    assert training["warmup_steps"] == 4000 and training["label_smoothing"] == 0.1
    assert training["mixed_precision"] == "auto"


# a training and an export; the TFDS reader: test_training_program.py's offline TFDS test
@pytest.mark.slow
def test_wmt14_recipe_end_to_end_on_tfds_mock_data(tmp_path):
    workdir = tmp_path / "wmt14"
    overrides = [arg for item in TINY for arg in ("--set", item)]
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            "--config",
            "wmt14_ende",
            "--workdir",
            str(workdir),
            *overrides,
        ],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["optimizer_steps"] == 4  # updates, each of two micro-batches
    assert len(metrics["history"]["loss"]) == 2 and len(metrics["history"]["val_bleu"]) == 2
    assert len(metrics["averaged_checkpoints"]) == 2 and "bleu" in metrics["test"]
    manifest = json.loads((workdir / "prepared" / "manifest.json").read_text())
    assert (
        manifest["examples"] > 0 and len(list((workdir / "prepared").glob("shard-*.tfrecord"))) >= 2
    )
    assert "training on" in result.stderr and "prepared examples" in result.stderr
    run = Workdir(workdir).check()
    assert run.max_lengths == (32, 31)
