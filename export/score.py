"""``python -m export.score``: the same program as ``kt score``."""

import sys

from keras_transformer.cli.score import main

if __name__ == "__main__":
    sys.exit(main())
