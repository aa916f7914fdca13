"""Convert a trained workdir to a TFLite translator with builtin ops only:
``kt export tflite --workdir runs/demo --out demo.tflite [--quantize dynamic] [--beam 4]``;
``--int8-out demo.int8.tflite`` writes the int8 (``--quantize dynamic``) file as well, of the
model this process loaded once.

The model takes token ids for one sentence, ``source_ids`` int32
``[1, max_src_length]`` (subword ids + EOS, padded with 0), and returns
``target_ids`` int32 ``[1, max_tgt_length + 1]`` (the target, EOS, then 0):
greedy decoding, or with ``--beam N [--alpha A]`` the best hypothesis of a beam
search (as ``kt export saved-model --beam N``; ``--beam 1`` is greedy), in a
``while`` loop over a fixed-size KV cache, no Flex delegate, so any stock
LiteRT runtime runs it. The library call is
``keras_transformer.exporters.export_tflite``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from keras_transformer.cli.common import (
    ArgumentParser,
    add_tflite_search,
    check_at_least_one,
    check_tflite_search,
    existing_workdir,
    run,
    setup_logging,
)

PROG = "kt export tflite"


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    parser.add_argument("--workdir", required=True, type=Path, help="a kt train workdir")
    parser.add_argument("--out", required=True, type=Path, help="the .tflite file to write")
    add_tflite_search(parser)
    parser.add_argument(
        "--max-src-length", type=int, default=None, help="default: training.max_src_length"
    )
    parser.add_argument(
        "--max-tgt-length",
        type=int,
        default=None,
        help="output ids (default: training.max_tgt_length + 1, room for EOS)",
    )
    parser.add_argument(
        "--int8-out",
        type=Path,
        default=None,
        help="also write the dynamic-range int8 file here (the model loaded once)",
    )
    args = parser.parse_args(argv)
    if args.int8_out is not None and args.quantize is not None:
        parser.error("--int8-out goes with a float32 --out (no --quantize)")
    check_at_least_one(parser, args, "max_src_length", "max_tgt_length")
    check_tflite_search(parser, args)
    existing_workdir(PROG, args.workdir)
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def export() -> int:
        from keras_transformer import Workdir
        from keras_transformer.exporters import export_tflite

        files = [(args.out, args.quantize)]
        if args.int8_out is not None:
            files.append((args.int8_out, "dynamic"))
        trained = Workdir(args.workdir).load("fp32") if len(files) > 1 else args.workdir
        for out, quantize in files:
            print(
                export_tflite(
                    trained,
                    out,
                    quantize=quantize,
                    max_src_length=args.max_src_length,
                    max_tgt_length=args.max_tgt_length,
                    beam=args.beam,
                    alpha=args.alpha,
                    progress=True,
                )
            )
        return 0

    return run(PROG, export, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
