"""``python -m export.client``: the same program as ``kt client``."""

import sys

from keras_transformer.cli.client import main

if __name__ == "__main__":
    sys.exit(main())
