"""``python -m training.import_checkpoint``: the same program as ``kt import-checkpoint``."""

import sys

from keras_transformer.cli.import_checkpoint import main

if __name__ == "__main__":
    sys.exit(main())
