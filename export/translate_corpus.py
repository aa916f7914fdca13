"""``python -m export.translate_corpus``: the same program as ``kt translate-corpus``."""

import sys

from keras_transformer.cli.translate_corpus import main

if __name__ == "__main__":
    sys.exit(main())
