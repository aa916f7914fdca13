"""The shipped SavedModel against CTranslate2 on the same trained model.

    python -m benchmarks.serving_vs_ct2 --workdir runs/multi30k \\
        --src ../shared/corpora/multi30k_de_en/test.src --ref
        ../shared/corpora/multi30k_de_en/test.tgt \\
        [--beam 4] [--alpha 1.4] [--batch-1-sentences 200] [--repeats 3] [--json out.json] \\
        [--cold] [--session] [--inter-op-threads N] [--intra-op-threads N] [--xla] [--baseline
        SAVED_MODEL] \\
        [--step-splits N] [--step-products conv|matmul] [--decode-parts N] \\
        [--ct2-backend fastest|library|mkl|dnnl]

Exports the workdir twice into a temporary folder: the SavedModel TF Serving
runs (``export_saved_model``: strings in and out, SentencePiece in the graph,
its ``serving_default`` beam search and ``translate_greedy``) and its
CTranslate2 conversion in float32 (``export_ctranslate2``, SentencePiece in
Python). Both then translate the same sentences in this process, back to
back, strings in and strings out: greedy and beam, at batch 64 (every
sentence) and batch 1 (the first ``--batch-1-sentences``). Each
configuration first translates one batch untimed (tracing, caches).

CTranslate2 computes its products with Intel MKL or oneDNN, chosen when it
loads (``CT2_USE_MKL``; its default, MKL on Intel CPUs, can be
several times slower than oneDNN there). By default (``--ct2-backend
fastest``) a short greedy probe times each backend in a fresh interpreter
that loads CTranslate2 and SentencePiece only, no TensorFlow
(``benchmarks.ct2_translate.probe_ct2``: one sentence at a time and a batch
of 64, ``PROBE_SENTENCES``) and the
faster one is set for the comparison; ``library`` keeps CTranslate2's own
default, ``mkl`` and ``dnnl`` choose; ``CT2_USE_MKL`` in the environment
decides over all of them. The report says which ran (``"ct2_backend"``).

The SavedModel is loaded with ``tf.saved_model.load`` and called through its
signatures, graph mode, no XLA, as TF Serving runs it. CTranslate2 gets the
same beam size, length penalty (``length_penalty=alpha``), source limit
(``max_input_length``) and output limit (``max_decoding_length``: the longest
source of the batch + 50, within the position table), ``min_decoding_length=0``,
and all the CPU's cores. The engines then take turns batch by batch,
``--repeats`` times over the sentences, and each batch counts its fastest time
for each engine: a slow moment of a shared machine falls on every engine
alike, and the minimum drops it.

Each timed call is warm: it follows an untimed call of the same engine on the
batch before, so it starts with that engine's weights in the CPU's caches, as
a server under load does. Right after the other engine's call (``--cold``)
each engine first reads its weights back from memory, and both are slower;
at batch 1 CTranslate2 loses more from it than the SavedModel, so the cold
ratio flatters the SavedModel (``benchmarks/README.md``).

Each row reports sentences/s, ms a sentence (the sums of those fastest
times), BLEU of its outputs, and the SavedModel's time over CTranslate2's
(``ratio``); ``"passes"`` in the JSON lists each repeat's total.

``--xla`` exports the XLA signatures too (``translate_xla``,
``translate_greedy_xla``) and times them as a third engine,
``saved_model_xla``, with a ratio of its own (``ratio_xla``). XLA compiles
once for each padded batch shape, so that engine first translates the whole
set once, untimed.

``--baseline DIR`` times another SavedModel of the same workdir (an export
made by an earlier version of the code, say) as one more engine,
``baseline``, with its own ratio (``ratio_baseline``): the two exports are
then compared in one process, batch by batch, on the same machine state.

``--session`` also times the SavedModel loaded as TF Serving loads it, by the
TF1 session loader, as one more engine, ``saved_model_session``, with its own
ratio (``ratio_session``): the same graph, called without passing the 100-odd
variables a ``tf.saved_model.load`` signature captures at every call.

``--inter-op-threads`` and ``--intra-op-threads`` set TensorFlow's thread
pools (0, the default: TensorFlow's choice, one thread a core for each) as
TF Serving's ``--tensorflow_inter_op_parallelism`` and
``--tensorflow_intra_op_parallelism`` set them for a served model.
``--step-splits N`` exports the small-batch decoding step with ``N``
splits (``export_saved_model(step_splits=N)``; 1: none), to time that export
under those pools; ``--step-products conv|matmul`` its products
(``export_saved_model(step_products=…)``; default: what suits this
process's TensorFlow, which ``TF_ENABLE_ONEDNN_OPTS`` may set).
``--decode-parts N`` exports the decoders of a batch of eight rows or more
as ``N`` parts side by side (``export_saved_model(decode_parts=N)``; 1:
one, for a server with one inter-op thread). One part also makes each
signature's first call, where TensorFlow optimises its graph, cheaper
(about 5x on a tiny model): most of what a quick run on a few sentences
costs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import sacrebleu
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the SavedModel)

from benchmarks.ct2_translate import EXTRA_LENGTH, ct2_translators
from benchmarks.report import emit
from benchmarks.serving_speed import session_translators, signature_translators, timed
from benchmarks.timing import add_thread_arguments, set_thread_pools
from keras_transformer import Workdir, kernels
from keras_transformer.exporters.ctranslate2 import export_ctranslate2
from keras_transformer.exporters.saved_model import export_saved_model

BATCHES = (64, 1)
# CTranslate2's CPU backends for its products, by the value of CT2_USE_MKL that selects them.
CT2_BACKENDS = {"mkl": "1", "dnnl": "0"}


def _fresh_env(**values: str) -> dict:
    """The environment for a fresh interpreter that imports this checkout's
    ``benchmarks``, with ``values`` set."""
    root = str(Path(__file__).resolve().parent.parent)
    return {
        **os.environ,
        **values,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }


def choose_ct2_backend(
    path: Path | None,
    sentences: Sequence[str],
    choice: str,
    *,
    max_input_length: int,
    max_length: int,
    extra_length: int = EXTRA_LENGTH,
) -> tuple[dict, str | None]:
    """Which CTranslate2 backend the comparison should use: ``(report,
    value)``, ``report`` ``{"backend", "how", "probe_ms"}`` and ``value`` the
    ``CT2_USE_MKL`` to run it with (``None``: as this process is).
    ``choice`` ``"fastest"`` times greedy decoding (``probe_ct2``: one
    sentence at a time, then 64 at once) under each of ``CT2_BACKENDS`` in
    a fresh interpreter, with ``ct2_translators``' limits
    (``max_input_length``, ``max_length``, ``extra_length``), and takes the
    one with the least time a sentence summed over both (``probe_ms``: each
    backend's two ms a sentence); ``"mkl"`` / ``"dnnl"`` take that one;
    ``"library"`` keeps CTranslate2's own default (Intel MKL on Intel CPUs,
    oneDNN on others). A ``CT2_USE_MKL`` already in the environment decides
    instead. ``path``: the CTranslate2 model the probe runs (only
    ``"fastest"`` reads it)."""
    if "CT2_USE_MKL" in os.environ:
        value = os.environ["CT2_USE_MKL"]
        chosen = {v: k for k, v in CT2_BACKENDS.items()}.get(value, f"CT2_USE_MKL={value}")
        return {"backend": chosen, "how": "CT2_USE_MKL in the environment", "probe_ms": None}, None
    if choice == "library":
        return {"backend": "library", "how": "CTranslate2's default", "probe_ms": None}, None
    probe_ms = None
    if choice == "fastest":
        code = (
            "import sys; from benchmarks.ct2_translate import probe_ct2; probe_ct2(*sys.argv[1:])"
        )
        limits = json.dumps(
            {
                "max_input_length": max_input_length,
                "max_length": max_length,
                "extra_length": extra_length,
            }
        )
        probe_ms = {}
        for backend, value in CT2_BACKENDS.items():
            result = subprocess.run(
                [sys.executable, "-c", code, str(path), json.dumps(list(sentences[:64])), limits],
                capture_output=True,
                text=True,
                env=_fresh_env(CT2_USE_MKL=value),
            )
            if result.returncode:
                raise RuntimeError(
                    f"CTranslate2's probe with CT2_USE_MKL={value} failed: {result.stderr[-2000:]}"
                )
            probe_ms[backend] = [
                round(ms, 2) for ms in json.loads(result.stdout.strip().splitlines()[-1])
            ]
        choice = min(probe_ms, key=lambda backend: sum(probe_ms[backend]))
    return (
        {
            "backend": choice,
            "how": "timed, the faster" if probe_ms else "asked for",
            "probe_ms": probe_ms,
        },
        CT2_BACKENDS[choice],
    )


# The backend a parent run chose, handed to the run it starts with CT2_USE_MKL set (JSON), and the
# CTranslate2 model its probe converted, if it probed.
_CHOSEN_ENV = "SERVING_VS_CT2_BACKEND"
_MODEL_ENV = "SERVING_VS_CT2_MODEL"


def rerun_with_backend(
    argv: Sequence[str], chosen: dict, value: str, model: Path | None = None
) -> int:
    """This benchmark again, in a fresh interpreter with ``CT2_USE_MKL`` set
    to ``value`` (CTranslate2 reads it when it loads, and this process has
    loaded it) and told the ``chosen`` backend's report and the converted
    ``model`` to time (``None``: it converts its own); its exit status."""
    env = _fresh_env(
        CT2_USE_MKL=value,
        **{_CHOSEN_ENV: json.dumps(chosen)},
        **({} if model is None else {_MODEL_ENV: str(model)}),
    )
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.serving_vs_ct2", *argv], env=env
    ).returncode


# The engines timed beside the SavedModel and CTranslate2 on request: their ratio's key and printed
# name.
EXTRA_ENGINES = {
    "saved_model_xla": ("ratio_xla", "SavedModel XLA"),
    "saved_model_session": ("ratio_session", "SavedModel, TF1 session"),
    "baseline": ("ratio_baseline", "baseline"),
}


def interleaved(
    engines: dict[str, Callable[[list[str]], list[str]]],
    sentences: Sequence[str],
    batch: int,
    repeats: int,
    warm: bool = True,
) -> dict[str, dict]:
    """``{engine: {"outputs", "seconds", "passes"}}``: every engine translates
    ``sentences`` in batches of ``batch``, ``repeats`` times, the engines taking
    turns batch by batch after one untimed batch each; ``seconds`` sums each
    batch's fastest time, ``passes`` lists each repeat's total. ``warm``: in
    its turn an engine first translates the batch before (the last one for
    the first), untimed, so that the timed call does not start from the
    other engine's state of the CPU's caches."""
    batches = [list(sentences[start : start + batch]) for start in range(0, len(sentences), batch)]
    for translate in engines.values():
        translate(batches[0])
    fastest = {engine: [float("inf")] * len(batches) for engine in engines}
    passes: dict[str, list[float]] = {engine: [] for engine in engines}
    outputs: dict[str, list[str]] = {}
    for _ in range(repeats):
        totals = dict.fromkeys(engines, 0.0)
        translated: dict[str, list[str]] = {engine: [] for engine in engines}
        for i, texts in enumerate(batches):
            for engine, translate in engines.items():
                if warm:
                    translate(batches[i - 1])
                started = time.perf_counter()
                translated[engine] += translate(texts)
                seconds = time.perf_counter() - started
                fastest[engine][i] = min(fastest[engine][i], seconds)
                totals[engine] += seconds
        for engine in engines:
            passes[engine].append(round(totals[engine], 3))
        outputs = translated
    return {
        engine: {
            "outputs": outputs[engine],
            "seconds": sum(fastest[engine]),
            "passes": passes[engine],
        }
        for engine in engines
    }


def summary(engine: str, result: dict) -> str:
    """``engine``'s speed and BLEU in a row of the printed table."""
    return (
        f"{engine} {result['sentences_per_s']:>7.1f} sent/s "
        f"({result['ms_per_sentence']:.1f} ms, BLEU {result['bleu']})"
    )


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    return round(sacrebleu.BLEU().corpus_score(list(hypotheses), [list(references)]).score, 2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--workdir", required=True, type=Path, help="a trained workdir (model.keras and tokenizers)"
    )
    parser.add_argument("--src", required=True, type=Path, help="source sentences, one per line")
    parser.add_argument("--ref", required=True, type=Path, help="their references, for BLEU")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument(
        "--alpha", type=float, default=0.6, help="length penalty of both beam searches"
    )
    parser.add_argument(
        "--batch-1-sentences",
        type=int,
        default=200,
        help="sentences translated one at a time (batch 64 uses all)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed passes over the sentences, the engines taking turns batch by batch",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="time each call right after the other engine's, without a warm-up call of its own",
    )
    add_thread_arguments(parser)
    parser.add_argument(
        "--xla",
        action="store_true",
        help="also time the SavedModel's XLA signatures (export_saved_model(xla=True))",
    )
    parser.add_argument(
        "--step-splits",
        type=int,
        default=None,
        metavar="N",
        help="the export's small-batch step splits (export_saved_model(step_splits=N); default: "
        "the exporter's)",
    )
    parser.add_argument(
        "--step-products",
        choices=kernels.PRODUCT_OPS,
        default=None,
        help="the export's small-batch step products (export_saved_model(step_products=...); "
        "default: the exporter's choice for this process's TensorFlow)",
    )
    parser.add_argument(
        "--decode-parts",
        type=int,
        default=None,
        metavar="N",
        help="the parts a batch of 8 rows or more decodes as (export_saved_model(decode_parts=N); "
        "default: the exporter's; 1: one)",
    )
    parser.add_argument(
        "--session",
        action="store_true",
        help="also time the SavedModel loaded by the TF1 session loader, as TF Serving loads it",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another SavedModel of the same workdir (e.g. exported by an earlier version) to time "
        "too",
    )
    parser.add_argument(
        "--ct2-backend",
        choices=("fastest", "library", *CT2_BACKENDS),
        default="fastest",
        help="CTranslate2's CPU backend: the faster of Intel MKL and oneDNN on a short greedy "
        "probe (default), CTranslate2's own default, or one of them; CT2_USE_MKL in the "
        "environment decides instead",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.step_splits is not None and args.step_splits < 1:
        parser.error(f"--step-splits must be >= 1, got {args.step_splits}")
    if args.decode_parts is not None and args.decode_parts < 1:
        parser.error(f"--decode-parts must be >= 1, got {args.decode_parts}")
    set_thread_pools(parser, args)
    if args.baseline is not None and not (args.baseline / "saved_model.pb").is_file():
        parser.error(
            f"--baseline {args.baseline}: no saved_model.pb there; pass an export's version folder."
        )
    sentences = args.src.read_text(encoding="utf-8").splitlines()
    references = args.ref.read_text(encoding="utf-8").splitlines()
    if len(sentences) != len(references):
        parser.error(f"{args.src} has {len(sentences)} lines and {args.ref} {len(references)}.")
    trained = Workdir(args.workdir).check().load("fp32")
    max_length = trained.model.config.max_length
    ct2_limits = dict(
        max_input_length=min(trained.max_src_length, max_length), max_length=max_length
    )
    if _CHOSEN_ENV in os.environ:  # started by a run that chose the backend
        ct2_backend = json.loads(os.environ[_CHOSEN_ENV])
    else:
        probe = args.ct2_backend == "fastest" and "CT2_USE_MKL" not in os.environ
        with tempfile.TemporaryDirectory(prefix="serving_vs_ct2_probe_") as tmp:
            probe_model = export_ctranslate2(trained, Path(tmp) / "ct2") if probe else None
            ct2_backend, value = choose_ct2_backend(
                probe_model, sentences, args.ct2_backend, **ct2_limits
            )
            if value is not None:  # the timed run, which takes the probe's conversion
                print(
                    f"CTranslate2 backend: {ct2_backend['backend']} ({ct2_backend['how']}"
                    + (
                        f"; probe, ms a sentence at batch 1 and 64: {ct2_backend['probe_ms']}"
                        if ct2_backend["probe_ms"]
                        else ""
                    )
                    + "); timing in a fresh process with it",
                    flush=True,
                )
                return rerun_with_backend(
                    sys.argv[1:] if argv is None else argv, ct2_backend, value, probe_model
                )
    with tempfile.TemporaryDirectory(prefix="serving_vs_ct2_") as tmp:
        saved_model = export_saved_model(
            trained,
            Path(tmp) / "saved_model",
            beam_size=args.beam,
            alpha=args.alpha,
            xla=args.xla,
            step_splits=args.step_splits,
            step_products=args.step_products,
            decode_parts=args.decode_parts,
        )
        probed = os.environ.get(_MODEL_ENV)  # the conversion a parent run probed, or one of its own
        ct2 = Path(probed) if probed else export_ctranslate2(trained, Path(tmp) / "ct2")
        print(f"CTranslate2 backend: {ct2_backend['backend']} ({ct2_backend['how']})", flush=True)
        signatures = signature_translators(saved_model)

        def greedy_and_beam(translators: dict, suffix: str = "") -> dict:
            return {
                "greedy": translators[f"greedy{suffix}"],
                "beam": translators[f"beam{args.beam}{suffix}"],
            }

        engines = {
            "saved_model": greedy_and_beam(signatures),
            "ctranslate2": ct2_translators(ct2, beam=args.beam, alpha=args.alpha, **ct2_limits),
        }
        if args.xla:
            engines["saved_model_xla"] = greedy_and_beam(signatures, "_xla")
        if args.session:
            engines["saved_model_session"] = greedy_and_beam(
                session_translators(saved_model, args.beam)
            )
        if args.baseline is not None:
            engines["baseline"] = greedy_and_beam(signature_translators(args.baseline))
        rows = []
        for decoder in ("greedy", "beam"):
            for batch in BATCHES:
                subset = sentences if batch > 1 else sentences[: args.batch_1_sentences]
                row = {
                    "decoder": decoder if decoder == "greedy" else f"beam{args.beam}",
                    "batch": batch,
                    "sentences": len(subset),
                }
                if (
                    "saved_model_xla" in engines
                ):  # one compilation per padded shape, before any timing
                    timed(engines["saved_model_xla"][decoder], subset, batch)
                results = interleaved(
                    {engine: translators[decoder] for engine, translators in engines.items()},
                    subset,
                    batch,
                    args.repeats,
                    warm=not args.cold,
                )
                for engine, result in results.items():
                    seconds = result["seconds"]
                    row[engine] = {
                        "bleu": bleu(result["outputs"], references[: len(subset)]),
                        "seconds": round(seconds, 3),
                        "sentences_per_s": round(len(subset) / seconds, 1),
                        "ms_per_sentence": round(1000 * seconds / len(subset), 2),
                        "passes": result["passes"],
                    }
                # ratios of the unrounded times: a tiny test model's call rounds to 0.000 s
                ct2_seconds = results["ctranslate2"]["seconds"]
                row["ratio"] = round(results["saved_model"]["seconds"] / ct2_seconds, 2)
                head = f"{row['decoder']:<7} batch {batch:>2}:"
                for engine, (ratio, label) in EXTRA_ENGINES.items():
                    if engine in engines:
                        row[ratio] = round(results[engine]["seconds"] / ct2_seconds, 2)
                        print(f"{head} {summary(label, row[engine])}: {row[ratio]}x", flush=True)
                rows.append(row)
                print(
                    f"{head} {summary('SavedModel', row['saved_model'])}, "
                    f"{summary('CTranslate2', row['ctranslate2'])}: {row['ratio']}x",
                    flush=True,
                )
    report = {
        "benchmark": "serving_vs_ct2",
        "workdir": str(args.workdir),
        "src": str(args.src),
        "beam": args.beam,
        "alpha": args.alpha,
        "tensorflow": tf.__version__,
        "warm": not args.cold,
        "inter_op_threads": args.inter_op_threads,
        "intra_op_threads": args.intra_op_threads,
        "step_splits": args.step_splits,
        "step_products": args.step_products,
        "decode_parts": args.decode_parts,
        "onednn_rewrites": kernels.onednn_rewrites(),
        "baseline": None if args.baseline is None else str(args.baseline),
        "ct2_backend": ct2_backend,
        "results": rows,
    }
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
