"""Pick the beam size and length penalty on the validation set (never on test):

    kt tune-decoding --workdir runs/multi30k --src valid.src --ref valid.tgt \\
        [--beams 1 4 6] [--alphas 0.6 1.0 1.4]

Loads the trained model once, translates the sources with every combination
(beam 1 = greedy, where α does not matter), prints BLEU/chrF per combination
and writes them, best first, to ``WORKDIR/decoding_grid.json``. Pass the best
``--beam``/``--alpha`` to ``kt export saved-model``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from keras_transformer.cli.common import (
    ArgumentParser,
    add_precision_argument,
    check_alpha,
    check_at_least_one,
    existing_file,
    existing_workdir,
    run,
    setup_logging,
)

PROG = "kt tune-decoding"
log = logging.getLogger("training")


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--src", required=True, type=Path, help="validation sources")
    parser.add_argument("--ref", required=True, type=Path, help="validation references")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.0])
    parser.add_argument("--batch-size", type=int, default=64)
    add_precision_argument(
        parser, "compute precision; tune in the one you export (export default: fp32)"
    )
    args = parser.parse_args(argv)
    if any(beam < 1 for beam in args.beams):
        parser.error("--beams must be >= 1")
    check_alpha(parser, args, "alphas")
    check_at_least_one(parser, args, "batch_size")
    existing_workdir(PROG, args.workdir)
    existing_file(PROG, args.src, "--src")
    existing_file(PROG, args.ref, "--ref")
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def tune() -> int:
        from keras_transformer.data import PairSource
        from keras_transformer.files import write_text_atomically
        from keras_transformer.hardware import cpu_record
        from keras_transformer.training.scoring import score_translations
        from keras_transformer.translate import Translator
        from keras_transformer.workdir import Workdir

        text = PairSource.from_text_files(args.src, args.ref).read()
        trained = Workdir(args.workdir).load(args.precision)
        grid = [
            (beam, alpha) for beam in args.beams for alpha in ([0.0] if beam == 1 else args.alphas)
        ]
        results = []
        for number, (beam, alpha) in enumerate(grid, 1):
            translator = Translator.from_trained_model(trained, beam_size=beam, alpha=alpha)
            started = time.time()
            log.info("decoding %d of %d: beam %d, alpha %.2f", number, len(grid), beam, alpha)
            hypotheses = translator.translate(
                list(text.sources), batch_size=args.batch_size, progress=True
            )
            scores = score_translations(hypotheses, list(text.targets))
            scores.update(
                {"beam": beam, "alpha": alpha, "seconds": round(time.time() - started, 1)}
            )
            results.append(scores)
            print(
                f"beam {beam} alpha {alpha:.2f}: BLEU {scores['bleu']:.2f} chrF "
                f"{scores['chrf']:.2f} "
                f"({scores['seconds']:.0f}s)",
                flush=True,
            )
        results.sort(key=lambda row: (-row["bleu"], -row["chrf"]))
        report = {
            "src": str(args.src),
            "ref": str(args.ref),
            "best": results[0],
            "grid": results,
            "cpu": cpu_record(),
        }
        write_text_atomically(args.workdir / "decoding_grid.json", json.dumps(report, indent=2))
        best = results[0]
        print(
            f"best on {args.src.name}: beam {best['beam']} alpha {best['alpha']} (BLEU "
            f"{best['bleu']:.2f})"
        )
        return 0

    return run(PROG, tune, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
