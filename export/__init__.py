"""Export programs over ``keras_transformer.exporters``: ``python -m export.saved_model``,
``export.translate``, ``export.tflite``, ``export.ctranslate2`` and ``export.client``."""
