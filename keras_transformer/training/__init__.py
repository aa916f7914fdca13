"""Training a Transformer from a run config: the trainer (``trainer.run``), its loops,
callbacks, training corpora and the typed config, as the ``kt train`` program uses them."""
