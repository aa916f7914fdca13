"""``python -m export.*``: shims over ``kt export``, ``kt translate``, ``kt translate-corpus``,
``kt score`` and ``kt client`` (``keras_transformer.cli``)."""
