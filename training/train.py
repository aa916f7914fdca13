"""``python -m training.train``: the same program as ``kt train``."""

import sys

from keras_transformer.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
