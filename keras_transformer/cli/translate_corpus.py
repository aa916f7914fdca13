"""Translate a corpus file into another, resumably (distillation, back-translation):

    kt translate-corpus --workdir runs/teacher --beam 4 --src train.src \\
        --out distilled/train.tgt
    kt translate-corpus --model exports/demo --src test.src.gz --out test.nbest \\
        --n-best 4
    kt translate-corpus --workdir runs/reverse --src mono.tgt --out bt/train.src \\
        --sample --top-k 10 --seed 1
    kt translate-corpus --model exports/demo --src test.src --out test.hyp \\
        --overwrite

``--src`` is plain text or gzip (known by its first bytes), one sentence a
line, split on ``\\n`` only (a ``\\r`` inside a line stays; CRLF's ``\\r`` is
dropped), each line decoded as UTF-8 with invalid bytes as U+FFFD. ``--out``
gets one line a line of ``--src``: the best translation (greedy or beam
search), with ``--n-best N`` the N best as Moses lines ``INDEX ||| TEXT |||
LOG_PROB`` (as ``kt translate --n-best`` writes them), or with
``--sample`` a sample (``--top-k``, ``--top-p``, ``--temperature``,
``--seed`` as ``kt translate --sample``). An empty line gives an empty
line.

``--workdir`` translates with a training run's Keras model, greedy unless
``--beam N`` (``--alpha``, default 0.6, its length penalty), as
``kt evaluate`` does; ``--model`` with an exported SavedModel (a
version folder or the folder above it: the newest), at the beam fixed at
export unless ``--beam 1`` (greedy); its length penalty is fixed at export
too (``--alpha`` goes with ``--workdir`` only).

The file is read ``--window`` lines at a time, sorted by length and batched
by ``--batch-tokens`` (as ``kt translate``). After each window the output
is appended and synced to disk, then ``OUT.progress.json`` records the
source's fingerprint, the settings (mode, beam, model) and the lines done.
Stopped for any reason, the same command again resumes where the record
ends (what was written after it is cut) and finishes; on a complete output
it says so and does nothing. Another source or other settings for an output
begun, or an output that exists without its record: a one-line error (exit
status 2) naming ``--overwrite``, which starts again from the first line.
The library call is ``keras_transformer.translate_corpus``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from keras_transformer.cli.common import (
    ArgumentParser,
    add_model_source,
    add_sampling_arguments,
    check_alpha,
    check_at_least_one,
    check_model_source,
    existing_file,
    fail,
    run,
    sampling_parameters,
    setup_logging,
)
from keras_transformer.cli.translate import add_batch_tokens_argument, add_window_argument

PROG = "kt translate-corpus"
ALPHA = 0.6  # keras_transformer.decoding.Beam's default, as kt evaluate's --alpha


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    add_model_source(parser)
    parser.add_argument(
        "--src", required=True, type=Path, help="the file to translate (plain or gzip)"
    )
    parser.add_argument("--out", required=True, type=Path, help="the translations' file")
    parser.add_argument(
        "--beam",
        type=int,
        default=None,
        help="beam size (--workdir: default 1 = greedy; --model: 1 or the exported beam, "
        "the default)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        help=f"--workdir: beam search's length penalty exponent (default {ALPHA})",
    )
    parser.add_argument(
        "--n-best",
        type=int,
        default=None,
        metavar="N",
        help="write the N best translations a line, INDEX ||| TEXT ||| LOG_PROB a line",
    )
    add_sampling_arguments(parser)
    add_batch_tokens_argument(parser)
    add_window_argument(parser, "the output is synced and the progress recorded after each")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start again from the first line, whatever --out holds",
    )
    args = parser.parse_args(argv)
    if args.n_best is not None and args.sample:
        parser.error("--n-best and --sample do not go together: choose one")
    args.sampling = sampling_parameters(parser, args)
    if args.alpha is not None and args.model is not None:
        parser.error(
            "--alpha goes with --workdir: an export's length penalty is fixed at export "
            "(kt export saved-model --alpha)"
        )
    check_at_least_one(parser, args, "beam", "n_best", "batch_tokens", "window")
    check_alpha(parser, args, "alpha")
    check_model_source(PROG, args)
    existing_file(PROG, args.src, "--src")
    if args.out.is_dir():
        fail(PROG, f"--out {args.out} is a folder: name a file.")
    if not args.out.absolute().parent.is_dir():
        fail(PROG, f"--out {args.out}: its folder does not exist (create it first).")
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def translate() -> int:
        from keras_transformer.file_translation import translate_corpus
        from keras_transformer.translate import Translator

        if args.model is not None:
            translator = Translator.from_saved_model(args.model, beam_size=args.beam)
        else:
            translator = Translator.from_workdir(
                args.workdir,
                beam_size=args.beam or 1,
                alpha=ALPHA if args.alpha is None else args.alpha,
            )
        done = translate_corpus(
            translator,
            args.src,
            args.out,
            n_best=args.n_best,
            sample=args.sample,
            **args.sampling,
            batch_tokens=args.batch_tokens,
            window=args.window,
            overwrite=args.overwrite,
            progress=sys.stderr.isatty(),
        )
        if done.already_complete:
            logging.info(
                "%s is already complete (%d lines): nothing to do.", done.output, done.lines
            )
        else:
            resumed = f", resumed at line {done.resumed_from}" if done.resumed_from else ""
            logging.info(
                "translated %d lines into %s%s: %d lines, %d bytes (progress in %s).",
                done.translated,
                done.output,
                resumed,
                done.lines,
                done.output_bytes,
                done.state,
            )
        return 0

    return run(PROG, translate, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
