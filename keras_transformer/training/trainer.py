"""The training program's work, behind ``kt train``: corpus,
tokenizers, datasets, the model, ``model.fit`` or the custom loop, averaging,
scoring, and the workdir's files (``keras_transformer.Workdir``).

Training counts optimizer updates (``training.steps.StepPlan``): ``max_steps``
and/or ``epochs × steps_per_epoch`` bound the run, an epoch is the interval
of validation (loss and BLEU, with any number of replicas), logs and the
checkpoints kept for averaging, and ``accumulate_steps`` micro-batches of
``batch_tokens`` make one update.

Re-running the same command after an interruption resumes from the last
backup (``TrainingBackup``, written every ``backup_every_steps`` updates or at
each epoch end, replaced whole so a kill never leaves a broken one): at the
backup's step, with its weights and optimizer state (so the learning-rate
schedule too), on the batches an uninterrupted run would have used next,
from the input position saved with it (either loop: no batch before it is
read again), ``fit`` finishing an interrupted epoch first so that later
epochs end at the same steps (``training.loop`` says more); the time budget
goes on from the time the backup recorded. The backup is deleted once
``metrics.json`` is written: a run killed while it scores resumes at its
last step and only scores.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data import (
    PairSource,
    PreparationError,
    PreparedShards,
    StalePreparationError,
    batch_examples,
    count_tokens,
    make_dataset,
    pad_id_of,
    prepare_shards,
    sharded_dataset,
    tokenize_pairs,
)
from keras_transformer.files import (
    replace_directory,
    staging_directory,
    write_text_atomically,
    write_through_temp,
)
from keras_transformer.hardware import cpu_record
from keras_transformer.precision import dtype_policy, resolve_precision
from keras_transformer.tokenization import (
    SubwordTokenizer,
    tag_piece,
    tokenizer_paths,
    train_tokenizers,
)
from keras_transformer.training.backup import TrainingBackup
from keras_transformer.training.callbacks import (
    EarlyStopping,
    EpochHistory,
    TimeBudget,
    ValidationBleu,
)
from keras_transformer.training.corpora import SourceMix, load_corpus
from keras_transformer.training.curves import plot_learning_curves
from keras_transformer.training.epochs import EpochRecord, better, metric_name, metric_value
from keras_transformer.training.loop import (
    custom_fit,
    evaluator,
    fit_in_steps,
    optimizer_step,
)
from keras_transformer.training.run_config import (
    CORPUS_KEYS,
    check_data,
    check_prepare_mode,
    check_training,
    corpus_sources,
    needs_validation,
    validation_metric,
    with_defaults,
)
from keras_transformer.training.scoring import score_translations
from keras_transformer.training.snapshots import KeepSnapshots, average_weights
from keras_transformer.training.steps import StepPlan
from keras_transformer.training.strategy import make_strategy
from keras_transformer.training.workers import (
    PerWorkerInput,
    is_chief,
    pad_batches_for_replicas,
    same_on_every_worker,
    worker_count,
    worker_index,
)
from keras_transformer.translate import Translator
from keras_transformer.workdir import Workdir

log = logging.getLogger("training")
CHECKOUT = Path(__file__).resolve().parent.parent
LOOPS = ("auto", "fit", "custom")
# A training split of at most this many pairs is small: its tokenized examples are cached in
# memory (training.cache: auto) and it may be shuffled whole (training.shuffle_buffer: null).
IN_MEMORY_PAIRS = 1_000_000


def _train_source(corpus) -> PairSource:
    """The training split of a single-corpus ``corpus`` as a ``PairSource``."""
    train = corpus["train"]
    return train if isinstance(train, PairSource) else PairSource.from_pairs(train)


def tagged_pairs(pairs: PairSource, tag: str | None) -> tf.data.Dataset:
    """``pairs.dataset()`` with ``tag`` and a space put before each source sentence
    (unchanged without a tag): what a tagged corpus of ``data.sources`` trains on."""
    dataset = pairs.dataset()
    if not tag:
        return dataset
    constant = tf.constant(tag)
    return dataset.map(lambda src, tgt: (tf.strings.join([constant, src], " "), tgt))


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


def starting_point(config: dict[str, Any]) -> Workdir | None:
    """The finished workdir that ``model.init_from`` names, checked, or ``None``."""
    init_from = (config.get("model") or {}).get("init_from")
    if init_from is None:
        return None
    path = Path(init_from)
    if not path.is_dir() and not path.is_absolute() and (CHECKOUT / path).is_dir():
        path = CHECKOUT / path  # like data.dir, a path from the checkout
    try:
        return Workdir(path).check()
    except ValueError as error:
        raise ValueError(f"model.init_from={init_from}: {error}") from error


def start_from(config: dict[str, Any], source: Workdir) -> dict[str, Any]:
    """``config`` for a run that starts from ``source``'s model: its architecture
    (``model_config.json``) and its tokenizer replace the config's ``model`` and
    ``tokenizer`` sections, which are logged where they are overridden."""
    architecture = source.transformer_config().to_dict()
    ignored = sorted(
        key
        for key, value in config["model"].items()
        if key not in ("init_from", "preset") and architecture.get(key, value) != value
    )
    if ignored:
        log.info(
            "model.init_from=%s: the architecture is that model's; the config's model.%s "
            "are not used",
            source.path,
            ", model.".join(ignored),
        )
    return {
        **config,
        "model": {**architecture, "init_from": str(source.path)},
        "tokenizer": dict(source.config.get("tokenizer") or config["tokenizer"]),
    }


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


def build_tokenizers(config: dict[str, Any], corpus, workdir: Path, source: Workdir | None = None):
    """Train SentencePiece on the training split only (once; reused on resume),
    streamed, on at most ``tokenizer.max_sentences`` sentences per model (a
    seeded random sample; null: all of them). A run that starts from another
    model (``source``) takes that model's tokenizer instead."""
    if source is not None:
        tokenizers = copy_tokenizer(source, workdir)
        check_tags(corpus, tokenizers[0])
        return tokenizers
    options = with_defaults("tokenizer", config["tokenizer"])
    directory = Workdir(workdir).tokenizer_dir
    shared = bool(options["shared"])
    src_path, tgt_path = tokenizer_paths(directory, shared)
    if not (src_path.exists() and tgt_path.exists()):
        started = time.time()
        train = corpus["train"]
        max_sentences = options["max_sentences"]
        log.info(
            "training the SentencePiece model(s) on %d sentence pairs (at most %s sentences a "
            "model)",
            len(train),
            "all" if max_sentences is None else f"{max_sentences:,}",
        )
        if isinstance(train, SourceMix):
            # A sample of the corpora by weight; the tags are reserved pieces of the source model.
            seed = with_defaults("training", config["training"])["seed"]
            texts = [train.sentences(side, max_sentences, seed) for side in ("source", "target")]
            symbols = [tag_piece(tag) for tag in train.tags]
            log.info("drawn %d sentence pairs by weight; tags: %s", len(texts[0]), train.tags)
        else:
            train = _train_source(corpus)
            texts = [train.sentences("source"), train.sentences("target")]
            symbols = []
        train_tokenizers(
            *texts,
            directory,
            vocab_size=options["vocab_size"],
            shared=shared,
            model_type=options["model_type"],
            max_sentences=max_sentences,
            progress=True,
            **({"source_symbols": symbols} if symbols else {}),
        )
        log.info("trained tokenizers in %.1fs", time.time() - started)
    src_tok = SubwordTokenizer.from_file(src_path)
    check_tags(corpus, src_tok)
    return src_tok, SubwordTokenizer.from_file(tgt_path)


def model_config(config: dict[str, Any], src_tok, tgt_tok) -> kt.TransformerConfig:
    options = dict(config["model"])
    options.pop("init_from", None)
    preset = options.pop("preset", "base")
    options.setdefault("src_vocab_size", src_tok.vocab_size)
    options.setdefault("tgt_vocab_size", tgt_tok.vocab_size)
    return kt.TransformerConfig.from_preset(preset, **options)


def _preparation(config: dict[str, Any], index: int | None = None) -> dict[str, Any]:
    """What a prepared training split must have been made with, from the config: of
    the single corpus, or (``index``) of corpus ``index`` of ``data.sources``."""
    if index is None:
        # A single corpus's preparation is described as before data.sources existed.
        unused = ("prepare", "examples_per_shard", "sources", "eval_source")
        data = {key: value for key, value in config["data"].items() if key not in unused}
    else:
        # A corpus of several: where it is read and its tag (its weight only samples).
        options = corpus_sources(config["data"])[index]
        data = {**{key: options.get(key) for key in CORPUS_KEYS}, "tag": options["tag"]}
    return dict(
        max_src_length=config["training"]["max_src_length"],
        max_tgt_length=config["training"]["max_tgt_length"],
        length_filter="drop",
        source=data,
    )


def source_prepared_dir(run_dir: Path, index: int) -> Path:
    """Where corpus ``index`` of ``data.sources`` is prepared: ``W/prepared/source-N``."""
    return Workdir(run_dir).prepared_dir / f"source-{index}"


# A training split on prepared shards: one preparation, or one per corpus of data.sources.
Prepared = PreparedShards | tuple[PreparedShards, ...]


def _prepared_one(
    config: dict[str, Any],
    directory: Path,
    pairs: Callable[[], tf.data.Dataset],
    size: int,
    wanted: dict[str, Any],
    seed: int,
    src_tok,
    tgt_tok,
    rebuild: bool,
) -> PreparedShards:
    """The preparation in ``directory``, written first when missing, stale or ``rebuild``."""
    if not rebuild and PreparedShards.exists(directory):
        try:
            return PreparedShards.load(directory).check(src_tok, tgt_tok, **wanted)
        except StalePreparationError as error:
            log.info("%s Preparing it again.", error)
    log.info("preparing %d training pairs in %s", size, directory)
    return prepare_shards(
        pairs(),
        src_tok,
        tgt_tok,
        directory,
        **wanted,
        examples_per_shard=with_defaults("data", config["data"])["examples_per_shard"],
        seed=seed,
    )


def prepared_train_split(
    config: dict[str, Any], run_dir: Path, corpus, src_tok, tgt_tok, *, rebuild: bool = False
) -> Prepared:
    """The workdir's prepared training split (``Workdir.prepared_dir``), tokenized and
    written first when it is missing, stale or ``rebuild`` is set. With ``data.sources``,
    one preparation per corpus (``source_prepared_dir``), its tag before each source
    sentence, shuffled with ``training.seed + index``; a tuple of them, in order."""
    seed = with_defaults("training", config["training"])["seed"]
    train = corpus["train"]
    if not isinstance(train, SourceMix):
        source = _train_source(corpus)
        return _prepared_one(
            config,
            Workdir(run_dir).prepared_dir,
            source.dataset,
            len(source),
            _preparation(config),
            seed,
            src_tok,
            tgt_tok,
            rebuild,
        )
    return tuple(
        _prepared_one(
            config,
            source_prepared_dir(run_dir, index),
            lambda source=source: tagged_pairs(source.pairs, source.tag),
            len(source.pairs),
            _preparation(config, index),
            seed + index,
            src_tok,
            tgt_tok,
            rebuild,
        )
        for index, source in enumerate(train.sources)
    )


def _load_checked(config: dict[str, Any], directory: Path, src_tok, tgt_tok, index=None):
    try:
        return PreparedShards.load(directory).check(src_tok, tgt_tok, **_preparation(config, index))
    except StalePreparationError as error:
        raise StalePreparationError(
            f"{error} Prepare it again (kt prepare with this config and workdir), "
            "or train on the text with --set data.prepare=false."
        ) from error


def find_prepared(
    config: dict[str, Any],
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
    check_prepare_mode(config)
    mode = with_defaults("data", config["data"])["prepare"]
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


def prepared_batches(
    prepared: Prepared,
    options: dict[str, Any],
    *,
    part: tuple[int, int] | None = None,
    weights: list[float] | None = None,
) -> tf.data.Dataset:
    """Training batches of ``prepared`` (repeating), one plain dataset: global
    batches, or with ``part=(index, count)`` worker ``index``'s own, of its
    shard files (``sharded_dataset``'s input pipeline ``index`` of ``count``:
    files ``index``, ``index + count``, ... of each preparation, so the
    workers' parts are disjoint and together the corpus once per pass) in
    batches of ``1 / count`` of the configured size (``worker_batching``).
    Several preparations (``data.sources``) are sampled by ``weights``."""
    options = with_defaults("training", options)
    shuffle_buffer = options["shuffle_buffer"]
    if part is None:
        batching = {"batch_tokens": options["batch_tokens"], "batch_size": options["batch_size"]}
        pipelines = {}
    else:
        batching = worker_batching(options, part[1])
        pipelines = {"num_input_pipelines": part[1], "input_pipeline_index": part[0]}
    return sharded_dataset(
        prepared,
        **batching,
        **pipelines,
        **({} if shuffle_buffer is None else {"shuffle_buffer": shuffle_buffer}),
        seed=options["seed"],
        repeat=True,
        training=True,
        static_shapes=bool(options["static_shapes"]),
        **({} if isinstance(prepared, PreparedShards) else {"weights": weights}),
    )


def training_input_identity(prepared: Prepared | None, corpus=None) -> str:
    """What a worker trains on, for the workers to compare: the text (and, given
    ``corpus``, each training corpus's lines and pairs), or the preparations
    (their fingerprints and files)."""
    if prepared is None:
        if corpus is None:
            return "text"
        return json.dumps(["text", [[part.lines, len(part)] for part in _train_texts(corpus)]])
    preparations = [prepared] if isinstance(prepared, PreparedShards) else list(prepared)
    return json.dumps(
        [[p.fingerprint, p.files, p.examples_per_file, p.seed] for p in preparations],
        sort_keys=True,
        default=str,
    )


def _train_texts(corpus) -> list[PairSource]:
    """The training corpora: the one, or each of ``data.sources``."""
    train = corpus["train"]
    if isinstance(train, SourceMix):
        return [source.pairs for source in train.sources]
    return [_train_source(corpus)]


def describe_prepared(prepared: Prepared) -> str:
    """One line on what training reads: examples, shard files and folder(s)."""
    if isinstance(prepared, PreparedShards):
        return (
            f"{prepared.examples} prepared examples in {len(prepared.files)} shard files "
            f"({prepared.directory})"
        )
    return "; ".join(describe_prepared(one) for one in prepared)


def worker_batching(options: dict[str, Any], workers: int) -> dict[str, Any]:
    """``batch_tokens`` / ``batch_size`` of one worker's batches when each of
    ``workers`` reads its own part of the text: the global ones divided by
    ``workers`` (rounded down). A ``ValueError`` when a worker's token budget
    cannot hold the longest row."""
    options = with_defaults("training", options)
    if options["batch_size"]:
        return {"batch_tokens": None, "batch_size": max(1, options["batch_size"] // workers)}
    tokens = options["batch_tokens"] // workers
    longest = max(options["max_src_length"], options["max_tgt_length"] + 1)
    if tokens < longest:
        raise ValueError(
            f"training.batch_tokens={options['batch_tokens']} over {workers} workers gives each "
            f"{tokens} tokens a batch, fewer than the longest row ({longest}); raise "
            "training.batch_tokens or lower the max lengths."
        )
    return {"batch_tokens": tokens, "batch_size": None}


def training_input(train_options: dict[str, Any], pairs: int) -> dict[str, Any]:
    """``make_dataset``'s ``cache`` and ``shuffle_buffer`` for a training split of ``pairs`` pairs.

    ``training.cache``: ``auto`` caches the tokenized split in memory when it is
    small (at most ``IN_MEMORY_PAIRS``) and not at all otherwise (each pass
    re-reads the files); ``true``/``false``, or a path prefix for a file cache.
    ``training.shuffle_buffer``: examples in the buffer; ``null`` is the whole
    split (a corpus stored in length order, as Tatoeba's is, read through a
    smaller window trains on short, then long sentences), allowed only for a
    small split: a large one needs a bound (a ``ValueError`` says so).
    """
    train_options = with_defaults("training", train_options)
    cache = train_options["cache"]
    if cache == "auto":
        cache = pairs <= IN_MEMORY_PAIRS
    elif not isinstance(cache, (bool, str)):
        raise ValueError(
            f"training.cache must be auto, true, false or a file path prefix, got {cache!r}."
        )
    shuffle_buffer = train_options["shuffle_buffer"]
    if shuffle_buffer is None:
        if pairs > IN_MEMORY_PAIRS:
            raise ValueError(
                "training.shuffle_buffer=null shuffles the whole training split, but it has "
                f"{pairs:,} "
                f"pairs (at most {IN_MEMORY_PAIRS:,} are shuffled whole, in memory); set a bound, "
                "e.g. "
                "--set training.shuffle_buffer=200000 (shuffle the corpus file itself if it is "
                "sorted)."
            )
        shuffle_buffer = pairs
    return {"cache": cache, "shuffle_buffer": shuffle_buffer}


def check_training_input(train_options: dict[str, Any], corpus) -> None:
    """``training_input``'s checks for the training split, each corpus of a ``SourceMix``."""
    train = corpus["train"]
    sizes = [len(s.pairs) for s in train.sources] if isinstance(train, SourceMix) else [len(train)]
    for pairs in sizes:
        training_input(train_options, pairs)


def mixed_batches(
    mix: SourceMix,
    src_tok,
    tgt_tok,
    train_options: dict[str, Any],
    part: tuple[int, int] | None = None,
    **common,
):
    """Training batches (repeating) of several corpora, each pair drawn from corpus i with
    probability ``mix.shares[i]``.

    Each corpus is streamed, tagged (its tag and a space before every source sentence),
    tokenized with the length filter, cached and shuffled as ``training_input`` says for
    its size (shuffle seed ``seed + i``) and repeated on its own, so a small corpus never
    runs out; ``tf.data.Dataset.sample_from_datasets`` with the run's seed then draws the
    pairs, and they are batched as one stream. The same seed gives the same stream, and
    its iterator's state (the sampler's included) is what a backup saves as the input's
    position. With ``part=(index, count)`` each corpus is read from its part ``index``
    of ``count`` only (``PairSource.part``: a worker's own lines)."""
    options = with_defaults("training", train_options)
    seed = options["seed"]
    streams = []
    for index, source in enumerate(mix.sources):
        text = source.pairs if part is None else source.pairs.part(*part)
        pairs = tagged_pairs(text, source.tag)
        examples = tokenize_pairs(
            pairs,
            src_tok,
            tgt_tok,
            max_src_length=common["max_src_length"],
            max_tgt_length=common["max_tgt_length"],
        )
        setting = training_input(options, len(source.pairs))
        cache = setting["cache"]
        if isinstance(cache, str):
            examples = examples.cache(f"{cache}.source{index}")
        elif cache:
            examples = examples.cache()
        if setting["shuffle_buffer"] > 0:
            examples = examples.shuffle(
                setting["shuffle_buffer"], seed=seed + index, reshuffle_each_iteration=True
            )
        streams.append(examples.repeat())
    mixed = tf.data.Dataset.sample_from_datasets(streams, weights=mix.shares, seed=seed)
    return batch_examples(
        mixed,
        **common,
        shuffle_buffer=0,  # each corpus is shuffled on its own
        seed=seed,
        cache=False,
        training=True,
        static_shapes=bool(options["static_shapes"]),
        pad_id=pad_id_of(src_tok, tgt_tok),
    )


def datasets(
    config,
    corpus,
    src_tok,
    tgt_tok,
    prepared: Prepared | None = None,
    *,
    part: tuple[int, int] | None = None,
):
    """The training input (repeating) and the validation dataset (``None``
    without a valid split). The training batches come from ``prepared``
    (``find_prepared``, ``prepared_batches``) or are streamed from
    ``corpus["train"]``: all of it in global batches, or with
    ``part=(index, count)`` a ``PerWorkerInput`` of worker ``index``'s part
    (its shard files of each preparation, or its lines of each training
    corpus: ``PairSource.part``) in batches of ``1 / count`` of the
    configured size (``worker_batching``)."""
    train_options = with_defaults("training", config["training"])
    common = dict(
        max_src_length=train_options["max_src_length"],
        max_tgt_length=train_options["max_tgt_length"],
        batch_tokens=train_options["batch_tokens"],
        batch_size=train_options["batch_size"],
    )
    train_common = common if part is None else {**common, **worker_batching(train_options, part[1])}
    if prepared is not None:
        weights = corpus["train"].shares if isinstance(corpus["train"], SourceMix) else None
        train = prepared_batches(prepared, train_options, part=part, weights=weights)
    elif isinstance(corpus["train"], SourceMix):
        train = mixed_batches(
            corpus["train"], src_tok, tgt_tok, train_options, part, **train_common
        )
    else:
        source = _train_source(corpus)
        train = make_dataset(
            (source if part is None else source.part(*part)).dataset(),
            src_tok,
            tgt_tok,
            **train_common,
            **training_input(train_options, len(source)),
            seed=train_options["seed"],
            repeat=True,
            training=True,
            static_shapes=bool(train_options["static_shapes"]),
        )
    if part is not None:
        train = PerWorkerInput(train)
    valid = None
    if corpus["valid"]:
        valid = make_dataset(
            PairSource.from_pairs(corpus["valid"]).dataset(),
            src_tok,
            tgt_tok,
            **common,
            training=False,
            length_filter="truncate",
        )
        # Bucketing hides the batch count, and Keras ends the first validation pass over a
        # dataset of unknown length with "Your input ran out of data; interrupting training".
        # Counted once (the split is in memory), the warning is gone.
        valid = valid.apply(tf.data.experimental.assert_cardinality(count_tokens(valid).batches))
    return train, valid


def score_split(translator: Translator, pairs, show: int = 0) -> dict[str, Any]:
    """Greedy-translate ``pairs`` and score them; log the first ``show`` examples."""
    started = time.time()
    hypotheses = translator.translate([source for source, _ in pairs], batch_size=128)
    scores = score_translations(hypotheses, [target for _, target in pairs])
    scores["decode_seconds"] = round(time.time() - started, 1)
    for (source, reference), hypothesis in list(zip(pairs, hypotheses))[:show]:
        log.info(
            "\n  source:     %s\n  reference:  %s\n  translated: %s", source, reference, hypothesis
        )
    return scores


def training_loop(options: dict[str, Any], strategy) -> str:
    """``fit`` or ``custom``: ``training.loop``, where ``auto`` is ``custom``
    under ``MultiWorkerMirroredStrategy`` (Keras 3.15's ``fit`` fails there)."""
    options = with_defaults("training", options)
    loop = options["loop"]
    if loop not in LOOPS:
        raise ValueError(f"training.loop must be one of {LOOPS}, got {loop!r}.")
    if loop == "auto":
        multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        loop = "custom" if multi_worker else "fit"
    return loop


def keras_steps_per_execution(plan: StepPlan, strategy, loop: str) -> int:
    """``compile``'s ``steps_per_execution``: Keras counts micro-batches, so an
    execution of N updates is N × ``accumulate_steps`` of them; 1 for ``fit``
    under a ``MirroredStrategy`` of several replicas, where Keras 3.15's
    multi-step function fails ("You must feed a value for placeholder tensor
    'while/cond/Placeholder'")."""
    if (
        loop == "fit"
        and strategy.num_replicas_in_sync > 1
        and isinstance(strategy, tf.distribute.MirroredStrategy)
    ):
        if plan.steps_per_execution * plan.accumulate_steps > 1:
            log.warning(
                "fit runs one batch per call under MirroredStrategy (Keras 3.15 fails with more); "
                "training.loop: custom runs training.steps_per_execution"
            )
        return 1
    return plan.steps_per_execution * plan.accumulate_steps


def train_model(
    model,
    strategy,
    train_data: Callable[[], tf.data.Dataset],
    valid_ds,
    options: dict[str, Any],
    run_dir: Workdir,
    epoch_callbacks: list[keras.callbacks.Callback],
    backup: TrainingBackup | None = None,
) -> dict:
    """``model.fit`` (one machine, mirrored, TPU) or ``custom_fit`` (multi-worker,
    or ``training.loop: custom``) over ``StepPlan.from_options(options)``; both
    run ``model.train_step``, validate ``valid_ds`` at each epoch end (with any
    number of replicas), run the same per-epoch callbacks and resume from
    ``run_dir.backup_dir`` (left in place: ``run`` deletes it at the end).
    ``train_data()`` builds the training batches anew (``fit_in_steps`` says
    why). ``backup``: the ``TrainingBackup`` (with the callbacks' states it
    tracks), by default one in ``run_dir.backup_dir``. Returns the per-epoch
    history."""
    options = with_defaults("training", options)
    loop = training_loop(options, strategy)
    plan = StepPlan.from_options(options)
    backup = backup if backup is not None else TrainingBackup(run_dir.backup_dir)
    if loop == "custom":
        return custom_fit(
            model,
            strategy,
            train_data(),
            plan,
            validation_data=valid_ds,
            backup=backup,
            summary_dir=run_dir.logs_dir,
            callbacks=epoch_callbacks,
        )
    replicas = strategy.num_replicas_in_sync
    if valid_ds is not None:
        valid_ds = pad_batches_for_replicas(valid_ds, replicas, model.config.pad_id)
    callbacks = [
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.TensorBoard(str(run_dir.logs_dir), update_freq=100),
        *epoch_callbacks,
    ]
    return fit_in_steps(
        model,
        lambda: pad_batches_for_replicas(train_data(), replicas, model.config.pad_id),
        plan,
        validation_data=valid_ds,
        backup=backup,
        callbacks=callbacks,
        verbose=options["verbose"],
    )


def choose_final_weights(
    model, keeper: KeepSnapshots, averaged: list[int], average: str, metric, measure
) -> dict[str, Any]:
    """Set ``model``'s final weights: the average of the ``averaged`` epochs'
    snapshots or a single one (the best epoch when best epochs are kept, else
    the last), whichever scores better on validation (``metric``; the average
    wins a tie), so averaging never makes the model worse than that single
    snapshot. ``measure()`` gives the metric of the model's weights now (a
    single snapshot's is the one its epoch recorded). Without a validation
    metric the average is kept unchecked. Returns what ``metrics.json`` records
    under ``averaging`` (and logs it)."""
    single_role = "best" if keeper.best else "last"
    single = keeper.best_epoch() if keeper.best else (keeper.last_epochs(1) or [None])[0]

    def names(epochs):
        return [keeper.path(epoch).name for epoch in epochs]

    candidates = []  # (what it is, its epochs): the average first, it wins ties
    if averaged:
        kind = "average" if len(averaged) > 1 else ("best" if average == "best" else "last")
        candidates.append((kind, list(averaged)))
    if single is not None and [single] != list(averaged):
        candidates.append((single_role, [single]))
    record: dict[str, Any] = {
        "metric": metric,
        "averaged": names(averaged),
        "averaged_value": None,
        "single": None if single is None else keeper.path(single).name,
        "single_value": None if single is None else keeper.values.get(single),
        "kept": None,
        "snapshots": [],
    }
    if not candidates:
        return record

    def describe(kind, epochs):
        if kind == "average":
            return "the average of epochs " + ", ".join(map(str, sorted(epochs)))
        return f"the {kind} epoch {epochs[0]}"

    kind, epochs = candidates[0]
    model.set_weights(average_weights(keeper.paths(epochs)))
    if len(candidates) == 2:
        other_kind, other = candidates[1]
        if metric is None:
            log.info(
                "final model: %s (no validation to check it against %s)",
                describe(kind, epochs),
                describe(other_kind, other),
            )
        else:
            value = measure() if kind == "average" else keeper.values.get(epochs[0])
            record["averaged_value"] = value
            keep_first = not better(metric, record["single_value"], value)
            log.info(
                "final model: %s (%s %s) against %s (%s): kept %s",
                describe(kind, epochs),
                metric_name(metric),
                metric_value(metric, value),
                describe(other_kind, other),
                metric_value(metric, record["single_value"]),
                describe(kind, epochs) if keep_first else describe(other_kind, other),
            )
            if not keep_first:
                kind, epochs = other_kind, other
                model.set_weights(average_weights(keeper.paths(epochs)))
    else:
        log.info("final model: %s", describe(kind, epochs))
    record.update(kept=kind, snapshots=names(epochs))
    return record


def batching_for_replicas(config: dict[str, Any], replicas: int) -> dict[str, Any]:
    """``config`` with a static batch size (``training.batch_size``, or the one
    ``static_shapes`` derives from ``batch_tokens``) rounded down to a multiple
    of ``replicas`` (at least ``replicas``), so each replica gets as many rows;
    the config itself is left unchanged (the saved config is the one asked for)."""
    options = with_defaults("training", config["training"])
    if replicas == 1:
        return config
    changed = dict(options)
    if options["batch_size"]:
        size = options["batch_size"]
        changed["batch_size"] = max(replicas, size // replicas * replicas)
        if changed["batch_size"] != size:
            log.info(
                "training.batch_size %d rounded to %d, a multiple of the %d replicas",
                size,
                changed["batch_size"],
                replicas,
            )
    elif options["static_shapes"] and options["batch_tokens"]:
        longest = max(options["max_src_length"], options["max_tgt_length"] + 1)
        size = options["batch_tokens"] // longest
        rounded = max(replicas, size // replicas * replicas)
        if rounded != size:
            changed["batch_tokens"] = rounded * longest
            log.info(
                "static batches of %d sentences rounded to %d, a multiple of the %d replicas "
                "(batch_tokens %d used as %d)",
                size,
                rounded,
                replicas,
                options["batch_tokens"],
                changed["batch_tokens"],
            )
    return {**config, "training": changed}


def run(config: dict[str, Any], workdir: Path) -> dict[str, Any]:
    started = time.time()
    train_options = with_defaults("training", config["training"])
    # First: MultiWorkerMirroredStrategy must exist before other TF ops run.
    strategy = make_strategy(train_options["strategy"])
    run_workdir = Path(workdir)
    chief = is_chief(strategy)
    if not chief:
        # Every worker trains; only the chief's outputs are the run's.
        workdir = Workdir(workdir).worker(strategy.cluster_resolver.task_id).path
    keras.utils.set_random_seed(train_options["seed"])
    precision = resolve_precision(train_options["mixed_precision"])
    log.info("mixed precision: %s (%s)", precision.precision, precision.reason)
    keras.config.set_dtype_policy(dtype_policy(precision.precision))
    if train_options["native_ops"]:  # opt-in; false leaves KERAS_TRANSFORMER_NATIVE_OPS's choice
        kt.native.set_enabled(True)
    source = starting_point(config)
    if source is not None:
        config = start_from(config, source)
    workdir.mkdir(parents=True, exist_ok=True)
    run_dir = Workdir(workdir)
    run_dir.save_config(config)

    check_training(config)
    check_data(config)
    corpus = load_corpus(config["data"], base_dir=CHECKOUT)
    log.info(
        "pairs: %s", {split: len(pairs) for split, pairs in corpus.items()}
    )  # scans train once
    if isinstance(corpus["train"], SourceMix):
        for row in corpus["train"].describe():
            log.info(
                "training corpus %s: %d pairs, weight %g: %.1f%% of the sampled pairs%s",
                row["name"],
                row["pairs"],
                row["weight"],
                100 * row["share"],
                f", tagged {row['tag']}" if row["tag"] else "",
            )
    setting = needs_validation(config)
    if setting and not corpus["valid"]:
        raise ValueError(
            f"{setting} needs a validation split, and the corpus has none: add one "
            "(data: valid) or turn the setting off."
        )
    check_training_input(train_options, corpus)  # a bad cache/shuffle setting fails first
    src_tok, tgt_tok = build_tokenizers(config, corpus, workdir, source)
    data_config = batching_for_replicas(config, strategy.num_replicas_in_sync)
    prepared = find_prepared(
        data_config, workdir, corpus, src_tok, tgt_tok, run_workdir=None if chief else run_workdir
    )
    loop = training_loop(train_options, strategy)
    # Under the custom loop with several workers, each reads its own part of the training data
    # (its shard files, or its lines of the text) through a plain iterator that its backup saves;
    # one worker reads global batches, which its replicas split.
    workers = worker_count(strategy)
    part = None
    if (
        workers > 1
        and loop == "custom"
        and isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    ):  # one process per worker (a TPU pod's one client reads for all its hosts)
        part = (worker_index(strategy), workers)
    if prepared is not None:
        log.info(
            "training on %s%s",
            describe_prepared(prepared),
            ", split over the workers by file" if part is not None else "",
        )
    elif part is not None:
        for text in _train_texts(corpus):
            log.info(
                "worker %d of %d reads its part of the training text: %s",
                part[0] + 1,
                workers,
                " / ".join(text.part(*part).files),
            )
    same_on_every_worker(
        strategy,
        training_input_identity(prepared, corpus),
        "the workers would train on different data (some on prepared shards, some on the text, "
        "on different preparations or on different text); give every worker the same corpus "
        "and W/prepared (kt prepare on each machine, or a shared workdir), or "
        "--set data.prepare=false on all of them",
    )
    train_ds, valid_ds = datasets(data_config, corpus, src_tok, tgt_tok, prepared, part=part)
    unread = [train_ds]  # not iterated yet: the first call may use it

    def train_data():  # from the start, as a new dataset (see train_model)
        return (
            unread.pop()
            if unread
            else datasets(
                data_config,
                corpus,
                src_tok,
                tgt_tok,
                prepared,
                part=part,
            )[0]
        )

    plan = StepPlan.from_options(train_options)
    if (
        plan.max_steps is not None
        and plan.epochs is not None
        and plan.max_steps != plan.epochs * plan.steps_per_epoch
    ):
        log.info(
            "training ends at step %d, the first of max_steps=%d and epochs × steps_per_epoch = %d",
            plan.total,
            plan.max_steps,
            plan.epochs * plan.steps_per_epoch,
        )
    if plan.accumulate_steps > 1:
        per_update = (
            f"{train_options['batch_tokens'] * plan.accumulate_steps:,} tokens"
            if train_options["batch_tokens"]
            else f"{train_options['batch_size'] * plan.accumulate_steps:,} sentences"
        )
        log.info("%d micro-batches per update: %s per update", plan.accumulate_steps, per_update)
    with strategy.scope():
        model = kt.Transformer(model_config(config, src_tok, tgt_tok))
        model.build()
        if source is not None:  # a resumed run's backup then replaces these weights
            model.load_weights(source.model_path)
            log.info("starting from the weights of %s", source.model_path)
        schedule = kt.TransformerSchedule(
            model.config.d_model,
            train_options["warmup_steps"],
            scale=train_options["learning_rate_scale"],
        )
        model.compile(
            optimizer=kt.paper_adam(
                schedule,
                gradient_accumulation_steps=plan.accumulate_steps
                if plan.accumulate_steps > 1
                else None,
            ),
            loss=kt.MaskedLabelSmoothedCrossEntropy(
                train_options["label_smoothing"], pad_id=model.config.pad_id
            ),
            metrics=[kt.MaskedAccuracy(pad_id=model.config.pad_id)],
            jit_compile=bool(train_options["jit"]),
            steps_per_execution=keras_steps_per_execution(plan, strategy, loop),
        )
    write_text_atomically(Workdir(workdir).model_config_path, model.config.to_json())
    log.info("model: %s parameters", f"{model.count_params():,}")

    evaluation = with_defaults("evaluation", config.get("evaluation") or {})
    translator = Translator(model, src_tok, tgt_tok, max_src_length=train_options["max_src_length"])
    metric = validation_metric(config, bool(corpus["valid"]))
    backup = TrainingBackup(run_dir.backup_dir)
    average = train_options["average"]
    keep_best = train_options["keep_best"] or (1 if train_options["early_stopping"] else 0)
    # The callbacks share the epoch's results and time through epoch_record: their order
    # in the list does not matter.
    epoch_record = EpochRecord()
    keeper = KeepSnapshots(
        run_dir.checkpoints_dir,
        last=train_options["average_last"] if average == "last" else 0,
        best=keep_best,
        metric=metric,
        protect=lambda: {
            name for state in backup.saved_states("snapshots") for name in state.get("kept", ())
        },
        record=epoch_record,
    )
    backup.track("snapshots", keeper)
    epoch_callbacks: list[keras.callbacks.Callback] = [keeper]
    bleu_sentences = evaluation["bleu_sentences"]
    bleu = None
    if bleu_sentences and corpus["valid"]:
        bleu = ValidationBleu(
            translator, corpus["valid"][:bleu_sentences], run_dir.logs_dir, record=epoch_record
        )
        epoch_callbacks.append(bleu)
    stopper = None
    if train_options["early_stopping"]:
        stopper = EarlyStopping(
            train_options["early_stopping"],
            train_options["patience"],
            train_options["min_delta"],
            record=epoch_record,
        )
        backup.track("early_stopping", stopper)
        epoch_callbacks.append(stopper)
    # Without max_minutes it only counts: the time used goes on across restarts either way.
    budget = TimeBudget(train_options["max_minutes"] or None, record=epoch_record)
    backup.track("time_budget", budget)
    epoch_callbacks.append(budget)
    epochs = EpochHistory(record=epoch_record)
    backup.track("history", epochs)
    epoch_callbacks.append(epochs)

    history = epochs.whole(
        train_model(
            model, strategy, train_data, valid_ds, train_options, run_dir, epoch_callbacks, backup
        )
    )
    train_seconds = budget.seconds()

    metrics: dict[str, Any] = {
        **(
            {"sources": corpus["train"].describe()}
            if isinstance(corpus["train"], SourceMix)
            else {}
        ),
        "train_seconds": round(train_seconds, 1),
        "optimizer_steps": optimizer_step(model),
        "precision": {
            "config": train_options["mixed_precision"],
            "used": precision.precision,
            "reason": precision.reason,
        },
        "history": {key: [round(float(v), 4) for v in values] for key, values in history.items()},
    }
    if isinstance(
        model.optimizer, keras.optimizers.LossScaleOptimizer
    ):  # fp16: Keras scales the loss
        metrics["loss_scale"] = float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale))
    if is_chief(strategy) and history.get("loss"):
        try:
            plot_learning_curves(history, workdir / "learning_curves.png", title=f"{workdir.name}")
        except ImportError:
            log.info("learning_curves.png not drawn: install matplotlib (the [plots] extra) for it")
    eval_split = "test" if corpus["test"] else "valid"
    pairs = corpus[eval_split][: evaluation["max_sentences"]]
    best = keeper.best_epoch()
    metrics["validation_metric"] = metric
    metrics["best_epoch"] = best
    metrics["best_value"] = None if best is None else keeper.values[best]
    metrics["stopped_early"] = stopper is not None and stopper.stopped_epoch is not None
    averaged = (
        keeper.last_epochs(train_options["average_last"])
        if average == "last"
        else keeper.best_epochs(train_options["keep_best"])
    )
    if len(averaged) > 1 and pairs:
        metrics[f"{eval_split}_last_checkpoint"] = score_split(translator, pairs)

    def measure() -> float:
        """The validation metric of the model's weights now."""
        if metric == "bleu":
            return float(bleu.score()["bleu"])
        return float(evaluator(model, strategy)(valid_ds)["loss"])

    metrics["averaging"] = choose_final_weights(model, keeper, averaged, average, metric, measure)
    if len(averaged) > 1:
        metrics["averaged_checkpoints"] = metrics["averaging"]["averaged"]
    write_through_temp(run_dir.model_path, model.save)
    if pairs:
        metrics[eval_split] = score_split(translator, pairs, show=5)
    metrics["total_seconds"] = round(time.time() - started, 1)
    metrics["cpu"] = cpu_record()  # the seconds (and a bf16 run's speed) depend on it
    write_text_atomically(run_dir.metrics_path, json.dumps(metrics, indent=2))
    backup.delete()  # finished: the next run starts afresh
    keeper.collect()  # the kept snapshots stay in W/checkpoints
    log.info("metrics: %s", json.dumps({k: v for k, v in metrics.items() if k != "history"}))
    return metrics
