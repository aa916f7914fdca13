"""Score a model on a test file, or on several:

    python -m training.evaluate --workdir DIR --src FILE --ref FILE [--beam 4]
    python -m training.evaluate --saved-model EXPORT_DIR/1 --src FILE --ref FILE
    python -m training.evaluate --tflite FILE --workdir DIR --src FILE --ref FILE [--threads 1]
    python -m training.evaluate --saved-model EXPORT_DIR/1 --src A.src B.src --ref A.tgt B.tgt \\
        --out A_beam.json B_beam.json --greedy-out A_greedy.json B_greedy.json

Greedy or beam decoding; BLEU and chrF with sacrebleu (cased, 13a,
detokenized) and exact match, printed and written to ``--out``. A workdir is
translated by ``keras_transformer.Translator.from_workdir``, a SavedModel by
``Translator.from_saved_model`` (its signatures, as TF Serving runs them), a
``.tflite`` file of ``python -m export.tflite`` by
``keras_transformer.exporters.LiteRTTranslator`` (LiteRT, ``--threads`` CPU
threads, one sentence at a time, greedy; ``--workdir`` is the run it was
exported from, for its tokenizers): its JSON adds the file's size and the
interpreter's milliseconds a sentence (tokenizing outside the time, after one
untimed warm-up sentence).

Several ``--src`` files go with as many ``--ref`` and ``--out`` files, in
order, and are scored by the one model this process loads (its graphs traced
once). ``--greedy-out`` (as many files as ``--src``) scores greedy decoding
too, of a beam-search workdir or SavedModel (its ``translate_greedy``
signature), as ``--beam 1`` would: one process for both decodings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from programs import (
    PRECISION_NAMES,
    WORKDIR_HINT,
    ArgumentParser,
    existing_file,
    existing_path,
    run,
    setup_logging,
)

PROG = "python -m training.evaluate"


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    model_source = parser.add_mutually_exclusive_group()
    model_source.add_argument(
        "--workdir", type=Path, help="a training.train workdir (with --tflite: its tokenizers)"
    )
    model_source.add_argument(
        "--saved-model",
        type=Path,
        help="an export version folder (exports/NAME/1) or the folder above it",
    )
    parser.add_argument(
        "--tflite", type=Path, default=None, help="a .tflite file of python -m export.tflite"
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
        help="JSON output, one a --src (default, for one --src: WORKDIR/eval.json, "
        "SAVED_MODEL/../eval.json or TFLITE without .tflite + .eval.json)",
    )
    parser.add_argument(
        "--greedy-out",
        type=Path,
        nargs="+",
        default=None,
        help="also score greedy decoding (as --beam 1) into these JSON files, one a --src",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--precision",
        choices=PRECISION_NAMES,
        default="fp32",
        help="workdir: compute precision of the model (the SavedModel has its own)",
    )
    args = parser.parse_args(argv)
    if args.beam is not None and args.beam < 1:
        parser.error(f"--beam must be >= 1 (1 = greedy), got {args.beam}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    sets = len(args.src)
    if len(args.ref) != sets:
        parser.error(f"give one --ref a --src: {sets} --src, {len(args.ref)} --ref")
    for flag, files in (("--out", args.out), ("--greedy-out", args.greedy_out)):
        if files is not None and len(files) != sets:
            parser.error(f"give one {flag} a --src: {sets} --src, {len(files)} {flag}")
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
        if args.beam not in (None, 1):
            parser.error(
                f"--tflite decodes greedy (the decoding is inside the file): --beam {args.beam}"
            )
        existing_file(PROG, args.tflite, "--tflite")
    elif args.workdir is None and args.saved_model is None:
        parser.error("give one of --workdir, --saved-model or --tflite with --workdir")
    if args.workdir is not None:
        existing_path(PROG, args.workdir, "workdir", WORKDIR_HINT)
    else:
        existing_path(PROG, args.saved_model, "SavedModel")
    for src, ref in zip(args.src, args.ref):
        existing_file(PROG, src, "--src")
        existing_file(PROG, ref, "--ref")
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def translator(beam: int | None):
        """The model, loaded once, decoding with ``beam``: a function ``sources →
        (translations, what the JSON says of the model and decoding)``, and the default
        --out."""
        from keras_transformer.translate import Translator

        if args.tflite:
            from keras_transformer.exporters import LiteRTTranslator

            lite = LiteRTTranslator.from_workdir(args.tflite, args.workdir, args.threads)

            def run_lite(sources: list[str]) -> tuple[list[str], dict]:
                result = lite.run(sources, progress=True)
                about = {
                    "decoding": "greedy",
                    "tflite": str(args.tflite),
                    "size_bytes": lite.size_bytes,
                    "threads": lite.num_threads,
                    "seconds": round(result.seconds, 3),
                    "ms_per_sentence": round(result.ms_per_sentence, 3),
                }
                return result.texts, about

            return run_lite, args.tflite.with_name(args.tflite.stem + ".eval.json")
        if args.saved_model:
            model = Translator.from_saved_model(args.saved_model, beam_size=beam)
            out = model.path.parent / "eval.json"
        else:
            model = Translator.from_workdir(
                args.workdir,
                beam_size=beam or 1,
                alpha=args.alpha,
                stopping=args.stopping,
                precision=args.precision,
            )
            out = args.workdir / "eval.json"
        decoding = "greedy" if model.beam_size == 1 else f"beam{model.beam_size}"

        def run_model(sources: list[str]) -> tuple[list[str], dict]:
            hypotheses = model.translate(sources, batch_size=args.batch_size, progress=True)
            return hypotheses, {"decoding": decoding}

        return run_model, out

    def evaluate() -> int:
        from keras_transformer.data import PairSource
        from keras_transformer.files import write_text_atomically
        from keras_transformer.hardware import cpu_record
        from training.scoring import score_translations

        decodings = [(translator(args.beam), args.out)]
        if args.greedy_out is not None:
            decodings.append((translator(1), args.greedy_out))
        for (translate, default_out), outs in decodings:
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
