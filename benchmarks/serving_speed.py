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
from pathlib import Path

import numpy as np
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the SavedModel)

from benchmarks.report import emit


def _spm_model(saved_model: Path) -> spm.SentencePieceProcessor:
    models = sorted((saved_model / "assets").glob("spm_*.model"))
    if not models:
        raise ValueError(f"No SentencePiece model in {saved_model / 'assets'}: is it an export of ours?")
    target = [m for m in models if m.name in ("spm_shared.model", "spm_tgt.model")][0]
    source = [m for m in models if m.name in ("spm_shared.model", "spm_src.model")][0]
    return spm.SentencePieceProcessor(model_file=str(source)), spm.SentencePieceProcessor(model_file=str(target))


def saved_model_rows(path: Path, sentences: list[str], batch_1_sentences: int, tgt_sp) -> list[dict]:
    model = tf.saved_model.load(str(path))
    beam = int(model.beam_size_tensor.numpy())
    rows = []
    for name, signature in (("greedy", model.signatures["translate_greedy"]),
                            (f"beam{beam}", model.signatures["serving_default"])):
        for batch in (1, 64):
            subset = sentences[:batch_1_sentences] if batch == 1 else sentences
            signature(inputs=tf.constant(subset[:batch]))  # trace + warm up
            outputs = []
            started = time.perf_counter()
            for i in range(0, len(subset), batch):
                outputs += [t.decode() for t in signature(inputs=tf.constant(subset[i:i + batch]))
                            ["translations"].numpy()]
            seconds = time.perf_counter() - started
            tokens = sum(len(tgt_sp.encode(text)) + 1 for text in outputs)
            rows.append({"artifact": "saved_model", "decoder": name, "batch": batch, "sentences": len(subset),
                         "seconds": seconds, "sentences_per_s": len(subset) / seconds,
                         "tokens_per_s": tokens / seconds, "ms_per_sentence": 1000 * seconds / len(subset)})
    return rows


def tflite_row(path: Path, sentences: list[str], src_sp) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=os.cpu_count())
    runner = interpreter.get_signature_runner()
    width = runner.get_input_details()["source_ids"]["shape"][1]
    eos = 3
    ids = np.zeros((len(sentences), width), np.int32)
    for row, text in zip(ids, sentences):
        pieces = src_sp.encode(text)[: width - 1] + [eos]
        row[: len(pieces)] = pieces
    runner(source_ids=ids[:1])  # warm up
    started = time.perf_counter()
    tokens = 0
    for row in ids:
        out = runner(source_ids=row[np.newaxis])["target_ids"][0]
        tokens += int(np.count_nonzero(out))
    seconds = time.perf_counter() - started
    return {"artifact": "tflite", "decoder": "greedy", "batch": 1, "sentences": len(sentences),
            "seconds": seconds, "sentences_per_s": len(sentences) / seconds, "tokens_per_s": tokens / seconds,
            "ms_per_sentence": 1000 * seconds / len(sentences), "size_mb": path.stat().st_size / 1e6}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saved-model", required=True, type=Path, help="export version folder (EXPORT/1)")
    parser.add_argument("--src", required=True, type=Path, help="source sentences, one per line")
    parser.add_argument("--tflite", type=Path, default=None, help="a .tflite from python -m export.tflite")
    parser.add_argument("--batch-1-sentences", type=int, default=100,
                        help="sentences translated one at a time (the batch-64 runs use all)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    sentences = [line.strip() for line in args.src.read_text(encoding="utf-8").splitlines() if line.strip()]
    src_sp, tgt_sp = _spm_model(args.saved_model)
    rows = saved_model_rows(args.saved_model, sentences, args.batch_1_sentences, tgt_sp)
    if args.tflite:
        rows.append(tflite_row(args.tflite, sentences[: args.batch_1_sentences], src_sp))
    report = {"benchmark": "serving_speed", "saved_model": str(args.saved_model), "src": str(args.src),
              "machine": {"platform": platform.platform()},  # the CPU: emit's "cpu" record
              "tensorflow": tf.__version__, "results": rows}
    print(f"{'artifact':<12} {'decoder':<7} {'batch':>5} {'sentences':>9} {'sent/s':>8} {'tokens/s':>9} {'ms/sent':>8}")
    for row in rows:
        print(f"{row['artifact']:<12} {row['decoder']:<7} {row['batch']:>5} {row['sentences']:>9} "
              f"{row['sentences_per_s']:>8.1f} {row['tokens_per_s']:>9.0f} {row['ms_per_sentence']:>8.1f}")
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
