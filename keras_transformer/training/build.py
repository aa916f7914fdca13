"""What a run builds before it trains: the tokenizers (trained on the training split, or
copied from the run a model starts from) and the model's ``TransformerConfig``."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import keras_transformer as kt
from keras_transformer.files import replace_directory, staging_directory
from keras_transformer.tokenization import (
    SubwordTokenizer,
    tag_piece,
    tokenizer_paths,
    train_tokenizers,
)
from keras_transformer.training.batches import train_source
from keras_transformer.training.corpora import SourceMix
from keras_transformer.training.run_config import RunConfig, resolve_path
from keras_transformer.workdir import Workdir

log = logging.getLogger("training")


def check_tags(corpus, src_tok) -> None:
    """Raise ``ValueError`` unless each tag of a ``SourceMix`` corpus is one piece of ``src_tok``
    (a tokenizer trained without them, e.g. a workdir's from before the tags, is not)."""
    train = corpus["train"]
    if not isinstance(train, SourceMix):
        return
    for source in train.sources:
        if not source.tag:
            continue
        ids = src_tok.tokenize(source.tag).numpy().tolist()
        if len(ids) != 1 or src_tok.piece(ids[0]) != tag_piece(source.tag):
            raise ValueError(
                f"data.sources tag {source.tag!r} (corpus {source.name}) is not one piece of the "
                f"source tokenizer (it reads as {src_tok.pieces(ids)}): the tokenizer was trained "
                "without it (an earlier run in this workdir, or model.init_from's model); train "
                "in a new workdir."
            )


def starting_point(config: RunConfig) -> Workdir | None:
    """The finished workdir that ``model.init_from`` names, checked, or ``None``."""
    init_from = config.model.init_from
    if init_from is None:
        return None
    path = resolve_path(init_from)  # like data.dir
    try:
        return Workdir(path).check()
    except ValueError as error:
        raise ValueError(f"model.init_from={init_from}: {error}") from error


def start_from(config: RunConfig, source: Workdir) -> RunConfig:
    """``config`` for a run that starts from ``source``'s model: its architecture
    (``model_config.json``) and its tokenizer replace the config's ``model`` and
    ``tokenizer`` sections, which are logged where they are overridden."""
    architecture = source.transformer_config().to_dict()
    ignored = sorted(
        key
        for key, value in config.model.overrides.items()
        if architecture.get(key, value) != value
    )
    if ignored:
        log.info(
            "model.init_from=%s: the architecture is that model's; the config's model.%s "
            "are not used",
            source.path,
            ", model.".join(ignored),
        )
    values = config.to_dict()
    values["model"] = {**architecture, "init_from": str(source.path)}
    values["tokenizer"] = dict(source.config.get("tokenizer") or values["tokenizer"])
    return RunConfig.from_dict(values, f"model.init_from={source.path}")


def copy_tokenizer(source: Workdir, workdir: Path):
    """``source``'s tokenizer files into ``workdir`` (once; kept on resume), and the
    tokenizers read back from there."""
    run_dir = Workdir(workdir)
    if not run_dir.tokenizer_dir.is_dir():
        staging = staging_directory(run_dir.tokenizer_dir, "copy")
        for path in source.tokenizer_dir.iterdir():
            if path.is_file():
                shutil.copyfile(path, staging / path.name)
        replace_directory(staging, run_dir.tokenizer_dir)
    return run_dir.load_tokenizers()


def build_tokenizers(config: RunConfig, corpus, workdir: Path, source: Workdir | None = None):
    """Train SentencePiece on the training split only (once; reused on resume),
    streamed, on at most ``tokenizer.max_sentences`` sentences per model (a
    seeded random sample; null: all of them). A run that starts from another
    model (``source``) takes that model's tokenizer instead.

    Returns:
        ``(src_tok, tgt_tok)``.
    """
    if source is not None:
        tokenizers = copy_tokenizer(source, workdir)
        check_tags(corpus, tokenizers[0])
        return tokenizers
    options = config.tokenizer
    directory = Workdir(workdir).tokenizer_dir
    src_path, tgt_path = tokenizer_paths(directory, options.shared)
    if not (src_path.exists() and tgt_path.exists()):
        started = time.time()
        train = corpus["train"]
        max_sentences = options.max_sentences
        log.info(
            "training the SentencePiece model(s) on %d sentence pairs (at most %s sentences a "
            "model)",
            len(train),
            "all" if max_sentences is None else f"{max_sentences:,}",
        )
        if isinstance(train, SourceMix):
            # A sample of the corpora by weight; the tags are reserved pieces of the source model.
            seed = config.training.seed
            texts = [train.sentences(side, max_sentences, seed) for side in ("source", "target")]
            symbols = [tag_piece(tag) for tag in train.tags]
            log.info("drawn %d sentence pairs by weight; tags: %s", len(texts[0]), train.tags)
        else:
            train = train_source(corpus)
            texts = [train.sentences("source"), train.sentences("target")]
            symbols = []
        train_tokenizers(
            *texts,
            directory,
            vocab_size=options.vocab_size,
            shared=options.shared,
            model_type=options.model_type,
            max_sentences=max_sentences,
            progress=True,
            **({"source_symbols": symbols} if symbols else {}),
        )
        log.info("trained tokenizers in %.1fs", time.time() - started)
    src_tok = SubwordTokenizer.from_file(src_path)
    check_tags(corpus, src_tok)
    return src_tok, SubwordTokenizer.from_file(tgt_path)


def model_config(config: RunConfig, src_tok, tgt_tok) -> kt.TransformerConfig:
    """The model's ``TransformerConfig``: ``model.preset`` (base by default) with the
    section's fields over it, the vocabularies the tokenizers' unless the section sets them.

    Raises:
        ValueError: the values do not make a valid model.
    """
    options = config.model.options()
    options.setdefault("src_vocab_size", src_tok.vocab_size)
    options.setdefault("tgt_vocab_size", tgt_tok.vocab_size)
    return kt.TransformerConfig.from_preset(config.model.preset or "base", **options)
