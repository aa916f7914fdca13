"""``python -m export.tflite``: the same program as ``kt export tflite``."""

import sys

from keras_transformer.cli.export_tflite import main

if __name__ == "__main__":
    sys.exit(main())
