"""Training configs: YAML files in ``training/configs/`` plus ``--set a.b=value``
overrides, resolved into a frozen, typed ``RunConfig``; its ``to_dict`` is what the work
directory's ``config.yaml`` holds (``keras_transformer.Workdir.save_config``).

The schema below is the one place where every key of the ``data``, ``tokenizer``,
``training`` and ``evaluation`` sections is named, typed and given its default:
``load_config`` fills in what a file leaves out (so ``--set`` reaches every key with
every config), refuses unknown keys (naming the closest known one) and values of the
wrong type, checks the settings that depend on each other, and the programs read the
resolved values as attributes (``config.training.patience``). The ``model`` section holds
``TransformerConfig`` field names (plus ``preset`` and ``init_from``); its keys are checked
here and its values by ``TransformerConfig`` when the model is built.

This module imports neither TensorFlow nor a module that does: the programs load and
check a config before TensorFlow starts.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from keras_transformer.config import TransformerConfig
from keras_transformer.training.config_checks import admits, allowed_values, describe, unknown_key
from keras_transformer.training.config_sources import (
    CORPUS_KEYS,
    CorpusSource,
    corpus_sources,
    eval_source_index,
)

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
# The source checkout this package runs from (its training/ recipes name corpora from it, as
# ../shared/...), or None for an installed package.
_CHECKOUT = Path(__file__).resolve().parents[2]
CHECKOUT = _CHECKOUT if (_CHECKOUT / "pyproject.toml").is_file() else None


def resolve_path(path: str | Path) -> Path:
    """A path a config names (``data.dir``, ``model.init_from``, ...), as the programs read it.

    Args:
        path: absolute, or relative to the current folder or, in a source checkout, to the
            checkout (where the recipes' ``../shared/...`` paths start).

    Returns:
        ``path`` if absolute; else the current folder's ``path`` if it exists, else the
        checkout's if that exists, else the current folder's (so an error names it).
    """
    path = Path(path)
    if path.is_absolute() or path.exists() or CHECKOUT is None:
        return path
    return CHECKOUT / path if (CHECKOUT / path).exists() else path


# data.prepare: train on the workdir's prepared shards when it has them (auto), prepare them
# on the first run (true), or always read the text (false).
PREPARE_MODES = ("auto", True, False)
# training.early_stopping's metrics (null: off) and training.average's choices.
VALIDATION_METRICS = (None, "bleu", "loss")
AVERAGES = ("last", "best")
# The keys of the model section: TransformerConfig's fields, its two shorthands, the preset
# they override and the finished run a model starts from.
TRANSFORMER_FIELDS = tuple(field.name for field in dataclasses.fields(TransformerConfig))
MODEL_KEYS = ("preset", "init_from", "vocab_size", "num_layers", *TRANSFORMER_FIELDS)


# --------------------------------------------------------------------------- the schema


@dataclasses.dataclass(frozen=True)
class DataSection:
    """``data``: where the corpus comes from."""

    kind: Literal["synthetic", "text", "tsv", "tfds"] = "text"
    dir: str | None = (
        None  # text: {dir}/{split}.src|.tgt (or .gz); relative: to the current folder or checkout
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
    sources: tuple[CorpusSource, ...] | None = None  # several corpora, each a CorpusSource
    eval_source: int | str = 0  # with sources: the one (index or name) valid and test come from

    def corpus(self) -> dict[str, Any]:
        """The single corpus's keys (kind, dir, synthetic, tsv, tfds), as ``load_corpus``
        reads them."""
        return {key: getattr(self, key) for key in CORPUS_KEYS}

    def eval_source_index(self) -> int:
        """The index in ``sources`` of the corpus that valid and test come from."""
        return eval_source_index(self.eval_source, self.sources)

    def to_dict(self) -> dict[str, Any]:
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        if self.sources is not None:
            values["sources"] = [source.to_dict() for source in self.sources]
        return values


@dataclasses.dataclass(frozen=True)
class TokenizerSection:
    """``tokenizer``: the SentencePiece model(s), trained on the training split."""

    vocab_size: int = 8000
    shared: bool = True  # one model for both languages
    model_type: Literal["unigram", "bpe"] = "unigram"
    max_sentences: int | None = (
        500_000  # a random sample a model (= tokenization.DEFAULT_MAX_SENTENCES)
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ModelSection:
    """``model``: a ``TransformerConfig`` preset and the fields that override it, or the
    finished run whose model a run starts from (``init_from``).

    The keys are checked at load (``MODEL_KEYS``); the values by ``TransformerConfig``
    when the model is built (``options``)."""

    preset: str | None = None  # null: base
    init_from: str | None = None  # a finished workdir whose model and tokenizer are used
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # field: value

    def options(self) -> dict[str, Any]:
        """``TransformerConfig.from_preset``'s overrides."""
        return dict(self.overrides)

    def to_dict(self) -> dict[str, Any]:
        return {
            **({} if self.preset is None else {"preset": self.preset}),
            **self.overrides,
            **({} if self.init_from is None else {"init_from": self.init_from}),
        }


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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class EvaluationSection:
    """``evaluation``: validation BLEU during training and the final test scores."""

    bleu_sentences: int = 0  # validation sentences translated (greedy) after each epoch; 0: none
    max_sentences: int | None = None  # test sentences scored at the end; null: all

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SECTIONS = {
    "data": DataSection,
    "tokenizer": TokenizerSection,
    "training": TrainingSection,
    "evaluation": EvaluationSection,
}
SECTION_ORDER = ("data", "tokenizer", "model", "training", "evaluation")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A training run's resolved config: every section typed, checked and complete.

    Made by ``load_config`` (a file and ``--set`` overrides) or ``RunConfig.from_dict``
    (a saved ``config.yaml``); ``to_dict`` gives the plain mapping that is saved.
    """

    data: DataSection
    tokenizer: TokenizerSection
    model: ModelSection
    training: TrainingSection
    evaluation: EvaluationSection

    @classmethod
    def from_dict(
        cls,
        values: Mapping[str, Any],
        where: str = "the config",
        origins: Mapping[str, str] | None = None,
    ) -> RunConfig:
        """Makes the config of a mapping of sections, as a YAML file or ``to_dict`` holds it.

        Args:
            values: the sections; a missing key takes the schema's default.
            where: what ``values`` was read from, for the messages.
            origins: ``section.key`` → the ``--set`` override that gave its value, for the
                messages.

        Returns:
            The ``RunConfig``.

        Raises:
            ValueError: one line naming the first unknown key (and the closest known one),
                missing required key, value of the wrong type or inconsistent setting.
        """
        if not isinstance(values, Mapping):
            raise ValueError(
                f"{where} must hold a mapping of sections (data, tokenizer, model, training, ...)."
            )
        for name in values:
            if name not in SECTION_ORDER:
                raise ValueError(unknown_key(where, str(name), SECTION_ORDER, "section"))
        sections = {
            name: _section(name, schema, values.get(name) or {}, where, origins or {})
            for name, schema in SECTIONS.items()
        }
        config = cls(model=_model_section(values.get("model") or {}, where), **sections)
        config.check()
        return config

    def to_dict(self) -> dict[str, Any]:
        """The config as plain YAML-serializable dicts, one per section (``config.yaml``)."""
        return {name: getattr(self, name).to_dict() for name in SECTION_ORDER}

    def replace(self, section: str, **changes: Any) -> RunConfig:
        """The config with ``changes`` made to ``section``, checked again.

        Raises:
            ValueError: a changed value of the wrong type, or an inconsistent setting.
        """
        values = self.to_dict()
        values[section] = {**values[section], **changes}
        return RunConfig.from_dict(values, where=f"the {section} section")

    def check(self) -> None:
        """Raise ``ValueError`` naming the first setting that contradicts another."""
        check_training(self.training, self.evaluation)
        check_data(self.data)

    def needs_validation(self) -> str | None:
        """The setting that needs a validation split (early stopping, the best epochs), or
        ``None``."""
        options = self.training
        if options.early_stopping:
            return f"training.early_stopping={options.early_stopping}"
        if options.keep_best is not None:
            return f"training.keep_best={options.keep_best}"
        if options.average == "best":
            return "training.average=best"
        return None

    def validation_metric(self, has_valid: bool) -> str | None:
        """The metric that ranks epochs (the best epoch, ``keep_best``, the final check of an
        average): ``training.early_stopping``'s when set, else ``bleu`` when validation BLEU
        runs, else ``loss``; ``None`` without a validation split."""
        if not has_valid:
            return None
        if self.training.early_stopping:
            return self.training.early_stopping
        return "bleu" if self.evaluation.bleu_sentences else "loss"

    def to_yaml(self) -> str:
        """``to_dict`` as YAML, in the sections' order."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def section_defaults(section: str) -> dict[str, Any]:
    """The schema's default of every key of ``section`` that has one."""
    return {
        field.name: field.default
        for field in dataclasses.fields(SECTIONS[section])
        if field.default is not dataclasses.MISSING
    }


# --------------------------------------------------------------------------- checking values


def _section(
    name: str, schema, options: Any, where: str, origins: Mapping[str, str]
) -> DataSection | TokenizerSection | TrainingSection | EvaluationSection:
    """Section ``name`` of a config: ``options`` checked against ``schema``, the defaults
    filled in."""
    if not isinstance(options, Mapping):
        raise ValueError(f"{where}: {name} must be a mapping of keys, got {options!r}.")
    fields = {field.name: field for field in dataclasses.fields(schema)}
    for key in options:
        if key not in fields:
            raise ValueError(unknown_key(where, f"{name}.{key}", list(fields)))
    hints = typing.get_type_hints(schema)
    values = {**section_defaults(name), **options}
    for key in fields:
        if key not in values:
            raise ValueError(f"{where}: {name}.{key} is required (no default); set it.")
        if key == "sources":
            continue  # corpus_sources checks them
        allowed = allowed_values(hints[key])
        if not admits(allowed, values[key]):
            dotted = f"{name}.{key}"
            raise ValueError(
                f"{dotted}={values[key]!r}: expected {describe(allowed)} "
                f"({origins.get(dotted, where)})"
            )
    if name == "data":
        values["sources"] = corpus_sources(values)
    return schema(**values)


def _model_section(options: Any, where: str) -> ModelSection:
    """The ``model`` section: its keys checked (``MODEL_KEYS``)."""
    if not isinstance(options, Mapping):
        raise ValueError(f"{where}: model must be a mapping of keys, got {options!r}.")
    for key in options:
        if key not in MODEL_KEYS:
            raise ValueError(unknown_key(where, f"model.{key}", MODEL_KEYS))
    overrides = {key: value for key, value in options.items() if key not in ("preset", "init_from")}
    for key in ("preset", "init_from"):
        if options.get(key) is not None and not isinstance(options[key], str):
            raise ValueError(f"{where}: model.{key}={options[key]!r}: use a string.")
    return ModelSection(
        preset=options.get("preset"), init_from=options.get("init_from"), overrides=overrides
    )


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


def load_config(name_or_path: str, overrides: Sequence[str] = ()) -> RunConfig:
    """Reads a config file, applies ``section.key=value`` overrides and checks the result.

    Values are parsed as YAML (``true``, ``3``, ``1e-3``, ``[1, 2]``). Only keys of the
    schema can be set, so a typo fails instead of being ignored.

    Args:
        name_or_path: a name in ``training/configs`` (``demo``) or a YAML path.
        overrides: ``section.key=value`` strings, applied in order (``--set``).

    Returns:
        The resolved ``RunConfig``.

    Raises:
        ValueError: one line naming the unknown config, the unreadable file, the unknown
            key (and the closest known one), the value of the wrong type (and the type
            expected) or the inconsistent setting.
    """
    path = config_path(name_or_path)
    try:
        with open(path, encoding="utf-8") as handle:
            values = yaml.safe_load(handle) or {}
    except yaml.YAMLError as error:
        first = str(error).strip().splitlines()[0]
        raise ValueError(f"{path} is not valid YAML ({first}).") from error
    if not isinstance(values, dict):
        raise ValueError(
            f"{path} must hold a mapping of sections (data, tokenizer, model, training, ...)."
        )
    origins: dict[str, str] = {}
    for override in overrides:
        apply_override(values, override, origins)
    return RunConfig.from_dict(values, str(path), origins)


def apply_override(values: dict[str, Any], override: str, origins: dict[str, str] | None = None):
    """Sets the key that ``override`` (``section.key=value``) names in the config mapping
    ``values``.

    Args:
        values: a config's sections as plain dicts (a YAML file's), changed in place.
        override: ``section.key=value`` (or ``section.key.inner=value`` inside a mapping);
            the value is parsed as YAML.
        origins: where ``section.key`` → ``override`` is recorded, for the messages of
            ``RunConfig.from_dict``.

    Raises:
        ValueError: one line naming a malformed override, an unknown section or key (and
            the closest known one) or a value that is not YAML.
    """
    where = f"--set {override}"
    if "=" not in override:
        raise ValueError(f"{where}: write it as section.key=value, e.g. training.epochs=3.")
    dotted, raw = override.split("=", 1)
    keys = dotted.strip().split(".")
    if keys[0] not in SECTION_ORDER:
        raise ValueError(unknown_key(where, keys[0], SECTION_ORDER, "section"))
    if len(keys) > 1:
        known = MODEL_KEYS if keys[0] == "model" else [f.name for f in fields_of(keys[0])]
        if keys[1] not in known:
            raise ValueError(unknown_key(where, ".".join(keys[:2]), known))
    node = values
    for depth, key in enumerate(keys[:-1], start=1):
        inner = node.get(key)
        if inner is None and depth == 1:
            inner = {}  # a section the file leaves out (or empty)
        if not isinstance(inner, dict):
            raise ValueError(
                f"{where}: {'.'.join(keys[:depth])} is not a mapping here; set it whole "
                f"({'.'.join(keys[:depth])}={{...}})."
            )
        node[key] = node = dict(inner)
    try:
        node[keys[-1]] = yaml.safe_load(raw)
    except yaml.YAMLError as error:
        first = str(error).strip().splitlines()[0]
        raise ValueError(f"{where}: the value is not valid YAML ({first}); quote it.") from error
    if origins is not None:
        origins[".".join(keys[:2])] = where


def fields_of(section: str) -> tuple[dataclasses.Field, ...]:
    """The schema's fields of ``section`` (one of ``SECTIONS``)."""
    return dataclasses.fields(SECTIONS[section])


# --------------------------------------------------------------------------- settings together


def check_early_stopping(metric: str | None, patience: int, min_delta: float) -> None:
    """Check early stopping's settings (the config's and ``EarlyStopping``'s one check).

    Args:
        metric: ``"bleu"``, ``"loss"`` or ``None`` (off).
        patience: the validations without improvement that end the run.
        min_delta: the least change that counts as an improvement.

    Raises:
        ValueError: one of them is out of range, named as its config key.
    """
    if metric not in VALIDATION_METRICS:
        raise ValueError(f"training.early_stopping={metric!r}: expected bleu, loss or null.")
    if patience < 1:
        raise ValueError(f"training.patience={patience!r}: use an integer >= 1.")
    if min_delta < 0:
        raise ValueError(f"training.min_delta={min_delta!r}: use a number >= 0.")


def check_training(training: TrainingSection, evaluation: EvaluationSection) -> None:
    """Raise ``ValueError`` naming the first inconsistent early-stopping, snapshot or
    averaging setting (the types are checked already)."""
    check_early_stopping(training.early_stopping, training.patience, training.min_delta)
    for name in ("keep_best", "average_last"):
        value = getattr(training, name)
        if value is not None and value < 1:
            raise ValueError(f"training.{name}={value!r}: use an integer >= 1.")
    if training.early_stopping == "bleu" and not evaluation.bleu_sentences:
        raise ValueError(
            "training.early_stopping=bleu needs validation BLEU: set evaluation.bleu_sentences "
            "> 0 (e.g. 500), or use training.early_stopping=loss."
        )
    if training.average == "best" and training.keep_best is None:
        raise ValueError(
            "training.average=best averages the training.keep_best best epochs: set "
            "training.keep_best (e.g. 3)."
        )


def check_data(data: DataSection) -> None:
    """Raise ``ValueError`` for a ``data.eval_source`` without ``data.sources``."""
    if data.sources is None and data.eval_source != 0:
        raise ValueError(
            f"data.eval_source={data.eval_source!r} picks one of several data.sources; this "
            "config has one corpus (no data.sources)."
        )


# --------------------------------------------------------------------------- several corpora
