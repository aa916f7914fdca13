"""Data sources and the tf.data pipeline: layout, lengths, buckets, order, bad data, TFDS, fit."""

from __future__ import annotations

import gzip
import logging
import sys

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.data import (
    PairSource,
    count_tokens,
    default_bucket_bounds,
    encode_sources,
    generate_pairs,
    make_dataset,
    normalize_whitespace,
    normalize_whitespace_tf,
)
from keras_transformer.tokenization import SubwordTokenizer, train_tokenizers

pytestmark = pytest.mark.runtime

PAIRS = generate_pairs(240, seed=0)
SOURCES = [source for source, _ in PAIRS]
TARGETS = [target for _, target in PAIRS]
WIDE = dict(max_src_length=64, max_tgt_length=63)  # longer than any synthetic pair


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    src_path, tgt_path = train_tokenizers(
        SOURCES, TARGETS, tmp_path_factory.mktemp("spm"), vocab_size=300
    )
    return SubwordTokenizer.from_file(src_path), SubwordTokenizer.from_file(tgt_path)


@pytest.fixture(scope="module")
def lengths(tokenizers) -> tuple[np.ndarray, np.ndarray]:
    """Subword counts (no specials) of every source and target in PAIRS."""
    src_tok, tgt_tok = tokenizers
    return (
        src_tok.tokenize(SOURCES).row_lengths().numpy(),
        tgt_tok.tokenize(TARGETS).row_lengths().numpy(),
    )


def batches(dataset) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return [(src.numpy(), tgt_in.numpy(), tgt_out.numpy()) for (src, tgt_in), tgt_out in dataset]


def rows(dataset) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(src ids, tgt_out ids) of every example, padding removed, in dataset order."""
    return [
        (tuple(s[s != PAD_ID]), tuple(o[o != PAD_ID]))
        for src, _, out in batches(dataset)
        for s, o in zip(src, out)
    ]


def as_text(tensor) -> list[str]:
    return [value.decode("utf-8") for value in tensor.numpy()]


# --------------------------------------------------------------------------- layout


def test_element_spec_and_id_layout(tokenizers, lengths):
    dataset = make_dataset(
        PairSource.from_pairs(PAIRS).dataset(), *tokenizers, batch_tokens=512, seed=0, **WIDE
    )
    spec = dataset.element_spec
    assert all(
        s.dtype == tf.int32 and s.shape.as_list() == [None, None] for s in tf.nest.flatten(spec)
    )
    assert isinstance(spec[0], tuple) and len(spec[0]) == 2

    sentences = 0
    for src, tgt_in, tgt_out in batches(dataset):
        assert src.dtype == tgt_in.dtype == tgt_out.dtype == np.int32
        assert tgt_in.shape == tgt_out.shape and src.shape[0] == tgt_in.shape[0]
        np.testing.assert_array_equal(tgt_in != PAD_ID, tgt_out != PAD_ID)  # masks line up
        for ids, decoder_in, labels in zip(src, tgt_in, tgt_out):
            for row in (ids, labels):
                n = int(np.sum(row != PAD_ID))
                assert np.all(row[:n] != PAD_ID) and np.all(row[n:] == PAD_ID)  # right padding only
                assert row[n - 1] == EOS_ID and not np.isin(row[: n - 1], [BOS_ID, EOS_ID]).any()
            n = int(np.sum(labels != PAD_ID))
            assert decoder_in[0] == BOS_ID
            np.testing.assert_array_equal(decoder_in[1:n], labels[: n - 1])  # shifted by one
        sentences += len(src)
    assert sentences == len(PAIRS)

    counts = count_tokens(dataset)
    src_lengths, tgt_lengths = lengths
    assert counts.sentences == len(PAIRS)
    assert counts.src_tokens == int(np.sum(src_lengths + 1))  # + EOS
    assert counts.tgt_tokens == int(np.sum(tgt_lengths + 1))
    assert counts.src_padded >= counts.src_tokens and 0 <= counts.padding_fraction < 0.5


def test_detokenized_sources_are_normalised_text(tokenizers, tmp_path):
    messy = [
        (f"  {s.replace(' ', chr(0xA0), 1)}   ", f"{t.replace(' ', '  ')}\t ")
        for s, t in PAIRS[:40]
    ]
    (tmp_path / "a.src").write_text("".join(s + "\n" for s, _ in messy), encoding="utf-8")
    (tmp_path / "a.tgt").write_text("".join(t + "\n" for _, t in messy), encoding="utf-8")
    pairs = PairSource.from_text_files(tmp_path / "a.src", tmp_path / "a.tgt").dataset()
    # One bucket, no shuffling: input order is kept.
    dataset = make_dataset(
        pairs, *tokenizers, batch_size=16, bucket_boundaries=(), training=False, **WIDE
    )
    src_tok, tgt_tok = tokenizers
    texts_src, texts_tgt = [], []
    for (src, _), tgt_out in dataset:
        texts_src += as_text(src_tok.detokenize(src))
        texts_tgt += as_text(tgt_tok.detokenize(tgt_out))
    assert texts_src == [normalize_whitespace(s) for s, _ in messy] == SOURCES[:40]
    assert texts_tgt == TARGETS[:40]
    # Decoders build encoder inputs with encode_sources: the same ids as training.
    first = next(iter(dataset))[0][0][0].numpy()
    encoded = encode_sources(src_tok, [SOURCES[0]]).to_tensor()[0]
    np.testing.assert_array_equal(encoded, first[first != PAD_ID])


# --------------------------------------------------------------------------- lengths and buckets


def test_length_filter_drop(tokenizers, lengths):
    src_lengths, tgt_lengths = lengths
    max_src, max_tgt = 12, 10
    keep = (src_lengths + 1 <= max_src) & (tgt_lengths <= max_tgt)
    assert 0 < keep.sum() < len(PAIRS)  # the limit bites
    dataset = make_dataset(
        PairSource.from_pairs(PAIRS).dataset(),
        *tokenizers,
        batch_size=32,
        max_src_length=max_src,
        max_tgt_length=max_tgt,
        training=False,
        bucket_boundaries=(),
    )
    kept = rows(dataset)
    assert len(kept) == keep.sum()
    src_tok, tgt_tok = tokenizers
    expected = [tuple(src_tok.tokenize(s).numpy()) + (EOS_ID,) for s, k in zip(SOURCES, keep) if k]
    assert [src for src, _ in kept] == expected


def test_length_filter_truncate_keeps_eos(tokenizers, lengths):
    src_lengths, tgt_lengths = lengths
    max_src, max_tgt = 12, 10
    dataset = make_dataset(
        PairSource.from_pairs(PAIRS).dataset(),
        *tokenizers,
        batch_size=32,
        max_src_length=max_src,
        max_tgt_length=max_tgt,
        length_filter="truncate",
        training=False,
        bucket_boundaries=(),
    )
    kept = rows(dataset)
    assert len(kept) == len(PAIRS)
    src_tok, tgt_tok = tokenizers
    for (src, tgt_out), source, target in zip(kept, SOURCES, TARGETS):
        assert src == tuple(src_tok.tokenize(source).numpy()[: max_src - 1]) + (EOS_ID,)
        assert tgt_out == tuple(tgt_tok.tokenize(target).numpy()[:max_tgt]) + (EOS_ID,)
    assert (
        max(len(src) for src, _ in kept) == max_src
        and max(len(out) for _, out in kept) == max_tgt + 1
    )
    assert (src_lengths + 1 > max_src).any()


def test_buckets_bound_lengths_and_tokens(tokenizers):
    bounds, batch_tokens = (8, 16, 24, 48), 160
    dataset = make_dataset(
        PairSource.from_pairs(PAIRS).dataset(),
        *tokenizers,
        batch_tokens=batch_tokens,
        bucket_boundaries=bounds[:-1],
        max_src_length=48,
        max_tgt_length=47,
        seed=3,
    )
    total = 0
    for src, tgt_in, tgt_out in batches(dataset):
        row_lengths = np.maximum((src != PAD_ID).sum(1), (tgt_in != PAD_ID).sum(1))
        bucket = np.searchsorted(bounds, row_lengths)  # index of the first bound >= length
        assert len(set(bucket)) == 1, "a batch mixes buckets"
        bound = bounds[bucket[0]]
        width = max(src.shape[1], tgt_in.shape[1])
        assert width <= bound and width == row_lengths.max()  # padded to the longest row only
        assert src.size <= batch_tokens and tgt_out.size <= batch_tokens
        assert len(src) <= batch_tokens // bound
        total += len(src)
    assert total == len(PAIRS)
    assert default_bucket_bounds(257)[-3:] == (216, 240, 257)


# --------------------------------------------------------------------------- order


def test_same_seed_same_order_different_seed_different(tokenizers):
    def order(seed):
        return rows(
            make_dataset(
                PairSource.from_pairs(PAIRS).dataset(),
                *tokenizers,
                batch_tokens=256,
                shuffle_buffer=64,
                seed=seed,
                **WIDE,
            )
        )

    first = order(7)
    assert first == order(7)
    assert first != order(8)
    assert sorted(first) == sorted(order(8))  # same examples, different order


def test_cache_to_file(tokenizers, tmp_path):
    def build():
        return make_dataset(
            PairSource.from_pairs(PAIRS[:50]).dataset(),
            *tokenizers,
            batch_size=8,
            training=False,
            cache=tmp_path / "tokenized",
            **WIDE,
        )

    first = rows(build())
    assert list(tmp_path.glob("tokenized*.index"))  # written on the first full pass
    assert rows(build()) == first and len(first) == 50


def test_repeat_reshuffles_each_epoch(tokenizers):
    dataset = make_dataset(
        PairSource.from_pairs(PAIRS[:48]).dataset(),
        *tokenizers,
        batch_size=8,
        bucket_boundaries=(),
        repeat=True,
        shuffle_buffer=48,
        seed=1,
        **WIDE,
    )
    epochs = [[r for r in rows(dataset.take(6))], [r for r in rows(dataset.skip(6).take(6))]]
    assert epochs[0] != epochs[1] and sorted(epochs[0]) == sorted(epochs[1])
    with pytest.raises(ValueError, match="max_batches"):
        count_tokens(dataset)
    assert count_tokens(dataset, max_batches=3).sentences == 24


# --------------------------------------------------------------------------- static shapes


def test_static_shapes(tokenizers):
    dataset = make_dataset(
        PairSource.from_pairs(PAIRS).dataset(),
        *tokenizers,
        batch_size=32,
        max_src_length=40,
        max_tgt_length=30,
        static_shapes=True,
        seed=0,
    )
    spec = dataset.element_spec
    assert [s.shape.as_list() for s in tf.nest.flatten(spec)] == [[32, 40], [32, 31], [32, 31]]
    assert all(s.shape.is_fully_defined() for s in tf.nest.flatten(spec))
    static_batches = batches(dataset)
    assert {tuple(a.shape for a in batch) for batch in static_batches} == {
        ((32, 40), (32, 31), (32, 31))
    }
    counts = count_tokens(dataset)
    assert counts.batches == len(static_batches) >= 5 and counts.sentences == 32 * counts.batches
    assert counts.src_padded == counts.batches * 32 * 40 > counts.src_tokens
    by_tokens = make_dataset(
        PairSource.from_pairs(PAIRS).dataset(),
        *tokenizers,
        batch_tokens=1000,
        max_src_length=40,
        max_tgt_length=30,
        static_shapes=True,
    )
    assert by_tokens.element_spec[1].shape.as_list() == [1000 // 40, 31]


# --------------------------------------------------------------------------- argument checks


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(batch_size=None), "exactly one of batch_tokens"),
        (dict(batch_tokens=512), "exactly one of batch_tokens"),
        (
            dict(batch_size=None, batch_tokens=40),
            "cannot hold one sentence of the longest allowed length 64",
        ),
        (dict(length_filter="clip"), "length_filter must be one of"),
        (dict(max_src_length=1), "max_src_length must be an integer >= 2"),
        (dict(bucket_boundaries=(16, 8)), "strictly increasing"),
        (dict(bucket_boundaries=(8, 64)), "keep only bounds below 64"),
        (dict(static_shapes=True, drop_remainder=False), "leave drop_remainder unset"),
        (dict(static_shapes=True, bucket_boundaries=(8,)), "drop bucket_boundaries"),
        (dict(shuffle_buffer=-1), "shuffle_buffer must be an integer >= 0"),
    ],
)
def test_make_dataset_argument_errors(tokenizers, overrides, message):
    arguments = {"batch_size": 8, **WIDE, **overrides}
    with pytest.raises(ValueError, match=message):
        make_dataset(PairSource.from_pairs(PAIRS[:4]).dataset(), *tokenizers, **arguments)


def test_make_dataset_rejects_non_pair_datasets(tokenizers):
    ids = tf.data.Dataset.from_tensor_slices(tf.constant([[1, 2]]))
    with pytest.raises(ValueError, match=r"PairSource\(\.\.\.\)\.dataset\(\)"):
        make_dataset(ids, *tokenizers, batch_size=8, **WIDE)


# --------------------------------------------------------------------------- bad data


def write_lines(path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def test_mismatched_line_counts_name_both_files(tmp_path):
    write_lines(tmp_path / "train.src", [b"one", b"two", b"three"])
    write_lines(tmp_path / "train.tgt", [b"uno", b"dos"])
    with pytest.raises(ValueError, match=r"train\.src'? has 3 lines but .*train\.tgt'? has 2"):
        PairSource.from_text_files(tmp_path / "train.src", tmp_path / "train.tgt").dataset()


def test_empty_and_invalid_utf8_lines_are_skipped_and_counted(tmp_path, caplog):
    nbsp = "\u00a0".encode()
    src = [
        b"  the cat  sleeps ",
        b"",
        b"a dog" + nbsp + nbsp + b"runs",
        b"\xff\xfe broken",
        b"   ",
        b"we see\r",
        b"fine",
    ]
    tgt = [b"cata dormit", b"orphan", b"  hunda  kurit", b"fine", b"kept?", b"videmos", b"\xc3("]
    write_lines(tmp_path / "x.src", src)
    write_lines(tmp_path / "x.tgt", tgt)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.data"):
        corpus = PairSource.from_text_files(tmp_path / "x.src", tmp_path / "x.tgt").read()
    stats = corpus.stats
    assert (stats.lines, stats.pairs, stats.empty, stats.invalid_utf8) == (7, 3, 2, 2)
    assert stats.empty_lines == (2, 5) and stats.invalid_utf8_lines == (4, 7) and stats.skipped == 4
    assert corpus.sources == ("the cat sleeps", "a dog runs", "we see")
    assert corpus.targets == ("cata dormit", "hunda kurit", "videmos")
    [record] = [r for r in caplog.records if r.name == "keras_transformer.data"]
    assert record.levelno == logging.WARNING
    assert "x.src" in record.getMessage() and "x.tgt" in record.getMessage()
    assert "2 empty (lines 2, 5)" in record.getMessage()
    assert "2 not valid UTF-8 (lines 4, 7)" in record.getMessage()
    dataset = PairSource.from_text_files(tmp_path / "x.src", tmp_path / "x.tgt").dataset()
    pairs = [(s.decode(), t.decode()) for s, t in dataset.as_numpy_iterator()]
    assert pairs == list(zip(corpus.sources, corpus.targets))


def test_tsv_rows(tmp_path, caplog):
    lines = [
        b"id\tsrc\ttgt",
        b"1\thello  world\tsalve munde",
        b"2\tonly two",
        b"",
        b"3\t\t  ",
        b"4\t\xff\tbad",
        b"5\tgood" + "\u00a0".encode() + b"bye\tvale\textra",
    ]
    write_lines(tmp_path / "c.tsv", lines)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.data"):
        corpus = PairSource.from_tsv(tmp_path / "c.tsv", src_column=2, tgt_column=1).read()
    assert corpus.sources == ("tgt", "salve munde", "vale")  # a header row is just a pair
    assert corpus.targets == ("src", "hello world", "good bye")
    stats = corpus.stats
    assert (stats.lines, stats.pairs, stats.malformed, stats.empty, stats.invalid_utf8) == (
        7,
        3,
        1,
        2,
        1,
    )
    assert (
        stats.malformed_lines == (3,)
        and stats.empty_lines == (4, 5)
        and stats.invalid_utf8_lines == (6,)
    )
    assert "1 with too few columns (line 3)" in caplog.text and "c.tsv" in caplog.text
    assert (
        len(list(PairSource.from_tsv(tmp_path / "c.tsv").dataset())) == 4
    )  # columns 0/1: only "3\t\t" is empty
    with pytest.raises(ValueError, match="different columns"):
        PairSource.from_tsv(tmp_path / "c.tsv", 1, 1).read()
    with pytest.raises(ValueError, match="does not exist"):
        PairSource.from_tsv(tmp_path / "missing.tsv").read()


def test_from_pairs_checks_and_normalises(caplog):
    with caplog.at_level(logging.WARNING, logger="keras_transformer.data"):
        dataset = PairSource.from_pairs([(" a\u00a0 b ", "c  d"), ("", "x"), ("e", "f")]).dataset()
    assert [(s.decode(), t.decode()) for s, t in dataset.as_numpy_iterator()] == [
        ("a b", "c d"),
        ("e", "f"),
    ]
    assert "1 empty (line 2)" in caplog.text
    with pytest.raises(ValueError, match="Item 1"):
        PairSource.from_pairs([("a", "b"), ("only one",)]).dataset()


BOM = b"\xef\xbb\xbf"
# A corpus with every kind of mess the readers handle; line numbers in the comments.
MESSY_SRC = [
    BOM + b"  the cat  sleeps ",  # 1 BOM, spaces
    b"",  # 2 empty source
    b"a dog" + "\u00a0".encode() * 2 + b"runs",  # 3 NBSP run
    b"\xff\xfe broken",  # 4 invalid UTF-8
    b"   ",  # 5 blank
    b"we see\r",  # 6 \r\n line end
    b"one\xe2\x80\xa8line",  # 7 U+2028: whitespace, but no line break
    b"tab\tand\x0cform feed",  # 8 other whitespace
    b"fine",  # 9 partner invalid
    b"\xed\xa0\x80 surrogate",  # 10 an encoded surrogate is not UTF-8
    "Ünïcödé\u3000wide".encode(),  # 11 ideographic space
    b"last",  # 12
]
MESSY_TGT = [
    b"cata dormit",
    b"orphan",
    b"  hunda  kurit",
    b"fine",
    b"kept?",
    b"videmos\r",
    "una\u2028linea".encode(),
    b"x",
    b"\xc3(",
    b"y",
    "ok\u0085".encode(),
    b"ultima",
]


def write_corpus(
    path, lines: list[bytes], newline_at_end: bool = True, compress: bool = False
) -> None:
    data = b"\n".join(lines) + (b"\n" if newline_at_end else b"")
    path.write_bytes(gzip.compress(data) if compress else data)


def streamed(source: PairSource) -> list[tuple[str, str]]:
    return [(s.decode(), t.decode()) for s, t in source.dataset().as_numpy_iterator()]


@pytest.mark.parametrize("lone_cr", [False, True], ids=["graph-lines", "python-lines"])
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gz"])
def test_stream_keeps_exactly_the_pairs_the_in_memory_reader_keeps(tmp_path, compress, lone_cr):
    # A \r inside a line (not before \n) is read in Python: TextLineDataset would drop it.
    src = MESSY_SRC + ([b"carriage\rreturn"] if lone_cr else [])
    tgt = MESSY_TGT + ([b"retour"] if lone_cr else [])
    suffix = ".gz" if compress else ""
    write_corpus(tmp_path / f"m.src{suffix}", src, compress=compress)
    write_corpus(tmp_path / f"m.tgt{suffix}", tgt, newline_at_end=False, compress=compress)
    paths = tmp_path / f"m.src{suffix}", tmp_path / f"m.tgt{suffix}"
    corpus = PairSource.from_text_files(*paths).read()
    expected = [
        ("the cat sleeps", "cata dormit"),
        ("a dog runs", "hunda kurit"),
        ("we see", "videmos"),
        ("one line", "una linea"),
        ("tab and form feed", "x"),
        ("Ünïcödé wide", "ok"),
        ("last", "ultima"),
    ] + ([("carriage return", "retour")] if lone_cr else [])
    assert list(zip(corpus.sources, corpus.targets)) == expected
    stats = corpus.stats
    assert (stats.lines, stats.pairs, stats.empty, stats.invalid_utf8) == (
        len(src),
        len(expected),
        2,
        3,
    )
    assert stats.empty_lines == (2, 5) and stats.invalid_utf8_lines == (4, 9, 10)
    source = PairSource.from_text_files(*paths)
    assert streamed(source) == expected  # cleaned in the graph
    assert source.stats == stats and len(source) == source.pairs == len(expected)
    assert list(source) == expected and list(source.sentences("target")) == [t for _, t in expected]


def test_streamed_tsv_rows_equal_the_in_memory_reader(tmp_path):
    lines = [
        BOM + b"id\tsrc\ttgt",
        b"1\thello  world\tsalve munde\r",
        b"2\tonly two",
        b"",
        b"3\t\t  ",
        b"4\t\xff\tbad",
        b"5\tgood" + "\u00a0".encode() + b"bye\tvale\textra",
        b"\t\t",
        "6\ta\u2028b\tc".encode(),
        b"7\t\xe2\x80\xa8\tz",
        b"8\tkept\tlast",
    ]
    write_corpus(tmp_path / "c.tsv", lines, newline_at_end=False)
    for columns in ((0, 1), (2, 1), (1, 2)):
        corpus = PairSource.from_tsv(tmp_path / "c.tsv", *columns).read()
        source = PairSource.from_tsv(tmp_path / "c.tsv", *columns)
        assert streamed(source) == list(zip(corpus.sources, corpus.targets)) == list(source)
        assert source.stats == corpus.stats
        assert corpus.stats.malformed_lines == ((3,) if max(columns) == 2 else ())
    assert corpus.sources[:2] == ("src", "hello world") and ("a b", "c") in list(source)


@pytest.mark.parametrize(
    "content, lines",
    [(b"", 0), (BOM, 0), (BOM + b"\n", 1), (b"\n\n", 2), (b"x\r", 1), (b"a\r\r\nb", 2), (b"\r", 1)],
)
def test_edge_files_count_and_read_alike(tmp_path, content, lines):
    (tmp_path / "e.src").write_bytes(content)
    (tmp_path / "e.tgt").write_bytes(content.replace(b"x", b"y"))
    corpus = PairSource.from_text_files(tmp_path / "e.src", tmp_path / "e.tgt").read()
    source = PairSource.from_text_files(tmp_path / "e.src", tmp_path / "e.tgt")
    assert corpus.stats.lines == source.stats.lines == lines
    assert streamed(source) == list(zip(corpus.sources, corpus.targets))


def test_pair_source_reads_lazily_and_keeps_memory_sources_as_they_are(tmp_path, caplog):
    write_corpus(tmp_path / "t.src", [b"a", b"", b"c"] * 3)
    write_corpus(tmp_path / "t.tgt", [b"x", b"y", b"z"] * 3)
    with caplog.at_level(logging.INFO, logger="keras_transformer.data"):
        source = PairSource.from_text_files(tmp_path / "t.src", tmp_path / "t.tgt")
        assert "PairSource(" in repr(source) and not caplog.records  # nothing scanned yet
        assert source.dataset().element_spec == (
            tf.TensorSpec([], tf.string),
            tf.TensorSpec([], tf.string),
        )
        assert len(source) == 6 and source.stats.empty_lines == (2, 5, 8)
        assert source.read().sources == ("a", "c") * 3
    [record] = caplog.records  # the scan's warning, once
    assert record.levelno == logging.WARNING and "3 empty (lines 2, 5, 8)" in record.getMessage()
    listed = PairSource.from_pairs([(" a ", "b"), ("", "x"), ("c", "d\u00a0e")])
    assert (
        list(listed) == [("a", "b"), ("c", "d e")] and len(listed) == 2 and listed.stats.empty == 1
    )
    assert streamed(listed) == list(listed) and list(listed.sentences("source")) == ["a", "c"]
    assert listed.read().targets == ("b", "d e")
    with pytest.raises(ValueError, match="side must be one of"):
        listed.sentences("src")
    with pytest.raises(ValueError, match="does not exist"):
        PairSource.from_text_files(tmp_path / "t.src", tmp_path / "missing.tgt")
    with pytest.raises(ValueError, match="different columns"):
        PairSource.from_tsv(tmp_path / "t.src", 1, 1)


def test_mismatched_gzip_files_fail_before_reading(tmp_path):
    write_corpus(tmp_path / "a.src.gz", [b"one", b"two"], compress=True)
    write_corpus(tmp_path / "a.tgt.gz", [b"uno"], newline_at_end=False, compress=True)
    with pytest.raises(ValueError, match=r"a\.src\.gz'? has 2 lines but .*a\.tgt\.gz'? has 1"):
        PairSource.from_text_files(tmp_path / "a.src.gz", tmp_path / "a.tgt.gz")


# --------------------------------------------------------------------------- parts (workers)


@pytest.fixture
def small_reads(monkeypatch):
    """A line index every 3 lines and reads of 5 bytes, so that parts of small files start
    between indexed lines and end inside a read."""
    from keras_transformer.data.sources import lines

    monkeypatch.setattr(lines, "LINE_INDEX_EVERY", 3)
    monkeypatch.setattr(lines, "RANGE_RECORD", 5)


@pytest.mark.parametrize("lone_cr", [False, True], ids=["crlf", "lone-cr"])
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gz"])
def test_parts_of_text_files_are_disjoint_and_make_the_corpus(
    tmp_path, small_reads, compress, lone_cr
):
    src = MESSY_SRC + ([b"carriage\rreturn"] if lone_cr else []) + [b"tail"]
    tgt = MESSY_TGT + ([b"retour"] if lone_cr else []) + [b"queue\r"]
    suffix = ".gz" if compress else ""
    write_corpus(tmp_path / f"m.src{suffix}", src, compress=compress)
    write_corpus(tmp_path / f"m.tgt{suffix}", tgt, newline_at_end=False, compress=compress)
    source = PairSource.from_text_files(tmp_path / f"m.src{suffix}", tmp_path / f"m.tgt{suffix}")
    whole = streamed(source)
    assert source.lines == len(src) and whole == list(source) and len(whole) == 8 + lone_cr
    assert source.part(0, 1) is source
    for count in (2, 5, len(src)):
        parts = [source.part(index, count) for index in range(count)]
        # In the graph (what training reads) and in Python, in corpus order, each pair once.
        assert [pair for part in parts for pair in streamed(part)] == whole, count
        assert [pair for part in parts for pair in part] == whole, count
        assert [part.lines for part in parts] == [
            (i + 1) * len(src) // count - i * len(src) // count for i in range(count)
        ]
        # Each part counts its own lines, numbered as in the whole corpus.
        stats = [part.stats for part in parts]
        assert sum(s.lines for s in stats) == len(src) and sum(s.pairs for s in stats) == len(whole)
        assert sum(s.empty for s in stats) == 2 and sum(s.invalid_utf8 for s in stats) == 3
        assert sorted(n for s in stats for n in s.empty_lines) == [2, 5]
        assert sorted(n for s in stats for n in s.invalid_utf8_lines) == [4, 9, 10]
    assert parts[1].files[0].endswith(f"m.src{suffix} lines 2-2")


def test_a_part_of_a_plain_file_reads_none_of_the_other_parts(tmp_path, small_reads):
    from keras_transformer.data.sources.lines import _file_facts, _line_offset

    lines = [f"sentence number {i}".encode() for i in range(40)]
    write_corpus(tmp_path / "p.src", lines)
    write_corpus(tmp_path / "p.tgt", [line.upper() for line in lines])
    facts = _file_facts(tmp_path / "p.src")
    data = (tmp_path / "p.src").read_bytes()
    starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == ord("\n")][:-1]
    assert facts.index == tuple(starts[::3]) and facts.size == len(data)
    assert [_line_offset(tmp_path / "p.src", facts, n) for n in range(41)] == starts + [len(data)]
    source = PairSource.from_text_files(tmp_path / "p.src", tmp_path / "p.tgt")
    part = source.part(1, 3)  # lines 14-26 (1-based)
    expected = streamed(part)
    assert expected[0][0] == "sentence number 13" and len(expected) == 13
    dataset = part.dataset()  # built: its byte ranges are known
    for name in ("p.src", "p.tgt"):  # the other parts overwritten, newlines included
        raw = (tmp_path / name).read_bytes()
        first, stop = starts[13], starts[26]
        (tmp_path / name).write_bytes(b"#" * first + raw[first:stop] + b"#" * (len(raw) - stop))
    assert [(s.decode(), t.decode()) for s, t in dataset.as_numpy_iterator()] == expected


def test_parts_of_tsv_files_and_lists(tmp_path, small_reads):
    rows = [b"%d\tsrc %d\ttgt %d" % (i, i, i) if i % 4 else b"%d\tshort" % i for i in range(23)]
    write_corpus(tmp_path / "c.tsv", rows, newline_at_end=False)
    tsv = PairSource.from_tsv(tmp_path / "c.tsv", 1, 2)
    parts = [tsv.part(index, 4) for index in range(4)]
    assert [pair for part in parts for pair in streamed(part)] == streamed(tsv) == list(tsv)
    assert sorted(n for part in parts for n in part.stats.malformed_lines) == [1, 5, 9, 13, 17, 21]
    items = [("a", "b"), ("", "x"), ("c", "d"), ("e", " "), ("f", "g"), ("h", "i")]
    listed = PairSource.from_pairs(items)
    halves = [listed.part(index, 2) for index in range(2)]
    assert [part.read().sources for part in halves] == [("a", "c"), ("f", "h")]
    assert [streamed(part) for part in halves] == [
        [("a", "b"), ("c", "d")],
        [("f", "g"), ("h", "i")],
    ]
    assert [(part.lines, part.stats.empty_lines) for part in halves] == [(3, (2,)), (3, (4,))]


def test_part_arguments_are_checked():
    source = PairSource.from_pairs([("a", "b"), ("c", "d"), ("e", "f")])
    for index, count, message in [
        (0, 0, "count must be an integer >= 1"),
        (-1, 2, "index must be an integer >= 0"),
        (2, 2, "index=2 must be below count=2"),
        (0, 4, "has 3 line\\(s\\), fewer than the 4 parts"),
    ]:
        with pytest.raises(ValueError, match=message):
            source.part(index, count)
    with pytest.raises(ValueError, match="is a part of a corpus already"):
        source.part(0, 2).part(0, 2)


def test_a_parts_pipeline_continues_exactly_from_a_saved_iterator(
    tokenizers, tmp_path, small_reads
):
    """A worker's data position: its iterator over its part, saved and restored."""
    write_corpus(tmp_path / "r.src", [s.encode() for s in SOURCES])
    write_corpus(tmp_path / "r.tgt", [t.encode() for t in TARGETS])
    part = PairSource.from_text_files(tmp_path / "r.src", tmp_path / "r.tgt").part(1, 2)
    dataset = make_dataset(
        part.dataset(),
        *tokenizers,
        batch_size=8,
        shuffle_buffer=32,
        seed=4,
        cache=False,
        repeat=True,
        **WIDE,
    )
    iterator = iter(dataset)
    for _ in range(20):  # past the end of the part's first pass
        next(iterator)
    saved = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "position"))
    following = [next(iterator)[1].numpy().tolist() for _ in range(6)]
    restored = iter(dataset)
    tf.train.Checkpoint(iterator=restored).read(saved).assert_consumed()
    assert [next(restored)[1].numpy().tolist() for _ in range(6)] == following


def test_graph_utf8_check_and_whitespace_agree_with_python_everywhere():
    from keras_transformer.data.sources.cleaning import _valid_utf8

    # Every code point around letters: the graph normalises exactly where str.split() splits.
    texts = [f"a{chr(c)}b{chr(c)}" for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000]
    graph = normalize_whitespace_tf(tf.constant(texts)).numpy()
    mismatched = [t for t, g in zip(texts, graph) if g.decode() != normalize_whitespace(t)]
    assert not mismatched, [hex(ord(t[1])) for t in mismatched[:10]]
    # Every 1- and 2-byte sequence, and every 3-byte one with an E0-EF lead (overlongs, surrogates).
    sequences = [bytes([a]) for a in range(256)] + [
        bytes([a, b]) for a in range(256) for b in range(256)
    ]
    sequences += [
        bytes([a, b, c]) for a in range(0xE0, 0xF0) for b in range(0x80, 0xC0) for c in (0x80, 0xBF)
    ]
    sequences += [
        b"\xf4\x8f\xbf\xbf",
        b"\xf4\x90\x80\x80",
        b"\xf0\x8f\xbf\xbf",
        b"\xf8\x88\x80\x80\x80",
    ]

    def python_valid(data: bytes) -> bool:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    assert _valid_utf8(tf.constant(sequences)).numpy().tolist() == [
        python_valid(s) for s in sequences
    ]


def test_graph_and_python_whitespace_agree():
    spaces = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
    text = f"{spaces}a{spaces}b\u00a0\u00a0c{spaces}"
    assert normalize_whitespace(text) == "a b c"
    assert normalize_whitespace_tf(tf.constant([text, " x "])).numpy().tolist() == [b"a b c", b"x"]


# --------------------------------------------------------------------------- TFDS


@pytest.mark.programs
def test_tfds_pairs_with_mock_data(tokenizers):
    import tensorflow_datasets as tfds

    name = "ted_hrlr_translate/pt_to_en"
    # USE_CODE generates examples from the builder's feature spec: no download, no metadata files.
    with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
        raw = [
            (normalize_whitespace(e["pt"].decode()), normalize_whitespace(e["en"].decode()))
            for e in tfds.load(name, split="train").as_numpy_iterator()
        ]
        raw = [pair for pair in raw if all(pair)]
        supervised = [
            (s.decode(), t.decode())
            for s, t in PairSource.from_tfds(name, "train").dataset().as_numpy_iterator()
        ]
        swapped = [
            (s.decode(), t.decode())
            for s, t in PairSource.from_tfds(name, "train", src_key="en", tgt_key="pt")
            .dataset()
            .as_numpy_iterator()
        ]
        with pytest.raises(ValueError, match="pass both"):
            PairSource.from_tfds(name, "train", src_key="en").dataset()
        with pytest.raises(ValueError, match=r"no feature\(s\) \['de'\].*\['pt', 'en'\]"):
            PairSource.from_tfds(name, "train", src_key="de", tgt_key="en").dataset()
        dataset = make_dataset(
            PairSource.from_tfds(name, "train").dataset(),
            *tokenizers,
            batch_size=4,
            seed=0,
            length_filter="truncate",
            **WIDE,
        )
        sentences = count_tokens(dataset).sentences
        source = PairSource.from_tfds(name, "train")
        stats, listed, read = source.stats, list(source), source.read()
        parts = [source.part(index, 3) for index in range(3)]  # examples 1-4, 5-8, 9-12
        in_parts = [pair for part in parts for pair in streamed(part)]
        part_stats = [part.stats for part in parts]
    assert len(raw) >= 8 and supervised == raw  # (pt, en): the builder's supervised_keys
    assert listed == raw and read.sources == tuple(s for s, _ in raw) and stats.pairs == len(raw)
    assert stats.lines == 12 and stats.files == (f"{name} train",)
    assert in_parts == raw and [s.lines for s in part_stats] == [4, 4, 4]
    assert sum(s.pairs for s in part_stats) == stats.pairs
    assert swapped == [(t, s) for s, t in raw]
    assert sentences == len(raw)


# --------------------------------------------------------------------------- training


def test_one_fit_step_on_pipeline(tokenizers):
    src_tok, tgt_tok = tokenizers
    dataset = make_dataset(
        PairSource.from_pairs(PAIRS[:64]).dataset(),
        src_tok,
        tgt_tok,
        batch_tokens=256,
        seed=0,
        repeat=True,
        **WIDE,
    )
    config = keras_transformer.TransformerConfig.from_preset(
        "tiny", src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size, max_length=64
    )
    model = keras_transformer.Transformer(config)
    model.compile(
        optimizer=keras_transformer.paper_adam(d_model=64),
        loss=keras_transformer.MaskedLabelSmoothedCrossEntropy(),
        metrics=[keras_transformer.MaskedAccuracy()],
    )
    # shuffle=False: the pipeline shuffles; Keras only warns that it cannot.
    history = model.fit(dataset, epochs=1, steps_per_epoch=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0]) and history.history["loss"][0] > 0
    assert 0.0 <= history.history["masked_accuracy"][0] <= 1.0
