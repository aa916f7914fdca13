"""keras-transformer: the original encoder–decoder Transformer in Keras 3.

The model and its training pieces (``Transformer``, ``TransformerConfig``,
``paper_adam``, the loss and metric), a training run's directory
(``Workdir``, ``TrainedModel``), translation (``Translator``; a file,
resumably, by ``translate_corpus``) and the exporters
(``keras_transformer.exporters``). The paper's layers are in
``keras_transformer.layers``; the speed kernels they run on, in
``keras_transformer.kernels``.
"""

from keras_transformer import decoding, exporters, kernels, layers
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, PRESETS, UNK_ID, TransformerConfig
from keras_transformer.corpus import CorpusTranslation, translate_corpus
from keras_transformer.kernels import FusedAdam, native
from keras_transformer.losses import (
    MaskedAccuracy,
    MaskedLabelSmoothedCrossEntropy,
    masked_accuracy,
)
from keras_transformer.model import Transformer
from keras_transformer.precision import PRECISIONS, with_precision
from keras_transformer.schedule import TransformerSchedule, paper_adam
from keras_transformer.tokenization import (
    MarianSubwordTokenizer,
    SubwordTokenizer,
    load_marian_tokenizers,
)
from keras_transformer.translate import Translator
from keras_transformer.workdir import TrainedModel, Workdir, WorkdirError

__version__ = "0.2.0"

__all__ = [
    "BOS_ID",
    "CorpusTranslation",
    "EOS_ID",
    "FusedAdam",
    "MaskedAccuracy",
    "MarianSubwordTokenizer",
    "MaskedLabelSmoothedCrossEntropy",
    "PAD_ID",
    "PRECISIONS",
    "PRESETS",
    "SubwordTokenizer",
    "TrainedModel",
    "Transformer",
    "TransformerConfig",
    "TransformerSchedule",
    "Translator",
    "UNK_ID",
    "Workdir",
    "WorkdirError",
    "decoding",
    "exporters",
    "kernels",
    "layers",
    "load_marian_tokenizers",
    "masked_accuracy",
    "native",
    "paper_adam",
    "translate_corpus",
    "with_precision",
]
