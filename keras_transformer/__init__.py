"""keras-transformer: the original encoder–decoder Transformer in Keras 3.

The model and its training pieces (``Transformer``, ``TransformerConfig``,
``paper_adam``, the loss and metric), a training run's directory
(``Workdir``, ``TrainedModel``), translation (``Translator``; a file,
resumably, by ``translate_corpus``) and the exporters
(``keras_transformer.exporters``). The paper's layers are in
``keras_transformer.layers``; the speed kernels they run on, in
``keras_transformer.kernels``.

Names are imported on first use, so that ``import keras_transformer`` and the ``kt``
command's ``--help`` need no TensorFlow; ``from keras_transformer import Translator``
works as usual. ``keras.models.load_model`` finds the library's classes once Keras
and ``keras_transformer`` are both imported and one of the library's names is used,
or after ``keras_transformer.register_keras_objects()``.
"""

import importlib
import sys

__version__ = "0.2.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "BOS_ID": "keras_transformer.config",
    "EOS_ID": "keras_transformer.config",
    "PAD_ID": "keras_transformer.config",
    "PRESETS": "keras_transformer.config",
    "UNK_ID": "keras_transformer.config",
    "TransformerConfig": "keras_transformer.config",
    "CorpusTranslation": "keras_transformer.file_translation",
    "translate_corpus": "keras_transformer.file_translation",
    "FusedAdam": "keras_transformer.kernels",
    "native": "keras_transformer.kernels",
    "MaskedAccuracy": "keras_transformer.losses",
    "MaskedLabelSmoothedCrossEntropy": "keras_transformer.losses",
    "masked_accuracy": "keras_transformer.losses",
    "Transformer": "keras_transformer.model",
    "PRECISIONS": "keras_transformer.precision",
    "with_precision": "keras_transformer.precision",
    "TransformerSchedule": "keras_transformer.schedule",
    "paper_adam": "keras_transformer.schedule",
    "MarianSubwordTokenizer": "keras_transformer.tokenization",
    "SubwordTokenizer": "keras_transformer.tokenization",
    "load_marian_tokenizers": "keras_transformer.tokenization",
    "Translator": "keras_transformer.translate",
    "TrainedModel": "keras_transformer.workdir",
    "Workdir": "keras_transformer.workdir",
    "WorkdirError": "keras_transformer.workdir",
}
_SUBPACKAGES = ("cli", "decoding", "exporters", "kernels", "layers", "training")
# The modules whose classes ``keras.models.load_model`` deserializes (the model, its
# layers, losses, metrics, schedule and optimizer), registered with Keras on import.
_KERAS_OBJECTS = (
    "keras_transformer.model",
    "keras_transformer.losses",
    "keras_transformer.schedule",
    "keras_transformer.kernels.fused_adam",
)

__all__ = sorted(
    [*_EXPORTS, "decoding", "exporters", "kernels", "layers", "register_keras_objects"]
)


def register_keras_objects() -> None:
    """Register the library's Keras classes, so that ``keras.models.load_model`` finds them.

    Imports TensorFlow and Keras. Using any of the library's names does this too.

    Example:

    >>> import keras_transformer
    >>> keras_transformer.register_keras_objects()
    """
    for module in _KERAS_OBJECTS:
        importlib.import_module(module)


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    if "keras" in sys.modules:
        register_keras_objects()
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if "keras" in sys.modules:  # Keras is loaded already: its load_model may come next
    register_keras_objects()
