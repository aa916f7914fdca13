"""Back-translation end to end on tiny models, as docs/training.md ("Back-translation") gives
its commands: a reverse model (target → source) trained on the real pairs samples a synthetic
source for each sentence of target-language text (``python -m export.translate_corpus
--sample``), and the forward model trains on the real pairs and the tagged synthetic ones
(``data.sources`` with weights), then translates tagged and untagged sentences."""

import importlib
import json
import logging
from pathlib import Path

import pytest

pytestmark = pytest.mark.programs

# Both models: 4 updates of a d_model-32 model on a 120-piece shared vocabulary.
TINY = [
    "tokenizer.vocab_size=120",
    "model.d_model=32",
    "model.d_ff=64",
    "training.epochs=2",
    "training.steps_per_epoch=2",
    "training.steps_per_execution=1",
    "training.batch_tokens=256",
    "training.average_last=1",
]
REAL_PAIRS, MONOLINGUAL = 240, 90


@pytest.fixture
def program(capfd):
    """``python -m MODULE ARGS`` as the docs give it, in this process (TensorFlow is imported
    already; ``make distill`` and the tests of each program run them as processes): its
    stderr, the status asserted 0. The logging the program sets up is undone."""
    root = logging.getLogger()

    def run(module: str, *args: str) -> str:
        handlers, level = root.handlers[:], root.level
        capfd.readouterr()
        try:
            status = importlib.import_module(module).main(list(args))
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        stderr = capfd.readouterr().err
        assert status == 0, (module, stderr[-4000:])
        return stderr

    return run


def test_back_translated_pairs_train_the_forward_model_with_their_tag(tmp_path, program):
    import numpy as np
    import tensorflow as tf

    from keras_transformer import Translator, Workdir
    from keras_transformer.data import demo_splits, write_parallel_files
    from keras_transformer.exporters import export_saved_model

    # The real corpus (the demo pair, source → target), and the same files sides swapped
    # for the reverse model, linked as the docs link them.
    real, reverse = tmp_path / "real", tmp_path / "real-reverse"
    splits = demo_splits(train=REAL_PAIRS, valid=4, test=5, seed=1)
    reverse.mkdir()
    for split, pairs in splits.items():
        write_parallel_files(pairs, real, split)
        (reverse / f"{split}.src").symlink_to(real / f"{split}.tgt")
        (reverse / f"{split}.tgt").symlink_to(real / f"{split}.src")
    # Target-language monolingual text: the synthetic corpus's train.tgt.
    known = {target for pairs in splits.values() for _, target in pairs}
    monolingual = [
        target
        for _, target in demo_splits(train=3 * MONOLINGUAL, valid=0, test=0, seed=2)["train"]
        if target not in known
    ][:MONOLINGUAL]
    assert len(monolingual) == MONOLINGUAL
    synthetic = tmp_path / "bt"
    synthetic.mkdir()
    (synthetic / "train.tgt").write_text("\n".join(monolingual) + "\n", encoding="utf-8")

    def train(workdir: Path, *overrides: str) -> str:
        sets = [arg for override in (*TINY, *overrides) for arg in ("--set", override)]
        return program("training.train", "--config", "demo", "--workdir", str(workdir), *sets)

    # 1. The reverse model, target → source (its test scores are not needed: none).
    train(
        tmp_path / "reverse", "data.kind=text", f"data.dir={reverse}", "evaluation.max_sentences=0"
    )

    # 2. Sampled back-translations of the monolingual text, line i the sample of line i.
    program(
        "export.translate_corpus",
        "--workdir",
        str(tmp_path / "reverse"),
        "--src",
        str(synthetic / "train.tgt"),
        "--out",
        str(synthetic / "train.src"),
        "--sample",
        "--top-k",
        "10",
        "--seed",
        "1",
    )
    lines = (synthetic / "train.src").read_text(encoding="utf-8").split("\n")
    assert lines.pop() == "" and len(lines) == MONOLINGUAL
    reverse_model = Translator.from_workdir(tmp_path / "reverse")
    assert lines == reverse_model.sample(monolingual, top_k=10, seed=1)
    kept = sum(1 for line in lines if line.split())  # a pair with an empty side is skipped
    assert kept > 0

    # 3. The forward model on the real pairs (weight 1) and the synthetic ones (weight 2,
    #    tagged <bt>); valid and test come from the real corpus, the first.
    corpora = [
        {"kind": "text", "dir": str(real), "weight": 1, "name": "real"},
        {"kind": "text", "dir": str(synthetic), "weight": 2, "tag": "<bt>", "name": "bt"},
    ]
    log = train(tmp_path / "forward", f"data.sources={json.dumps(corpora)}")
    metrics = json.loads((tmp_path / "forward" / "metrics.json").read_text())
    assert metrics["sources"] == [
        {"name": "real", "pairs": REAL_PAIRS, "weight": 1, "share": 0.333333, "tag": None},
        {"name": "bt", "pairs": kept, "weight": 2, "share": 0.666667, "tag": "<bt>"},
    ]
    assert metrics["optimizer_steps"] == 4 and metrics["test"]["sentences"] == 5
    assert f"training corpus real: {REAL_PAIRS} pairs, weight 1: 33.3% of the sampled pairs" in log
    assert (
        f"training corpus bt: {kept} pairs, weight 2: 66.7% of the sampled pairs, tagged <bt>"
        in log
    )

    # The tag is one reserved piece of the forward model's source tokenizer, first of the
    # sentence, and the words after it are split as without it.
    src_tokenizer, _ = Workdir(tmp_path / "forward").load_tokenizers()
    sentence = splits["test"][0][0]
    tagged, plain = src_tokenizer.tokenize([f"<bt> {sentence}", sentence]).to_list()
    assert src_tokenizer.pieces(tagged)[0] == "\u2581<bt>" and tagged[1:] == plain

    # 4. The exported forward model translates a tagged and an untagged sentence.
    version = export_saved_model(tmp_path / "forward", tmp_path / "export", beam_size=1)
    both = [f"<bt> {sentence}", sentence]
    exported = Translator.from_saved_model(version)
    translations = exported.translate(both)
    assert len(translations) == 2
    assert translations == Translator.from_workdir(tmp_path / "forward").translate(both)
    signature = exported.saved_model.signatures["cross_attention"]  # the export, loaded once
    pieces = signature(sentence=tf.constant(f"<bt> {sentence}"))
    source_pieces = [piece.decode() for piece in np.asarray(pieces["source_pieces"])]
    assert source_pieces[0] == "\u2581<bt>" and source_pieces[-1] == "</s>", source_pieces
