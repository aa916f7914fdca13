"""The Marian (OPUS-MT) tokenizer in TensorFlow: the ids and text of Hugging
Face's MarianTokenizer, through tf.function, tf.data and a SavedModel loaded in
a fresh process; loading from a checkpoint's files; the data pipeline with
decoder start = pad; the workdir and exporter file layout."""

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hang_guard import HANG_TIMEOUT
from marian_fixtures import EXTRA_SENTENCES, random_text, write_marian_tokenizer

from keras_transformer.data import (
    PairSource,
    count_tokens,
    make_dataset,
    prepare_shards,
    sharded_dataset,
    source_ids,
    target_ids,
)
from keras_transformer.tokenization import MarianSubwordTokenizer, load_marian_tokenizers
from keras_transformer.workdir import TrainedModel, Workdir, WorkdirError

pytestmark = pytest.mark.runtime

CHECKOUT = Path(__file__).resolve().parent.parent
LANGUAGE_CODES = (">>fra<<", ">>deu<<")
TF_TEXT_OPS = {
    "SentencepieceOp",
    "SentencepieceTokenizeOp",
    "SentencepieceDetokenizeOp",
    "SentencepieceIdToStringOp",
    "SentencepieceGetPieceSizeOp",
}

SENTENCES = [
    "the big dog sees 3 red cats",
    "",
    "   ",
    "Hello, world! How are you?",
    "The price is 1,250.75 euros (about 3 %).",
    "\u201cQuoted\u201d text \u2014 with a dash; and 'single' quotes.",
    "  spaces   inside  and around ",
    "digits 0123456789 and 42",
    "unknown characters: \u4e2d\u6587 \u0416 \U0001f600 \u00df",
    ">>fra<< the boy sleeps",
    ">>deu<<the boy",
    ">>xyz<< a code outside the vocabulary",
    ">>fra<<",
    "a >>fra<< code inside the text",
    "two\nlines",
    "</s> written out",
    *EXTRA_SENTENCES,
]


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    return write_marian_tokenizer(
        tmp_path_factory.mktemp("marian") / "tokenizer", language_codes=LANGUAGE_CODES
    )


@pytest.fixture(scope="module")
def tokenizers(marian_dir):
    return load_marian_tokenizers(marian_dir)


@pytest.fixture(scope="module")
def hf_tokenizer(marian_dir):
    transformers = pytest.importorskip("transformers")
    return transformers.MarianTokenizer.from_pretrained(str(marian_dir))


def _sentences() -> list[str]:
    rng = random.Random(0)
    return SENTENCES + [random_text(rng, rng.randrange(1, 60)) for _ in range(40)]


def _as_lists(ragged) -> list[list[int]]:
    return [list(row) for row in ragged.to_list()]


def test_special_ids_follow_the_vocabulary(marian_dir, tokenizers):
    src, tgt = tokenizers
    vocab = json.loads((marian_dir / "vocab.json").read_text(encoding="utf-8"))
    for tokenizer in (src, tgt):
        assert tokenizer.vocab_size == len(vocab)
        assert (tokenizer.eos_id, tokenizer.unk_id) == (0, 1)
        assert tokenizer.pad_id == len(vocab) - 1 == vocab["<pad>"]
        assert tokenizer.bos_id == tokenizer.pad_id  # Marian's decoder starts from the pad id
        assert tokenizer.piece(tokenizer.pad_id) == "<pad>"
        assert tokenizer.pieces([0, 1, 2]) == ["</s>", "<unk>", ">>fra<<"]
        assert [p.decode() for p in tokenizer.id_to_piece([0, vocab["<pad>"], -5]).numpy()] == [
            "</s>",
            "<pad>",
            "<unk>",
        ]
    assert src.vocabulary == tgt.vocabulary
    assert src.model_bytes == (marian_dir / "source.spm").read_bytes()
    assert tgt.model_bytes == (marian_dir / "target.spm").read_bytes()
    assert src.model_bytes != tgt.model_bytes
    with pytest.raises(ValueError, match="outside the vocabulary"):
        src.piece(len(vocab))


def test_tokenize_adds_no_eos_and_keeps_the_language_code(tokenizers):
    src, _ = tokenizers
    one = src.tokenize(">>deu<< the boy")
    assert one.shape.rank == 1 and one.dtype == tf.int32
    ids = one.numpy().tolist()
    assert ids[0] == src.vocabulary.index(">>deu<<")
    assert src.eos_id not in ids
    assert src.tokenize(["the boy"]).to_list()[0] == ids[1:]
    assert src.tokenize([""]).to_list() == [[]]
    unknown = src.tokenize(["\u4e2d"]).to_list()[0]
    assert src.unk_id in unknown


def test_ids_match_marian_tokenizer(tokenizers, hf_tokenizer):
    src, tgt = tokenizers
    sentences = _sentences()
    src_ids = _as_lists(src.tokenize(tf.constant(sentences)))
    tgt_ids = _as_lists(tgt.tokenize(tf.constant(sentences)))
    expected_src = [hf_tokenizer(text)["input_ids"] for text in sentences]
    expected_tgt = [hf_tokenizer(text_target=text)["input_ids"] for text in sentences]
    mismatched = [
        (text, ours + [src.eos_id], theirs)
        for text, ours, theirs in zip(sentences, src_ids, expected_src)
        if ours + [src.eos_id] != theirs
    ]
    # A special token written out in the text is read as that token by MarianTokenizer, as text
    # here.
    assert [text for text, _, _ in mismatched] == ["</s> written out"], mismatched
    mismatched = [
        (text, ours, theirs)
        for text, ours, theirs in zip(sentences, tgt_ids, expected_tgt)
        if ours + [tgt.eos_id] != theirs and text != "</s> written out"
    ]
    assert not mismatched, mismatched
    assert src_ids != tgt_ids  # the two SentencePiece models split differently


def test_encode_sources_matches_marian_tokenizer(tokenizers, hf_tokenizer):
    from keras_transformer.data import encode_sources

    src, _ = tokenizers
    texts = ["the big dog sees 3 red cats", "Hello, world!", ""]
    ours = encode_sources(src, texts).to_list()
    assert ours == [hf_tokenizer(text)["input_ids"] for text in texts]
    truncated = encode_sources(src, texts, max_length=3).to_list()
    assert all(len(row) <= 3 and row[-1] == src.eos_id for row in truncated)


def test_detokenize_matches_marian_decode(tokenizers, hf_tokenizer):
    src, tgt = tokenizers
    # (MarianTokenizer reads a written-out "</s>" as EOS, where detokenize would stop.)
    sentences = [text for text in _sentences() if text != "</s> written out"]
    rng = np.random.default_rng(0)
    rows = [hf_tokenizer(text_target=text)["input_ids"] for text in sentences]
    # Model-like outputs: any ids (language codes, unk, pad included) up to one EOS.
    for _ in range(60):
        row = rng.integers(0, tgt.vocab_size, size=rng.integers(0, 20)).tolist()
        rows.append([i for i in row if i != tgt.eos_id] + [tgt.eos_id])
    expected = [hf_tokenizer.decode(row, skip_special_tokens=True) for row in rows]
    padded = tf.ragged.constant(rows).to_tensor(default_value=tgt.pad_id)
    ours = [text.decode("utf-8") for text in tgt.detokenize(padded).numpy()]
    assert ours == expected
    assert [t.decode() for t in tgt.detokenize(tf.ragged.constant(rows)).numpy()] == expected
    assert tgt.detokenize(tf.constant(rows[0], tf.int32)).numpy().decode() == expected[0]
    # Reading stops at the first EOS; ids outside the vocabulary are dropped like <unk>.
    ids = tf.constant([rows[0][:-1] + [tgt.eos_id] + rows[1][:-1] + [tgt.vocab_size + 7, -1]])
    assert tgt.detokenize(ids).numpy()[0].decode() == expected[0]
    # The source tokenizer reads the shared vocabulary alike.
    assert [t.decode() for t in src.detokenize(padded).numpy()] == expected


def test_graph_functions_and_tf_data(tokenizers):
    src, tgt = tokenizers
    texts = tf.constant(_sentences()[:12])
    eager = src.tokenize(texts)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(batch):
        ids = src.tokenize(batch)
        return ids.to_tensor(default_value=src.pad_id), tgt.detokenize(
            ids.to_tensor(default_value=src.pad_id)
        )

    dense, text = round_trip(texts)
    assert dense.numpy().tolist() == eager.to_tensor(default_value=src.pad_id).numpy().tolist()
    assert text.numpy().tolist() == tgt.detokenize(eager).numpy().tolist()
    mapped = tf.data.Dataset.from_tensor_slices(texts).batch(5).map(src.tokenize)
    assert sum((batch.to_list() for batch in mapped), []) == eager.to_list()


class _Module(tf.Module):
    def __init__(self, src, tgt):
        super().__init__()
        self.src, self.tgt = src, tgt

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, texts):
        ids = self.src.tokenize(texts)
        return {"ids": ids.to_tensor(default_value=self.src.pad_id), "lengths": ids.row_lengths()}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def detokenize(self, ids):
        return {"text": self.tgt.detokenize(ids), "pieces": self.tgt.id_to_piece(ids)}


def test_saved_model_in_a_fresh_process_with_only_tf_and_tf_text(tokenizers, tmp_path):
    src, tgt = tokenizers
    sentences = _sentences()[:20]
    path = tmp_path / "tokenizer_module"
    tf.saved_model.save(_Module(src, tgt), str(path))
    expected_ids = src.tokenize(tf.constant(sentences)).to_list()
    padded = tf.ragged.constant([row + [src.eos_id] for row in expected_ids]).to_tensor(
        default_value=src.pad_id
    )
    expected_text = [t.decode() for t in tgt.detokenize(padded).numpy()]
    script = textwrap.dedent(f"""
        import json, sys
        import tensorflow as tf, tensorflow_text  # noqa: F401 (registers the SentencePiece ops)
        from tensorflow.core.protobuf import saved_model_pb2
        from tensorflow.python.framework import op_def_registry
        sentences, padded = json.load(sys.stdin)
        module = tf.saved_model.load({str(path)!r})
        out = module.tokenize(tf.constant(sentences))
        ids = [row[:n] for row, n in zip(out["ids"].numpy().tolist(),
        out["lengths"].numpy().tolist())]
        text = [t.decode() for t in module.detokenize(tf.constant(padded,
        tf.int32))["text"].numpy()]
        saved = saved_model_pb2.SavedModel()
        saved.ParseFromString(open({str(path / "saved_model.pb")!r}, "rb").read())
        graph = saved.meta_graphs[0].graph_def
        functions = {{f.signature.name for f in graph.library.function}}
        ops = {{n.op for n in graph.node}} | {{n.op for f in graph.library.function for n in
        f.node_def}}
        custom = sorted(op for op in ops - functions if op_def_registry.get(op) is None)
        leaked = sorted(name for name in sys.modules if name.split(".")[0] == "keras_transformer")
        print(json.dumps({{"ids": ids, "text": text, "custom": custom, "ops": sorted(ops), "leaked":
        leaked}}))
    """)
    result = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps([sentences, padded.numpy().tolist()]),
        cwd=CHECKOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["ids"] == expected_ids
    assert out["text"] == expected_text
    assert set(out["custom"]) <= TF_TEXT_OPS, set(out["custom"]) - TF_TEXT_OPS
    assert {"LookupTableFindV2", "HashTableV2"} <= set(out["ops"])
    assert out["leaked"] == []


def test_target_ids_start_from_pad_when_bos_is_pad():
    tokens = tf.ragged.constant([[5, 6, 7], [8]], dtype=tf.int32)
    tgt_in, tgt_out = target_ids(tokens, bos_id=99, eos_id=0)
    assert tgt_in.to_list() == [[99, 5, 6, 7], [99, 8]]
    assert tgt_out.to_list() == [[5, 6, 7, 0], [8, 0]]
    assert source_ids(tokens, eos_id=0).to_list() == [[5, 6, 7, 0], [8, 0]]
    # The defaults are the package's reserved ids, as before.
    default_in, default_out = target_ids(tokens)
    assert default_in.to_list() == [[2, 5, 6, 7], [2, 8]]
    assert default_out.to_list() == [[5, 6, 7, 3], [8, 3]]


def _pairs():
    return [
        ("the big dog sees 3 red cats", "a b c"),
        ("Hello, world!", "Hallo Welt !"),
        ("a boy", "yesterday the hungry teacher gave an old book to the farmer"),
        (">>fra<< x", "y"),
    ]


def test_make_dataset_pads_with_the_pad_id_and_starts_targets_with_it(tokenizers, hf_tokenizer):
    src, tgt = tokenizers
    pad, eos = src.pad_id, src.eos_id
    pairs = _pairs()
    dataset = make_dataset(
        PairSource.from_pairs(pairs).dataset(),
        src,
        tgt,
        batch_size=len(pairs),
        max_src_length=64,
        max_tgt_length=63,
        bucket_boundaries=(),
        shuffle_buffer=0,
        training=False,
    )
    (src_ids, tgt_in), tgt_out = next(iter(dataset))
    src_ids, tgt_in, tgt_out = src_ids.numpy(), tgt_in.numpy(), tgt_out.numpy()
    for (source, target), s, i, o in zip(pairs, src_ids, tgt_in, tgt_out):
        expected_src = hf_tokenizer(source)["input_ids"]
        expected_tgt = hf_tokenizer(text_target=target)["input_ids"]  # labels: t1..tn </s>
        assert s.tolist() == expected_src + [pad] * (len(s) - len(expected_src))
        assert o.tolist() == expected_tgt + [pad] * (len(o) - len(expected_tgt))
        assert i.tolist() == [pad] + expected_tgt[:-1] + [pad] * (len(i) - len(expected_tgt))
    # The loss counts the label positions that are not pad: exactly the real tokens and EOS,
    # never the start token (the labels never hold it).
    real = sum(len(hf_tokenizer(text_target=t)["input_ids"]) for _, t in pairs)
    assert int((tgt_out != pad).sum()) == real
    counts = count_tokens(dataset, pad_id=pad)
    assert counts.tgt_tokens == real
    assert counts.src_tokens == sum(len(hf_tokenizer(s)["input_ids"]) for s, _ in pairs)
    assert eos not in tgt_in[:, 1:][tgt_in[:, 1:] != pad]


def test_static_shapes_pad_with_the_pad_id(tokenizers):
    src, tgt = tokenizers
    dataset = make_dataset(
        PairSource.from_pairs(_pairs()).dataset(),
        src,
        tgt,
        batch_size=2,
        max_src_length=40,
        max_tgt_length=39,
        static_shapes=True,
        shuffle_buffer=0,
        training=False,
    )
    (src_ids, tgt_in), tgt_out = next(iter(dataset))
    assert src_ids.shape == (2, 40) and tgt_in.shape == (2, 40)
    assert int(src_ids[0, -1]) == int(tgt_in[0, -1]) == int(tgt_out[0, -1]) == src.pad_id
    assert int(tgt_in[0, 0]) == src.pad_id


def test_prepared_shards_read_back_the_marian_layout(tokenizers, tmp_path):
    src, tgt = tokenizers
    pairs = _pairs() * 3
    kwargs = dict(max_src_length=64, max_tgt_length=63)
    prepared = prepare_shards(
        PairSource.from_pairs(pairs).dataset(),
        src,
        tgt,
        tmp_path / "prepared",
        examples_per_shard=4,
        **kwargs,
    )
    assert prepared.special_ids == {
        "pad_id": src.pad_id,
        "src_eos_id": src.eos_id,
        "tgt_bos_id": tgt.bos_id,
        "tgt_eos_id": tgt.eos_id,
    }
    read = sharded_dataset(
        tmp_path / "prepared", batch_size=1, bucket_boundaries=(), shuffle_buffer=0, training=False
    )
    direct = make_dataset(
        PairSource.from_pairs(pairs).dataset(),
        src,
        tgt,
        batch_size=1,
        bucket_boundaries=(),
        shuffle_buffer=0,
        training=False,
        **kwargs,
    )

    def examples(dataset):
        return sorted(
            (tuple(s.numpy()[0]), tuple(i.numpy()[0]), tuple(o.numpy()[0])) for (s, i), o in dataset
        )

    assert examples(read) == examples(direct)
    # Another vocabulary with the same SentencePiece models makes the preparation stale.
    other = MarianSubwordTokenizer(
        src.model_bytes,
        tuple(reversed(src.vocabulary)),
        eos_id=src.vocab_size - 1,
        unk_id=src.vocab_size - 2,
        pad_id=0,
    )
    from keras_transformer.data import StalePreparationError

    with pytest.raises(StalePreparationError, match="src_tokenizer"):
        prepared.check(other, tgt, length_filter="drop", **kwargs)


def test_mismatched_pad_ids_are_refused(tokenizers):
    src, tgt = tokenizers
    other = MarianSubwordTokenizer(tgt.model_bytes, tgt.vocabulary, eos_id=0, unk_id=1, pad_id=2)
    with pytest.raises(ValueError, match="pad"):
        make_dataset(
            PairSource.from_pairs(_pairs()).dataset(),
            src,
            other,
            batch_size=2,
            max_src_length=8,
            max_tgt_length=7,
        )


def test_separate_vocabularies_match_marian_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    directory = write_marian_tokenizer(tmp_path / "separate", separate_vocabs=True)
    assert (directory / "target_vocab.json").is_file()
    hf = transformers.MarianTokenizer.from_pretrained(str(directory))
    src, tgt = load_marian_tokenizers(directory)
    assert src.vocabulary != tgt.vocabulary and src.pad_id == tgt.pad_id == 2
    sentences = [s for s in _sentences() if s != "</s> written out"]
    assert [row + [0] for row in src.tokenize(sentences).to_list()] == [
        hf(s)["input_ids"] for s in sentences
    ]
    targets = [hf(text_target=s)["input_ids"] for s in sentences]
    assert [row + [0] for row in tgt.tokenize(sentences).to_list()] == targets
    texts = tgt.detokenize(tf.ragged.constant(targets)).numpy()
    assert [t.decode() for t in texts] == [
        hf.decode(row, skip_special_tokens=True) for row in targets
    ]


def test_clean_up_tokenization_spaces_decodes_as_marian_tokenizer(marian_dir, tmp_path):
    """A config with clean_up_tokenization_spaces: the space before . ? ! , and
    English clitics goes, as in MarianTokenizer.decode."""
    transformers = pytest.importorskip("transformers")
    directory = _copy(marian_dir, tmp_path / "clean")
    config_path = directory / "tokenizer_config.json"
    config_path.write_text(
        json.dumps({**json.loads(config_path.read_text()), "clean_up_tokenization_spaces": True})
    )
    hf = transformers.MarianTokenizer.from_pretrained(str(directory))
    _, tgt = load_marian_tokenizers(directory)
    assert tgt.clean_up_tokenization_spaces
    sentences = [
        "Hello , world ! How are you ?",
        "it 's what they 've said , isn 't it .",
        "a . b ' c",
    ]
    sentences += [text for text in _sentences() if text != "</s> written out"]
    rows = [hf(text_target=text)["input_ids"] for text in sentences]
    expected = [hf.decode(row, skip_special_tokens=True) for row in rows]
    assert expected[:2] == ["Hello, world! How are you?", "it's what they've said, isn 't it."]
    padded = tf.ragged.constant(rows).to_tensor(default_value=tgt.pad_id)
    assert [t.decode() for t in tgt.detokenize(padded).numpy()] == expected


def _copy(marian_dir: Path, destination: Path) -> Path:
    shutil.copytree(marian_dir, destination)
    return destination


@pytest.mark.parametrize(
    "problem, match",
    [
        ("no_vocab", "vocab.json not found"),
        ("bad_json", "vocab.json is not valid JSON"),
        ("gaps", "does not number its"),
        ("no_spm", "target.spm not found"),
        ("bad_spm", "source.spm is not a SentencePiece model"),
        ("unknown_pad", "lacks the special token"),
        ("separate_without_target_vocab", "target_vocab.json not found"),
    ],
)
def test_bad_checkpoint_files_are_named(marian_dir, tmp_path, problem, match):
    directory = _copy(marian_dir, tmp_path / problem)
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    vocab = json.loads((directory / "vocab.json").read_text())
    if problem == "no_vocab":
        (directory / "vocab.json").unlink()
    elif problem == "bad_json":
        (directory / "vocab.json").write_text("{not json")
    elif problem == "gaps":
        vocab["<pad>"] += 5
        (directory / "vocab.json").write_text(json.dumps(vocab))
    elif problem == "no_spm":
        (directory / "target.spm").unlink()
    elif problem == "bad_spm":
        (directory / "source.spm").write_bytes(b"not a model")
    elif problem == "unknown_pad":
        config["pad_token"] = "<blank>"
    elif problem == "separate_without_target_vocab":
        config["separate_vocabs"] = True
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=match) as error:
        load_marian_tokenizers(directory)
    assert "\n" not in str(error.value)


def test_workdir_loads_the_marian_pair(marian_dir, tmp_path):
    from keras_transformer.exporters.serving_files import vocabulary_files, write_tokenizer_files

    workdir = Workdir(tmp_path / "run")
    _copy(marian_dir, workdir.tokenizer_dir)
    assert workdir.is_marian and workdir.shared_vocabulary
    assert workdir.tokenizer_paths == (
        workdir.tokenizer_dir / "source.spm",
        workdir.tokenizer_dir / "target.spm",
    )
    src, tgt = workdir.load_tokenizers()
    assert isinstance(src, MarianSubwordTokenizer) and isinstance(tgt, MarianSubwordTokenizer)
    assert src.model_bytes == (marian_dir / "source.spm").read_bytes()

    model = types.SimpleNamespace(config=types.SimpleNamespace(max_length=16))
    trained = TrainedModel(model, src, tgt)
    assert trained.shared_vocabulary and not trained.shared_tokenizer_model
    written = tmp_path / "written"
    src_path, tgt_path = write_tokenizer_files(trained, written)
    assert (src_path.name, tgt_path.name) == ("source.spm", "target.spm")
    assert set(vocabulary_files(written)) == {"vocab.json"}
    shutil.copyfile(marian_dir / "tokenizer_config.json", written / "tokenizer_config.json")
    again_src, again_tgt = load_marian_tokenizers(written)
    assert again_src.vocabulary == src.vocabulary and again_tgt.model_bytes == tgt.model_bytes
    assert again_src.pad_id == src.pad_id

    (workdir.tokenizer_dir / "vocab.json").write_text("[]")
    with pytest.raises(WorkdirError, match="vocab.json"):
        workdir.load_tokenizers()


def test_saved_model_export_embeds_the_marian_tokenizer(tokenizers, tmp_path):
    import keras

    import keras_transformer as kt
    from keras_transformer.data import encode_sources
    from keras_transformer.decoding import Greedy, Limits, decode
    from keras_transformer.exporters import export_saved_model

    src, tgt = tokenizers
    keras.utils.set_random_seed(0)
    # The decoder's start id is the model's; any id not pad/unk/eos serves for the tokenizer's part
    # here.
    config = kt.TransformerConfig.from_preset(
        "tiny",
        vocab_size=src.vocab_size,
        dropout=0.0,
        max_length=32,
        pad_id=src.pad_id,
        unk_id=src.unk_id,
        bos_id=src.vocab_size - 2,
        eos_id=tgt.eos_id,
    )
    model = kt.Transformer(config)
    model.build()
    trained = TrainedModel(model, src, tgt, max_src_length=16)
    version = export_saved_model(
        trained, tmp_path / "marian", beam_size=1, warmup_sentences=("Hello world.",)
    )
    assets = {path.name for path in (version / "assets").iterdir()}
    assert {"source.spm", "target.spm", "vocab.json"} <= assets
    texts = ["the big dog sees 3 red cats", ">>fra<< Hello, world!"]
    source = encode_sources(src, texts, 16).to_tensor(default_value=src.pad_id)
    expected_ids = decode(model, source, Greedy(), Limits(extra_length=50)).tokens[:, 0]  # greedy
    expected = [t.decode() for t in tgt.detokenize(expected_ids).numpy()]
    loaded = tf.saved_model.load(str(version))
    ids = loaded.signatures["translate_ids"](source_ids=source)["target_ids"]
    out = loaded.signatures["translate_greedy"](inputs=tf.constant(texts))
    assert [t.decode() for t in out["translations"].numpy()] == expected
    assert ids.numpy().tolist() == expected_ids.numpy().tolist()
    # The strings are padded with the pad id (Marian's 0 is EOS), in the export and in Translator.
    assert kt.Translator.from_trained_model(trained).translate(texts) == expected
