"""``python -m export.translate``: the same program as ``kt translate``."""

import sys

from keras_transformer.cli.translate import main

if __name__ == "__main__":
    sys.exit(main())
