"""Training configs: YAML files in ``training/configs/`` plus ``--set a.b=value``
overrides; the resolved config is saved in the work directory
(``keras_transformer.Workdir.save_config``).

The schema below is the one place where every key of the ``data``, ``tokenizer``,
``training`` and ``evaluation`` sections is named, typed and given its default:
``load_config`` fills in what a file leaves out (so ``--set`` reaches every key with
every config), refuses unknown keys and values of the wrong type, and the programs
read the resolved values. The ``model`` section holds ``TransformerConfig`` fields
(plus ``preset``) and is validated there.
"""

import dataclasses
import math
import types
import typing
import unicodedata
from pathlib import Path
from typing import Any, Literal, Union

import yaml

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
# data.prepare: train on the workdir's prepared shards when it has them (auto), prepare them
# on the first run (true), or always read the text (false).
PREPARE_MODES = ("auto", True, False)


# --------------------------------------------------------------------------- the schema


@dataclasses.dataclass(frozen=True)
class DataSection:
    """``data``: where the corpus comes from."""

    kind: Literal["synthetic", "text", "tsv", "tfds"] = "text"
    dir: str | None = (
        None  # text: {dir}/{split}.src|.tgt (or .gz); a relative path from the checkout
    )
    prepare: Literal["auto", True, False] = (
        "auto"  # train on W/prepared shards: when present | make them | never
    )
    examples_per_shard: int = 100_000  # per prepared shard file; one file per worker at least
    synthetic: dict | None = (
        None  # kind synthetic: {train, valid, test, seed} sizes of the demo pair
    )
    tsv: dict | None = None  # kind tsv: {train, valid, test} file paths (source<TAB>target)
    tfds: dict | None = None  # kind tfds: {name, train, valid, test, src_key, tgt_key, data_dir}
    sources: list | None = None  # several corpora: [{kind, dir, ..., weight, tag, name}, ...]
    eval_source: int | str = 0  # with sources: the one (index or name) valid and test come from


@dataclasses.dataclass(frozen=True)
class TokenizerSection:
    """``tokenizer``: the SentencePiece model(s), trained on the training split."""

    vocab_size: int = 8000
    shared: bool = True  # one model for both languages
    model_type: Literal["unigram", "bpe"] = "unigram"
    max_sentences: int | None = (
        500_000  # a random sample a model (= tokenization.DEFAULT_MAX_SENTENCES)
    )


@dataclasses.dataclass(frozen=True)
class TrainingSection:
    """``training``: the run. Steps are optimizer updates."""

    max_src_length: int  # subwords; longer training pairs are dropped
    max_tgt_length: int
    seed: int = 0
    strategy: Literal["auto", "default", "mirrored", "multi_worker", "tpu"] = "auto"
    loop: Literal["auto", "fit", "custom"] = "auto"  # auto: custom under multi_worker, else fit
    mixed_precision: Literal["auto", "fp32", "bf16", "fp16"] = "fp32"
    native_ops: bool = False  # the C++ LayerNorm in CPU training
    jit: bool = False  # XLA
    batch_tokens: int | None = None  # tokens a side a batch (length buckets); or batch_size
    batch_size: int | None = None  # sentences a batch
    accumulate_steps: int = 1  # micro-batches an update
    shuffle_buffer: int | None = None  # examples; null: the whole split (small corpora only)
    cache: Literal["auto"] | bool | str = (
        "auto"  # tokenized train split in memory (auto: up to 1M pairs)
    )
    static_shapes: bool = False  # pad every batch to the length limits (TPU / XLA)
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0  # times the paper's d_model^-0.5 schedule
    label_smoothing: float = 0.1
    epochs: int | None = (
        None  # with steps_per_epoch; the first of epochs and max_steps reached ends the run
    )
    max_steps: int | None = None
    max_minutes: float | None = None  # stop after the last epoch that fits (all restarts)
    steps_per_epoch: int | None = (
        None  # validation, BLEU, logs and averaging checkpoints at each epoch end
    )
    steps_per_execution: int = 1
    average_last: int = 1  # epochs averaged at the end (average: last)
    average: Literal["last", "best"] = "last"  # average the last average_last or keep_best best
    keep_best: int | None = None  # the K best epoch snapshots kept (by the validation metric)
    early_stopping: Literal["bleu", "loss"] | None = None  # the validation metric; null: off
    patience: int = 3  # validations without improvement that end the run (early_stopping)
    min_delta: float = 0.0  # the smallest change of the metric that counts as an improvement
    backup_every_steps: Literal["epoch"] | int = "epoch"
    verbose: int = 2


@dataclasses.dataclass(frozen=True)
class EvaluationSection:
    """``evaluation``: validation BLEU during training and the final test scores."""

    bleu_sentences: int = 0  # validation sentences translated (greedy) after each epoch; 0: none
    max_sentences: int | None = None  # test sentences scored at the end; null: all


SECTIONS = {
    "data": DataSection,
    "tokenizer": TokenizerSection,
    "training": TrainingSection,
    "evaluation": EvaluationSection,
}


def section_defaults(section: str) -> dict[str, Any]:
    """The schema's default of every key of ``section`` that has one."""
    return {
        field.name: field.default
        for field in dataclasses.fields(SECTIONS[section])
        if field.default is not dataclasses.MISSING
    }


def with_defaults(section: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` (a section, possibly partial) over the schema's defaults."""
    return {**section_defaults(section), **options}


def _allowed(annotation) -> list:
    """The plain types and literal values an annotation admits."""
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:  # Optional[X] or X | None
        return [item for argument in typing.get_args(annotation) for item in _allowed(argument)]
    if origin is Literal:
        return [("literal", value) for value in typing.get_args(annotation)]
    return [annotation]


def _admits(allowed: list, value) -> bool:
    for item in allowed:
        if isinstance(item, tuple):
            if value == item[1] and type(value) is type(item[1]):
                return True
        elif item is type(None):
            if value is None:
                return True
        elif item is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return True
        elif item is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return True
        elif isinstance(value, item):
            return True
    return False


def _describe(allowed: list) -> str:
    def literal(value) -> str:
        return (
            {True: "true", False: "false", None: "null"}.get(value, value)
            if not isinstance(value, str)
            else value
        )

    names = [
        literal(item[1])
        if isinstance(item, tuple)
        else {
            type(None): "null",
            int: "an integer",
            float: "a number",
            bool: "true or false",
            str: "a string",
            dict: "a mapping",
            list: "a list",
        }.get(item, getattr(item, "__name__", str(item)))
        for item in allowed
    ]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def resolve_config(config: dict[str, Any], where: str = "the config") -> dict[str, Any]:
    """``config`` with every schema key present (defaults filled in), or a ``ValueError``
    naming the first unknown key, missing required key or value of the wrong type."""
    unknown = sorted(set(config) - set(SECTIONS) - {"model"})
    if unknown:
        raise ValueError(
            f"{where}: unknown section(s) {unknown}; the sections are "
            f"{sorted([*SECTIONS, 'model'])}."
        )
    resolved = dict(config)
    resolved["model"] = dict(config.get("model") or {})
    for section, schema in SECTIONS.items():
        options = config.get(section) or {}
        if not isinstance(options, dict):
            raise ValueError(f"{where}: {section} must be a mapping of keys, got {options!r}.")
        fields = {field.name: field for field in dataclasses.fields(schema)}
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise ValueError(
                f"{where}: no key(s) {unknown} in section {section!r}; known keys: "
                f"{sorted(fields)}."
            )
        hints = typing.get_type_hints(schema)
        values = with_defaults(section, options)
        for name in fields:
            if name not in values:
                raise ValueError(f"{where}: {section}.{name} is required (no default).")
            allowed = _allowed(hints[name])
            if not _admits(allowed, values[name]):
                raise ValueError(
                    f"{where}: {section}.{name}={values[name]!r}: use {_describe(allowed)}."
                )
        resolved[section] = values
    return resolved


# --------------------------------------------------------------------------- files and overrides


def config_path(name_or_path: str) -> Path:
    """``demo`` → ``training/configs/demo.yaml``; an existing path is used as is."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ValueError(f"Config file {path} does not exist.")
        return path
    candidate = CONFIG_DIR / f"{name_or_path}.yaml"
    if not candidate.exists():
        known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
        raise ValueError(f"Unknown config {name_or_path!r}; use one of {known} or a YAML path.")
    return candidate


def load_config(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The config as nested dicts, every schema key resolved, with each
    ``section.key=value`` override applied.

    Values are parsed as YAML (``true``, ``3``, ``1e-3``, ``[1, 2]``). Only keys of
    the schema can be set, so a typo fails instead of being ignored; keys under
    ``model`` are free (they are TransformerConfig fields, validated there).
    """
    path = config_path(name_or_path)
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"{path} is not valid YAML: {error}") from error
    if not isinstance(config, dict):
        raise ValueError(
            f"{path} must hold a mapping of sections (data, tokenizer, model, training, ...)."
        )
    config = resolve_config(config, str(path))
    for override in overrides:
        apply_override(config, override)
    return resolve_config(config, "--set")


def apply_override(config: dict[str, Any], override: str) -> None:
    if "=" not in override:
        raise ValueError(f"Override {override!r} must look like section.key=value.")
    dotted, raw = override.split("=", 1)
    keys = dotted.strip().split(".")
    node = config
    for depth, key in enumerate(keys[:-1]):
        if not isinstance(node.get(key), dict):
            raise ValueError(
                f"Override {override!r}: {'.'.join(keys[: depth + 1])!r} is not a config section."
            )
        node = node[key]
    last = keys[-1]
    if last not in node and keys[0] != "model":
        raise ValueError(
            f"Override {override!r}: no key {last!r} in section "
            f"{'.'.join(keys[:-1]) or '<root>'!r}; "
            f"known keys: {sorted(node)}."
        )
    try:
        node[last] = yaml.safe_load(raw)
    except yaml.YAMLError as error:
        raise ValueError(
            f"Override {override!r}: the value is not valid YAML ({error})."
        ) from error


def check_prepare_mode(config: dict[str, Any]) -> None:
    """Raise ``ValueError`` unless ``data.prepare`` is one of ``PREPARE_MODES``."""
    mode = with_defaults("data", config.get("data") or {})["prepare"]
    if not (mode == "auto" or mode is True or mode is False):
        raise ValueError(
            f"data.prepare={mode!r}: use auto (the prepared shards when the workdir has them), "
            "true (prepare them on the first run) or false."
        )


def check_training(config: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the first inconsistent early-stopping, snapshot or
    averaging setting of ``config`` (types are ``resolve_config``'s)."""
    options = with_defaults("training", config.get("training") or {})
    evaluation = with_defaults("evaluation", config.get("evaluation") or {})
    for name in ("patience", "keep_best", "average_last"):
        value = options[name]
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise ValueError(f"training.{name}={value!r}: use an integer >= 1.")
    min_delta = options["min_delta"]
    if isinstance(min_delta, bool) or not isinstance(min_delta, (int, float)) or min_delta < 0:
        raise ValueError(f"training.min_delta={min_delta!r}: use a number >= 0.")
    metric = options["early_stopping"]
    if metric not in VALIDATION_METRICS:
        raise ValueError(
            f"training.early_stopping={metric!r}: use bleu (validation BLEU), loss (validation "
            "loss) or null (off)."
        )
    if metric == "bleu" and not evaluation["bleu_sentences"]:
        raise ValueError(
            "training.early_stopping=bleu needs validation BLEU: set evaluation.bleu_sentences "
            "> 0 (e.g. 500), or use training.early_stopping=loss."
        )
    if options["average"] not in AVERAGES:
        raise ValueError(
            f"training.average={options['average']!r}: use last (the last average_last epochs) "
            "or best (the keep_best best ones)."
        )
    if options["average"] == "best" and options["keep_best"] is None:
        raise ValueError(
            "training.average=best averages the training.keep_best best epochs: set "
            "training.keep_best (e.g. 3)."
        )


# training.early_stopping's metrics (null: off) and training.average's choices.
VALIDATION_METRICS = (None, "bleu", "loss")
AVERAGES = ("last", "best")


def needs_validation(config: dict[str, Any]) -> str | None:
    """The setting that needs a validation split (early stopping, the best epochs), or ``None``."""
    options = with_defaults("training", config.get("training") or {})
    if options["early_stopping"]:
        return f"training.early_stopping={options['early_stopping']}"
    if options["keep_best"] is not None:
        return f"training.keep_best={options['keep_best']}"
    if options["average"] == "best":
        return "training.average=best"
    return None


def validation_metric(config: dict[str, Any], has_valid: bool) -> str | None:
    """The metric that ranks epochs (the best epoch, ``keep_best``, the final check of an
    average): ``training.early_stopping``'s when set, else ``bleu`` when validation BLEU
    runs, else ``loss``; ``None`` without a validation split."""
    if not has_valid:
        return None
    options = with_defaults("training", config.get("training") or {})
    evaluation = with_defaults("evaluation", config.get("evaluation") or {})
    if options["early_stopping"]:
        return options["early_stopping"]
    return "bleu" if evaluation["bleu_sentences"] else "loss"


# --------------------------------------------------------------------------- several corpora

# The keys of one corpus in data.sources: those of a single-corpus data section, plus its share
# of the training pairs (weight), the token put before its source sentences (tag) and a name.
CORPUS_KEYS = ("kind", "dir", "synthetic", "tsv", "tfds")
SOURCE_KEYS = (*CORPUS_KEYS, "weight", "tag", "name")


def _source_name(source: dict[str, Any], index: int) -> str:
    """A corpus's ``name``, or one made from where it is read."""
    if source.get("name"):
        return str(source["name"])
    for path in (source.get("dir"), (source.get("tsv") or {}).get("train")):
        if path:
            return Path(str(path)).name
    if (source.get("tfds") or {}).get("name"):
        return str(source["tfds"]["name"])
    return f"{source.get('kind', 'text')}{index}"


def check_tag(tag: Any, where: str) -> None:
    """Raise ``ValueError`` unless ``tag`` can be a reserved piece of the tokenizer: a
    non-empty string without whitespace (a tag is one piece, written before a sentence)."""
    if not isinstance(tag, str) or not tag:
        raise ValueError(f"{where}={tag!r}: a tag is a non-empty string such as '<bt>' or '<fr>'.")
    if any(character.isspace() for character in tag) or "\u2581" in tag:
        raise ValueError(
            f"{where}={tag!r}: a tag is one piece of the tokenizer and cannot hold whitespace "
            "(or '\u2581'); use e.g. '<bt>'."
        )
    if unicodedata.normalize("NFKC", tag) != tag:
        raise ValueError(
            f"{where}={tag!r}: the tokenizer's NFKC normalisation changes it, so it would not stay "
            f"one piece; write it as {unicodedata.normalize('NFKC', tag)!r}."
        )


def corpus_sources(data: dict[str, Any]) -> list[dict[str, Any]] | None:
    """``data.sources`` checked, each corpus with its defaults (``kind: text``, ``weight: 1``,
    ``tag: null``, a ``name``), or ``None`` for a single-corpus ``data`` section.

    Args:
        data: the ``data`` section.

    Returns:
        The corpora, in order, or ``None`` without ``data.sources``.

    Raises:
        ValueError: ``sources`` is not a non-empty list of mappings, a corpus has an unknown
            key, a value of the wrong type, a weight that is not a positive number or a tag
            that cannot be one piece, or ``eval_source`` names no corpus.
    """
    sources = data.get("sources")
    if sources is None:
        return None
    if not isinstance(sources, list) or not sources:
        raise ValueError(
            f"data.sources={sources!r}: list one corpus or more, e.g. [{{kind: text, dir: DIR, "
            "weight: 1}}, {kind: text, dir: DIR2, weight: 2, tag: '<bt>'}]; or drop the key for "
            "a single corpus."
        )
    hints = typing.get_type_hints(DataSection)
    resolved = []
    for index, source in enumerate(sources):
        where = f"data.sources[{index}]"
        if not isinstance(source, dict):
            raise ValueError(
                f"{where}={source!r}: each corpus is a mapping such as "
                "{kind: text, dir: DIR, weight: 1}."
            )
        unknown = sorted(set(source) - set(SOURCE_KEYS))
        if unknown:
            raise ValueError(f"{where}: no key(s) {unknown}; known keys: {sorted(SOURCE_KEYS)}.")
        for key in CORPUS_KEYS:
            if key in source:
                allowed = _allowed(hints[key])
                if not _admits(allowed, source[key]):
                    raise ValueError(f"{where}.{key}={source[key]!r}: use {_describe(allowed)}.")
        weight = source.get("weight", 1)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not math.isfinite(weight)
            or weight <= 0
        ):
            raise ValueError(
                f"{where}.weight={weight!r}: use a positive number (the corpus's share of the "
                "sampled training pairs, relative to the other weights)."
            )
        tag = source.get("tag")
        if tag is not None:
            check_tag(tag, f"{where}.tag")
        if source.get("name") is not None and not isinstance(source["name"], str):
            raise ValueError(f"{where}.name={source['name']!r}: use a string.")
        resolved.append(
            {
                "kind": "text",
                **{key: source[key] for key in CORPUS_KEYS if key in source},
                "weight": float(weight),
                "tag": tag,
                "name": _source_name(source, index),
            }
        )
    eval_source_index(data, resolved)
    return resolved


def eval_source_index(data: dict[str, Any], sources: list[dict[str, Any]]) -> int:
    """The index in ``sources`` of the corpus that ``data.eval_source`` names (an index, or a
    corpus's ``name``); the first by default. Raises ``ValueError`` when it names none."""
    chosen = data.get("eval_source", 0)
    if isinstance(chosen, int) and not isinstance(chosen, bool):
        if not 0 <= chosen < len(sources):
            raise ValueError(
                f"data.eval_source={chosen}: use an index of data.sources (0 to "
                f"{len(sources) - 1}) or a corpus's name."
            )
        return chosen
    names = [source["name"] for source in sources]
    if names.count(chosen) != 1:
        raise ValueError(
            f"data.eval_source={chosen!r}: "
            + ("no corpus has that name" if chosen not in names else "several corpora have it")
            + f"; the names are {names} (or use an index)."
        )
    return names.index(chosen)


def check_data(config: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the first bad setting of ``data.sources`` (``corpus_sources``)
    or a ``data.eval_source`` without ``data.sources``."""
    data = with_defaults("data", config.get("data") or {})
    if corpus_sources(data) is None and data["eval_source"] != 0:
        raise ValueError(
            f"data.eval_source={data['eval_source']!r} picks one of several data.sources; this "
            "config has one corpus (no data.sources)."
        )
