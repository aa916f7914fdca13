"""The inference kernels' choices, timed one op group at a time in a ``tf.while_loop``.

    python -m benchmarks.inference_kernels [--rows 1,4,16,64] [--keys 17] [--json out.json]

Two questions a decoding step of few rows answers on TensorFlow's graph executor:

* **attention**: one query a row against ``--keys`` keys, ``--heads`` heads of ``--depth``,
  as ``kernels.attend`` computes it (``BatchMatMulV3``, which the oneDNN build leaves to
  Eigen, and an ``exp`` softmax), against ``tf.matmul`` + ``tf.nn.softmax`` (oneDNN's
  ``BatchMatMulV2`` and ``Softmax``) and against a broadcast product and sums. Eight chained
  attentions an iteration; µs an attention, over the same loop without them.
* **tied logits**: ``[rows, d_model] × [vocab, d_model]ᵀ`` as one product against
  ``kernels.OUTPUT_SLICES`` products of slices of the embedding's rows, concatenated (the
  few-rows step's). ``--copies`` embeddings take turns so that each product streams its
  weights from memory, as in a decoding step; µs a product.

Each figure is the median of ``--repeats`` timed loops, the variants taking turns.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
import tensorflow as tf

from benchmarks.report import emit
from keras_transformer import kernels


def by_sums(q, k, v):
    scores = tf.reduce_sum(q * k, axis=-1)  # q [rows, heads, 1, depth]: broadcast over the keys
    exp = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))
    weights = exp / tf.reduce_sum(exp, axis=-1, keepdims=True)
    return tf.reduce_sum(weights[..., tf.newaxis] * v, axis=2, keepdims=True)


def onednn_matmuls(q, k, v):
    return tf.matmul(tf.nn.softmax(tf.matmul(q, k, transpose_b=True)), v)


ATTENTIONS: dict[str, Callable] = {
    "kernels.attend (BatchMatMulV3, exp)": lambda q, k, v: kernels.attend(q, k, v),
    "tf.matmul + tf.nn.softmax": onednn_matmuls,
    "broadcast product and sums": by_sums,
}


def interleaved(functions: dict[str, Callable], repeats: int) -> dict[str, float]:
    """Median seconds of each function, the functions taking turns after a warm-up call."""
    for function in functions.values():
        function()
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            started = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def attention_times(rows: int, keys: int, heads: int, depth: int, iterations: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    q0 = tf.constant(rng.normal(size=(rows, heads, 1, depth)).astype("float32"))
    k = tf.constant(rng.normal(size=(rows, heads, keys, depth)).astype("float32"))
    v = tf.constant(rng.normal(size=(rows, heads, keys, depth)).astype("float32"))
    chained = 8

    def loop(attention):
        @tf.function
        def run():
            def body(i, q):
                for _ in range(chained):
                    q = attention(q, k, v) * 0.5
                return i + 1, q
            return tf.while_loop(lambda i, q: i < iterations, body, (0, q0))[1]
        return run

    functions = {"none": loop(lambda q, k, v: q)} | {name: loop(a) for name, a in ATTENTIONS.items()}
    seconds = interleaved(functions, repeats)
    return {name: 1e6 * (seconds[name] - seconds["none"]) / iterations / chained for name in ATTENTIONS}


def logits_times(rows: int, vocab: int, d_model: int, copies: int, iterations: int, repeats: int) -> dict:
    rng = np.random.default_rng(1)
    embeddings = [tf.constant(rng.normal(scale=0.05, size=(vocab, d_model)).astype("float32"))
                  for _ in range(copies)]
    slices = min(kernels.OUTPUT_SLICES, vocab)
    sizes = [vocab // slices + (i < vocab % slices) for i in range(slices)]
    x0 = tf.constant(rng.normal(size=(rows, d_model)).astype("float32"))

    def loop(product):
        @tf.function
        def run():
            parts = [tf.split(e, sizes) for e in embeddings]

            def body(i, x):
                for e, p in zip(embeddings, parts):
                    x = x + 1e-4 * product(x, e, p)[:, :d_model]
                return i + 1, x
            return tf.while_loop(lambda i, x: i < iterations, body, (0, x0))[1]
        return run

    functions = {
        "one product": loop(lambda x, e, p: tf.matmul(x, e, transpose_b=True)),
        f"{slices} slices": loop(lambda x, e, p: tf.concat([tf.matmul(x, s, transpose_b=True) for s in p], 1)),
    }
    seconds = interleaved(functions, repeats)
    return {name: 1e6 * value / iterations / copies for name, value in seconds.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1,4,16,64", help="comma-separated row counts")
    parser.add_argument("--keys", type=int, default=17)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--depth", type=int, default=48)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--d-model", type=int, default=192)
    parser.add_argument("--copies", type=int, default=6, help="embeddings taking turns (default 6: 37 MB)")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    if min(rows) < 1:
        parser.error("--rows must be positive integers, e.g. 1,4,16,64")
    results = []
    for count in rows:
        attention = attention_times(count, args.keys, args.heads, args.depth, args.iterations, args.repeats)
        logits = logits_times(count, args.vocab, args.d_model, args.copies, max(1, args.iterations // 10),
                              args.repeats)
        results.append({"rows": count, "attention_us": attention, "logits_us": logits})
        print(f"rows {count}: attention " + ", ".join(f"{k} {v:.1f} µs" for k, v in attention.items())
              + "; logits " + ", ".join(f"{k} {v:.1f} µs" for k, v in logits.items()), flush=True)
    emit({"benchmark": "inference_kernels", "tensorflow": tf.__version__, "keys": args.keys, "heads": args.heads,
          "depth": args.depth, "vocab": args.vocab, "d_model": args.d_model, "copies": args.copies,
          "results": results}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
