"""What the trainer's phases hand each other: prepare data → build → train → finish."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.model import Transformer
from keras_transformer.training.backup import TrainingBackup
from keras_transformer.training.callbacks import (
    EarlyStopping,
    EpochHistory,
    TimeBudget,
    ValidationBleu,
)
from keras_transformer.training.run_config import RunConfig
from keras_transformer.training.snapshots import KeepSnapshots
from keras_transformer.translate import Translator
from keras_transformer.workdir import Workdir


@dataclasses.dataclass(frozen=True)
class RunSetup:
    """What every phase works with: the config, the strategy and where outputs go."""

    config: RunConfig  # with model.init_from's architecture and tokenizer, when set
    strategy: tf.distribute.Strategy
    workdir: Path  # this process's: the run's, or a non-chief worker's W/worker_N
    run_workdir: Path  # the run's
    chief: bool
    precision: Any  # resolve_precision's choice
    source: Workdir | None  # the finished run whose model this one starts from

    @property
    def run_dir(self) -> Workdir:
        return Workdir(self.workdir)


@dataclasses.dataclass(frozen=True)
class TrainingData:
    """The prepare-data phase's result: the corpus, the tokenizers and the input."""

    corpus: dict[str, Any]
    src_tok: Any
    tgt_tok: Any
    loop: str  # fit or custom (training_loop)
    train_data: Callable[[], tf.data.Dataset]  # the training batches, from the start
    valid: tf.data.Dataset | None


@dataclasses.dataclass(frozen=True)
class EpochCallbacks:
    """The per-epoch callbacks and the backup that tracks their states."""

    backup: TrainingBackup
    keeper: KeepSnapshots
    bleu: ValidationBleu | None
    stopper: EarlyStopping | None
    budget: TimeBudget
    history: EpochHistory

    def as_list(self) -> list[keras.callbacks.Callback]:
        # Any order: they share the epoch's results and time through one EpochRecord.
        found = [self.keeper, self.bleu, self.stopper, self.budget, self.history]
        return [callback for callback in found if callback is not None]


@dataclasses.dataclass(frozen=True)
class Trained:
    """The train phase's result."""

    model: Transformer
    translator: Translator
    callbacks: EpochCallbacks
    metric: str | None  # the validation metric that ranks epochs
    history: dict[str, list[float]]
