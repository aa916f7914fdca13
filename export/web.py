"""``python -m export.web``: the same program as ``kt export web``."""

import sys

from keras_transformer.cli.export_web import main

if __name__ == "__main__":
    sys.exit(main())
