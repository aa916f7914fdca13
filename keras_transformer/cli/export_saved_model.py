"""Export a trained workdir as a TF Serving SavedModel:
``kt export saved-model --workdir runs/demo --out exports/demo [--version 1] [--beam 4]``.

Writes ``OUT/<version>/`` (the layout TF Serving watches) atomically: the model
is saved to a hidden folder beside it and renamed in; an existing version is
replaced only with ``--overwrite``, moved aside before the new one is renamed
in, so a watching server never sees it missing. Includes
``assets.extra/tf_serving_warmup_requests`` and, one level up, an example
``models.config``. The library call is
``keras_transformer.exporters.export_saved_model``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from keras_transformer.cli.common import (
    ArgumentParser,
    add_precision_argument,
    check_alpha,
    check_at_least_one,
    existing_workdir,
    run,
    setup_logging,
)

PROG = "kt export saved-model"


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    parser.add_argument("--workdir", required=True, type=Path, help="a kt train workdir")
    parser.add_argument(
        "--out", required=True, type=Path, help="model folder; versions go below it"
    )
    parser.add_argument("--version", type=int, default=None, help="default: next free integer")
    parser.add_argument(
        "--beam", type=int, default=4, help="beam size fixed in the export (1 = greedy)"
    )
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty exponent")
    parser.add_argument(
        "--stopping",
        choices=("heuristic", "exact"),
        default="heuristic",
        help="when a sentence's beam search ends: once its finished hypotheses beat the live "
        "beams at their current length (heuristic), or once no live beam could still win "
        "at any allowed length (exact, slower)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing version")
    add_precision_argument(
        parser, "compute precision of the exported graph (weights are float32 either way)"
    )
    parser.add_argument(
        "--xla",
        action="store_true",
        help="also export translate_xla and translate_greedy_xla, the decoders compiled by XLA "
        "(a server needs XLA for them; the default signatures stay plain graphs)",
    )
    parser.add_argument(
        "--step-splits",
        type=int,
        default=None,
        metavar="N",
        help="splits of the small-batch decoding step (a sentence or a beam), run side by side on "
        "the "
        "server's inter-op threads (default: 2; 1 for a server with one inter-op thread)",
    )
    parser.add_argument(
        "--step-products",
        choices=("conv", "matmul"),
        default=None,
        help="that step's products: 1x1 convolutions or MatMul (default: what suits this "
        "machine's TensorFlow, matmul where its oneDNN rewrites are on: by default on CPUs "
        "with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX; export for the server's CPU)",
    )
    parser.add_argument(
        "--decode-parts",
        type=int,
        default=None,
        metavar="N",
        help="a batch of 8 decoding rows or more (sentences x beams) decodes as N parts side by "
        "side on the server's inter-op threads (default: 2; 1 for a server with one "
        "inter-op thread)",
    )
    args = parser.parse_args(argv)
    check_at_least_one(parser, args, "beam", "version", "step_splits", "decode_parts")
    check_alpha(parser, args, "alpha")
    existing_workdir(PROG, args.workdir)
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def export() -> int:
        from keras_transformer.exporters import export_saved_model

        path = export_saved_model(
            args.workdir,
            args.out,
            beam_size=args.beam,
            alpha=args.alpha,
            stopping=args.stopping,
            version=args.version,
            overwrite=args.overwrite,
            precision=args.precision,
            xla=args.xla,
            step_splits=args.step_splits,
            step_products=args.step_products,
            decode_parts=args.decode_parts,
            progress=True,
        )
        print(path)
        return 0

    return run(PROG, export, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
