"""Tiny Marian (OPUS-MT) tokenizer directories, built offline for tests.

``write_marian_tokenizer(directory)`` trains two small SentencePiece models
with the settings of Marian's (unigram, ``<unk>``/``<s>``/``</s>`` = 0/1/2,
no pad piece), numbers the union of their pieces in one ``vocab.json`` laid
out as OPUS-MT's (``</s>`` = 0, ``<unk>`` = 1, language codes, the pieces,
``<pad>`` last) and saves them with ``transformers.MarianTokenizer.save_pretrained``
when transformers is installed (the layout of a real checkpoint), else writes
the same files itself. Tests of the importer add a model beside them.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm

from keras_transformer.data import generate_pairs

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"

# Beside the synthetic pairs: punctuation, quotes, digits and accents, so that
# the models hold pieces for them (characters outside both models stay <unk>).
EXTRA_SENTENCES = (
    "Hello, world! How are you?",
    "\u201cQuoted\u201d text \u2014 with a dash; and 'single' quotes.",
    "The price is 1,250.75 euros (about 3 %).",
    "Caf\u00e9 na\u00efve \u00e0 l'\u00e9cole : \u00ab bonjour \u00bb !",
    "Emails: a.b@example.com, URLs: https://example.org/x?y=1",
)


def marian_sentences(count: int = 400, seed: int = 0) -> tuple[list[str], list[str]]:
    """(source, target) sentences to train the two models on: synthetic pairs
    plus ``EXTRA_SENTENCES`` on both sides."""
    pairs = generate_pairs(count, seed)
    extra = list(EXTRA_SENTENCES) * 4
    return [s for s, _ in pairs] + extra, [t for _, t in pairs] + extra


def _train(sentences: Sequence[str], vocab_size: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    spm.set_random_generator_seed(seed)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=buffer,
        model_type="unigram",
        vocab_size=vocab_size,
        character_coverage=1.0,
        normalization_rule_name="nmt_nfkc",
        hard_vocab_limit=False,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    return buffer.getvalue()


def _pieces(model: bytes) -> list[str]:
    processor = spm.SentencePieceProcessor(model_proto=model)
    return [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if not (processor.is_control(i) or processor.is_unknown(i))
    ]


def _vocab(
    *piece_lists: Sequence[str], language_codes: Sequence[str], pad_last: bool = True
) -> dict[str, int]:
    order = [EOS, UNK, *([] if pad_last else [PAD]), *language_codes]
    for pieces in piece_lists:
        order += pieces
    order = list(dict.fromkeys(order))
    if pad_last:
        order.append(PAD)
    return {piece: i for i, piece in enumerate(order)}


def write_marian_tokenizer(
    directory,
    *,
    source_sentences: Sequence[str] | None = None,
    target_sentences: Sequence[str] | None = None,
    vocab_size: int = 250,
    language_codes: Sequence[str] = (),
    separate_vocabs: bool = False,
    source_lang: str = "en",
    target_lang: str = "xx",
    seed: int = 0,
) -> Path:
    """Write a Marian tokenizer into ``directory`` and return it.

    Files: ``source.spm``, ``target.spm``, ``vocab.json`` (and
    ``target_vocab.json`` with ``separate_vocabs``), ``tokenizer_config.json``
    (plus what ``save_pretrained`` adds). Ids: ``</s>`` = 0, ``<unk>`` = 1,
    then ``language_codes`` (e.g. ``(">>fra<<",)``), the pieces, and
    ``<pad>`` = the last id, so ``len(vocab.json)`` is the model's vocabulary
    size and its pad / decoder start id is that size minus one. With
    ``separate_vocabs`` each side has its own vocabulary of its model's pieces,
    both with ``<pad>`` = 2 (the special ids must agree). The sentences
    default to ``marian_sentences()``; ``vocab_size`` bounds each model.
    """
    directory = Path(directory)
    if source_sentences is None or target_sentences is None:
        default_source, default_target = marian_sentences(seed=seed)
        source_sentences = default_source if source_sentences is None else source_sentences
        target_sentences = default_target if target_sentences is None else target_sentences
    source_model = _train(source_sentences, vocab_size, seed)
    target_model = _train(target_sentences, vocab_size, seed)
    if separate_vocabs:
        # The model has one set of special ids: <pad> = 2 in both vocabularies.
        vocabs = {
            "vocab.json": _vocab(
                _pieces(source_model), language_codes=language_codes, pad_last=False
            ),
            "target_vocab.json": _vocab(_pieces(target_model), language_codes=(), pad_last=False),
        }
    else:
        vocabs = {
            "vocab.json": _vocab(
                _pieces(source_model), _pieces(target_model), language_codes=language_codes
            )
        }
    config = {
        "source_lang": source_lang,
        "target_lang": target_lang,
        "separate_vocabs": separate_vocabs,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "model_max_length": 512,
    }
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="marian_raw_") as raw:
        raw = Path(raw)
        (raw / "source.spm").write_bytes(source_model)
        (raw / "target.spm").write_bytes(target_model)
        for name, vocab in vocabs.items():
            (raw / name).write_text(
                json.dumps(vocab, ensure_ascii=False, indent=2), encoding="utf-8"
            )
        try:
            from transformers import MarianTokenizer
        except ImportError:
            (raw / "tokenizer_config.json").write_text(
                json.dumps(config, indent=2), encoding="utf-8"
            )
            for path in raw.iterdir():
                shutil.copyfile(path, directory / path.name)
            return directory
        tokenizer = MarianTokenizer(
            source_spm=str(raw / "source.spm"),
            target_spm=str(raw / "target.spm"),
            vocab=str(raw / "vocab.json"),
            target_vocab_file=str(raw / "target_vocab.json") if separate_vocabs else None,
            source_lang=source_lang,
            target_lang=target_lang,
            separate_vocabs=separate_vocabs,
            eos_token=EOS,
            unk_token=UNK,
            pad_token=PAD,
            model_max_length=512,
        )
        tokenizer.save_pretrained(str(directory))
    return directory


def random_text(rng: random.Random, length: int = 40) -> str:
    """A string of ``length`` characters from a mix of scripts, spaces and punctuation,
    many of them outside the models (they become <unk>)."""
    alphabet = (
        "abcdefghijklmnopqrstuvwxyz ABCXYZ 0123456789 .,;:!?'\"()-\u2014\u201c\u201d\u00e9\u00e0"
        "\u00df\u4e2d\u6587\u0416\u03bb\U0001f600  "
    )
    return "".join(rng.choice(alphabet) for _ in range(length))
