"""Hugging Face's ``MarianTokenizer`` as TensorFlow ops, and its files.

``MarianSubwordTokenizer`` is one side (source or target) of a Marian
(OPUS-MT) tokenizer; ``load_marian_tokenizers`` reads both from a
checkpoint's folder, ``write_marian_tokenizer_files`` writes them back.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm
import tensorflow as tf

from keras_transformer.files import write_atomically
from keras_transformer.tokenization.sentencepiece_tokenizer import (
    _Pieces,
    _SentencepieceTokenizer,
)

PathLike = str | os.PathLike

# Marian (OPUS-MT) checkpoints, as Hugging Face's MarianTokenizer saves them.
MARIAN_SOURCE_SPM = "source.spm"
MARIAN_TARGET_SPM = "target.spm"
MARIAN_VOCAB = "vocab.json"
MARIAN_TARGET_VOCAB = "target_vocab.json"
MARIAN_CONFIG = "tokenizer_config.json"
MARIAN_FILES = (
    MARIAN_SOURCE_SPM,
    MARIAN_TARGET_SPM,
    MARIAN_VOCAB,
    MARIAN_TARGET_VOCAB,
    MARIAN_CONFIG,
)
# A language code such as ">>fra<<" that opens a sentence (multilingual models): one token.
_LANGUAGE_CODE = r"(?s)^>>.*?<<"
_ONLY_LANGUAGE_CODE = r"(?s)^(>>.*?<<).*$"
_SPIECE_UNDERLINE = "\u2581"
# Hugging Face's clean_up_tokenization, in its order: (" .", ".") reads "drop the space before '.'".
_CLEAN_UP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


class MarianSubwordTokenizer(_Pieces):
    r"""One side (source or target) of Hugging Face's ``MarianTokenizer`` as TensorFlow ops.

    Marian splits text with a SentencePiece model but numbers the pieces with
    its own vocabulary (``vocab.json``): one id space for both languages, so
    the source and target tokenizers share ``vocabulary`` and special ids
    while each has its own SentencePiece model. ``tokenize`` looks the pieces
    up in a ``tf.lookup`` table (unknown pieces read as ``unk_id``), so it
    works in ``tf.function``, ``tf.data`` and an exported SavedModel. The
    contract is ``SubwordTokenizer``'s: ``tokenize`` adds no EOS,
    ``detokenize`` stops at the first EOS.

    As in ``MarianTokenizer``: a sentence that starts with a language code
    ``>>xxx<<`` keeps it as one token and tokenizes the rest; no punctuation
    normalisation is applied; ``detokenize`` drops the special tokens (EOS,
    pad, unk and ``extra_special_ids``, as ``skip_special_tokens`` does) and
    the pieces SentencePiece decodes to nothing (control symbols), joins the
    rest and turns "\u2581" into spaces, stripped at both ends. Special tokens
    written literally in the input text (``"</s>"``) are tokenized as text.
    Use ``load_marian_tokenizers`` to read a pair from a checkpoint's folder.

    Args:
        model_bytes: the serialized SentencePiece model (``source.spm`` or
            ``target.spm``).
        vocabulary: the pieces by id (``vocab.json`` inverted); its length is
            the model's vocabulary size.
        eos_id: the end-of-sentence id (OPUS-MT: 0).
        unk_id: the id of unknown pieces (OPUS-MT: 1).
        pad_id: the padding id (OPUS-MT: the last id).
        bos_id: the decoder's start id; Marian starts from the pad id (default).
        extra_special_ids: further ids that ``detokenize`` drops.
        clean_up_tokenization_spaces: ``detokenize`` then drops the space
            before ``. ? ! ,`` and English clitics (``n't``, ``'s``, ...), as
            ``MarianTokenizer.decode`` does when its config sets this.
        name: the ``tf.Module`` name.

    Raises:
        ValueError: ``model_bytes`` is not a SentencePiece model, the vocabulary
            is empty or holds a piece twice, or a special id is outside it or
            shared by two of eos/unk/pad.
    """

    def __init__(
        self,
        model_bytes: bytes,
        vocabulary: Sequence[str],
        *,
        eos_id: int,
        unk_id: int,
        pad_id: int,
        bos_id: int | None = None,
        extra_special_ids: Iterable[int] = (),
        clean_up_tokenization_spaces: bool = False,
        name: str | None = None,
    ):
        super().__init__(name=name)
        try:
            processor = spm.SentencePieceProcessor(model_proto=bytes(model_bytes))
        except (RuntimeError, OSError, TypeError) as error:
            raise ValueError(
                f"Not a SentencePiece model ({error}); pass the bytes of source.spm or target.spm."
            ) from error
        pieces = tuple(vocabulary)
        if not pieces or not all(isinstance(piece, str) for piece in pieces):
            raise ValueError(
                "vocabulary must be a non-empty sequence of pieces (str), indexed by id."
            )
        if len(set(pieces)) != len(pieces):
            raise ValueError("vocabulary holds a piece twice; each piece needs exactly one id.")
        bos_id = pad_id if bos_id is None else bos_id
        extra_special_ids = tuple(int(i) for i in extra_special_ids)
        for label, value in (
            ("eos_id", eos_id),
            ("unk_id", unk_id),
            ("pad_id", pad_id),
            ("bos_id", bos_id),
            *(("extra_special_ids", i) for i in extra_special_ids),
        ):
            if not isinstance(value, int) or not 0 <= value < len(pieces):
                raise ValueError(
                    f"{label}={value!r} is not an id of the {len(pieces)}-piece vocabulary."
                )
        if eos_id in (pad_id, unk_id) or pad_id == unk_id:
            raise ValueError(
                f"eos_id, unk_id and pad_id must differ, got {eos_id}, {unk_id}, {pad_id}."
            )
        self._model_bytes = bytes(model_bytes)
        self._pieces = pieces
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = (
            int(pad_id),
            int(unk_id),
            int(bos_id),
            int(eos_id),
        )
        self.extra_special_ids = extra_special_ids
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)

        def decodes_to_nothing(piece: str) -> bool:
            piece_id = processor.piece_to_id(piece)
            return piece_id != processor.unk_id() and processor.is_control(piece_id)

        skipped = {self.eos_id, self.unk_id, self.pad_id, *extra_special_ids}
        skipped |= {i for i, piece in enumerate(pieces) if decodes_to_nothing(piece)}
        self._skipped = tf.constant([i in skipped for i in range(len(pieces))], tf.bool)
        self._piece_tensor = tf.constant(pieces, tf.string)
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                self._piece_tensor, tf.range(len(pieces), dtype=tf.int32)
            ),
            default_value=self.unk_id,
        )
        self._tokenizer = _SentencepieceTokenizer(self._model_bytes, out_type=tf.string)

    @property
    def model_bytes(self) -> bytes:
        """The serialized SentencePiece model."""
        return self._model_bytes

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """The pieces by id."""
        return self._pieces

    def tokenize(self, strings) -> tf.RaggedTensor | tf.Tensor:
        """Turns text into Marian ids, without EOS.

        Args:
            strings: a string or a 1-D batch ``[B]`` of strings.

        Returns:
            The ids (int32): ``RaggedTensor[B, None]`` for a batch, a 1-D tensor for a string.

        Raises:
            ValueError: ``strings`` has rank 2 or more.
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        rank = strings.shape.rank
        if rank not in (0, 1):
            raise ValueError(f"tokenize needs a string or a 1-D batch of strings, got rank {rank}.")
        batch = strings if rank == 1 else strings[tf.newaxis]
        has_code = tf.strings.regex_full_match(batch, _LANGUAGE_CODE + ".*")
        codes = tf.strings.regex_replace(
            tf.boolean_mask(batch, has_code), _ONLY_LANGUAGE_CODE, r"\1", replace_global=False
        )
        rest = tf.strings.regex_replace(batch, _LANGUAGE_CODE, "", replace_global=False)
        pieces = self._tokenizer.tokenize(rest)
        ids = pieces.with_flat_values(self._table.lookup(pieces.flat_values))
        code_ids = tf.RaggedTensor.from_row_lengths(
            self._table.lookup(codes), tf.cast(has_code, ids.row_splits.dtype), validate=False
        )
        ids = tf.concat([code_ids, ids], axis=1)
        return ids if rank == 1 else ids[0]

    def detokenize(self, ids) -> tf.Tensor:
        """Turns ids into text as ``MarianTokenizer.decode(ids, skip_special_tokens=True)`` does.

        Reading stops at the first EOS; special ids are dropped; ids outside the
        vocabulary read as ``<unk>`` (and are dropped with it).

        Args:
            ids: ``[B, T]`` ids (dense or ragged) or one row ``[T]``.

        Returns:
            The text: a ``[B]`` string tensor, or a scalar for a ``[T]`` input.
        """
        batch, rank, before_eos = self._ids_to_read(ids)
        keep = before_eos & tf.logical_not(tf.gather(self._skipped, batch))
        pieces = tf.ragged.boolean_mask(tf.gather(self._piece_tensor, batch), keep)
        text = tf.strings.reduce_join(pieces, axis=1)
        text = tf.strings.strip(tf.strings.regex_replace(text, _SPIECE_UNDERLINE, " "))
        if self.clean_up_tokenization_spaces:
            for before, after in _CLEAN_UP:
                text = tf.strings.regex_replace(text, re.sub(r"([.?])", r"\\\1", before), after)
        return text if rank == 2 else text[0]

    def id_to_piece(self, ids) -> tf.Tensor:
        """Looks up the pieces of ids inside the graph.

        Ids outside the vocabulary read as the unk piece.

        Args:
            ids: integer ids of any shape.

        Returns:
            A string tensor of the pieces, of the same shape.
        """
        ids = tf.cast(ids, tf.int32)
        ids = tf.where((ids < 0) | (ids >= self.vocab_size), self.unk_id, ids)
        return tf.gather(self._piece_tensor, ids)


def _read_json(path: Path):
    if not path.is_file():
        raise ValueError(
            f"{path} not found: a Marian tokenizer needs {MARIAN_SOURCE_SPM}, {MARIAN_TARGET_SPM} "
            f"and {MARIAN_VOCAB} (as MarianTokenizer.save_pretrained writes them)."
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(
            f"{path} is not valid JSON ({error}); copy it again from the checkpoint."
        ) from error


def _vocabulary(path: Path) -> tuple[str, ...]:
    """The pieces by id of a Marian ``vocab.json`` (piece → id)."""
    mapping = _read_json(path)
    if not isinstance(mapping, dict) or not mapping:
        raise ValueError(f"{path} does not map pieces to ids (a non-empty JSON object).")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in mapping.values()):
        raise ValueError(f"{path} maps a piece to something other than an integer id.")
    if sorted(mapping.values()) != list(range(len(mapping))):
        raise ValueError(
            f"{path} does not number its {len(mapping)} pieces 0..{len(mapping) - 1}, each once."
        )
    pieces = [""] * len(mapping)
    for piece, index in mapping.items():
        pieces[index] = piece
    return tuple(pieces)


def _token_text(value, name: str, path: Path) -> str:
    """A special token of ``tokenizer_config.json``: text, or a serialized AddedToken."""
    if isinstance(value, dict):
        value = value.get("content")
    if not isinstance(value, str) or not value:
        raise ValueError(f"{path}: {name} must be a token (text), got {value!r}.")
    return value


def load_marian_tokenizers(
    directory: PathLike,
) -> tuple[MarianSubwordTokenizer, MarianSubwordTokenizer]:
    """Loads the (source, target) tokenizers of a Marian checkpoint's folder.

    Reads ``source.spm``, ``target.spm``, ``vocab.json`` and, when present,
    ``tokenizer_config.json`` (its ``eos_token``, ``unk_token``,
    ``pad_token``, extra special tokens and ``separate_vocabs``; the
    defaults are ``MarianTokenizer``'s: ``</s>``, ``<unk>``, ``<pad>``). A
    model with ``separate_vocabs`` numbers its target pieces with
    ``target_vocab.json``; its special tokens must have the same ids in both
    vocabularies, since the model has one set of special ids.

    Args:
        directory: the folder, as ``MarianTokenizer.save_pretrained`` writes it.

    Returns:
        ``(source, target)`` ``MarianSubwordTokenizer`` objects.

    Raises:
        ValueError: the folder or a file is missing or malformed, a special
            token is not in the vocabulary, or the special ids differ between
            the two vocabularies.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(
            f"{directory} is not a directory; pass the folder of a Marian checkpoint's tokenizer."
        )
    config_path = directory / MARIAN_CONFIG
    config = _read_json(config_path) if config_path.is_file() else {}
    if not isinstance(config, dict):
        raise ValueError(f"{config_path} does not hold a JSON object.")
    names = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}
    tokens = {
        key: _token_text(config.get(f"{key}_token", default), f"{key}_token", config_path)
        for key, default in names.items()
    }
    extra = config.get("additional_special_tokens") or config.get("extra_special_tokens") or []
    if isinstance(extra, dict):
        extra = list(extra.values())
    extra_tokens = {_token_text(token, "additional_special_tokens", config_path) for token in extra}
    added = config.get("added_tokens_decoder") or {}
    extra_tokens |= {
        _token_text(token, "added_tokens_decoder", config_path)
        for token in added.values()
        if isinstance(token, dict) and token.get("special")
    }

    source_vocab = _vocabulary(directory / MARIAN_VOCAB)
    separate = bool(config.get("separate_vocabs", False))
    target_vocab = _vocabulary(directory / MARIAN_TARGET_VOCAB) if separate else source_vocab

    def special_ids(vocab: tuple[str, ...], file: str) -> dict:
        index = {piece: i for i, piece in enumerate(vocab)}
        missing = [token for token in tokens.values() if token not in index]
        if missing:
            raise ValueError(
                f"{directory / file} lacks the special token(s) {missing} that {MARIAN_CONFIG} "
                "names; the files do not belong together."
            )
        return {f"{key}_id": index[token] for key, token in tokens.items()} | {
            "extra_special_ids": sorted(index[token] for token in extra_tokens if token in index)
        }

    source_ids = special_ids(source_vocab, MARIAN_VOCAB)
    target_ids = special_ids(target_vocab, MARIAN_TARGET_VOCAB) if separate else source_ids
    if {k: v for k, v in source_ids.items() if k != "extra_special_ids"} != {
        k: v for k, v in target_ids.items() if k != "extra_special_ids"
    }:
        raise ValueError(
            f"{directory}: the special tokens have other ids in {MARIAN_VOCAB} than in "
            f"{MARIAN_TARGET_VOCAB} ({source_ids} vs {target_ids}); such a model is not supported."
        )

    def model(file: str) -> bytes:
        path = directory / file
        if not path.is_file():
            raise ValueError(
                f"{path} not found: a Marian tokenizer needs {MARIAN_SOURCE_SPM}, "
                f"{MARIAN_TARGET_SPM} and {MARIAN_VOCAB}."
            )
        try:
            spm.SentencePieceProcessor(model_proto=path.read_bytes())
        except (RuntimeError, OSError) as error:
            raise ValueError(f"{path} is not a SentencePiece model ({error}).") from error
        return path.read_bytes()

    clean_up = bool(config.get("clean_up_tokenization_spaces", False))
    source = MarianSubwordTokenizer(
        model(MARIAN_SOURCE_SPM),
        source_vocab,
        name="source_tokenizer",
        clean_up_tokenization_spaces=clean_up,
        **source_ids,
    )
    target = MarianSubwordTokenizer(
        model(MARIAN_TARGET_SPM),
        target_vocab,
        name="target_tokenizer",
        clean_up_tokenization_spaces=clean_up,
        **target_ids,
    )
    return source, target


def write_marian_tokenizer_files(
    source: MarianSubwordTokenizer, target: MarianSubwordTokenizer, directory: PathLike
) -> dict[str, Path]:
    """Writes a Marian tokenizer pair's files into ``directory``, as a checkpoint holds them.

    The files are ``source.spm``, ``target.spm`` and ``vocab.json``, and
    ``target_vocab.json`` when the two vocabularies differ; they are written
    atomically, and ``load_marian_tokenizers`` reads them back.

    Args:
        source: the source-side tokenizer.
        target: the target-side tokenizer.
        directory: the folder to write into (created if missing).

    Returns:
        ``{file name: path}`` of the files written.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)

    def vocab_json(tokenizer: MarianSubwordTokenizer) -> bytes:
        return json.dumps(
            {piece: i for i, piece in enumerate(tokenizer.vocabulary)}, ensure_ascii=False, indent=2
        ).encode("utf-8")

    files = {
        MARIAN_SOURCE_SPM: source.model_bytes,
        MARIAN_TARGET_SPM: target.model_bytes,
        MARIAN_VOCAB: vocab_json(source),
    }
    if target.vocabulary != source.vocabulary:
        files[MARIAN_TARGET_VOCAB] = vocab_json(target)
    paths = {name: directory / name for name in files}
    write_atomically({paths[name]: data for name, data in files.items()})
    return paths
