"""Export programs over ``keras_transformer.exporters``: ``python -m export.saved_model``,
``export.translate``, ``export.translate_corpus``, ``export.score``, ``export.tflite``,
``export.ctranslate2`` and ``export.client``."""
