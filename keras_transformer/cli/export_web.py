"""Write a static web page that translates offline, in the browser, with LiteRT.js:
``kt export web --workdir runs/demo --out runs/demo/web [--quantize dynamic]``.

The folder holds ``index.html``, its ES modules, ``model.tflite`` (``kt export tflite``'s
translator, exported here unless ``--tflite FILE`` gives one of this workdir), the run's
SentencePiece model(s), ``translator.json`` and LiteRT.js's WebAssembly runtime. Serve it from
any static server (``python -m http.server -d runs/demo/web``) and open it: everything is fetched
from the same host, and the page translates with the network off once loaded. The JavaScript
packages come from npm (``npm ci``, once, into a cache folder) unless ``--node-modules DIR``
gives them. ``--beam N`` / ``--alpha A`` choose the search inside the file, where
``kt export tflite`` has it. The library call is ``keras_transformer.exporters.web.export_web``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from keras_transformer.cli.common import (
    ArgumentParser,
    add_tflite_search,
    check_tflite_search,
    existing_path,
    existing_workdir,
    fail,
    run,
    setup_logging,
)

PROG = "kt export web"


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    parser.add_argument("--workdir", required=True, type=Path, help="a kt train workdir")
    parser.add_argument("--out", required=True, type=Path, help="the folder to write the page to")
    parser.add_argument(
        "--tflite",
        type=Path,
        default=None,
        help="a .tflite of this workdir (kt export tflite), copied instead of exporting one",
    )
    add_tflite_search(parser)
    parser.add_argument(
        "--node-modules",
        type=Path,
        default=None,
        help="the node_modules of npm ci on the package's web/package-lock.json "
        "(default: installed once into a cache folder)",
    )
    args = parser.parse_args(argv)
    check_tflite_search(parser, args)
    if args.tflite is not None:
        given = [flag for flag in ("quantize", "beam", "alpha") if getattr(args, flag) is not None]
        if given:
            parser.error(f"--{given[0]} applies when exporting the model, not to a given --tflite")
        existing_path(PROG, args.tflite, ".tflite file", "write one with kt export tflite")
    if args.out.is_file():
        fail(PROG, f"--out {args.out} is a file; give the folder to write the page into.")
    if args.node_modules is not None:
        existing_path(PROG, args.node_modules, "--node-modules folder")
    existing_workdir(PROG, args.workdir)
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def export() -> int:
        from keras_transformer.exporters.web import export_web

        out = export_web(
            args.workdir,
            args.out,
            quantize=args.quantize,
            beam=args.beam,
            alpha=args.alpha,
            tflite=args.tflite,
            node_modules=args.node_modules,
        )
        print(out)
        return 0

    return run(PROG, export, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
