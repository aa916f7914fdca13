"""keras-transformer: the original encoder–decoder Transformer in Keras 3."""

from keras_transformer import decoding, layers
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, PRESETS, UNK_ID, TransformerConfig
from keras_transformer.fused_adam import FusedAdam
from keras_transformer.losses import MaskedAccuracy, MaskedLabelSmoothedCrossEntropy, masked_accuracy
from keras_transformer.model import Transformer
from keras_transformer.schedule import TransformerSchedule, paper_adam

__version__ = "0.1.0"

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "FusedAdam",
    "MaskedAccuracy",
    "MaskedLabelSmoothedCrossEntropy",
    "PAD_ID",
    "PRESETS",
    "Transformer",
    "TransformerConfig",
    "TransformerSchedule",
    "UNK_ID",
    "decoding",
    "layers",
    "masked_accuracy",
    "paper_adam",
]
