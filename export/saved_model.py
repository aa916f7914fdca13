"""``python -m export.saved_model``: the same program as ``kt export saved-model``."""

import sys

from keras_transformer.cli.export_saved_model import main

if __name__ == "__main__":
    sys.exit(main())
