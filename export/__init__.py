"""Export programs: ``python -m export.saved_model``, ``python -m export.translate``."""
