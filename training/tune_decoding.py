"""``python -m training.tune_decoding``: the same program as ``kt tune-decoding``."""

import sys

from keras_transformer.cli.tune_decoding import main

if __name__ == "__main__":
    sys.exit(main())
