"""SentencePiece training and the in-graph SubwordTokenizer."""

from __future__ import annotations

import io

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.data import PairSource, generate_pairs
from keras_transformer.tokenization import (
    SubwordTokenizer,
    sample_sentences,
    train_sentencepiece,
    train_tokenizers,
)
from keras_transformer.tokenization.sentencepiece_trainer import _sample_batches

pytestmark = pytest.mark.runtime

PAIRS = generate_pairs(200, seed=0)
SOURCES = [source for source, _ in PAIRS]
TARGETS = [target for _, target in PAIRS]
# Unseen sentences from the same distribution (same alphabet, new combinations).
HELD_OUT = [s for pair in generate_pairs(20, seed=1) for s in pair]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return train_sentencepiece(
        SOURCES + TARGETS, tmp_path_factory.mktemp("spm") / "joint", vocab_size=400
    )


@pytest.fixture(scope="module")
def tokenizer(model_path):
    return SubwordTokenizer.from_file(model_path)


def as_text(tensor) -> list[str]:
    return [value.decode("utf-8") for value in tensor.numpy()]


def test_reserved_ids(model_path, tokenizer):
    processor = spm.SentencePieceProcessor(model_file=str(model_path))
    assert (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id()) == (
        PAD_ID,
        UNK_ID,
        BOS_ID,
        EOS_ID,
    )
    assert [processor.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tokenizer.pieces([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert as_text(tokenizer.id_to_piece(tf.constant([0, 3]))) == ["<pad>", "</s>"]
    assert tokenizer.vocab_size == processor.get_piece_size() <= 400
    assert tokenizer.model_bytes == model_path.read_bytes()
    assert (
        model_path.with_suffix(".vocab")
        .read_text(encoding="utf-8")
        .splitlines()[3]
        .startswith("</s>\t")
    )


def test_round_trip(tokenizer):
    ids = tokenizer.tokenize(tf.constant(HELD_OUT))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert int(tf.reduce_min(ids.flat_values)) > EOS_ID  # no specials, no unknowns
    assert as_text(tokenizer.detokenize(ids)) == [" ".join(s.split()) for s in HELD_OUT]
    # NFKC + whitespace normalization: full-width digits and extra spaces read back plain.
    assert (
        tokenizer.detokenize(tokenizer.tokenize("the  ３  cats ")).numpy().decode() == "the 3 cats"
    )
    # Digits are split, so any number can be copied piece by piece.
    pieces = [p.strip("▁") for p in tokenizer.pieces(tokenizer.tokenize("407"))]
    assert [p for p in pieces if p] == ["4", "0", "7"]


def test_detokenize_dense_batches_stops_at_eos(tokenizer):
    a, b = (tokenizer.tokenize(s).numpy().tolist() for s in HELD_OUT[:2])
    width = max(len(a), len(b)) + 4
    rows = [
        [BOS_ID] + a + [EOS_ID] + b[:2],  # junk after EOS is ignored
        [BOS_ID] + b + [EOS_ID, EOS_ID],
        [BOS_ID] + a,  # no EOS: read to the end
    ]
    dense = np.array([row + [PAD_ID] * (width - len(row)) for row in rows], dtype=np.int64)
    expected = [HELD_OUT[0], HELD_OUT[1], HELD_OUT[0]]
    assert as_text(tokenizer.detokenize(dense)) == expected
    assert as_text(tokenizer.detokenize(tf.ragged.constant(rows))) == expected
    assert tokenizer.detokenize(tf.constant(rows[1])).numpy().decode() == HELD_OUT[1]
    assert as_text(tokenizer.detokenize([[EOS_ID, 7], [PAD_ID, PAD_ID]])) == ["", ""]
    out_of_range = tokenizer.detokenize([a[:1] + [tokenizer.vocab_size + 5]]).numpy()[0].decode()
    assert out_of_range.split()[-1] == "⁇"  # read as <unk>
    with pytest.raises(ValueError, match=r"\[batch, length\]"):
        tokenizer.detokenize(tf.zeros([2, 2, 2], tf.int32))


def test_works_in_tf_function(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        ids = tokenizer.tokenize(strings).to_tensor(default_value=PAD_ID)
        return tokenizer.detokenize(ids), tokenizer.id_to_piece(ids)

    text, pieces = round_trip(tf.constant(HELD_OUT[:4]))
    assert as_text(text) == HELD_OUT[:4]
    assert pieces.dtype == tf.string and pieces.shape[0] == 4


def test_works_in_tf_data(tokenizer):
    dataset = tf.data.Dataset.from_tensor_slices(HELD_OUT[:6]).map(tokenizer.tokenize)
    dataset = dataset.padded_batch(3, padding_values=PAD_ID).map(tokenizer.detokenize)
    assert [s for batch in dataset for s in as_text(batch)] == HELD_OUT[:6]


def test_survives_reseeding(model_path):
    # tensorflow_text's own resource is deleted when the eager kernel cache is
    # cleared, which tf.random.set_seed (and so keras.utils.set_random_seed) does.
    tokenizer = SubwordTokenizer.from_file(model_path)
    expected = tokenizer.tokenize(HELD_OUT[0]).numpy().tolist()
    tf.random.set_seed(0)
    assert tokenizer.tokenize(HELD_OUT[0]).numpy().tolist() == expected
    assert tokenizer.detokenize(expected).numpy().decode() == HELD_OUT[0]


def test_exports_in_a_saved_model(tmp_path, tokenizer):
    class Translit(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, strings):
            return self.tokenizer.detokenize(self.tokenizer.tokenize(strings))

    tf.saved_model.save(Translit(), str(tmp_path / "saved"))
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    tf.random.set_seed(1)
    assert as_text(restored(tf.constant(HELD_OUT[:2]))) == HELD_OUT[:2]


def test_training_is_deterministic_and_atomic(tmp_path, model_path):
    again = train_sentencepiece(SOURCES + TARGETS, tmp_path / "joint", vocab_size=400)
    assert again.read_bytes() == model_path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joint.model", "joint.vocab"]


def test_files_and_bpe_with_a_tiny_corpus(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SOURCES[:50]) + "\n", encoding="utf-8")
    path = train_sentencepiece(corpus, tmp_path / "bpe", vocab_size=5_000, model_type="bpe")
    tokenizer = SubwordTokenizer.from_file(path)
    assert 4 < tokenizer.vocab_size < 5_000  # hard_vocab_limit=False: smaller, not an error
    assert as_text(tokenizer.detokenize(tokenizer.tokenize(SOURCES[:3]))) == SOURCES[:3]


def test_shared_and_separate_vocabularies(tmp_path):
    src, tgt = train_tokenizers(SOURCES, TARGETS, tmp_path / "shared", vocab_size=300, shared=True)
    assert src == tgt == tmp_path / "shared" / "spm_shared.model"
    src, tgt = train_tokenizers(
        SOURCES, TARGETS, tmp_path / "separate", vocab_size=300, shared=False
    )
    assert (src.name, tgt.name) == ("spm_src.model", "spm_tgt.model")
    src_tokenizer, tgt_tokenizer = SubwordTokenizer.from_file(src), SubwordTokenizer.from_file(tgt)
    assert "▁the" in src_tokenizer.pieces(range(src_tokenizer.vocab_size))
    assert "▁the" not in tgt_tokenizer.pieces(range(tgt_tokenizer.vocab_size))


def proto_fields(data: bytes) -> dict[int, list]:
    """A protobuf message's fields by number: varints as ints, length-delimited ones as bytes.

    sentencepiece's generated ``sentencepiece_model_pb2`` needs a newer protobuf runtime than
    TensorFlow 2.19 allows, so the tests read the two fields they need off the wire."""

    def varint(position):
        value = shift = 0
        while True:
            byte = data[position]
            value |= (byte & 0x7F) << shift
            position, shift = position + 1, shift + 7
            if byte < 0x80:
                return value, position

    fields, position = {}, 0
    while position < len(data):
        key, position = varint(position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = varint(position)
        elif wire_type == 2:
            size, position = varint(position)
            value, position = data[position : position + size], position + size
        else:  # fixed 64 or 32 bits (the pieces' float scores)
            width = 8 if wire_type == 1 else 4
            value, position = data[position : position + width], position + width
        fields.setdefault(number, []).append(value)
    return fields


def trainer_input_sentence_size(path) -> int:
    """ModelProto.trainer_spec (field 2).input_sentence_size (field 11); 0 when unset."""
    (trainer_spec,) = proto_fields(path.read_bytes())[2]
    return proto_fields(trainer_spec).get(11, [0])[0]


def pieces_and_scores(path) -> list[tuple[str, float]]:
    processor = spm.SentencePieceProcessor(model_file=str(path))
    return [(processor.id_to_piece(i), processor.get_score(i)) for i in range(len(processor))]


def test_a_corpus_within_max_sentences_gives_the_unlimited_model_byte_for_byte(tmp_path):
    # The unlimited way: every sentence, both sides one after the other, as before max_sentences.
    old = train_sentencepiece(SOURCES + TARGETS, tmp_path / "old" / "spm_shared", vocab_size=300)
    (tmp_path / "a.src").write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    (tmp_path / "a.tgt").write_text("".join(t + "\n" for t in TARGETS), encoding="utf-8")
    streamed = PairSource.from_text_files(tmp_path / "a.src", tmp_path / "a.tgt")
    for name, texts, limit in (
        ("lists", (SOURCES, TARGETS), len(PAIRS) * 2),  # exactly fits
        ("stream", (streamed.sentences("source"), streamed.sentences("target")), 10**6),
        ("none", (SOURCES, TARGETS), None),
    ):
        src, tgt = train_tokenizers(
            *texts, tmp_path / name, vocab_size=300, shared=True, max_sentences=limit
        )
        assert src == tgt and src.read_bytes() == old.read_bytes(), name
        assert src.with_suffix(".vocab").read_bytes() == old.with_suffix(".vocab").read_bytes()


def test_max_sentences_trains_on_a_seeded_sample(tmp_path):
    def train(name, texts=(SOURCES, TARGETS), **options):
        return train_tokenizers(
            *texts, tmp_path / name, vocab_size=200, **{"max_sentences": 150, **options}
        )[0]

    sampled, again, other_seed = train("a"), train("b"), train("c", seed=1)
    assert sampled.read_bytes() == again.read_bytes()  # deterministic
    assert pieces_and_scores(sampled) != pieces_and_scores(other_seed)
    assert trainer_input_sentence_size(sampled) == 0  # sampled here, not by SentencePiece
    assert trainer_input_sentence_size(full := train("full", max_sentences=None)) == 0
    reservoir = train_sentencepiece(
        SOURCES, tmp_path / "reservoir", vocab_size=200, input_sentence_size=120
    )
    assert trainer_input_sentence_size(reservoir) == 120  # the reader sees it set
    assert pieces_and_scores(sampled) != pieces_and_scores(full)
    expected = SubwordTokenizer.from_file(
        train_sentencepiece(sample_sentences(SOURCES, 150), tmp_path / "direct", vocab_size=200)
    ).model_bytes
    assert sampled.read_bytes() == expected  # exactly the sample's model
    # A stream of unknown length is sampled while read; one that fits is used whole, in order.
    streamed = train("iterators", texts=(iter(SOURCES), iter(TARGETS)), max_sentences=200)
    assert streamed.read_bytes() == full.read_bytes()
    with pytest.raises(ValueError, match="max_sentences must be a positive integer"):
        train("zero", max_sentences=0)
    with pytest.raises(ValueError, match="drop input_sentence_size"):
        train("both", input_sentence_size=500)


def test_sample_sentences_is_uniform_ordered_and_bounded():
    items = [str(i) for i in range(50)]
    assert sample_sentences(iter(items), 80) == items and sample_sentences(items, 50) == items
    counts = np.zeros(50)
    for seed in range(2000):
        sample = sample_sentences(iter(items), 10, seed=seed)
        assert len(set(sample)) == 10 and sample == sorted(sample, key=int)  # corpus order
        counts[[int(s) for s in sample]] += 1
    # Each item is kept with probability 10/50: 400 of 2000 draws, binomial sd ~17.9.
    assert abs(counts - 400).max() < 5 * 17.9, counts
    assert sample_sentences(iter(items), 10, seed=3) == sample_sentences(iter(items), 10, seed=3)
    # A list at a time (PairSource.sentences) draws the same sample as one sentence at a time.
    for seed in range(20):
        batches = [items[i : i + 7] for i in range(0, 50, 7)]
        assert _sample_batches(batches, 10, seed) == sample_sentences(iter(items), 10, seed)


def test_errors_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match="model_type='unigram'"):
        train_sentencepiece(SOURCES, tmp_path / "m", vocab_size=100, model_type="char")
    with pytest.raises(ValueError, match="model_type='unigram'"):
        train_tokenizers(SOURCES, TARGETS, tmp_path, vocab_size=100, model_type="wordpiece")
    with pytest.raises(ValueError, match="without extension"):
        train_sentencepiece(SOURCES, tmp_path / "m.model", vocab_size=100)
    with pytest.raises(ValueError, match="list of str"):
        train_sentencepiece(str(tmp_path / "missing.txt"), tmp_path / "m", vocab_size=100)
    with pytest.raises(ValueError, match="No training text"):
        train_sentencepiece([], tmp_path / "m", vocab_size=100)
    with pytest.raises(ValueError, match="Increase vocab_size"):
        train_sentencepiece(SOURCES, tmp_path / "m", vocab_size=10)
    with pytest.raises(ValueError, match="train_sentencepiece"):
        SubwordTokenizer.from_file(tmp_path / "missing.model")
    # A model with SentencePiece's default ids (unk=0, bos=1, eos=2, no pad) is refused.
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SOURCES),
        model_writer=buffer,
        vocab_size=100,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="retrain it with train_sentencepiece"):
        SubwordTokenizer(buffer.getvalue())
