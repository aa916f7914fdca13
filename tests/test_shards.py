"""Prepared corpora: the two stages of make_dataset, preparing shuffled shards, and reading
them back split over input pipelines (two MultiWorkerMirroredStrategy workers on loopback)."""

from __future__ import annotations

import collections
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hang_guard import HANG_TIMEOUT
from loopback import run_workers

from keras_transformer.config import BOS_ID, PAD_ID
from keras_transformer.data import (
    PairSource,
    PreparationError,
    PreparedShards,
    StalePreparationError,
    batch_examples,
    demo_splits,
    make_dataset,
    prepare_shards,
    sharded_dataset,
    tokenize_pairs,
)
from keras_transformer.data.shards import prepare as prepare_module
from keras_transformer.tokenization import SubwordTokenizer, train_tokenizers

pytestmark = pytest.mark.runtime

CHECKOUT = Path(__file__).resolve().parent.parent
PAIRS = demo_splits(train=300, valid=0, test=0, seed=3)["train"]  # no two sources alike
LIMITS = dict(max_src_length=16, max_tgt_length=16)  # drops the longest pairs


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    src_path, tgt_path = train_tokenizers(
        [s for s, _ in PAIRS], [t for _, t in PAIRS], tmp_path_factory.mktemp("spm"), vocab_size=300
    )
    return SubwordTokenizer.from_file(src_path), SubwordTokenizer.from_file(tgt_path)


@pytest.fixture(scope="module")
def prepared(tokenizers, tmp_path_factory) -> PreparedShards:
    return prepare_shards(
        PairSource.from_pairs(PAIRS).dataset(),
        *tokenizers,
        tmp_path_factory.mktemp("p") / "prepared",
        **LIMITS,
        examples_per_shard=60,
        seed=5,
        source={"corpus": "demo"},
    )


def example_rows(dataset) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(src ids, tgt_out ids) of every example of a batched dataset, unpadded; checks tgt_in."""
    rows = []
    for (src, tgt_in), tgt_out in dataset:
        for s, i, o in zip(src.numpy(), tgt_in.numpy(), tgt_out.numpy()):
            s, i, o = s[s != PAD_ID], i[i != PAD_ID], o[o != PAD_ID]
            assert i[0] == BOS_ID and list(i[1:]) == list(o[:-1])  # tgt_in = BOS + tgt_out[:-1]
            rows.append((tuple(s), tuple(o)))
    return rows


def tokenized_rows(tokenizers) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    examples = tokenize_pairs(PairSource.from_pairs(PAIRS).dataset(), *tokenizers, **LIMITS)
    return [(tuple(src.numpy()), tuple(tgt_out.numpy())) for (src, _), tgt_out in examples]


# --------------------------------------------------------------------------- the two stages


def test_make_dataset_is_tokenize_pairs_then_batch_examples(tokenizers):
    batching = dict(batch_tokens=128, shuffle_buffer=64, seed=2, **LIMITS)
    whole = make_dataset(PairSource.from_pairs(PAIRS).dataset(), *tokenizers, **batching)
    staged = batch_examples(
        tokenize_pairs(PairSource.from_pairs(PAIRS).dataset(), *tokenizers, **LIMITS), **batching
    )
    assert example_rows(whole) == example_rows(staged)
    assert whole.element_spec == staged.element_spec
    with pytest.raises(ValueError, match="tokenize_pairs or sharded_dataset"):
        batch_examples(PairSource.from_pairs(PAIRS).dataset(), batch_size=8, **LIMITS)
    with pytest.raises(ValueError, match="length_filter must be one of"):
        tokenize_pairs(
            PairSource.from_pairs(PAIRS).dataset(), *tokenizers, **LIMITS, length_filter="clip"
        )


# --------------------------------------------------------------------------- preparing


def test_prepared_shards_hold_the_tokenized_corpus_once(prepared, tokenizers):
    expected = tokenized_rows(tokenizers)
    assert 0 < len(expected) < len(PAIRS)  # the limits drop some pairs
    assert prepared.pairs_read == len(PAIRS) and prepared.examples == len(expected)
    assert prepared.dropped_too_long == len(PAIRS) - len(expected)
    assert len(prepared.files) == 5 == len(set(prepared.files))  # ceil(300 / 60)
    assert prepared.files[0] == "shard-00000-of-00005.tfrecord"
    assert prepared.id_dtype == "uint16"
    assert prepared.src_tokens == sum(len(s) for s, _ in expected)
    assert prepared.tgt_tokens == sum(len(t) for _, t in expected)
    assert prepared.longest_src == max(len(s) for s, _ in expected) <= 16
    assert sorted(p.name for p in prepared.directory.iterdir()) == sorted(
        [*prepared.files, "manifest.json"]
    )
    assert not [
        p for p in prepared.directory.parent.iterdir() if p.name.startswith(".")
    ]  # no staging left

    read = example_rows(sharded_dataset(prepared.directory, batch_size=16, training=False))
    assert sorted(read) == sorted(expected)
    assert read != expected  # shuffled, not in corpus order
    loaded = PreparedShards.load(prepared.directory)
    assert (
        loaded == prepared
        and json.loads((prepared.directory / "manifest.json").read_text()) == prepared.to_json()
    )


def test_same_seed_same_bytes_other_seed_other_order(prepared, tokenizers, tmp_path):
    def shard_bytes(directory):
        return [path.read_bytes() for path in sorted(Path(directory).glob("shard-*"))]

    again = prepare_shards(
        PairSource.from_pairs(PAIRS).dataset(),
        *tokenizers,
        tmp_path / "again",
        **LIMITS,
        examples_per_shard=60,
        seed=5,
        source={"corpus": "demo"},
    )
    assert shard_bytes(again.directory) == shard_bytes(prepared.directory)
    assert (again.directory / "manifest.json").read_text() == (
        prepared.directory / "manifest.json"
    ).read_text()
    other = prepare_shards(
        PairSource.from_pairs(PAIRS).dataset(),
        *tokenizers,
        tmp_path / "other",
        **LIMITS,
        examples_per_shard=60,
        seed=6,
    )
    assert shard_bytes(other.directory) != shard_bytes(prepared.directory)
    assert other.examples == prepared.examples


def test_more_shards_than_open_files_and_int32_ids(tokenizers, tmp_path, monkeypatch):
    """Past MAX_OPEN_FILES a temporary file becomes several shards; ids past uint16 are int32;
    a source of unknown length is counted first."""
    monkeypatch.setattr(prepare_module, "MAX_OPEN_FILES", 2)
    monkeypatch.setattr(prepare_module, "_id_dtype", lambda *args: np.dtype("<i4"))
    unknown_length = (
        PairSource.from_pairs(PAIRS).dataset().filter(lambda source, target: True)
    )  # counted first
    prepared = prepare_shards(
        unknown_length, *tokenizers, tmp_path / "p", **LIMITS, examples_per_shard=60, seed=1
    )
    assert prepared.pairs_read == len(PAIRS)
    assert len(prepared.files) == 5 and prepared.id_dtype == "int32"
    assert max(prepared.examples_per_file) - min(prepared.examples_per_file) < 30
    read = example_rows(sharded_dataset(prepared, batch_size=16, training=False))
    assert sorted(read) == sorted(tokenized_rows(tokenizers))


def test_a_failed_preparation_leaves_the_previous_one(prepared, tokenizers, tmp_path, monkeypatch):
    target = tmp_path / "p"
    first = prepare_shards(
        PairSource.from_pairs(PAIRS[:100]).dataset(),
        *tokenizers,
        target,
        **LIMITS,
        examples_per_shard=60,
    )
    before = {path.name: path.read_bytes() for path in target.iterdir()}

    def dies(path, *args):
        Path(path).write_bytes(b"half a shard")
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_module, "_write_records", dies)
    with pytest.raises(KeyboardInterrupt):
        prepare_shards(
            PairSource.from_pairs(PAIRS).dataset(),
            *tokenizers,
            target,
            **LIMITS,
            examples_per_shard=60,
        )
    assert {path.name: path.read_bytes() for path in target.iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["p"]  # no staging folder left
    assert PreparedShards.load(target) == first

    elsewhere = tmp_path / "mine"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="holds no prepared corpus"):
        prepare_shards(PairSource.from_pairs(PAIRS).dataset(), *tokenizers, elsewhere, **LIMITS)
    with pytest.raises(ValueError, match="examples_per_shard must be an integer >= 1"):
        prepare_shards(
            PairSource.from_pairs(PAIRS).dataset(),
            *tokenizers,
            tmp_path / "q",
            **LIMITS,
            examples_per_shard=0,
        )
    with pytest.raises(ValueError, match="nothing to prepare"):
        prepare_shards(
            PairSource.from_pairs(PAIRS).dataset(),
            *tokenizers,
            tmp_path / "q",
            max_src_length=2,
            max_tgt_length=1,
        )
    assert not (tmp_path / "q").exists()


def test_stale_or_damaged_preparations_are_named(prepared, tokenizers, tmp_path):
    prepared.check(*tokenizers, **LIMITS, source={"corpus": "demo"})
    with pytest.raises(StalePreparationError, match="max_src_length: prepared with 16, now 32"):
        prepared.check(*tokenizers, max_src_length=32, max_tgt_length=16, source={"corpus": "demo"})
    with pytest.raises(StalePreparationError, match="source"):
        prepared.check(*tokenizers, **LIMITS, source={"corpus": "other"})
    src_tok, _ = tokenizers
    with pytest.raises(StalePreparationError, match="tgt_tokenizer"):
        prepared.check(src_tok, src_tok, **LIMITS, source={"corpus": "demo"})

    with pytest.raises(PreparationError, match="holds no prepared corpus"):
        PreparedShards.load(tmp_path)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "manifest.json").write_text((prepared.directory / "manifest.json").read_text())
    with pytest.raises(PreparationError, match="lacks shard"):
        sharded_dataset(damaged, batch_size=8)


# --------------------------------------------------------------------------- reading


def test_input_pipelines_split_the_files(prepared):
    def read(pipelines, index, **kwargs):
        return example_rows(
            sharded_dataset(
                prepared,
                batch_size=8,
                num_input_pipelines=pipelines,
                input_pipeline_index=index,
                seed=0,
                **kwargs,
            )
        )

    everything = sorted(read(1, 0))
    parts = [read(2, 0), read(2, 1)]
    assert not set(parts[0]) & set(parts[1]) and sorted(parts[0] + parts[1]) == everything
    assert len(parts[0]) == sum(prepared.examples_per_file[0::2])  # files 0, 2, 4

    dataset = sharded_dataset(prepared, batch_size=8, num_input_pipelines=2, input_pipeline_index=1)
    policy = dataset.options().experimental_distribute.auto_shard_policy
    assert (
        policy == tf.data.experimental.AutoShardPolicy.OFF
    )  # sharded here, not again by tf.distribute
    with pytest.raises(
        ValueError, match="fewer than the 6 input pipelines.*examples_per_shard <= "
    ):
        sharded_dataset(prepared, batch_size=8, num_input_pipelines=6)
    with pytest.raises(ValueError, match="must be below"):
        sharded_dataset(prepared, batch_size=8, num_input_pipelines=2, input_pipeline_index=2)


def test_each_pass_reads_the_files_in_a_new_order(prepared):
    dataset = sharded_dataset(
        prepared, batch_size=1, bucket_boundaries=(), shuffle_buffer=0, seed=3
    )
    first, second = example_rows(dataset), example_rows(dataset)
    assert sorted(first) == sorted(second) and first != second
    repeated = sharded_dataset(prepared, batch_size=1, bucket_boundaries=(), seed=3, repeat=True)
    assert repeated.cardinality() == tf.data.INFINITE_CARDINALITY
    passes = example_rows(repeated.take(2 * prepared.examples))
    assert (
        sorted(passes[: prepared.examples]) == sorted(passes[prepared.examples :]) == sorted(first)
    )
    static = sharded_dataset(prepared, batch_tokens=160, static_shapes=True)
    assert [s.shape.as_list() for s in tf.nest.flatten(static.element_spec)] == [
        [9, 16],
        [9, 17],
        [9, 17],
    ]


# --------------------------------------------------------------------------- several corpora


@pytest.fixture(scope="module")
def other_prepared(tokenizers, tmp_path_factory) -> PreparedShards:
    """A second, smaller corpus of the same language pair, prepared with the same tokenizers."""
    pairs = demo_splits(train=100, valid=0, test=0, seed=11)["train"]
    return prepare_shards(
        PairSource.from_pairs(pairs).dataset(),
        *tokenizers,
        tmp_path_factory.mktemp("o") / "prepared",
        **LIMITS,
        examples_per_shard=25,
        seed=6,
        source={"corpus": "other"},
    )


def test_several_prepared_corpora_are_drawn_by_weight(prepared, other_prepared, tokenizers):
    first = collections.Counter(example_rows(sharded_dataset(prepared, batch_size=8)))
    second = collections.Counter(example_rows(sharded_dataset(other_prepared, batch_size=8)))
    both = [prepared, other_prepared.directory]  # a PreparedShards or its folder
    # One pass without repeat: every example of each corpus once.
    once = sharded_dataset(both, weights=[1, 3], batch_size=8, seed=1)
    assert collections.Counter(example_rows(once)) == first + second
    # Repeated: each corpus on its own, drawn 1:3 whatever their sizes (300-ish and 100-ish).
    drawn = example_rows(
        sharded_dataset(
            both, weights=[1, 3], batch_size=1, bucket_boundaries=(), seed=2, repeat=True
        ).take(2000)
    )
    share = sum(row in second for row in drawn) / len(drawn)
    assert 0.72 < share < 0.78, share
    again = example_rows(
        sharded_dataset(
            both, weights=[1, 3], batch_size=1, bucket_boundaries=(), seed=2, repeat=True
        ).take(2000)
    )
    assert again == drawn  # the same seed, the same stream (what a resumed fit skips)
    # Split over two input pipelines: each reads its own files of each corpus.
    halves = [
        collections.Counter(
            example_rows(
                sharded_dataset(
                    both,
                    weights=[1, 1],
                    batch_size=8,
                    num_input_pipelines=2,
                    input_pipeline_index=i,
                )
            )
        )
        for i in range(2)
    ]
    assert not halves[0] & halves[1] and halves[0] + halves[1] == first + second
    for weights, message in [
        (None, "2 prepared corpora need weights"),
        ([1], "give one positive number for each of the 2"),
        ([1, 0], "give one positive number"),
    ]:
        with pytest.raises(ValueError, match=message):
            sharded_dataset(both, weights=weights, batch_size=8)
    with pytest.raises(ValueError, match="fewer than the 5 input pipelines"):
        sharded_dataset(both, weights=[1, 1], batch_size=8, num_input_pipelines=5)


def test_several_prepared_corpora_must_be_prepared_alike(prepared, tokenizers, tmp_path):
    longer = prepare_shards(
        PairSource.from_pairs(PAIRS[:50]).dataset(),
        *tokenizers,
        tmp_path / "longer",
        max_src_length=20,
        max_tgt_length=16,
        examples_per_shard=25,
    )
    with pytest.raises(ValueError, match="max_src_length=20 and .* with 16: prepare them alike"):
        sharded_dataset([prepared, longer], weights=[1, 1], batch_size=8)


WORKER = """
import hashlib, json, sys
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
from keras_transformer.data import sharded_dataset, sharded_dataset_fn

directory, out = sys.argv[1:]

def fingerprints(distributed):
    seen = []
    for (src, _), tgt_out in distributed:
        for s, o in zip(strategy.experimental_local_results(src),
        strategy.experimental_local_results(tgt_out)):
            for a, b in zip(s.numpy(), o.numpy()):
                seen.append(hashlib.sha256(a[a != 0].tobytes() + b"|" + b[b !=
                0].tobytes()).hexdigest())
    return seen

per_worker = strategy.distribute_datasets_from_function(sharded_dataset_fn(directory, batch_size=8,
seed=0))
one_pipeline = strategy.experimental_distribute_dataset(sharded_dataset(directory, batch_size=8,
seed=0))
with open(out, "w") as handle:
    json.dump({"from_function": fingerprints(per_worker), "distribute_dataset":
    fingerprints(one_pipeline)},
              handle)
"""


def test_two_workers_on_loopback_see_disjoint_parts_that_make_the_corpus(prepared, tmp_path):
    """One pass of two MultiWorkerMirroredStrategy workers: by file through
    distribute_datasets_from_function, and one pipeline through experimental_distribute_dataset."""
    run_workers(
        lambda index: [
            sys.executable,
            "-c",
            WORKER,
            str(prepared.directory),
            str(tmp_path / f"worker{index}.json"),
        ],
        CHECKOUT,
        timeout=HANG_TIMEOUT,
    )
    seen = [json.loads((tmp_path / f"worker{index}.json").read_text()) for index in range(2)]

    def fingerprints(rows):
        return [
            hashlib.sha256(
                np.array(s, np.int32).tobytes() + b"|" + np.array(o, np.int32).tobytes()
            ).hexdigest()
            for s, o in rows
        ]

    corpus = collections.Counter(
        fingerprints(example_rows(sharded_dataset(prepared, batch_size=8, training=False)))
    )
    assert sum(corpus.values()) == prepared.examples == len(corpus)
    for way in ("from_function", "distribute_dataset"):
        first, second = (collections.Counter(worker[way]) for worker in seen)
        assert first and second and not first & second, way
        assert first + second == corpus, way  # the whole corpus, once
    # By file: worker i read exactly shard files i, i + 2, ...
    for index, worker in enumerate(seen):
        files = example_rows(
            sharded_dataset(
                prepared,
                batch_size=8,
                training=False,
                num_input_pipelines=2,
                input_pipeline_index=index,
            )
        )
        assert collections.Counter(worker["from_function"]) == collections.Counter(
            fingerprints(files)
        )
