"""``python -m training.prepare``: the same program as ``kt prepare``."""

import sys

from keras_transformer.cli.prepare import main

if __name__ == "__main__":
    sys.exit(main())
