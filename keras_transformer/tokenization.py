"""Subword tokenizers: train SentencePiece models, run them inside the TF graph.

Every model trained here reserves the ids the rest of the package assumes
(``keras_transformer.config``)::

    0  <pad>  PAD_ID   padding; never produced by tokenize
    1  <unk>  UNK_ID   characters not covered by the model
    2  <s>    BOS_ID   prepended to decoder inputs by the data pipeline
    3  </s>   EOS_ID   appended to targets; decoding stops there

``tokenize`` adds no BOS/EOS (the data pipeline decides where they go), and
``detokenize`` drops pad/bos/eos and everything after the first EOS, so raw
decoder output can be fed to it. Tokenization runs as TensorFlow ops
(``tensorflow_text``), so it works in ``tf.function``, ``tf.data`` and an
exported SavedModel; ``model_bytes`` is the serialized model to embed there.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
import os
import random
import re
from pathlib import Path
from typing import Iterable, Iterator, Sequence, Sized

import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow.python.trackable import resource as tf_resource
from tensorflow_text.python.ops.sentencepiece_tokenizer import gen_sentencepiece_tokenizer

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.files import write_atomically
from keras_transformer.progress import progress_bar

MODEL_TYPES = ("unigram", "bpe")
# Sentences each model is trained on at most (train_tokenizers' max_sentences). SentencePiece's
# unigram trainer holds ~1.4 KB per sentence of ~70 characters (+0.7 GB of memory at 500k
# sentences, +1.4 GB at 1M, +2.8 GB at 2M), and its time grows faster than linearly.
DEFAULT_MAX_SENTENCES = 500_000
MIN_SAMPLE = 100  # SentencePiece's input_sentence_size must be 0 (all) or above this
SAMPLE_BATCH = 65536  # sentences handled at a time while sampling
RESERVED_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}

PathLike = str | os.PathLike
# A file, sentences, or files. A sized iterable of sentences that also has a ``batches()``
# method yielding lists of them (``PairSource.sentences``) is sampled a list at a time.
TextSource = PathLike | Iterable[str] | Iterable[os.PathLike]


def _iter_sentences(source: TextSource) -> Iterator[str]:
    """Lines of a text source: a ``str``/``Path`` is a file, an iterable of
    ``Path`` objects is files, any other iterable yields the sentences themselves.

    Argument errors are raised here, before SentencePiece consumes the iterator.
    """
    if isinstance(source, (str, os.PathLike)):
        return _read_files([source])
    iterator = iter(source)
    first = next(iterator, None)
    if first is None:
        return iter(())
    iterator = itertools.chain([first], iterator)
    if isinstance(first, os.PathLike):
        return _read_files(list(iterator))
    if not isinstance(first, str):
        raise ValueError(
            f"Expected sentences (str) or file paths (pathlib.Path), got {type(first).__name__}."
        )
    return _checked_texts(iterator)


def _checked_texts(texts: Iterable[object]) -> Iterator[str]:
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(
                f"Training text {index} is a {type(text).__name__}; pass sentences as str."
            )
        yield text.rstrip("\r\n")


def _read_files(paths: Sequence[PathLike]) -> Iterator[str]:
    paths = [Path(path) for path in paths]
    for path in paths:
        if not path.is_file():
            raise ValueError(
                f"Training file {str(path)!r} does not exist. A single str is read as a file path; "
                "pass in-memory sentences as a list of str."
            )

    def lines() -> Iterator[str]:
        for path in paths:
            with path.open(encoding="utf-8") as stream:
                for line in stream:
                    yield line.rstrip("\r\n")

    return lines()


def _check_model_type(model_type: str) -> None:
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"model_type must be one of {MODEL_TYPES}, got {model_type!r}; "
            "use model_type='unigram' (default) or model_type='bpe'."
        )


def train_sentencepiece(
    texts: TextSource,
    model_prefix: PathLike,
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    *,
    normalization_rule_name: str = "nmt_nfkc",
    split_digits: bool = True,
    byte_fallback: bool = False,
    user_defined_symbols: Sequence[str] = (),
    input_sentence_size: int = 0,
    seed: int = 0,
    progress: bool = False,
) -> Path:
    """Train a SentencePiece model and return the path of ``{model_prefix}.model``.

    ``vocab_size`` is an upper bound (``hard_vocab_limit=False``): a tiny corpus
    yields a smaller vocabulary instead of failing, so size the Transformer
    from ``SubwordTokenizer.vocab_size``, not from this argument. Digits are
    split into single pieces by default so numbers can be copied digit by
    digit. ``input_sentence_size > 0`` has SentencePiece train on a random
    sample of that many sentences, drawn while the text streams by (its own
    reservoir, the same sample every run whatever ``seed``); 0 uses every
    sentence (``train_tokenizers`` samples with a seed, ``max_sentences``).
    Training is deterministic for a given corpus, options and ``seed``.
    ``{model_prefix}.vocab`` (piece and score per line) is written alongside.
    ``progress`` shows the sentences read (needs ``tqdm``).
    """
    _check_model_type(model_type)
    if not isinstance(vocab_size, int) or vocab_size <= len(RESERVED_PIECES):
        raise ValueError(
            f"vocab_size must be an integer > {len(RESERVED_PIECES)}, got {vocab_size!r}."
        )
    if not 0.0 < character_coverage <= 1.0:
        raise ValueError(f"character_coverage must be in (0, 1], got {character_coverage}.")
    if (
        not isinstance(input_sentence_size, int)
        or isinstance(input_sentence_size, bool)
        or 0 < input_sentence_size <= MIN_SAMPLE
        or input_sentence_size < 0
    ):
        raise ValueError(
            f"input_sentence_size must be 0 (every sentence) or an integer above {MIN_SAMPLE}, "
            f"got {input_sentence_size!r}."
        )
    prefix = Path(model_prefix)
    if prefix.suffix in (".model", ".vocab"):
        raise ValueError(
            f"model_prefix is a path without extension; use {str(prefix.with_suffix(''))!r}."
        )

    sentences = _iter_sentences(texts)
    count = 0
    bar = progress_bar(progress, desc=f"SentencePiece {prefix.name}", unit="sent")

    def counted() -> Iterator[str]:
        nonlocal count
        for sentence in sentences:
            count += 1
            if count % 4096 == 0:
                bar.update(4096)
            yield sentence
        bar.update(count % 4096)
        bar.set_postfix_str("read; training the model")

    buffer = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=counted(),
            model_writer=buffer,
            model_type=model_type,
            vocab_size=vocab_size,
            character_coverage=character_coverage,
            normalization_rule_name=normalization_rule_name,
            split_digits=split_digits,
            byte_fallback=byte_fallback,
            user_defined_symbols=list(user_defined_symbols),
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            hard_vocab_limit=False,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece=RESERVED_PIECES[PAD_ID],
            unk_piece=RESERVED_PIECES[UNK_ID],
            bos_piece=RESERVED_PIECES[BOS_ID],
            eos_piece=RESERVED_PIECES[EOS_ID],
            minloglevel=2,
        )
        bar.close()
    except RuntimeError as error:
        bar.close()
        if count == 0:
            raise ValueError(
                "No training text: pass a non-empty list of sentences or file(s)."
            ) from error
        raise ValueError(f"SentencePiece training failed: {error}") from error
    model_bytes = buffer.getvalue()
    processor = spm.SentencePieceProcessor(model_proto=model_bytes)
    vocab = "".join(
        f"{processor.id_to_piece(i)}\t{processor.get_score(i):.6g}\n"
        for i in range(processor.get_piece_size())
    )
    model_path = prefix.parent / f"{prefix.name}.model"
    write_atomically(
        {model_path: model_bytes, prefix.parent / f"{prefix.name}.vocab": vocab.encode("utf-8")}
    )
    return model_path


def tokenizer_paths(out_dir: PathLike, shared: bool) -> tuple[Path, Path]:
    """Where ``train_tokenizers`` puts the (source, target) models in ``out_dir``."""
    out_dir = Path(out_dir)
    if shared:
        return out_dir / "spm_shared.model", out_dir / "spm_shared.model"
    return out_dir / "spm_src.model", out_dir / "spm_tgt.model"


def _known_length(texts: TextSource) -> int | None:
    """How many sentences ``texts`` holds, where that is known without reading it
    (a list or tuple of sentences, ``PairSource.sentences``); else ``None``."""
    if isinstance(texts, (str, os.PathLike)) or not isinstance(texts, Sized):
        return None
    if isinstance(texts, (list, tuple)) and texts and not isinstance(texts[0], str):
        return None  # file paths
    return len(texts)


def _check_max_sentences(max_sentences) -> None:
    if max_sentences is not None and (
        not isinstance(max_sentences, int) or isinstance(max_sentences, bool) or max_sentences < 1
    ):
        raise ValueError(
            f"max_sentences must be a positive integer or None (every sentence), "
            f"got {max_sentences!r}."
        )


def _uniform(rng: random.Random) -> float:
    """A uniform draw in (0, 1)."""
    while True:
        value = rng.random()
        if value > 0.0:
            return value


def sample_sentences(sentences: Iterable[str], size: int, seed: int = 0) -> list[str]:
    """A uniform random sample of ``size`` sentences, in their original order,
    from one pass that holds only the sample (reservoir sampling, Li's
    "Algorithm L": it skips ahead instead of drawing a number per sentence).
    Fewer sentences than ``size`` are all returned, in order."""
    iterator = iter(sentences)
    return _sample_batches(
        iter(lambda: list(itertools.islice(iterator, SAMPLE_BATCH)), []), size, seed
    )


def _sample_batches(batches: Iterable[Sequence[str]], size: int, seed: int = 0) -> list[str]:
    """``sample_sentences`` over the concatenation of ``batches`` (lists of
    sentences): sentences skipped over cost no Python work."""
    _check_max_sentences(size)
    rng = random.Random(seed)
    sample: list[str] = []
    positions: list[int] = []
    weight = 0.0
    pick = -1  # position of the next sentence to take once the reservoir is full
    start = 0  # position of the batch's first sentence

    def next_pick(after: int) -> int:
        skip = int(math.log(_uniform(rng)) / math.log1p(-weight)) if weight < 1.0 else 0
        return after + skip + 1

    for batch in batches:
        end = start + len(batch)
        if len(sample) < size:
            taken = batch[: size - len(sample)]
            sample += taken
            positions += range(start, start + len(taken))
            if len(sample) == size:
                weight = math.exp(math.log(_uniform(rng)) / size)
                pick = next_pick(size - 1)
        while size <= pick < end:
            slot = rng.randrange(size)
            sample[slot], positions[slot] = batch[pick - start], pick
            weight *= math.exp(math.log(_uniform(rng)) / size)
            pick = next_pick(pick)
        start = end
    if pick < 0:
        return sample  # all of them, in order
    return [sample[slot] for slot in sorted(range(size), key=positions.__getitem__)]


def _training_text(
    texts: Sequence[TextSource], max_sentences: int | None, seed: int, progress: bool, name: str
) -> Iterable[str]:
    """What one model is trained on: the texts streamed whole when they are known
    to fit in ``max_sentences``, else a seeded sample of them."""
    lengths = [_known_length(text) for text in texts]
    if max_sentences is None or (None not in lengths and sum(lengths) <= max_sentences):
        return itertools.chain.from_iterable([_iter_sentences(text) for text in texts])
    if all(callable(getattr(text, "batches", None)) for text in texts):
        batches = itertools.chain.from_iterable(text.batches() for text in texts)
    else:
        sentences = itertools.chain.from_iterable([_iter_sentences(text) for text in texts])
        batches = iter(lambda: list(itertools.islice(sentences, SAMPLE_BATCH)), [])
    with progress_bar(
        progress, desc=f"sampling {max_sentences:,} sentences for {name}", unit="sent"
    ) as bar:

        def counted() -> Iterator[Sequence[str]]:
            for batch in batches:
                bar.update(len(batch))
                yield batch

        return _sample_batches(counted(), max_sentences, seed)


def train_tokenizers(
    src_texts: TextSource,
    tgt_texts: TextSource,
    out_dir: PathLike,
    vocab_size: int,
    shared: bool = False,
    model_type: str = "unigram",
    *,
    max_sentences: int | None = DEFAULT_MAX_SENTENCES,
    seed: int = 0,
    **options,
) -> tuple[Path, Path]:
    """Train a joint model (``shared=True``: one ``spm_shared.model``, returned
    twice, needed for ``share_embeddings``) or one model per side
    (``spm_src.model``, ``spm_tgt.model``) in ``out_dir``.

    Texts are streamed: sentences (a list, or a sized stream such as
    ``PairSource.sentences(side)``), a file path or a list of ``Path``s.

    Args:
        max_sentences: each model is trained on at most this many sentences: a
            uniform random sample (``sample_sentences``, seeded by ``seed``)
            drawn in one pass that holds only the sample, never the corpus; a
            shared model samples from both sides together. Texts with no more
            sentences give exactly the model of ``max_sentences=None`` (every
            sentence); texts of known length (a list, ``PairSource.sentences``)
            that fit are streamed to SentencePiece, not held in a list.
        seed: the sample's seed, also SentencePiece's.
        options: go to ``train_sentencepiece``.
    """
    _check_model_type(model_type)
    _check_max_sentences(max_sentences)
    if "input_sentence_size" in options:
        raise ValueError("train_tokenizers samples with max_sentences=N; drop input_sentence_size.")
    src_path, tgt_path = tokenizer_paths(out_dir, shared)
    progress = bool(options.get("progress", False))
    models = (
        [((src_texts, tgt_texts), src_path)]
        if shared
        else [((src_texts,), src_path), ((tgt_texts,), tgt_path)]
    )
    for texts, path in models:
        sentences = _training_text(texts, max_sentences, seed, progress, path.stem)
        train_sentencepiece(
            sentences, path.with_suffix(""), vocab_size, model_type, seed=seed, **options
        )
    return src_path, tgt_path


class _SharedModelResource(tf_resource.TrackableResource):
    """The SentencePiece model resource, registered under a name derived from the model.

    ``tensorflow_text`` creates it without a name, so the op kernel owns it, and
    ``tf.random.set_seed`` / ``keras.utils.set_random_seed`` (which clear the
    eager kernel cache) silently delete it: every later call fails with
    "Resource .../SentencepieceResource does not exist". A shared name puts it
    in the resource manager instead; equal models share one resource.
    """

    def __init__(self, model: bytes):
        super().__init__()
        self._model = model
        self._shared_name = "keras_transformer_spm_" + hashlib.sha256(model).hexdigest()[:32]
        _ = self.resource_handle  # create it now, like tensorflow_text does

    def _create_resource(self):
        return gen_sentencepiece_tokenizer.sentencepiece_op(
            model=self._model, shared_name=self._shared_name
        )


class _SentencepieceTokenizer(tf_text.SentencepieceTokenizer):
    def __init__(self, model: bytes, out_type: tf.DType = tf.int32):
        super().__init__(model=model, out_type=out_type, add_bos=False, add_eos=False)
        self._model_resource = _SharedModelResource(model)


class _Pieces(tf.Module):
    """What both tokenizers share: the pieces by id (``self._pieces``), their
    special ids, and the first steps of ``detokenize``."""

    _pieces: tuple[str, ...]
    pad_id: int
    unk_id: int
    eos_id: int

    @property
    def vocab_size(self) -> int:
        """The number of pieces, the model's vocabulary size."""
        return len(self._pieces)

    def piece(self, token_id: int) -> str:
        """One piece as Python text, e.g. for plot labels."""
        if not 0 <= int(token_id) < self.vocab_size:
            raise ValueError(
                f"token id {token_id} is outside the vocabulary [0, {self.vocab_size})."
            )
        return self._pieces[int(token_id)]

    def pieces(self, ids) -> list[str]:
        """Pieces of a 1-D sequence of ids (list, NumPy array or eager tensor) as Python text."""
        values = ids.numpy() if hasattr(ids, "numpy") else ids
        return [self.piece(int(i)) for i in values]

    def _ids_to_read(self, ids) -> tuple[tf.Tensor, int, tf.Tensor]:
        """``(batch, rank, before_eos)`` for ``detokenize``: ``[B, T]`` int32 ids (a
        ``[T]`` input gets a batch axis; ragged rows are padded with ``pad_id``;
        ids outside the vocabulary read as ``unk_id``), the input's rank, and
        which ids come before the first EOS."""
        if isinstance(ids, tf.RaggedTensor):
            if ids.ragged_rank != 1:
                raise ValueError(
                    f"detokenize needs [batch, None] ids, got ragged rank {ids.ragged_rank}."
                )
            ids = ids.to_tensor(default_value=self.pad_id)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        rank = ids.shape.rank
        if rank not in (1, 2):
            raise ValueError(
                f"detokenize needs ids of shape [batch, length] or [length], got rank {rank}."
            )
        batch = ids if rank == 2 else ids[tf.newaxis]
        batch = tf.where((batch < 0) | (batch >= self.vocab_size), self.unk_id, batch)
        before_eos = tf.cumsum(tf.cast(batch == self.eos_id, tf.int32), axis=1) == 0
        return batch, rank, before_eos


class SubwordTokenizer(_Pieces):
    """A SentencePiece model as TensorFlow ops (usable in graphs, ``tf.data`` and SavedModels).

    Its ids are the SentencePiece model's, with the reserved ids
    ``pad_id``/``unk_id``/``bos_id``/``eos_id`` = 0/1/2/3 that
    ``train_sentencepiece`` gives every model.
    """

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self, model_bytes: bytes, name: str | None = None):
        super().__init__(name=name)
        try:
            processor = spm.SentencePieceProcessor(model_proto=bytes(model_bytes))
        except (RuntimeError, OSError, TypeError) as error:
            raise ValueError(
                f"Not a SentencePiece model ({error}); train one with train_sentencepiece."
            ) from error
        size = processor.get_piece_size()
        actual = {i: processor.id_to_piece(i) if i < size else None for i in RESERVED_PIECES}
        ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"The model reserves pad/unk/bos/eos ids {ids} (pieces {actual}), but this package needs "
                f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; retrain it with train_sentencepiece."
            )
        self._model_bytes = bytes(model_bytes)
        self._pieces = tuple(processor.id_to_piece(i) for i in range(processor.get_piece_size()))
        self._tokenizer = _SentencepieceTokenizer(self._model_bytes)

    @classmethod
    def from_file(cls, path: PathLike) -> "SubwordTokenizer":
        path = Path(path)
        if not path.is_file():
            raise ValueError(
                f"No SentencePiece model at {str(path)!r}; train one with train_sentencepiece."
            )
        return cls(path.read_bytes())

    @property
    def model_bytes(self) -> bytes:
        """The serialized model, to embed in an exported SavedModel."""
        return self._model_bytes

    def tokenize(self, strings) -> tf.RaggedTensor | tf.Tensor:
        """Ids without BOS/EOS: a batch ``[B]`` gives ``RaggedTensor[B, None]``, a scalar a 1-D tensor."""
        return self._tokenizer.tokenize(tf.convert_to_tensor(strings, dtype=tf.string))

    def detokenize(self, ids) -> tf.Tensor:
        """Text of ``[B, T]`` (dense, pad 0, or ragged) or ``[T]`` ids.

        Reading stops at the first EOS; pad/bos are dropped; ids outside the
        vocabulary read as ``<unk>`` (the model may be wider than the vocabulary).
        """
        batch, rank, before_eos = self._ids_to_read(ids)
        keep = before_eos & (batch != self.pad_id) & (batch != self.bos_id)
        text = self._tokenizer.detokenize(tf.ragged.boolean_mask(batch, keep))
        return text if rank == 2 else text[0]

    def id_to_piece(self, ids) -> tf.Tensor:
        """Pieces of ids as a string tensor of the same shape (graph-safe)."""
        return self._tokenizer.id_to_string(tf.cast(ids, tf.int32))


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
    """Hugging Face's ``MarianTokenizer`` (one side of it) as TensorFlow ops.

    Marian splits text with a SentencePiece model but numbers the pieces with
    its own vocabulary (``vocab.json``): one id space for both languages, so
    the source and target tokenizers share ``vocabulary`` and special ids
    while each has its own SentencePiece model. ``tokenize`` runs the model
    with string output and looks the pieces up in a ``tf.lookup`` table
    (unknown pieces read as ``unk_id``), so it works in ``tf.function``,
    ``tf.data`` and an exported SavedModel, with only core TensorFlow and
    TF Text ops. The contract is ``SubwordTokenizer``'s: ``tokenize`` adds
    no EOS, ``detokenize`` stops at the first EOS.

    As in ``MarianTokenizer``: a sentence that starts with a language code
    ``>>xxx<<`` keeps it as one token (looked up in the vocabulary) and
    tokenizes the rest; no punctuation normalisation is applied (the
    ``MarianTokenizer`` of transformers 5 defines a Moses normaliser but does
    not call it when encoding); ``detokenize`` drops the special tokens
    (EOS, pad, unk and ``extra_special_ids``, as ``skip_special_tokens``
    does) and the pieces SentencePiece decodes to nothing (control symbols),
    joins the rest and turns "\u2581" into spaces, stripped at both ends.
    Special tokens written literally in the input text (``"</s>"``) are
    tokenized as text, where ``MarianTokenizer`` would read the token.

    Args:
        model_bytes: the serialized SentencePiece model (``source.spm`` or
            ``target.spm``).
        vocabulary: the pieces by id (``vocab.json`` inverted); its length is
            the model's vocabulary size.
        eos_id, unk_id, pad_id: the special ids (OPUS-MT: 0, 1 and the last id).
        bos_id: the decoder's start id; Marian starts from the pad id (default).
        extra_special_ids: further ids that ``detokenize`` drops.
        clean_up_tokenization_spaces: ``detokenize`` then drops the space
            before ``. ? ! ,`` and English clitics (``n't``, ``'s``, ...), as
            ``MarianTokenizer.decode`` does when its config sets this.
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
        """Ids without EOS: a batch ``[B]`` gives ``RaggedTensor[B, None]``, a scalar a 1-D tensor."""
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
        """Text of ``[B, T]`` (dense or ragged) or ``[T]`` ids, as
        ``MarianTokenizer.decode(ids, skip_special_tokens=True)`` gives it.

        Reading stops at the first EOS; special ids are dropped; ids outside
        the vocabulary read as ``<unk>`` (and are dropped with it).
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
        """Pieces of ids as a string tensor of the same shape (graph-safe; ids
        outside the vocabulary read as the unk piece)."""
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
    """The (source, target) tokenizers of a Marian checkpoint directory.

    Reads ``source.spm``, ``target.spm``, ``vocab.json`` and, when present,
    ``tokenizer_config.json`` (its ``eos_token``, ``unk_token``,
    ``pad_token``, extra special tokens and ``separate_vocabs``; the
    defaults are ``MarianTokenizer``'s: ``</s>``, ``<unk>``, ``<pad>``). A
    model with ``separate_vocabs`` numbers its target pieces with
    ``target_vocab.json``; its special tokens must have the same ids in both
    vocabularies, since the model has one set of special ids.
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
    """Write the pair's ``source.spm``, ``target.spm`` and ``vocab.json`` (and
    ``target_vocab.json`` when the vocabularies differ) into ``directory``, as
    a Marian checkpoint holds them; returns ``{file name: path}``."""
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
