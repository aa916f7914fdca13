"""Exporters from a trained model to what serves it: SavedModel, TFLite, CTranslate2.

Each takes a ``TrainedModel``, a ``Workdir`` or a workdir path.

- ``export_saved_model``: a TF Serving model version, strings in and out
  (loads with ``tensorflow`` + ``tensorflow_text`` only);
- ``export_tflite``: a builtins-only TFLite translator over token ids, greedy or beam search;
- ``export_ctranslate2``: a CTranslate2 model directory (``[ct2]`` extra),
  imported on first use.

``ExportedTranslator`` and ``TFLiteTranslator`` are the ``tf.Module`` objects the
first two save; ``keras_transformer.Translator.from_saved_model`` translates with an export,
``LiteRTTranslator`` with a ``.tflite`` file (LiteRT, the ``[tflite]`` extra).
"""

from keras_transformer.exporters.saved_model import ExportedTranslator, export_saved_model
from keras_transformer.exporters.tflite import (
    LiteRTRun,
    LiteRTTranslator,
    TFLiteTranslator,
    export_tflite,
)


def __getattr__(name):
    if name in ("export_ctranslate2", "KerasTransformerConverter"):
        from keras_transformer.exporters import ctranslate2

        return getattr(ctranslate2, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ExportedTranslator",
    "KerasTransformerConverter",
    "LiteRTRun",
    "LiteRTTranslator",
    "TFLiteTranslator",
    "export_ctranslate2",
    "export_saved_model",
    "export_tflite",
]
