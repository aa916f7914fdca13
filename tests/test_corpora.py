"""Several training corpora (``data.sources``): weights, tags, evaluation source, resume."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hang_guard import HANG_TIMEOUT

from keras_transformer.training.run_config import CorpusSource, corpus_sources, load_config

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
PROG = "kt train"


def write_corpus(directory: Path, train: int, test: int = 5, seed: int = 0) -> Path:
    """A small text corpus of the demo language pair: train/valid/test .src/.tgt files."""
    from keras_transformer.data import demo_splits, write_parallel_files

    splits = demo_splits(train=train, valid=4, test=test, seed=seed)
    for split, pairs in splits.items():
        write_parallel_files(pairs, directory, split)
    return directory


def two_sources(tmp_path, weights=(1, 3), tags=("<a>", "<b>"), **extra) -> list[dict]:
    return [
        {
            "kind": "text",
            "dir": str(write_corpus(tmp_path / "small", 60, test=5, seed=1)),
            "weight": weights[0],
            "tag": tags[0],
            "name": "small",
        },
        {
            "kind": "text",
            "dir": str(write_corpus(tmp_path / "large", 240, test=7, seed=2)),
            "weight": weights[1],
            "tag": tags[1],
            "name": "large",
            **extra,
        },
    ]


def tiny_config(sources, *overrides: str):
    return load_config(
        "demo",
        [
            f"data.sources={json.dumps(sources)}",
            "tokenizer.vocab_size=120",
            "training.batch_size=32",
            "training.batch_tokens=null",
            "training.shuffle_buffer=null",
            *overrides,
        ],
    )


# --------------------------------------------------------------------------- the config


@pytest.mark.parametrize(
    "sources, message",
    [
        ([], r"data.sources=\[\]: list one corpus or more"),
        ({"kind": "text"}, r"data.sources=\{'kind': 'text'\}: list one corpus or more"),
        (["corpus"], r"data.sources\[0\]='corpus': each corpus is a mapping"),
        ([{"dir": "a", "weight": 0}], r"data.sources\[0\].weight=0: use a positive number"),
        ([{"dir": "a", "weight": -1.5}], r"weight=-1.5: use a positive number"),
        ([{"dir": "a", "weight": "two"}], r"weight='two': use a positive number"),
        ([{"dir": "a", "tag": ""}], r"data.sources\[0\].tag='': a tag is a non-empty string"),
        ([{"dir": "a", "tag": "<b t>"}], r"tag='<b t>': .*cannot hold whitespace"),
        ([{"dir": "a", "tag": 3}], r"tag=3: a tag is a non-empty string"),
        ([{"dir": "a", "tag": "＜bt＞"}], r"NFKC normalisation changes it"),
        (
            [{"dir": "a", "weigth": 1}],
            r"data.sources\[0\].weigth: unknown key; did you mean data.sources\[0\].weight\?",
        ),
        ([{"dir": "a", "kind": "csv"}], r"data.sources\[0\].kind='csv': use synthetic, text"),
    ],
)
def test_bad_sources_are_named(sources, message):
    with pytest.raises(ValueError, match=message):
        corpus_sources({"sources": sources})


def test_sources_resolve_with_defaults_and_the_eval_source_by_index_or_name():
    sources = corpus_sources(
        {"sources": [{"dir": "corpora/x"}, {"kind": "tsv", "tsv": {"train": "t/y.tsv"}}]}
    )
    assert sources == (
        CorpusSource(kind="text", dir="corpora/x", weight=1.0, tag=None, name="x"),
        CorpusSource(kind="tsv", tsv={"train": "t/y.tsv"}, weight=1.0, tag=None, name="y.tsv"),
    )
    assert [source.to_dict() for source in sources] == [
        {"kind": "text", "dir": "corpora/x", "weight": 1.0, "tag": None, "name": "x"},
        {"kind": "tsv", "tsv": {"train": "t/y.tsv"}, "weight": 1.0, "tag": None, "name": "y.tsv"},
    ]
    two = [{"dir": "a"}, {"dir": "b", "name": "bt"}]
    corpus_sources({"sources": two, "eval_source": "bt"})
    corpus_sources({"sources": two, "eval_source": 1})
    for chosen, message in [(2, "use an index of data.sources"), ("c", "no corpus has that name")]:
        with pytest.raises(ValueError, match=message):
            corpus_sources({"sources": two, "eval_source": chosen})
    with pytest.raises(ValueError, match="several corpora have it"):
        corpus_sources({"sources": [{"dir": "x/a"}, {"dir": "y/a"}], "eval_source": "a"})
    with pytest.raises(ValueError, match="this config has one corpus"):
        load_config("demo", ["data.eval_source=1"])


def test_a_single_corpus_config_is_unchanged():
    """Without data.sources: the corpus, the tokenizer text and a preparation's description
    are what they were before several corpora existed."""
    from keras_transformer.data import PairSource
    from keras_transformer.training.corpora import load_corpus
    from keras_transformer.training.prepared import preparation

    config = load_config("demo", ["data.synthetic={train: 30, valid: 3, test: 3, seed: 1}"])
    assert config.data.sources is None
    assert isinstance(load_corpus(config.data)["train"], PairSource)
    assert set(preparation(config)["source"]) == {"kind", "dir", "synthetic", "tsv", "tfds"}


def _program(args, timeout=HANG_TIMEOUT):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "-m", "training.train", *args],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "sources, message",
    [
        ("[{kind: text, dir: corpora/x, weight: 0}]", "data.sources[0].weight=0: use a positive"),
        ("[]", "data.sources=[]: list one corpus or more"),
        ("{kind: text}", "list one corpus or more"),
        ("[{dir: x, tag: ''}]", "data.sources[0].tag='': a tag is a non-empty string"),
        ("[{dir: x, tag: 'a b'}]", "cannot hold whitespace"),
    ],
)
def test_bad_sources_end_the_program_in_one_line(tmp_path, sources, message):
    result = _program(
        ["--config", "demo", "--workdir", str(tmp_path / "w"), "--set", f"data.sources={sources}"]
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: error: "), result.stderr
    assert message in lines[0]


def test_a_missing_corpus_ends_the_program_in_one_line(tmp_path):
    sources = [{"kind": "text", "dir": str(tmp_path / "nowhere"), "weight": 1, "name": "gone"}]
    result = _program(
        ["--config", "demo", "--workdir", str(tmp_path / "w"), "--set", f"data.sources={sources}"]
    )
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr
    assert last.startswith(f"{PROG}: error: data.sources[0] (gone): No training data:"), last
    assert "train.src does not exist" in last


# --------------------------------------------------------------------------- tags and sampling


def test_tags_are_one_piece_of_the_source_model_only(tmp_path):
    from keras_transformer.tokenization import SubwordTokenizer, tag_piece, train_tokenizers

    assert tag_piece("<bt>") == "\u2581<bt>"
    with pytest.raises(ValueError, match="without whitespace"):
        tag_piece("a b")
    src_texts = ["the cat sleeps", "a dog runs in the park"] * 60
    tgt_texts = ["die Katze schläft", "ein Hund läuft im Park"] * 60
    src_path, tgt_path = train_tokenizers(
        src_texts, tgt_texts, tmp_path, vocab_size=60, source_symbols=[tag_piece("<bt>")]
    )
    src, tgt = SubwordTokenizer.from_file(src_path), SubwordTokenizer.from_file(tgt_path)
    tagged, plain = src.tokenize(["<bt> a dog runs", "a dog runs"])
    assert len(src.tokenize("<bt>").numpy()) == 1
    assert (
        src.pieces(tagged)[0] == "\u2581<bt>"
        and tagged.numpy().tolist()[1:] == plain.numpy().tolist()
    )
    assert "\u2581<bt>" not in tgt.pieces(range(tgt.vocab_size))
    assert src.detokenize(tagged).numpy().decode() == "<bt> a dog runs"


def _mixed_input(tmp_path, config, workdir):
    import keras

    from keras_transformer.training.batches import datasets
    from keras_transformer.training.build import build_tokenizers
    from keras_transformer.training.corpora import load_corpus

    keras.utils.set_random_seed(config.training.seed)
    workdir.mkdir(parents=True, exist_ok=True)
    corpus = load_corpus(config.data)
    src_tok, tgt_tok = build_tokenizers(config, corpus, workdir)
    return corpus, src_tok, datasets(config.training, corpus, src_tok, tgt_tok)


def test_weighted_sampling_matches_the_weights_and_tags_start_the_sources(tmp_path):
    """Weights 1 and 3: over 4,000 sampled pairs the large corpus's share is 3/4 within four
    standard deviations of a binomial count; every source row starts with its corpus's tag."""
    import numpy as np

    config = tiny_config(two_sources(tmp_path))
    corpus, src_tok, (train, valid) = _mixed_input(tmp_path, config, tmp_path / "w")
    tag_ids = [int(src_tok.tokenize(tag).numpy()[0]) for tag in ("<a>", "<b>")]
    assert [src_tok.piece(i) for i in tag_ids] == ["\u2581<a>", "\u2581<b>"]
    firsts = np.concatenate([inputs[0][:, 0] for inputs, _ in train.take(125).as_numpy_iterator()])
    assert len(firsts) == 4000
    assert set(np.unique(firsts)) == set(tag_ids)  # tags reach the model, first of every row
    share, expected = float(np.mean(firsts == tag_ids[1])), 0.75
    assert abs(share - expected) < 4 * math.sqrt(expected * (1 - expected) / len(firsts)), share
    # The small corpus (60 pairs) ran out many times over: it repeats on its own.
    assert np.sum(firsts == tag_ids[0]) > 3 * 60
    # Validation and test come from the first corpus, tagged with its tag.
    assert all(source.startswith("<a> ") for source, _ in corpus["test"])
    assert len(corpus["test"]) == 5
    rows = np.concatenate([inputs[0][:, 0] for inputs, _ in valid.as_numpy_iterator()])
    assert set(rows) == {tag_ids[0]}


def test_the_mixed_stream_is_the_same_after_a_skip(tmp_path):
    """What a resumed ``fit`` does (a new dataset from its start, skipping the micro-batches
    already used) gives the batches an uninterrupted run reads next."""
    import numpy as np

    config = tiny_config(two_sources(tmp_path, weights=(2, 1), tags=("<a>", None)))
    _, _, (first, _) = _mixed_input(tmp_path, config, tmp_path / "w")
    uninterrupted = list(first.take(30).as_numpy_iterator())
    _, _, (again, _) = _mixed_input(tmp_path, config, tmp_path / "w")  # a new process's dataset
    resumed = list(again.skip(18).take(12).as_numpy_iterator())
    assert len(resumed) == 12
    for (got_in, got_out), (want_in, want_out) in zip(resumed, uninterrupted[18:]):
        for got, want in zip((*got_in, got_out), (*want_in, want_out)):
            np.testing.assert_array_equal(got, want)


def test_the_mixed_streams_iterator_is_saved_and_restored(tmp_path):
    """What a resumed custom loop does (its backup holds the input iterator's state)."""
    import numpy as np
    import tensorflow as tf

    config = tiny_config(two_sources(tmp_path, weights=(1, 2)))
    _, _, (train, _) = _mixed_input(tmp_path, config, tmp_path / "w")
    iterator = iter(train)
    for _ in range(4):
        next(iterator)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.write(str(tmp_path / "ckpt" / "input"))
    ahead = [next(iterator)[1].numpy() for _ in range(6)]
    checkpoint.read(path).assert_consumed()
    again = [next(iterator)[1].numpy() for _ in range(6)]
    for got, want in zip(again, ahead):
        np.testing.assert_array_equal(got, want)


def test_a_tag_the_workdirs_tokenizer_lacks_is_refused(tmp_path):
    config = tiny_config(two_sources(tmp_path, tags=(None, None)))
    _mixed_input(tmp_path, config, tmp_path / "w")  # trains the tokenizer without tags
    tagged = tiny_config(two_sources(tmp_path, tags=(None, "<new>")))
    with pytest.raises(ValueError, match="tag '<new>' .* is not one piece of the source tokenizer"):
        _mixed_input(tmp_path, tagged, tmp_path / "w")


def _prepare(tmp_path, sources, *overrides):
    """``python -m training.prepare`` (in this process) on ``sources``; its JSON summary."""
    from keras_transformer.cli import prepare

    sets = [f"data.sources={json.dumps(sources)}", "tokenizer.vocab_size=120", *overrides]
    arguments = ["--config", "demo", "--workdir", str(tmp_path / "w")]
    assert prepare.main([*arguments, *(a for s in sets for a in ("--set", s))]) == 0


def test_several_corpora_are_prepared_each_into_its_own_shards(tmp_path, capsys):
    """training.prepare writes W/prepared/source-N per corpus (tagged); training reads them
    back drawn by weight, and a stale or missing one is named."""
    import numpy as np

    from keras_transformer.data import PreparationError, PreparedShards, StalePreparationError
    from keras_transformer.training.batches import datasets
    from keras_transformer.training.build import build_tokenizers
    from keras_transformer.training.corpora import load_corpus
    from keras_transformer.training.prepared import find_prepared, training_input_identity

    sources = two_sources(tmp_path)  # 60 pairs tagged <a> (weight 1), 240 tagged <b> (3)
    _prepare(tmp_path, sources, "data.examples_per_shard=40")
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    workdir = tmp_path / "w"
    assert [row["name"] for row in summary["sources"]] == ["small", "large"]
    assert [row["pairs_read"] for row in summary["sources"]] == [60, 240]
    assert summary["examples"] == sum(row["examples"] for row in summary["sources"])
    assert summary["directory"] == str(workdir / "prepared")
    preparations = [PreparedShards.load(workdir / "prepared" / f"source-{i}") for i in range(2)]
    assert [len(p.files) for p in preparations] == [2, 6]
    assert preparations[0].fingerprint["source"]["tag"] == "<a>"

    config = tiny_config(sources, "data.examples_per_shard=40")
    corpus = load_corpus(config.data)
    src_tok, tgt_tok = build_tokenizers(config, corpus, workdir)  # the workdir's
    prepared = find_prepared(config, workdir, corpus, src_tok, tgt_tok)
    assert [p.directory for p in prepared] == [p.directory for p in preparations]
    train, _ = datasets(config.training, corpus, src_tok, tgt_tok, prepared)
    tag_ids = [int(src_tok.tokenize(tag).numpy()[0]) for tag in ("<a>", "<b>")]
    firsts = np.concatenate([inputs[0][:, 0] for inputs, _ in train.take(100).as_numpy_iterator()])
    assert set(np.unique(firsts)) == set(tag_ids)  # each example starts with its corpus's tag
    share = float(np.mean(firsts == tag_ids[1]))
    assert abs(share - 0.75) < 4 * math.sqrt(0.75 * 0.25 / len(firsts)), share
    assert training_input_identity(prepared) != training_input_identity(None)

    retagged = tiny_config(two_sources(tmp_path, tags=("<a>", "<c>")))
    with pytest.raises(StalePreparationError, match="source-1 is stale .*source.*kt prepare"):
        find_prepared(retagged, workdir, load_corpus(retagged.data), src_tok, tgt_tok)
    reweighted = tiny_config(two_sources(tmp_path, weights=(5, 1)))  # weights only sample
    assert find_prepared(reweighted, workdir, corpus, src_tok, tgt_tok) is not None
    off = tiny_config(sources, "data.prepare=false")
    assert find_prepared(off, workdir, corpus, src_tok, tgt_tok) is None
    import shutil

    shutil.rmtree(workdir / "prepared" / "source-1")
    with pytest.raises(PreparationError, match="some of the data.sources only \\(not for large\\)"):
        find_prepared(config, workdir, corpus, src_tok, tgt_tok)
    again = tiny_config(sources, "data.examples_per_shard=40", "data.prepare=true")
    assert len(find_prepared(again, workdir, corpus, src_tok, tgt_tok)) == 2  # remade
    assert PreparedShards.exists(workdir / "prepared" / "source-1")


# --------------------------------------------------------------------------- the program


@pytest.mark.slow  # a training and a SavedModel export
def test_two_tagged_corpora_train_and_the_tags_survive_export(tmp_path):
    import numpy as np
    import tensorflow as tf

    from keras_transformer import Workdir
    from keras_transformer.exporters import export_saved_model

    workdir = tmp_path / "run"
    sources = two_sources(tmp_path)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.train",
            "--config",
            "demo",
            "--workdir",
            str(workdir),
            "--set",
            f"data.sources={json.dumps(sources)}",
            "--set",
            "data.eval_source=large",
            "--set",
            "tokenizer.vocab_size=120",
            "--set",
            "model.d_model=32",
            "--set",
            "model.d_ff=64",
            "--set",
            "training.epochs=2",
            "--set",
            "training.steps_per_epoch=2",
            "--set",
            "training.steps_per_execution=1",
            "--set",
            "training.batch_tokens=256",
            "--set",
            "training.average_last=1",
        ],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert [row["name"] for row in metrics["sources"]] == ["small", "large"]
    assert [row["share"] for row in metrics["sources"]] == [0.25, 0.75]
    assert metrics["test"]["sentences"] == 7  # the large corpus's test split (eval_source)

    trained = Workdir(workdir).load()  # model.keras and the workdir's tokenizer
    ids = trained.src_tokenizer.tokenize(["<b> ka mi", "<a>"]).to_list()
    assert trained.src_tokenizer.pieces(ids[0])[0] == "\u2581<b>" and len(ids[1]) == 1
    from keras_transformer.translate import Translator

    translator = Translator(trained.model, trained.src_tokenizer, trained.tgt_tokenizer)
    assert len(translator.translate(["<b> ka mi"])) == 1  # decodes a tagged sentence

    version = export_saved_model(workdir, tmp_path / "served", beam_size=1)
    loaded = tf.saved_model.load(str(version))
    pieces = loaded.signatures["cross_attention"](sentence=tf.constant("<b> ka mi"))
    source_pieces = [piece.decode() for piece in np.asarray(pieces["source_pieces"])]
    assert source_pieces[0] == "\u2581<b>" and source_pieces[-1] == "</s>", source_pieces


@pytest.mark.slow  # a killed training, then its resumption
@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_a_killed_run_on_two_weighted_corpora_resumes(tmp_path, loop):
    import signal
    import time

    workdir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "training.train",
        "--config",
        "demo",
        "--workdir",
        str(workdir),
        "--set",
        f"data.sources={json.dumps(two_sources(tmp_path, weights=(1, 2), tags=('<a>', None)))}",
        "--set",
        "tokenizer.vocab_size=120",
        "--set",
        "model.d_model=32",
        "--set",
        "model.d_ff=64",
        "--set",
        f"training.loop={loop}",
        "--set",
        "training.epochs=6",
        "--set",
        "training.steps_per_epoch=4",
        "--set",
        "training.steps_per_execution=1",
        "--set",
        "training.backup_every_steps=2",
        "--set",
        "training.batch_tokens=256",
        "--set",
        "evaluation.max_sentences=3",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    backup = workdir / "backup" / "training_metadata.json"
    process = subprocess.Popen(
        command, cwd=CHECKOUT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + HANG_TIMEOUT
    while not backup.exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    assert backup.exists(), "no backup written before the deadline"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (workdir / "metrics.json").exists(), "the run finished before it was killed"
    resumed_at = json.loads(backup.read_text())["step"]
    result = subprocess.run(
        command, cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=HANG_TIMEOUT
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"at step {resumed_at}" in result.stderr
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["optimizer_steps"] == 24
    # the history spans the epochs before the kill too
    assert {name: len(values) for name, values in metrics["history"].items()} == {
        name: 6 for name in metrics["history"]
    }


@pytest.mark.slow  # two worker processes
@pytest.mark.parametrize("prepared", [False, True], ids=["text", "prepared"])
def test_two_workers_train_on_their_own_parts_of_the_weighted_corpora(tmp_path, prepared):
    """Multi-worker on 127.0.0.1 with two weighted corpora: each worker reads its own part of
    each corpus (its lines of the text, or its shard files of each corpus's preparation), drawn
    by weight; the two train as one (the same global metrics)."""
    import re

    sys.path.insert(0, str(CHECKOUT / "tests"))
    from loopback import run_workers

    sources = json.dumps(two_sources(tmp_path, weights=(1, 2), tags=("<a>", None)))
    command = [
        *("-m", "training.train", "--config", "demo", "--workdir", str(tmp_path / "run")),
        *("--strategy", "multi_worker", "--set", f"data.sources={sources}"),
        *("--set", "tokenizer.vocab_size=120", "--set", "model.d_model=32"),
        *("--set", "model.d_ff=64", "--set", "training.epochs=2"),
        *("--set", "training.steps_per_epoch=3", "--set", "training.steps_per_execution=1"),
        *("--set", "training.batch_tokens=256", "--set", "evaluation.max_sentences=3"),
        *(
            ("--set", "data.prepare=true", "--set", "data.examples_per_shard=20")
            if prepared
            else ()
        ),
    ]
    outputs = run_workers(lambda index: [sys.executable, *command], CHECKOUT)
    chief, other = tmp_path / "run", tmp_path / "run" / "worker_1"
    metrics = [json.loads((path / "metrics.json").read_text()) for path in (chief, other)]
    assert metrics[0]["optimizer_steps"] == metrics[1]["optimizer_steps"] == 6
    assert metrics[0]["history"]["loss"] == metrics[1]["history"]["loss"]
    assert metrics[0]["sources"] == metrics[1]["sources"]
    if prepared:  # each corpus's shard files split over the two pipelines
        read = [
            [
                line.split(": ")[-1].split(", ")
                for line in out.splitlines()
                if "shard files: " in line
            ]
            for out in outputs
        ]
        assert [len(lines) for lines in read] == [2, 2]  # a line per corpus and worker
        for index in range(2):
            manifest = json.loads(
                (chief / "prepared" / f"source-{index}" / "manifest.json").read_text()
            )
            files = [shard["file"] for shard in manifest["shards"]]
            first, second = read[0][index], read[1][index]
            assert not set(first) & set(second) and sorted(first + second) == sorted(files)
        return
    # Worker i reads lines of each corpus's files: small (60 lines), then large (240).
    spans = [
        [
            sorted({tuple(map(int, s)) for s in re.findall(r"lines (\d+)-(\d+)", line)})
            for line in out.splitlines()
            if "reads its part of the training text" in line
        ]
        for out in outputs
    ]
    assert spans == [[[(1, 30)], [(1, 120)]], [[(31, 60)], [(121, 240)]]]
