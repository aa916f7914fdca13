"""The workdir's prepared training split (``kt prepare``, ``data.prepare``): tokenized
shards written once and checked against the config on every run."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf

from keras_transformer.data import (
    PreparationError,
    PreparedShards,
    StalePreparationError,
    prepare_shards,
)
from keras_transformer.training.batches import Prepared, tagged_pairs, train_source, train_texts
from keras_transformer.training.corpora import SourceMix
from keras_transformer.training.run_config import RunConfig
from keras_transformer.workdir import Workdir

log = logging.getLogger("training")
# The data keys that do not change what a single corpus's preparation holds.
UNPREPARED_KEYS = ("prepare", "examples_per_shard", "sources", "eval_source")


def preparation(config: RunConfig, index: int | None = None) -> dict[str, Any]:
    """What a prepared training split must have been made with, from the config: of
    the single corpus, or (``index``) of corpus ``index`` of ``data.sources``."""
    if index is None:
        # A single corpus's preparation is described as before data.sources existed.
        data = config.data.to_dict()
        data = {key: value for key, value in data.items() if key not in UNPREPARED_KEYS}
    else:
        # A corpus of several: where it is read and its tag (its weight only samples).
        source = config.data.sources[index]
        data = {**source.corpus(), "tag": source.tag}
    return dict(
        max_src_length=config.training.max_src_length,
        max_tgt_length=config.training.max_tgt_length,
        length_filter="drop",
        source=data,
    )


def source_prepared_dir(run_dir: Path, index: int) -> Path:
    """Where corpus ``index`` of ``data.sources`` is prepared: ``W/prepared/source-N``."""
    return Workdir(run_dir).prepared_dir / f"source-{index}"


def _prepared_one(
    config: RunConfig,
    directory: Path,
    pairs: Callable[[], tf.data.Dataset],
    size: int,
    index: int | None,
    tokenizers: tuple,
    rebuild: bool,
) -> PreparedShards:
    """The preparation in ``directory``, written first when missing, stale or ``rebuild``."""
    wanted = preparation(config, index)
    if not rebuild and PreparedShards.exists(directory):
        try:
            return PreparedShards.load(directory).check(*tokenizers, **wanted)
        except StalePreparationError as error:
            log.info("%s Preparing it again.", error)
    log.info("preparing %d training pairs in %s", size, directory)
    return prepare_shards(
        pairs(),
        *tokenizers,
        directory,
        **wanted,
        examples_per_shard=config.data.examples_per_shard,
        seed=config.training.seed + (index or 0),
    )


def prepared_train_split(
    config: RunConfig, run_dir: Path, corpus, src_tok, tgt_tok, *, rebuild: bool = False
) -> Prepared:
    """The workdir's prepared training split (``Workdir.prepared_dir``), tokenized and
    written first when it is missing, stale or ``rebuild`` is set. With ``data.sources``,
    one preparation per corpus (``source_prepared_dir``), its tag before each source
    sentence, shuffled with ``training.seed + index``; a tuple of them, in order."""
    train = corpus["train"]
    tokenizers = (src_tok, tgt_tok)
    if not isinstance(train, SourceMix):
        source = train_source(corpus)
        directory = Workdir(run_dir).prepared_dir
        return _prepared_one(
            config, directory, source.dataset, len(source), None, tokenizers, rebuild
        )
    return tuple(
        _prepared_one(
            config,
            source_prepared_dir(run_dir, index),
            lambda source=source: tagged_pairs(source.pairs, source.tag),
            len(source.pairs),
            index,
            tokenizers,
            rebuild,
        )
        for index, source in enumerate(train.sources)
    )


def _load_checked(config: RunConfig, directory: Path, src_tok, tgt_tok, index=None):
    try:
        return PreparedShards.load(directory).check(src_tok, tgt_tok, **preparation(config, index))
    except StalePreparationError as error:
        raise StalePreparationError(
            f"{error} Prepare it again (kt prepare with this config and workdir), "
            "or train on the text with --set data.prepare=false."
        ) from error


def find_prepared(
    config: RunConfig,
    run_dir: Path | None,
    corpus,
    src_tok,
    tgt_tok,
    *,
    run_workdir: Path | None = None,
) -> Prepared | None:
    """The prepared training split to train on, or ``None`` to read the text.

    ``data.prepare``: ``auto`` uses shards that ``kt prepare`` wrote
    (a stale preparation is an error that says what to do); ``true`` also writes
    them when missing or stale; ``false`` never uses them. ``run_workdir`` is the
    run's own workdir when ``run_dir`` is a non-chief worker's (``W/worker_N``):
    with ``auto``, a worker without shards of its own reads ``W/prepared``, the
    ones ``training.prepare`` wrote for the run (on a shared file system the
    chief's, elsewhere that machine's). With ``data.sources`` every corpus has
    its own preparation (``W/prepared/source-N``), all of them or none: a
    folder that holds some of them only is an error.
    """
    mode = config.data.prepare
    if mode is False or run_dir is None:
        return None
    if mode is True:
        return prepared_train_split(config, run_dir, corpus, src_tok, tgt_tok)
    bases = [run_dir] if run_workdir is None else [run_dir, run_workdir]
    train = corpus["train"]
    if not isinstance(train, SourceMix):
        directory = next(
            (
                Workdir(base).prepared_dir
                for base in bases
                if PreparedShards.exists(Workdir(base).prepared_dir)
            ),
            None,
        )
        return None if directory is None else _load_checked(config, directory, src_tok, tgt_tok)
    for base in bases:
        directories = [source_prepared_dir(base, index) for index in range(len(train.sources))]
        present = [PreparedShards.exists(directory) for directory in directories]
        if all(present):
            return tuple(
                _load_checked(config, directory, src_tok, tgt_tok, index)
                for index, directory in enumerate(directories)
            )
        if any(present):
            missing = [source.name for source, there in zip(train.sources, present) if not there]
            raise PreparationError(
                f"{Workdir(base).prepared_dir} holds prepared shards for some of the "
                f"data.sources only (not for {', '.join(missing)}): prepare them all (python -m "
                "training.prepare with this config and workdir), or train on the text with "
                "--set data.prepare=false."
            )
    return None


def training_input_identity(prepared: Prepared | None, corpus=None) -> str:
    """What a worker trains on, for the workers to compare: the text (and, given
    ``corpus``, each training corpus's lines and pairs), or the preparations
    (their fingerprints and files)."""
    if prepared is None:
        if corpus is None:
            return "text"
        return json.dumps(["text", [[part.lines, len(part)] for part in train_texts(corpus)]])
    preparations = [prepared] if isinstance(prepared, PreparedShards) else list(prepared)
    return json.dumps(
        [[p.fingerprint, p.files, p.examples_per_file, p.seed] for p in preparations],
        sort_keys=True,
        default=str,
    )


def describe_prepared(prepared: Prepared) -> str:
    """One line on what training reads: examples, shard files and folder(s)."""
    if isinstance(prepared, PreparedShards):
        return (
            f"{prepared.examples} prepared examples in {len(prepared.files)} shard files "
            f"({prepared.directory})"
        )
    return "; ".join(describe_prepared(one) for one in prepared)
