"""Beam search inside the TFLite translator against greedy: LiteRT's milliseconds a sentence
and BLEU of each, on a file of sentences.

    python -m benchmarks.tflite_beam --workdir runs/multi30k \\
        --src ../shared/corpora/multi30k_de_en/test.src \\
        --ref ../shared/corpora/multi30k_de_en/test.tgt \\
        [--beam 4] [--alpha 0.6] [--sentences 200] [--threads 1] [--repeats 3] [--keep DIR] \\
        [--quantize dynamic] [--json out.json]

The workdir is converted twice by ``export_tflite`` (float32, or int8 weights
with ``--quantize dynamic``; the widths it was trained with): greedy, and a
beam search of ``--beam`` hypotheses with the length penalty ``--alpha``. Each
file translates the first ``--sentences`` lines of ``--src`` in LiteRT
(``LiteRTTranslator``, ``--threads`` CPU threads, 1 by default as a phone app
gets), batch 1, one sentence at a time after one untimed warm-up sentence;
ms/sentence is the interpreter's time (tokenizing and detokenizing outside it)
in the fastest of ``--repeats`` passes, the two files taking turns pass by
pass, so that a busy moment of a shared machine weighs on neither alone. BLEU
and chrF: sacrebleu, as ``kt evaluate`` scores (``training.scoring``). The
reference is greedy decoding in this process (``Translator``, the decoder of
the SavedModel's ``translate_greedy``: the same ids,
``tests/test_tflite.py``); ``agreement`` is the share of sentences the greedy
file translates as it does.

The goals, each a measured value against a bound: the beam file's time at most
3× the greedy file's, and its BLEU at least the SavedModel's greedy BLEU. A
table and a JSON line (``--json`` also writes it) that names the CPU.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

from benchmarks.report import emit

# (key, what, comparison, bound): the goals, each a measured value against a bound.
GOALS = (
    ("time_ratio", "beam file's ms/sentence over the greedy file's", "<=", 3.0),
    ("bleu_over_greedy", "beam file's BLEU minus the SavedModel's greedy decoder's", ">=", 0.0),
)


def read_lines(path: Path, count: int) -> list[str]:
    """The first ``count`` lines of ``path``, without their line ends."""
    return path.read_text(encoding="utf-8").splitlines()[:count]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", required=True, type=Path, help="a trained workdir")
    parser.add_argument("--src", required=True, type=Path, help="the source sentences")
    parser.add_argument("--ref", required=True, type=Path, help="their references, for BLEU")
    parser.add_argument("--beam", type=int, default=4, help="the beam file's beam size (>= 2)")
    parser.add_argument(
        "--alpha", type=float, default=None, help="its length penalty (default: the exporter's)"
    )
    parser.add_argument("--sentences", type=int, default=200, help="the first N lines")
    parser.add_argument("--threads", type=int, default=1, help="LiteRT's CPU threads")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed passes a file, in turn; the fastest counts"
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="write the two .tflite files in this folder"
    )
    parser.add_argument(
        "--quantize", choices=["dynamic"], default=None, help="both files with int8 weights"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.beam < 2:
        parser.error(f"--beam must be >= 2 (the greedy file is the other), got {args.beam}")
    for flag in ("sentences", "threads", "repeats"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.alpha is not None and not (math.isfinite(args.alpha) and args.alpha >= 0):
        parser.error(f"--alpha must be a finite number >= 0, got {args.alpha}")
    for path in (args.src, args.ref):
        if not path.is_file():
            parser.error(f"no file at {path}")
    return args


def goals(results: dict) -> list[dict]:
    """The goals as measured: each value, its bound and whether it is met."""
    greedy, beam, reference = results["greedy"], results["beam"], results["library_greedy"]
    values = {
        "time_ratio": beam["ms_per_sentence"] / greedy["ms_per_sentence"],
        "bleu_over_greedy": beam["bleu"] - reference["bleu"],
    }
    rows = []
    for key, what, comparison, bound in GOALS:
        value = round(values[key], 2)
        met = value <= bound if comparison == "<=" else value >= bound
        rows.append({"goal": key, "what": what, "value": value, comparison: bound, "met": met})
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    from keras_transformer import Translator, Workdir
    from keras_transformer.exporters import LiteRTTranslator, export_tflite
    from keras_transformer.training.scoring import score_translations

    sources = read_lines(args.src, args.sentences)
    references = read_lines(args.ref, args.sentences)
    if len(references) != len(sources):
        raise SystemExit(f"{args.src} and {args.ref} differ in length in the first lines.")
    trained = Workdir(args.workdir).check().load("fp32")
    library = Translator.from_trained_model(trained)  # greedy
    library_texts = library.translate(sources)
    results = {"library_greedy": {"decoding": "greedy", "engine": "library"}}
    results["library_greedy"].update(score_translations(library_texts, references))
    with tempfile.TemporaryDirectory(prefix="tflite_beam_") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        files = {}
        for name, beam in (("greedy", None), ("beam", args.beam)):
            alpha = args.alpha if beam else None
            path = export_tflite(
                trained, folder / f"{name}.tflite", quantize=args.quantize, beam=beam, alpha=alpha
            )
            files[name] = LiteRTTranslator(
                path, trained.src_tokenizer, trained.tgt_tokenizer, num_threads=args.threads
            )
        runs = {name: [] for name in files}
        for repeat in range(args.repeats):  # the files in turn, pass by pass
            for name, lite in files.items():
                runs[name].append(lite.run(sources, warm_up=repeat == 0))
        for name, lite in files.items():
            run = min(runs[name], key=lambda run: run.seconds)
            results[name] = {
                "decoding": lite.decoding,
                "engine": "tflite",
                "alpha": lite.alpha,
                "size_bytes": lite.size_bytes,
                "seconds": round(run.seconds, 3),
                "passes_seconds": [round(each.seconds, 3) for each in runs[name]],
                "ms_per_sentence": round(run.ms_per_sentence, 3),
                **score_translations(run.texts, references),
            }
            if name == "greedy":
                same = sum(a == b for a, b in zip(run.texts, library_texts))
                results[name]["agreement"] = round(same / len(sources), 4)
    report = {
        "benchmark": "tflite_beam",
        "workdir": str(args.workdir),
        "src": str(args.src),
        "sentences": len(sources),
        "threads": args.threads,
        "repeats": args.repeats,
        "quantize": args.quantize,
        "results": results,
        "goals": goals(results),
    }
    print(f"{'engine':<8} {'decoding':<8} {'ms/sentence':>11} {'BLEU':>6} {'chrF':>6}")
    for row in results.values():
        ms = f"{row['ms_per_sentence']:.2f}" if "ms_per_sentence" in row else "–"
        print(
            f"{row['engine']:<8} {row['decoding']:<8} {ms:>11} {row['bleu']:>6.2f} "
            f"{row['chrf']:>6.2f}"
        )
    for goal in report["goals"]:
        bound = next(f"{key} {value}" for key, value in goal.items() if key in ("<=", ">="))
        verdict = "met" if goal["met"] else "not met"
        print(f"goal: {goal['what']}: {goal['value']} ({bound}: {verdict})")
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
