"""The recipes (``training/configs``) and ``python -m training.*``: shims over ``kt``'s programs
(``keras_transformer.cli``) for the notebook, the Makefile and the docs."""
