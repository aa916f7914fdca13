"""``python -m export.ctranslate2``: the same program as ``kt export ctranslate2``."""

import sys

from keras_transformer.cli.export_ctranslate2 import main

if __name__ == "__main__":
    sys.exit(main())
