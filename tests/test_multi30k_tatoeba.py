"""The Makefile's real-data recipes on tiny stand-ins: ``make multi30k-tatoeba`` end to end
(two corpora of the demo's language pair, a tiny model; early stopping ends it where the settings
say, and both scores come from its one SavedModel), and ``TRAIN_ARGS`` in every recipe's training
command."""

import json

import pytest
import yaml
from make_targets import make, python_bin

from keras_transformer.data import demo_splits, write_parallel_files

pytestmark = pytest.mark.programs

# The multi30k config shrunk to a tiny model and budget: 4 epochs of 2 updates at most, and an
# improvement has to beat the first validation BLEU by 100, so patience 1 ends the run after
# epoch 2.
TINY = {
    "model.d_model": 32,
    "model.num_heads": 2,
    "model.d_ff": 64,
    "model.num_encoder_layers": 1,
    "model.num_decoder_layers": 1,
    "model.max_length": 64,
    "tokenizer.vocab_size": 200,
    "training.mixed_precision": "fp32",
    "training.batch_tokens": 256,
    "training.max_src_length": 32,
    "training.max_tgt_length": 31,
    "training.warmup_steps": 4,
    "training.epochs": 4,
    "training.max_minutes": "null",
    "training.steps_per_epoch": 2,
    "training.steps_per_execution": 1,
    "training.average_last": 1,
    "training.patience": 1,
    "training.min_delta": 100,
    "evaluation.bleu_sentences": 5,
}


@pytest.fixture(scope="module")
def two_corpus_run(tmp_path_factory):
    """A tiny ``make multi30k-tatoeba``: the first corpus with valid and test, the second (like
    Tatoeba) with valid only."""
    root = tmp_path_factory.mktemp("recipes")
    first, second = root / "first", root / "second"
    for folder, splits in (
        (first, demo_splits(train=200, valid=20, test=12, seed=3)),
        (second, demo_splits(train=300, valid=16, test=0, seed=4)),
    ):
        for split in ("train", "valid", "test") if folder == first else ("train", "valid"):
            write_parallel_files(splits[split], folder, split)
    bin_dir = python_bin(root / "bin")
    run = root / "run"
    train_args = " ".join(f"--set {key}={value}" for key, value in TINY.items())
    result = make(
        "multi30k-tatoeba",
        f"BIN={bin_dir}",
        f"M30K={first}",
        f"TATOEBA={second}",
        f"M30K_TATOEBA_RUN={run}",
        f"TRAIN_ARGS={train_args}",
    )
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-4000:])  # noqa
    return {"run": run, "first": first, "second": second, "log": result.stdout + result.stderr}


def test_both_corpora_train_one_model_with_half_the_pairs_each(two_corpus_run):
    run = two_corpus_run["run"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert [(s["name"], s["pairs"], s["share"], s["tag"]) for s in metrics["sources"]] == [
        ("first", 200, 0.5, None),
        ("second", 300, 0.5, None),
    ]
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert [source["dir"] for source in config["data"]["sources"]] == [
        str(two_corpus_run["first"]),
        str(two_corpus_run["second"]),
    ]
    assert config["training"]["shuffle_buffer"] is None
    assert config["model"]["d_model"] == 32  # TRAIN_ARGS come after the recipe's own settings


def test_early_stopping_on_validation_bleu_ends_the_run(two_corpus_run):
    metrics = json.loads((two_corpus_run["run"] / "metrics.json").read_text())
    assert metrics["validation_metric"] == "bleu"
    assert metrics["stopped_early"] is True
    assert metrics["optimizer_steps"] == 4  # 2 epochs of 2 updates, not the 4 epochs allowed
    assert len(metrics["history"]["val_bleu"]) == 2
    # The best epoch is the best score (ties: the later), whether or not it beat min_delta.
    bleu = metrics["history"]["val_bleu"]
    assert metrics["best_epoch"] == (2 if bleu[1] >= bleu[0] else 1)


def test_one_saved_model_is_scored_on_both_corpora(two_corpus_run):
    """Both splits, beam (the exported M30K_BEAM) and greedy, each in its own file, from the
    recipe's one ``kt evaluate``."""
    run = two_corpus_run["run"]
    assert (run / "export" / "1" / "saved_model.pb").is_file()
    expected = {"test_beam": 12, "test_greedy": 12, "valid_beam": 16, "valid_greedy": 16}
    for name, sentences in expected.items():
        scores = json.loads((run / f"{name}.json").read_text())
        assert scores["sentences"] == sentences, name
        assert 0 <= scores["bleu"] <= 100, name
        assert scores["decoding"] == ("beam4" if name.endswith("beam") else "greedy"), name
        split = name.partition("_")[0]
        assert scores["ref"].endswith(f"{split}.tgt"), name
    assert two_corpus_run["log"].count("/kt evaluate ") == 1
    beam = json.loads((run / "valid_beam.json").read_text())
    assert beam["src"] == str(two_corpus_run["second"] / "valid.src")


@pytest.mark.parametrize("target", ["multi30k", "tatoeba", "multi30k-tatoeba"])
def test_train_args_reach_every_recipes_training_command(target):
    result = make("-n", target, "TRAIN_ARGS=--set training.max_steps=6000")
    assert result.returncode == 0, result.stderr
    commands = result.stdout.replace("\\\n", " ").splitlines()
    train = [command for command in commands if "/kt train " in command]
    assert len(train) == 1 and train[0].rstrip().endswith("--set training.max_steps=6000")
