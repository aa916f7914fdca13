"""A training run's directory, and a trained model with what it needs to translate.

``kt train --workdir W`` writes a workdir; everything that
reads one (evaluation, decoding, the exporters, ``Translator.from_workdir``)
goes through ``Workdir``, the one place that knows its layout::

    W/config.yaml          the resolved training config
    W/tokenizer/           spm_shared.model, or spm_src.model + spm_tgt.model; or, for a
                           model imported from Marian (OPUS-MT), the checkpoint's
                           source.spm, target.spm, vocab.json (target_vocab.json),
                           tokenizer_config.json
    W/model.keras          the final (averaged) model
    W/model_config.json    its TransformerConfig, readable without loading the model
    W/metrics.json         history and scores of the run
    W/backup/              the resumable state while training runs
    W/backup.previous/     the backup before it, resumed from when W/backup cannot be read
    W/checkpoints/         epoch snapshots: the last and the best epochs', for averaging
    W/logs/                TensorBoard summaries
    W/prepared/            the training split tokenized into shuffled shards (optional)

``TrainedModel`` is a model with its tokenizers and length limits: what the
translators and exporters take, whether it came from a workdir or from a
model trained in a notebook.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import Any

import keras
import yaml

from keras_transformer.config import TransformerConfig
from keras_transformer.files import write_text_atomically
from keras_transformer.precision import AUTO, PRECISIONS, with_precision
from keras_transformer.tokenization import (
    MARIAN_SOURCE_SPM,
    MARIAN_TARGET_SPM,
    MARIAN_TARGET_VOCAB,
    MARIAN_VOCAB,
    MarianSubwordTokenizer,
    SubwordTokenizer,
    load_marian_tokenizers,
    tokenizer_paths,
)

PathLike = str | os.PathLike


class WorkdirError(ValueError):
    """A path that is not (yet) a usable workdir; the message says what is missing."""


@dataclasses.dataclass(frozen=True)
class TrainedModel:
    """A ``Transformer`` with its tokenizers and the lengths it was trained for.

    What the translators and exporters take, whether it came from a workdir
    (``Workdir.load``) or from a model trained in a notebook.

    Args:
        model: the trained, built ``keras_transformer.Transformer``.
        src_tokenizer: its source ``SubwordTokenizer``, or the source
            ``MarianSubwordTokenizer`` of an imported Marian model.
        tgt_tokenizer: its target tokenizer (the same object as
            ``src_tokenizer`` for a shared SentencePiece model).
        max_src_length: sources are truncated to this many subwords
            (default: the model's ``max_length``).
        max_tgt_length: the longest target trained on (default: the model's
            ``max_length`` minus one, for EOS).

    Raises:
        ValueError: a length limit is outside ``[1, model.config.max_length]``.

    Example (after ``model.fit`` in a notebook)::

        trained = kt.TrainedModel(model, src_tok, tgt_tok, max_src_length=64)
        kt.exporters.export_saved_model(trained, "exports/mine")
    """

    model: Any
    src_tokenizer: SubwordTokenizer | MarianSubwordTokenizer
    tgt_tokenizer: SubwordTokenizer | MarianSubwordTokenizer
    max_src_length: int | None = None
    max_tgt_length: int | None = None

    def __post_init__(self):
        limit = self.model.config.max_length
        if self.max_src_length is None:
            object.__setattr__(self, "max_src_length", limit)
        if self.max_tgt_length is None:
            object.__setattr__(self, "max_tgt_length", limit - 1)
        for name in ("max_src_length", "max_tgt_length"):
            value = getattr(self, name)
            if not 1 <= int(value) <= limit:
                raise ValueError(
                    f"{name}={value} must be between 1 and the model's max_length ({limit})."
                )
            object.__setattr__(self, name, int(value))

    @property
    def shared_vocabulary(self) -> bool:
        """Whether an id means the same piece on both sides.

        A Marian model has one vocabulary but a SentencePiece model per language:
        its vocabulary is shared, its tokenizer model is not (``shared_tokenizer_model``).
        """
        src_vocabulary = getattr(self.src_tokenizer, "vocabulary", None)
        tgt_vocabulary = getattr(self.tgt_tokenizer, "vocabulary", None)
        if src_vocabulary is not None or tgt_vocabulary is not None:
            return src_vocabulary == tgt_vocabulary
        return self.shared_tokenizer_model

    @property
    def shared_tokenizer_model(self) -> bool:
        """Whether both sides are split by the same SentencePiece model (one file serves both)."""
        return self.src_tokenizer.model_bytes == self.tgt_tokenizer.model_bytes


@dataclasses.dataclass(frozen=True)
class Workdir:
    """The layout of a training run's directory, and loading what the run wrote.

    ``Workdir(path)`` does not touch the disk; ``load`` checks that the run
    finished and raises ``WorkdirError`` naming what is missing. The layout
    is in the module's docstring.

    Args:
        path: the run's folder (``--workdir`` of ``kt train``).

    Example:
        >>> run = Workdir("runs/demo")
        >>> run.model_path.as_posix()
        'runs/demo/model.keras'
    """

    path: Path

    def __init__(self, path: PathLike):
        object.__setattr__(self, "path", Path(path))

    # The files and folders of a run.
    @property
    def config_path(self) -> Path:
        """The resolved training config, ``W/config.yaml``."""
        return self.path / "config.yaml"

    @property
    def model_path(self) -> Path:
        """The final (averaged) model, ``W/model.keras``."""
        return self.path / "model.keras"

    @property
    def model_config_path(self) -> Path:
        """The model's ``TransformerConfig`` as JSON, ``W/model_config.json``."""
        return self.path / "model_config.json"

    @property
    def tokenizer_dir(self) -> Path:
        """The folder of the tokenizer models, ``W/tokenizer/``."""
        return self.path / "tokenizer"

    @property
    def metrics_path(self) -> Path:
        """The run's history and scores, ``W/metrics.json``."""
        return self.path / "metrics.json"

    @property
    def backup_dir(self) -> Path:
        """The resumable state while training runs, ``W/backup/``."""
        return self.path / "backup"

    @property
    def checkpoints_dir(self) -> Path:
        """The last epochs' weights, for averaging, ``W/checkpoints/``."""
        return self.path / "checkpoints"

    @property
    def logs_dir(self) -> Path:
        """The TensorBoard summaries, ``W/logs/``."""
        return self.path / "logs"

    @property
    def prepared_dir(self) -> Path:
        """The prepared training split (``prepare_shards``), ``W/prepared/``."""
        return self.path / "prepared"

    def worker(self, task_id: int) -> Workdir:
        """Gives the folder where a non-chief worker of a multi-worker run writes its outputs.

        Args:
            task_id: the worker's task index.

        Returns:
            The worker's ``Workdir``, ``W/worker_{task_id}``.
        """
        return Workdir(self.path / f"worker_{task_id}")

    # The resolved config.
    def save_config(self, config: dict[str, Any]) -> None:
        """Writes the resolved training config atomically, and keeps it as ``config``.

        Args:
            config: the config, a YAML-serializable mapping.
        """
        write_text_atomically(
            self.config_path, yaml.safe_dump(copy.deepcopy(config), sort_keys=False)
        )
        self.__dict__["config"] = copy.deepcopy(config)

    @functools.cached_property
    def config(self) -> dict[str, Any]:
        """The run's ``config.yaml``, read once (a run writes it when it starts, then never again).

        Raises:
            WorkdirError: the file is missing or holds no mapping.
        """
        if not self.config_path.is_file():
            raise WorkdirError(
                f"{self.path} is not a training workdir: {self.config_path} not found "
                "(train one with kt train --config C --workdir W)."
            )
        config = yaml.safe_load(self.config_path.read_text(encoding="utf-8")) or {}
        if not isinstance(config, dict):
            raise WorkdirError(f"{self.config_path} does not hold a config (a YAML mapping).")
        return config

    @property
    def is_marian(self) -> bool:
        """Whether ``W/tokenizer/`` holds a Marian checkpoint's tokenizer (its ``vocab.json``)."""
        return (self.tokenizer_dir / MARIAN_VOCAB).is_file()

    @property
    def shared_vocabulary(self) -> bool:
        """Whether both sides number their pieces alike.

        A Marian tokenizer shares its vocabulary unless it has a
        ``target_vocab.json``; otherwise the config's ``tokenizer.shared`` says.
        """
        if self.is_marian:
            return not (self.tokenizer_dir / MARIAN_TARGET_VOCAB).is_file()
        return bool(self.config.get("tokenizer", {}).get("shared", True))

    @property
    def tokenizer_paths(self) -> tuple[Path, Path]:
        """The (source, target) SentencePiece models; the same path twice when shared.

        A Marian tokenizer has two: ``source.spm`` and ``target.spm``.
        """
        if self.is_marian:
            return self.tokenizer_dir / MARIAN_SOURCE_SPM, self.tokenizer_dir / MARIAN_TARGET_SPM
        return tokenizer_paths(self.tokenizer_dir, self.shared_vocabulary)

    @property
    def max_lengths(self) -> tuple[int | None, int | None]:
        """``training.max_src_length`` and ``max_tgt_length`` (``None`` where unset)."""
        training = self.config.get("training", {})
        return training.get("max_src_length"), training.get("max_tgt_length")

    @property
    def precision(self) -> str:
        """The precision the run trained in (``fp32``, ``bf16``, ``fp16``).

        For ``mixed_precision: auto`` it is what the run picked, from
        ``metrics.json``; ``"auto"`` while the run has not finished.
        """
        precision = str(self.config.get("training", {}).get("mixed_precision", "fp32"))
        if precision == AUTO and self.metrics_path.is_file():
            try:
                used = json.loads(self.metrics_path.read_text()).get("precision", {}).get("used")
            except (ValueError, AttributeError):
                used = None
            if used in PRECISIONS:
                return used
        return precision

    # Loading.
    def transformer_config(self) -> TransformerConfig:
        """Reads the model's architecture from ``model_config.json``, without building the model.

        Returns:
            The ``TransformerConfig``: its sizes and ids.

        Raises:
            WorkdirError: the file is missing or does not hold a valid config.

        Example:

        >>> Workdir("runs/demo").transformer_config().src_vocab_size > 4
        True
        """
        if not self.model_config_path.is_file():
            raise WorkdirError(
                f"{self.model_config_path} not found: the run has not built its model yet "
                "(kt train writes it before training starts)."
            )
        try:
            return TransformerConfig.from_dict(
                json.loads(self.model_config_path.read_text(encoding="utf-8"))
            )
        except (ValueError, TypeError) as error:
            raise WorkdirError(
                f"{self.model_config_path} does not hold a TransformerConfig: {error}"
            ) from error

    def load_tokenizers(
        self,
    ) -> (
        tuple[SubwordTokenizer, SubwordTokenizer]
        | tuple[MarianSubwordTokenizer, MarianSubwordTokenizer]
    ):
        """Loads the (source, target) tokenizers of the run.

        Returns:
            The Marian pair when ``W/tokenizer/`` holds ``vocab.json``
            (``load_marian_tokenizers``), else ``SubwordTokenizer`` objects (the
            same object twice for a shared model).

        Raises:
            WorkdirError: a tokenizer file is missing or malformed.
        """
        if self.is_marian:
            try:
                return load_marian_tokenizers(self.tokenizer_dir)
            except ValueError as error:
                raise WorkdirError(str(error)) from error
        src_path, tgt_path = self.tokenizer_paths
        for path in {src_path, tgt_path}:
            if not path.is_file():
                raise WorkdirError(f"{path} not found: the workdir has no trained tokenizer.")
        src = SubwordTokenizer.from_file(src_path)
        return src, src if tgt_path == src_path else SubwordTokenizer.from_file(tgt_path)

    def load_model(self, precision: str | None = "fp32"):
        """Loads the trained ``Transformer``, computing in ``precision``.

        ``fp32`` is the default whatever the training precision: a model trained
        under ``mixed_bfloat16`` keeps float32 weights, and every runtime runs
        float32 (TFLite builtins, CPUs without bf16 units).

        Args:
            precision: ``"fp32"``, ``"bf16"`` or ``"fp16"``; ``None`` keeps the
                training precision.

        Returns:
            The model.

        Raises:
            ValueError: ``precision`` is unknown.
            WorkdirError: the run has no final model.
        """
        if precision is not None and precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r}: use one of {sorted(PRECISIONS)}.")
        if not self.model_path.is_file():
            raise WorkdirError(
                f"{self.model_path} not found: train first "
                "(kt train --config C --workdir W), or wait for the run to end."
            )
        from keras_transformer import register_keras_objects

        register_keras_objects()
        model = keras.models.load_model(self.model_path)
        return model if precision is None else with_precision(model, precision)

    def load(self, precision: str | None = "fp32") -> TrainedModel:
        """Loads the trained model with its tokenizers and length limits.

        Args:
            precision: as in ``load_model``.

        Returns:
            The ``TrainedModel``.

        Raises:
            WorkdirError: the run has no config, tokenizers or final model.
        """
        self.check()
        model = self.load_model(precision)
        src, tgt = self.load_tokenizers()
        max_src, max_tgt = self.max_lengths
        return TrainedModel(model, src, tgt, max_src_length=max_src, max_tgt_length=max_tgt)

    def check(self) -> Workdir:
        """Checks that the run has a config, tokenizers and a final model.

        Returns:
            ``self``.

        Raises:
            WorkdirError: something is missing; the message names it.
        """
        if not self.path.is_dir():
            raise WorkdirError(f"workdir {self.path} does not exist.")
        _ = self.config
        for path in {*self.tokenizer_paths, self.model_path}:
            if not path.is_file():
                raise WorkdirError(f"{path} not found: {self.path} holds no finished training run.")
        return self


def as_trained_model(source, precision: str | None = "fp32") -> TrainedModel:
    """Gives a ``TrainedModel`` from itself, a ``Workdir`` or a workdir path.

    Args:
        source: a ``TrainedModel``, a ``Workdir`` or the path of one.
        precision: the precision to compute in (``None``: as it is).

    Returns:
        The ``TrainedModel``.

    Raises:
        TypeError: ``source`` is none of those.
    """
    if isinstance(source, TrainedModel):
        return (
            source
            if precision is None
            else dataclasses.replace(source, model=with_precision(source.model, precision))
        )
    if isinstance(source, (str, os.PathLike)):
        source = Workdir(source)
    if isinstance(source, Workdir):
        return source.load(precision)
    raise TypeError(
        f"Expected a TrainedModel, a Workdir or a workdir path, got {type(source).__name__}."
    )
