"""Score a model on a test file, or on several:

    kt evaluate --workdir DIR --src FILE --ref FILE [--beam 4]
    kt evaluate --saved-model EXPORT_DIR/1 --src FILE --ref FILE
    kt evaluate --tflite FILE --workdir DIR --src FILE --ref FILE [--threads 1]
    kt evaluate --saved-model EXPORT_DIR/1 --src A.src B.src --ref A.tgt B.tgt \\
        --out A_beam.json B_beam.json --greedy-out A_greedy.json B_greedy.json
    kt evaluate --tflite F.tflite F.int8.tflite G.tflite --workdir F F G \\
        --src A.src --ref A.tgt --out F.A.json F.int8.A.json G.A.json

Greedy or beam decoding; BLEU and chrF with sacrebleu (cased, 13a,
detokenized) and exact match, printed and written to ``--out``. A workdir is
translated by ``keras_transformer.Translator.from_workdir``, a SavedModel by
``Translator.from_saved_model`` (its signatures, as TF Serving runs them), a
``.tflite`` file of ``kt export tflite`` by
``keras_transformer.exporters.LiteRTTranslator`` (LiteRT, ``--threads`` CPU
threads, one sentence at a time, by the search inside the file, greedy or
``kt export tflite --beam N``; ``--workdir`` is the run it was exported
from, for its tokenizers): its JSON adds the file's size and the
interpreter's milliseconds a sentence (tokenizing outside the time, after one
untimed warm-up sentence).

Several ``--src`` files go with as many ``--ref`` and ``--out`` files, in
order, and are scored by the one model this process loads (its graphs traced
once). ``--greedy-out`` (as many files as ``--src``) scores greedy decoding
too, of a beam-search workdir or SavedModel (its ``translate_greedy``
signature), as ``--beam 1`` would: one process for both decodings.

Several ``--tflite`` files are scored one after the other by one process, each
with its ``--workdir`` (one a file, or one for all: a run's float and int8
files), so that their milliseconds a sentence are measured side by side:
``--out`` then names one file a ``--tflite`` a ``--src``, the first file's sets
first.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

from keras_transformer.cli.common import (
    ArgumentParser,
    add_precision_argument,
    check_alpha,
    existing_file,
    existing_path,
    existing_workdir,
    needs_module,
    run,
    setup_logging,
)

PROG = "kt evaluate"


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    model_source = parser.add_mutually_exclusive_group()
    model_source.add_argument(
        "--workdir",
        type=Path,
        nargs="+",
        help="a kt train workdir (with --tflite: its tokenizers; several --tflite: "
        "one a file, or one for all)",
    )
    model_source.add_argument(
        "--saved-model",
        type=Path,
        help="an export version folder (exports/NAME/1) or the folder above it",
    )
    parser.add_argument(
        "--tflite",
        type=Path,
        nargs="+",
        default=None,
        help="a .tflite file of kt export tflite, or several (scored in turn)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="--tflite: LiteRT's CPU threads (default 1)"
    )
    parser.add_argument(
        "--src", required=True, type=Path, nargs="+", help="source sentences, one per line"
    )
    parser.add_argument(
        "--ref", required=True, type=Path, nargs="+", help="reference translations, aligned"
    )
    parser.add_argument(
        "--beam",
        type=int,
        default=None,
        help="beam size (workdir: default 1 = greedy; SavedModel: default the exported beam)",
    )
    parser.add_argument(
        "--alpha", type=float, default=0.6, help="length penalty exponent for beam search"
    )
    parser.add_argument(
        "--stopping",
        choices=("heuristic", "exact"),
        default="heuristic",
        help="workdir: beam search's stopping rule (the SavedModel has its own)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        nargs="+",
        default=None,
        help="JSON output, one a --src (several --tflite: one a --tflite a --src; default, "
        "for one --src: WORKDIR/eval.json, SAVED_MODEL/../eval.json or TFLITE without "
        ".tflite + .eval.json)",
    )
    parser.add_argument(
        "--greedy-out",
        type=Path,
        nargs="+",
        default=None,
        help="also score greedy decoding (as --beam 1) into these JSON files, one a --src",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    add_precision_argument(
        parser, "workdir: compute precision of the model (the SavedModel has its own)"
    )
    args = parser.parse_args(argv)
    if args.beam is not None and args.beam < 1:
        parser.error(f"--beam must be >= 1 (1 = greedy), got {args.beam}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    check_alpha(parser, args, "alpha")
    sets, models = len(args.src), len(args.tflite or [None])
    if len(args.ref) != sets:
        parser.error(f"give one --ref a --src: {sets} --src, {len(args.ref)} --ref")
    if args.out is not None and len(args.out) != sets * models:
        each = "a --src" if models == 1 else f"a --tflite a --src ({sets * models})"
        parser.error(f"give one --out {each}: {sets} --src, {len(args.out)} --out")
    if args.greedy_out is not None and len(args.greedy_out) != sets:
        parser.error(
            f"give one --greedy-out a --src: {sets} --src, {len(args.greedy_out)} --greedy-out"
        )
    if args.out is None and models > 1:
        parser.error(f"{models} --tflite files need one --out a --tflite a --src")
    if args.out is None and sets > 1:
        parser.error(f"{sets} --src files need as many --out files")
    greedy = (
        args.tflite is not None or args.beam == 1 or (args.saved_model, args.beam) == (None, None)
    )
    if args.greedy_out is not None and greedy:
        parser.error(
            "--greedy-out goes with a beam search (--tflite, --beam 1 and a workdir without "
            "--beam decode greedy)"
        )
    if args.tflite is not None:
        if args.workdir is None:
            parser.error("--tflite needs --workdir, the run it was exported from (its tokenizers)")
        if len(args.workdir) not in (1, models):
            parser.error(
                f"give one --workdir a --tflite, or one for all: {models} --tflite, "
                f"{len(args.workdir)} --workdir"
            )
        if args.beam not in (None, 1):
            parser.error(
                f"--tflite decodes as the file was exported (kt export tflite [--beam N]), "
                f"not by --beam {args.beam}"
            )
        for tflite in args.tflite:
            existing_file(PROG, tflite, "--tflite")
        needs_module(PROG, "ai_edge_litert", "--tflite", "tflite")
    elif args.workdir is None and args.saved_model is None:
        parser.error("give one of --workdir, --saved-model or --tflite with --workdir")
    elif args.workdir is not None and len(args.workdir) > 1:
        parser.error(f"give one --workdir (several go with as many --tflite): {len(args.workdir)}")
    if args.workdir is not None:
        for workdir in args.workdir:
            existing_workdir(PROG, workdir)
    else:
        existing_path(PROG, args.saved_model, "SavedModel")
    for src, ref in zip(args.src, args.ref):
        existing_file(PROG, src, "--src")
        existing_file(PROG, ref, "--ref")
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def lite_translator(tflite: Path, workdir: Path):
        """The ``.tflite`` file ``tflite`` in LiteRT, with ``workdir``'s tokenizers: as
        ``translator`` gives."""
        from keras_transformer.exporters import LiteRTTranslator

        lite = LiteRTTranslator.from_workdir(tflite, workdir, args.threads)

        def run_lite(sources: list[str]) -> tuple[list[str], dict]:
            result = lite.run(sources, progress=True)
            about = {
                "decoding": lite.decoding,
                "tflite": str(tflite),
                "size_bytes": lite.size_bytes,
                "threads": lite.num_threads,
                "seconds": round(result.seconds, 3),
                "ms_per_sentence": round(result.ms_per_sentence, 3),
            }
            return result.texts, about

        return run_lite, tflite.with_name(tflite.stem + ".eval.json")

    def translator(beam: int | None):
        """The model, loaded once, decoding with ``beam``: a function ``sources →
        (translations, what the JSON says of the model and decoding)``, and the default
        --out."""
        from keras_transformer.translate import Translator

        if args.saved_model:
            model = Translator.from_saved_model(args.saved_model, beam_size=beam)
            out = model.path.parent / "eval.json"
        else:
            (workdir,) = args.workdir
            model = Translator.from_workdir(
                workdir,
                beam_size=beam or 1,
                alpha=args.alpha,
                stopping=args.stopping,
                precision=args.precision,
            )
            out = workdir / "eval.json"
        decoding = "greedy" if model.beam_size == 1 else f"beam{model.beam_size}"

        def run_model(sources: list[str]) -> tuple[list[str], dict]:
            hypotheses = model.translate(sources, batch_size=args.batch_size, progress=True)
            return hypotheses, {"decoding": decoding}

        return run_model, out

    def evaluate() -> int:
        from keras_transformer.data import PairSource
        from keras_transformer.files import write_text_atomically
        from keras_transformer.hardware import cpu_record
        from keras_transformer.training.scoring import score_translations

        # (the model's loader, its --out files): each loaded in turn
        if args.tflite:  # a file's outs: the next len(--src) of --out
            sets = len(args.src)
            workdirs = args.workdir * len(args.tflite) if len(args.workdir) == 1 else args.workdir
            decodings = [
                (
                    partial(lite_translator, tflite, workdir),
                    args.out and args.out[index * sets : (index + 1) * sets],
                )
                for index, (tflite, workdir) in enumerate(zip(args.tflite, workdirs))
            ]
        else:
            decodings = [(partial(translator, args.beam), args.out)]
            if args.greedy_out is not None:
                decodings.append((partial(translator, 1), args.greedy_out))
        for load, outs in decodings:
            translate, default_out = load()
            for index, (src, ref) in enumerate(zip(args.src, args.ref)):
                text = PairSource.from_text_files(src, ref).read()
                hypotheses, about = translate(list(text.sources))
                scores = score_translations(hypotheses, list(text.targets))
                scores.update({"src": str(src), "ref": str(ref), **about, "cpu": cpu_record()})
                out = default_out if outs is None else outs[index]
                write_text_atomically(out, json.dumps(scores, indent=2))
                print(json.dumps(scores, indent=2))
        return 0

    return run(PROG, evaluate, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
