"""Convert a trained workdir to a CTranslate2 model directory (needs ``ctranslate2``):
``kt export ctranslate2 --workdir runs/demo --out demo-ct2 [--quantization int8] [--force]``.

Feed the result SentencePiece pieces without ``</s>`` and pass
``min_decoding_length=0`` to reproduce our greedy output: see
``keras_transformer.exporters.ctranslate2``, the library call
(``export_ctranslate2``) and how the weights map.
"""

from __future__ import annotations

import sys
from pathlib import Path

from keras_transformer.cli.common import (
    ArgumentParser,
    existing_workdir,
    needs_module,
    run,
    setup_logging,
)

PROG = "kt export ctranslate2"
# CTranslate2's weight types (ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES), here before
# ctranslate2 is imported; the library checks the value against CTranslate2's own list.
QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    parser.add_argument("--workdir", required=True, type=Path, help="trained workdir (kt train)")
    parser.add_argument(
        "--out", required=True, type=Path, help="CTranslate2 model directory to create"
    )
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="weight type (default: float32 as trained)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing --out directory")
    args = parser.parse_args(argv)
    existing_workdir(PROG, args.workdir)  # an existing --out: export_ctranslate2
    needs_module(PROG, "ctranslate2", "the CTranslate2 export", "ct2")
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def export() -> int:
        from keras_transformer.exporters.ctranslate2 import export_ctranslate2

        print(
            export_ctranslate2(
                args.workdir,
                args.out,
                quantization=args.quantization,
                force=args.force,
                progress=True,
            )
        )
        return 0

    return run(PROG, export, expected=(ValueError, ImportError))


if __name__ == "__main__":
    sys.exit(main())
