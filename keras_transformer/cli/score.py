"""Score given translations: the log-probability of each target given its source.

    kt score --model exports/demo --src test.src --tgt test.tgt > scores.txt
    kt score --workdir runs/demo --src test.src --tgt test.tgt --out scores.txt

``--src`` and ``--tgt`` are aligned text files, one sentence a line. The
output has one number a line pair: the target's log-probability (natural
log, summed over its subwords and EOS, no length penalty; the number
``kt translate --n-best`` gives the same text), on standard
output or written atomically to ``--out``. An empty target is scored as EOS
alone. Files of different line counts, or a target longer than the model's
limit, are a one-line error (exit status 2); nothing is cut. ``--model`` runs
an exported SavedModel's ``score`` signature (the graph TF Serving runs),
``--workdir`` a training run's Keras model; the library call is
``keras_transformer.Translator.score``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from keras_transformer.cli.common import (
    ArgumentParser,
    add_model_source,
    check_at_least_one,
    check_model_source,
    existing_file,
    run,
    setup_logging,
)
from keras_transformer.cli.translate import add_batch_tokens_argument

PROG = "kt score"


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    add_model_source(parser)
    parser.add_argument("--src", required=True, type=Path, help="source sentences, one a line")
    parser.add_argument("--tgt", required=True, type=Path, help="target sentences, aligned")
    parser.add_argument(
        "--out", type=Path, default=None, help="the scores' file (default: standard output)"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="at most N pairs a batch (default: as many as --batch-tokens allows)",
    )
    add_batch_tokens_argument(parser)
    args = parser.parse_args(argv)
    check_at_least_one(parser, args, "batch_size", "batch_tokens")
    check_model_source(PROG, args)
    existing_file(PROG, args.src, "--src")
    existing_file(PROG, args.tgt, "--tgt")
    return args


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file without their newlines (invalid bytes as U+FFFD)."""
    with open(path, encoding="utf-8", errors="replace") as file:
        return [line.rstrip("\n") for line in file]


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def score() -> int:
        from keras_transformer.files import write_text_atomically
        from keras_transformer.translate import Translator

        if args.model is not None:
            translator = Translator.from_saved_model(args.model)
        else:
            translator = Translator.from_workdir(args.workdir)
        log_probs = translator.score(
            read_lines(args.src),
            read_lines(args.tgt),
            args.batch_size,
            progress=sys.stderr.isatty(),
            batch_tokens=args.batch_tokens,
        )
        text = "".join(f"{log_prob:.4f}\n" for log_prob in log_probs)
        if args.out is None:
            sys.stdout.write(text)
        else:
            write_text_atomically(args.out, text)
        return 0

    return run(PROG, score, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
