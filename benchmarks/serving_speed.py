"""Speed of the shipped artifacts on real sentences: the exported SavedModel's
``serving_default`` (beam) and ``translate_greedy`` at batch 1 and 64, and the
TFLite model at batch 1.

    python -m benchmarks.serving_speed --saved-model runs/multi30k/export/1 \\
        --src ../shared/corpora/multi30k_de_en/test.src [--tflite runs/multi30k/model.tflite] \\
        [--batch-1-sentences 100] [--json out.json]

Strings in, strings out, as a client sees it (tokenization inside the graph).
Each configuration: one warm-up batch (tracing), then every sentence once;
sentences/s and generated target tokens/s (SentencePiece pieces of the output
plus EOS). The TFLite model takes ids: sources are tokenized with the exported
SentencePiece model outside the timed region, as an app would on the device.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the SavedModel)

from benchmarks.ct2_translate import spm_processors
from benchmarks.report import emit
from keras_transformer.exporters import LiteRTTranslator
from keras_transformer.tokenization import SubwordTokenizer


def timed(translate: Callable[[list[str]], list[str]], sentences: Sequence[str], batch: int):
    """``(outputs, seconds)``: ``translate`` over ``sentences`` in batches of ``batch``,
    after one untimed batch (tracing, caches)."""
    translate(list(sentences[:batch]))
    outputs: list[str] = []
    started = time.perf_counter()
    for start in range(0, len(sentences), batch):
        outputs += translate(list(sentences[start : start + batch]))
    return outputs, time.perf_counter() - started


def signature_translators(path: Path) -> dict[str, Callable[[list[str]], list[str]]]:
    """The SavedModel's ``translate_greedy`` and ``serving_default`` as list → list
    functions, named ``greedy`` and ``beam<k>``."""
    model = tf.saved_model.load(str(path))
    beam = int(model.beam_size_tensor.numpy())

    def call(signature):
        def translate(batch: list[str]) -> list[str]:
            return [
                text.decode("utf-8")
                for text in signature(inputs=tf.constant(batch))["translations"].numpy()
            ]

        return translate

    translators = {
        "greedy": call(model.signatures["translate_greedy"]),
        f"beam{beam}": call(model.signatures["serving_default"]),
    }
    if "translate_xla" in model.signatures:  # an export with xla=True
        translators.update(
            {
                "greedy_xla": call(model.signatures["translate_greedy_xla"]),
                f"beam{beam}_xla": call(model.signatures["translate_xla"]),
            }
        )
    return translators


def session_signatures(
    path: Path, names: Sequence[str]
) -> dict[str, Callable[[list[str]], list[str]]]:
    """The SavedModel's signatures ``names`` loaded as TF Serving loads them: the TF1
    session loader (``tf.compat.v1.saved_model``), each signature a ``Session``
    callable from a list of strings to their translations, keyed by its name.
    A signature called from Python this way does not pass the variables it
    captures at every call, as a ``tf.saved_model.load`` signature does."""
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph)
    with graph.as_default():
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(path))

    def call(name):
        signature = meta.signature_def[name]
        (source,) = signature.inputs.values()
        run = session.make_callable(
            signature.outputs["translations"].name, [graph.get_tensor_by_name(source.name)]
        )

        def translate(batch: list[str]) -> list[str]:
            return [text.decode("utf-8") for text in run(np.array(batch, dtype=object))]

        return translate

    return {name: call(name) for name in names}


def session_translators(path: Path, beam: int) -> dict[str, Callable[[list[str]], list[str]]]:
    """The SavedModel's ``translate_greedy`` and ``serving_default`` (exported with
    ``beam``) by ``session_signatures``; named like ``signature_translators``'s."""
    calls = session_signatures(path, ("translate_greedy", "serving_default"))
    return {"greedy": calls["translate_greedy"], f"beam{beam}": calls["serving_default"]}


def saved_model_rows(
    path: Path, sentences: list[str], batch_1_sentences: int, tgt_sp
) -> list[dict]:
    rows = []
    for name, translate in signature_translators(path).items():
        for batch in (1, 64):
            subset = sentences[:batch_1_sentences] if batch == 1 else sentences
            outputs, seconds = timed(translate, subset, batch)
            tokens = sum(len(tgt_sp.encode(text)) + 1 for text in outputs)
            rows.append(
                {
                    "artifact": "saved_model",
                    "decoder": name,
                    "batch": batch,
                    "sentences": len(subset),
                    "seconds": seconds,
                    "sentences_per_s": len(subset) / seconds,
                    "tokens_per_s": tokens / seconds,
                    "ms_per_sentence": 1000 * seconds / len(subset),
                }
            )
    return rows


def tflite_row(path: Path, sentences: list[str], src_sp, tgt_sp) -> dict:
    """The ``.tflite`` translator at batch 1 in LiteRT (``LiteRTTranslator``, every core):
    tokenized by the export's SentencePiece models outside the timed region, one untimed
    warm-up sentence; tokens are the output ids up to and with EOS."""
    translator = LiteRTTranslator(
        path,
        SubwordTokenizer(src_sp.serialized_model_proto()),
        SubwordTokenizer(tgt_sp.serialized_model_proto()),
        num_threads=os.cpu_count(),
    )
    result = translator.run(sentences)
    tokens = int(np.count_nonzero(result.target_ids))
    return {
        "artifact": "tflite",
        "decoder": translator.decoding,
        "batch": 1,
        "sentences": len(sentences),
        "seconds": result.seconds,
        "sentences_per_s": len(sentences) / result.seconds,
        "tokens_per_s": tokens / result.seconds,
        "ms_per_sentence": result.ms_per_sentence,
        "size_mb": translator.size_bytes / 1e6,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--saved-model", required=True, type=Path, help="export version folder (EXPORT/1)"
    )
    parser.add_argument("--src", required=True, type=Path, help="source sentences, one per line")
    parser.add_argument(
        "--tflite", type=Path, default=None, help="a .tflite from python -m export.tflite"
    )
    parser.add_argument(
        "--batch-1-sentences",
        type=int,
        default=100,
        help="sentences translated one at a time (the batch-64 runs use all)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    sentences = [
        line.strip() for line in args.src.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    src_sp, tgt_sp = spm_processors(args.saved_model / "assets")
    rows = saved_model_rows(args.saved_model, sentences, args.batch_1_sentences, tgt_sp)
    if args.tflite:
        rows.append(tflite_row(args.tflite, sentences[: args.batch_1_sentences], src_sp, tgt_sp))
    report = {
        "benchmark": "serving_speed",
        "saved_model": str(args.saved_model),
        "src": str(args.src),
        "machine": {"platform": platform.platform()},  # the CPU: emit's "cpu" record
        "tensorflow": tf.__version__,
        "results": rows,
    }
    print(
        f"{'artifact':<12} {'decoder':<7} {'batch':>5} {'sentences':>9} {'sent/s':>8} "
        f"{'tokens/s':>9} {'ms/sent':>8}"
    )
    for row in rows:
        print(
            f"{row['artifact']:<12} {row['decoder']:<7} {row['batch']:>5} {row['sentences']:>9} "
            f"{row['sentences_per_s']:>8.1f} {row['tokens_per_s']:>9.0f} "
            f"{row['ms_per_sentence']:>8.1f}"
        )
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
