"""Train SentencePiece models with the ids the package reserves.

Every model trained here reserves the ids the rest of the package assumes
(``keras_transformer.config``)::

    0  <pad>  PAD_ID   padding; never produced by tokenize
    1  <unk>  UNK_ID   characters not covered by the model
    2  <s>    BOS_ID   prepended to decoder inputs by the data pipeline
    3  </s>   EOS_ID   appended to targets; decoding stops there
"""

from __future__ import annotations

import io
import itertools
import math
import os
import random
from collections.abc import Iterable, Iterator, Sequence, Sized
from pathlib import Path

import sentencepiece as spm

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
WORD_START = "\u2581"  # SentencePiece's mark of a word's start ("▁")

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
    """Trains a SentencePiece model that reserves the package's pad/unk/bos/eos ids.

    Writes ``{model_prefix}.model`` and ``{model_prefix}.vocab`` (piece and
    score per line). ``vocab_size`` is an upper bound (``hard_vocab_limit=False``):
    a tiny corpus yields a smaller vocabulary instead of failing, so size the
    Transformer from ``SubwordTokenizer.vocab_size``, not from this argument.
    Training is deterministic for a given corpus, options and ``seed``.

    Args:
        texts: the training text: a file path (``str`` or ``Path``), a list of
            ``Path`` files, or the sentences themselves (an iterable of ``str``).
        model_prefix: the output path without extension.
        vocab_size: the largest vocabulary to build (more than the 4 reserved ids).
        model_type: ``"unigram"`` or ``"bpe"``.
        character_coverage: the share of characters the model covers, in
            ``(0, 1]``; the rest read as ``<unk>``.
        normalization_rule_name: SentencePiece's text normalisation.
        split_digits: split numbers into single digits, so that they can be
            copied digit by digit.
        byte_fallback: spell characters outside the model as UTF-8 bytes
            instead of ``<unk>``.
        user_defined_symbols: pieces always kept whole.
        input_sentence_size: 0 trains on every sentence; a number above 100 on
            a sample of that many that SentencePiece draws while the text streams
            by (the same sample whatever ``seed``; ``train_tokenizers`` samples
            with a seed instead).
        seed: SentencePiece's random seed.
        progress: show the sentences read (needs ``tqdm``).

    Returns:
        The path of ``{model_prefix}.model``.

    Raises:
        ValueError: an argument is out of range, a file is missing, the text is
            empty or holds something other than ``str``, or SentencePiece fails.

    Example:

    >>> path = train_sentencepiece(["the cat sleeps", "a dog runs"] * 50, "spm", vocab_size=30)
    >>> path.name
    'spm.model'
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
    """Where ``train_tokenizers`` puts the (source, target) models in ``out_dir``.

    Args:
        out_dir: the folder the models are trained into.
        shared: whether one model serves both sides.

    Returns:
        ``(source_model, target_model)`` paths; the same path twice when shared.

    Example:

    >>> [path.name for path in tokenizer_paths("run/tokenizer", shared=False)]
    ['spm_src.model', 'spm_tgt.model']
    """
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
    """Draws a uniform random sample of ``size`` sentences, kept in their original order.

    One pass holds only the sample (reservoir sampling, Li's "Algorithm L",
    which skips ahead instead of drawing a number per sentence). Fewer
    sentences than ``size`` are all returned, in order.

    Args:
        sentences: the sentences, streamed once.
        size: how many to keep (a positive integer).
        seed: the sample's random seed.

    Returns:
        The sampled sentences, as a list in their input order.

    Raises:
        ValueError: ``size`` is not a positive integer.

    Example:

    >>> sample_sentences(["a", "b", "c"], size=5)
    ['a', 'b', 'c']
    >>> len(sample_sentences((str(i) for i in range(1000)), size=10, seed=1))
    10
    """
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


def tag_piece(tag: str) -> str:
    """Gives the piece that a tag written before a sentence is tokenized as: the tag as a word.

    A tag (``"<bt>"``, ``"<fr>"``) marks a sentence's corpus or task: written as the first
    word of a source sentence, it is one piece when the model reserves ``tag_piece(tag)``
    (``train_tokenizers(source_symbols=[tag_piece(tag)])``), and the words after it are
    tokenized as without it. SentencePiece starts a sentence with a word mark, so the
    reserved piece is the tag with that mark (``"▁<bt>"``); the tag alone would leave a
    lone ``"▁"`` piece before it.

    Args:
        tag: the tag as written, without whitespace.

    Returns:
        The piece to reserve.

    Raises:
        ValueError: ``tag`` is empty, not a string, or holds whitespace.

    Example:

    >>> tag_piece("<bt>")
    '▁<bt>'
    """
    if not isinstance(tag, str) or not tag or any(c.isspace() or c == WORD_START for c in tag):
        raise ValueError(f"A tag is a non-empty string without whitespace, got {tag!r}.")
    return WORD_START + tag


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
    source_symbols: Sequence[str] = (),
    **options,
) -> tuple[Path, Path]:
    """Trains the source and target SentencePiece models of a run, or one shared model.

    ``shared=True`` trains one joint model, ``spm_shared.model`` (needed for
    ``share_embeddings``); otherwise one model per side, ``spm_src.model`` and
    ``spm_tgt.model`` (``tokenizer_paths``). Texts are streamed. A model is
    trained on at most ``max_sentences`` sentences: a uniform random sample
    (``sample_sentences``) drawn in one pass that holds only the sample; a
    shared model samples from both sides together. Texts with no more
    sentences give exactly the model of ``max_sentences=None``.

    Args:
        src_texts: the source-language text, in any form ``train_sentencepiece``
            takes, or a sized stream such as ``PairSource.sentences("source")``.
        tgt_texts: the target-language text, likewise.
        out_dir: the folder to write the models into.
        vocab_size: the largest vocabulary of each model.
        shared: train one model for both languages.
        model_type: ``"unigram"`` or ``"bpe"``.
        max_sentences: the most sentences a model is trained on (``None``: all).
        seed: the sample's seed, also SentencePiece's.
        source_symbols: user-defined symbols of the source model only (of the
            shared one when ``shared``), e.g. the ``tag_piece`` of each tag.
        **options: further ``train_sentencepiece`` arguments (not
            ``input_sentence_size``).

    Returns:
        ``(source_model, target_model)`` paths; the same path twice when shared.

    Raises:
        ValueError: an argument is out of range (see ``train_sentencepiece``).

    Example:

    >>> pairs = [("the cat sleeps", "die Katze schläft"), ("a dog runs", "ein Hund läuft")] * 50
    >>> src, tgt = train_tokenizers(
    ...     [s for s, _ in pairs], [t for _, t in pairs], "tok", vocab_size=40, shared=True
    ... )
    >>> src == tgt, src.name
    (True, 'spm_shared.model')
    """
    _check_model_type(model_type)
    _check_max_sentences(max_sentences)
    if "input_sentence_size" in options:
        raise ValueError("train_tokenizers samples with max_sentences=N; drop input_sentence_size.")
    src_path, tgt_path = tokenizer_paths(out_dir, shared)
    progress = bool(options.get("progress", False))
    symbols = list(options.pop("user_defined_symbols", ()))
    source_symbols = [*symbols, *(s for s in source_symbols if s not in symbols)]
    models = (
        [((src_texts, tgt_texts), src_path, source_symbols)]
        if shared
        else [((src_texts,), src_path, source_symbols), ((tgt_texts,), tgt_path, symbols)]
    )
    for texts, path, user_defined_symbols in models:
        sentences = _training_text(texts, max_sentences, seed, progress, path.stem)
        train_sentencepiece(
            sentences,
            path.with_suffix(""),
            vocab_size,
            model_type,
            seed=seed,
            user_defined_symbols=user_defined_symbols,
            **options,
        )
    return src_path, tgt_path
