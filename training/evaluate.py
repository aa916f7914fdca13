"""``python -m training.evaluate``: the same program as ``kt evaluate``."""

import sys

from keras_transformer.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
