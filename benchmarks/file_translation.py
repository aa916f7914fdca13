"""A file translated with beam search: our batching by length against CTranslate2's.

    python -m benchmarks.file_translation --workdir runs/multi30k \\
        --src ../shared/corpora/multi30k_de_en/test.src [--ref .../test.tgt] \\
        [--beam 4] [--alpha 0.6] [--batch-tokens N] [--window N] [--repeats 1] \\
        [--decode-parts N] [--inter-op-threads N] [--intra-op-threads N] [--json out.json]

Five ways through the same source file, with the same beam, length penalty and
thread count, each writing one line a line of input:

- ``sorted``: ``Translator.from_workdir(...).translate_iterable`` with the
  batching by length (``keras_transformer.translate.token_batches``:
  ``--batch-tokens`` padded source tokens a batch, ``--window`` lines sorted at
  a time);
- ``input_order``: the same translator, 64 sentences a batch in input order
  (``batch_tokens=None``, the batching before token budgets);
- ``saved_model``: ``Translator.from_saved_model`` over a SavedModel of the
  workdir (``export_saved_model``), ``translate_iterable`` as for ``sorted``:
  the program's translation, loaded once;
- ``program``: ``python -m export.translate`` in its own process (stdin and
  stdout the files) over that SavedModel, with ``--batch-tokens`` and
  ``--window``; its time includes starting Python, importing TensorFlow,
  loading the SavedModel's signature and its first call, as a run of
  the program does;
- ``ctranslate2``: the workdir converted by ``export_ctranslate2`` (float32),
  ``Translator.translate_iterable`` with ``max_batch_size=--batch-tokens``,
  ``batch_type="tokens"`` (CTranslate2 reads 16 batches' worth of lines and
  sorts them), SentencePiece in Python, ``inter_threads=1`` and
  ``intra_threads`` TensorFlow's intra-op pool (all cores by default).

CTranslate2's output limit is one for the whole file,
``min(max_src_length + 50, max_length)``; ours is each source's length + 50
(the same for every sentence that ends before it). Each engine first
translates the first 64 lines untimed (tracing, caches), then the whole file
``--repeats`` times; ``seconds`` is the fastest pass, ``ratio`` the engine's
seconds over CTranslate2's. ``agreement`` is the share of lines each engine
translates as ``sorted`` does (``input_order`` must be 1.0: a sentence
translates the same in any batch); with ``--ref``, BLEU.

``--decode-parts N``: our engines decode a batch as ``N`` parts side by side
(``Translator(decode_parts=N)``, ``export_saved_model(decode_parts=N)``;
default: the library's; 1: whole). One part also makes each decoder's first
call, where TensorFlow optimises its graph, cheaper: most of what a quick run
on a few lines costs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tensorflow as tf

from benchmarks.ct2_translate import EXTRA_LENGTH, spm_processors
from benchmarks.report import emit
from benchmarks.timing import add_thread_arguments, set_thread_pools
from keras_transformer import Translator, Workdir
from keras_transformer.translate import BATCH_TOKENS, INPUT_ORDER_BATCH, WINDOW

ENGINES = ("sorted", "input_order", "saved_model", "program", "ctranslate2")
WARMUP_LINES = 64


def read_lines(path: Path):
    """The lines of ``path`` without their newlines, read as the program reads them."""
    with open(path, encoding="utf-8") as handle:
        yield from (line.rstrip("\n") for line in handle)


def write_lines(path: Path, lines) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")


def api_engine(translator, **options) -> Callable[[Path, Path], None]:
    """``(src, out)`` → ``out`` written by ``translator.translate_iterable(src's lines)``."""

    def run(src: Path, out: Path) -> None:
        write_lines(out, translator.translate_iterable(read_lines(src), **options))

    return run


def program_engine(saved_model: Path, beam: int, batch_tokens: int, window: int):
    """``(src, out)`` → ``out`` written by ``python -m export.translate`` over ``saved_model``.

    The program runs as a user runs it, in its own process from the checkout: its time includes
    starting Python, importing TensorFlow and loading the SavedModel.
    """
    argv = [sys.executable, "-m", "export.translate", "--model", str(saved_model)]
    argv += ["--beam", str(beam), "--batch-tokens", str(batch_tokens), "--window", str(window)]
    checkout = Path(__file__).resolve().parent.parent

    def run(src: Path, out: Path) -> None:
        with open(src, encoding="utf-8") as stdin, open(out, "w", encoding="utf-8") as stdout:
            result = subprocess.run(
                argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, cwd=checkout, text=True
            )
        if result.returncode:
            raise RuntimeError(
                f"python -m export.translate exited {result.returncode}: {result.stderr[-2000:]}"
            )

    return run


def ct2_engine(path: Path, *, beam: int, alpha: float, batch_tokens: int, threads: int, limits):
    """``(src, out)`` → ``out`` written by CTranslate2's ``translate_iterable`` over ``path``."""
    import ctranslate2

    src_sp, tgt_sp = spm_processors(path)
    translator = ctranslate2.Translator(
        str(path), device="cpu", inter_threads=1, intra_threads=threads
    )
    max_input_length, max_length = limits

    def run(src: Path, out: Path) -> None:
        results = translator.translate_iterable(
            (src_sp.encode(line, out_type=str) for line in read_lines(src)),
            max_batch_size=batch_tokens,
            batch_type="tokens",
            beam_size=beam,
            length_penalty=alpha if beam > 1 else 0,
            max_input_length=max_input_length,
            max_decoding_length=min(max_input_length + EXTRA_LENGTH, max_length),
            min_decoding_length=0,
        )
        write_lines(out, (tgt_sp.decode(result.hypotheses[0]) for result in results))

    return run


def bleu(hypotheses: list[str], references: list[str]) -> float:
    import sacrebleu

    return round(sacrebleu.BLEU().corpus_score(hypotheses, [references]).score, 2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", required=True, type=Path, help="a trained workdir")
    parser.add_argument("--src", required=True, type=Path, help="the file to translate")
    parser.add_argument("--ref", type=Path, default=None, help="its references, for BLEU")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6, help="the length penalty")
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=BATCH_TOKENS,
        help="padded source tokens a batch, ours and CTranslate2's max_batch_size",
    )
    parser.add_argument("--window", type=int, default=WINDOW, help="lines sorted at a time")
    parser.add_argument("--repeats", type=int, default=1, help="timed passes; the fastest counts")
    parser.add_argument(
        "--decode-parts",
        type=int,
        default=None,
        metavar="N",
        help="the parts our engines decode a batch as (default: the library's; 1: whole)",
    )
    parser.add_argument(
        "--engines", nargs="+", choices=ENGINES, default=list(ENGINES), help="what to time"
    )
    add_thread_arguments(parser)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    for flag in ("beam", "batch_tokens", "window", "repeats", "decode_parts"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if "ctranslate2" in args.engines and "ctranslate2" not in sys.modules:
        try:
            import ctranslate2  # noqa: F401
        except ImportError:
            parser.error("the ctranslate2 engine needs CTranslate2: pip install ctranslate2")
    set_thread_pools(parser, args)
    threads = args.intra_op_threads or os.cpu_count()
    sources = list(read_lines(args.src))
    references = list(read_lines(args.ref)) if args.ref else None
    if references is not None and len(references) != len(sources):
        parser.error(f"{args.src} has {len(sources)} lines and {args.ref} {len(references)}.")

    trained = Workdir(args.workdir).check().load("fp32")
    translator = Translator.from_trained_model(
        trained, beam_size=args.beam, alpha=args.alpha, decode_parts=args.decode_parts
    )
    with tempfile.TemporaryDirectory(prefix="file_translation_") as tmp:
        tmp = Path(tmp)
        engines: dict[str, Callable[[Path, Path], None]] = {}
        batching = dict(batch_tokens=args.batch_tokens, window=args.window)
        if "sorted" in args.engines:
            engines["sorted"] = api_engine(translator, **batching)
        if "input_order" in args.engines:
            engines["input_order"] = api_engine(
                translator, batch_size=INPUT_ORDER_BATCH, batch_tokens=None, window=None
            )
        if {"saved_model", "program"} & set(args.engines):
            from keras_transformer.exporters import export_saved_model

            saved_model = export_saved_model(
                trained,
                tmp / "saved_model",
                beam_size=args.beam,
                alpha=args.alpha,
                decode_parts=args.decode_parts,
            )
        if "saved_model" in args.engines:
            engines["saved_model"] = api_engine(
                Translator.from_saved_model(saved_model, beam_size=args.beam), **batching
            )
        if "program" in args.engines:
            engines["program"] = program_engine(
                saved_model, args.beam, args.batch_tokens, args.window
            )
        if "ctranslate2" in args.engines:
            from keras_transformer.exporters.ctranslate2 import export_ctranslate2

            max_length = trained.model.config.max_length
            engines["ctranslate2"] = ct2_engine(
                export_ctranslate2(trained, tmp / "ct2"),
                beam=args.beam,
                alpha=args.alpha,
                batch_tokens=args.batch_tokens,
                threads=threads,
                limits=(min(trained.max_src_length, max_length), max_length),
            )
        warmup = tmp / "warmup.src"
        write_lines(warmup, sources[:WARMUP_LINES])
        results: dict[str, dict] = {}
        outputs: dict[str, list[str]] = {}
        for name, run in engines.items():
            with contextlib.redirect_stdout(sys.stderr):  # nothing of theirs in the report
                run(warmup, tmp / "warmup.out")
            passes = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                run(args.src, tmp / f"{name}.out")
                passes.append(time.perf_counter() - started)
            outputs[name] = list(read_lines(tmp / f"{name}.out"))
            if len(outputs[name]) != len(sources):
                raise RuntimeError(f"{name} wrote {len(outputs[name])} lines for {len(sources)}")
            seconds = min(passes)
            results[name] = {
                "seconds": round(seconds, 3),
                "sentences_per_s": round(len(sources) / seconds, 1),
                "passes": [round(p, 3) for p in passes],
            }
    reference = outputs.get("sorted")
    for name, result in results.items():
        if "ctranslate2" in results:
            result["ratio"] = round(result["seconds"] / results["ctranslate2"]["seconds"], 2)
        if reference is not None:
            same = sum(a == b for a, b in zip(outputs[name], reference))
            result["agreement"] = round(same / max(1, len(sources)), 4)
        if references is not None:
            result["bleu"] = bleu(outputs[name], references)
    print(f"{len(sources)} lines, beam {args.beam}, {threads} threads")
    print(f"{'engine':<12} {'seconds':>8} {'sent/s':>8} {'ratio':>6} {'agree':>6}")
    nan = float("nan")
    for name, result in results.items():
        print(
            f"{name:<12} {result['seconds']:>8.2f} {result['sentences_per_s']:>8.1f} "
            f"{result.get('ratio', nan):>6.2f} {result.get('agreement', nan):>6.3f}"
        )
    report = {
        "benchmark": "file_translation",
        "workdir": str(args.workdir),
        "src": str(args.src),
        "lines": len(sources),
        "beam": args.beam,
        "alpha": args.alpha,
        "batch_tokens": args.batch_tokens,
        "window": args.window,
        "input_order_batch": INPUT_ORDER_BATCH,
        "threads": threads,
        "inter_op_threads": args.inter_op_threads,
        "intra_op_threads": args.intra_op_threads,
        "repeats": args.repeats,
        "decode_parts": args.decode_parts,
        "tensorflow": tf.__version__,
        "results": results,
    }
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
