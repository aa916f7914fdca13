"""The inference kernels' choices, timed one op group at a time in a ``tf.while_loop``.

    python -m benchmarks.inference_kernels [--rows 1,4,16,64] [--keys 17] [--candidates 32000] \
        [--json out.json]

The choices a decoding step of few rows makes on TensorFlow's graph executor:

* **attention**: one query a row against ``--keys`` keys, ``--heads`` heads of ``--depth``,
  as ``kernels.attend`` computes it (``BatchMatMulV3``, which the oneDNN build leaves to
  Eigen, and an ``exp`` softmax), against ``tf.matmul`` + ``tf.nn.softmax`` (oneDNN's
  ``BatchMatMulV2`` and ``Softmax``) and against a broadcast product and sums. Eight chained
  attentions an iteration; µs an attention, over the same loop without them.
* **tied logits**: ``[rows, d_model] × [vocab, d_model]ᵀ`` as one product against
  ``kernels.OUTPUT_SLICES`` products of slices of the embedding's rows, concatenated (the
  small-batch step's). ``--copies`` embeddings take turns so that each product reads its
  weights from memory rather than the CPU's caches (a step whose weights were evicted; on
  a server under load they may be in the cache); µs a product.
* **layer products**: a decoder's 6 products a layer for ``--layers`` layers (``--d-model``,
  ``--d-ff``), with the bias fused into oneDNN's product (``BiasAdd``, as grappler fuses
  it) against oneDNN's plain product and the bias unfused (``kernels.projection.unfused``, the
  small-batch step's); µs a product.
* **top-k**: the best ``--top-k`` of ``--candidates`` a row, ``tf.math.top_k`` against
  ``kernels.top_k`` (beam search's candidates); µs a call, over the same loop without it.

Each figure is the median of ``--repeats`` timed loops, the variants taking turns.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from benchmarks.report import emit
from benchmarks.workload import decoder_product_shapes
from keras_transformer import kernels
from keras_transformer.kernels.projection import unfused
from keras_transformer.kernels.small_batch import output_slice_sizes


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


def attention_times(
    rows: int, keys: int, heads: int, depth: int, iterations: int, repeats: int
) -> dict:
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

    functions = {"none": loop(lambda q, k, v: q)} | {
        name: loop(a) for name, a in ATTENTIONS.items()
    }
    seconds = interleaved(functions, repeats)
    return {
        name: 1e6 * (seconds[name] - seconds["none"]) / iterations / chained for name in ATTENTIONS
    }


def logits_times(
    rows: int, vocab: int, d_model: int, copies: int, iterations: int, repeats: int
) -> dict:
    rng = np.random.default_rng(1)
    embeddings = [
        tf.constant(rng.normal(scale=0.05, size=(vocab, d_model)).astype("float32"))
        for _ in range(copies)
    ]
    sizes = output_slice_sizes(vocab)
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
        f"{len(sizes)} slices": loop(
            lambda x, e, p: tf.concat([tf.matmul(x, s, transpose_b=True) for s in p], 1)
        ),
    }
    seconds = interleaved(functions, repeats)
    return {name: 1e6 * value / iterations / copies for name, value in seconds.items()}


def product_times(
    rows: int, d_model: int, d_ff: int, layers: int, iterations: int, repeats: int
) -> dict:
    rng = np.random.default_rng(2)
    shapes = decoder_product_shapes(d_model, d_ff) * layers
    weights = [
        (
            tf.constant(rng.normal(scale=0.05, size=shape).astype("float32")),
            tf.constant(rng.normal(scale=0.05, size=shape[1]).astype("float32")),
        )
        for shape in shapes
    ]
    x0 = tf.constant(rng.normal(size=(rows, d_model)).astype("float32"))

    def loop(bias_of):
        @tf.function
        def run():
            products = [(kernel, bias_of(bias)) for kernel, bias in weights]

            def body(i, x):
                h = x
                for kernel, bias in products:
                    y = kernels.project_rows(
                        h if kernel.shape[0] == d_model else tf.tile(h, [1, d_ff // d_model]),
                        (kernel, bias),
                        tf.nn.relu if kernel.shape[1] == d_ff else None,
                    )
                    h = h + 0.5 * y[:, :d_model]
                return i + 1, h

            return tf.while_loop(lambda i, x: i < iterations, body, (0, x0))[1]

        return run

    functions = {
        "bias fused (BiasAdd)": loop(lambda bias: bias),
        "bias unfused (Sub)": loop(unfused),
    }
    seconds = interleaved(functions, repeats)
    return {name: 1e6 * value / iterations / len(shapes) for name, value in seconds.items()}


def top_k_times(rows: int, candidates: int, k: int, iterations: int, repeats: int) -> dict:
    scores = tf.constant(np.random.default_rng(3).normal(size=(rows, candidates)).astype("float32"))

    def loop(top_k):
        @tf.function
        def run():
            def body(i, total):
                values, indices = top_k(scores + tf.cast(i, tf.float32))
                return i + 1, total + values[:, 0] + tf.cast(indices[:, 0], tf.float32)

            return tf.while_loop(lambda i, t: i < iterations, body, (0, tf.zeros([rows])))[1]

        return run

    functions = {
        "none": loop(lambda x: (x[:, :k], tf.zeros([rows, k], tf.int32))),
        "tf.math.top_k": loop(lambda x: tf.math.top_k(x, k=k)),
        "kernels.top_k": loop(lambda x: kernels.top_k(x, k)),
    }
    seconds = interleaved(functions, repeats)
    return {
        name: 1e6 * (seconds[name] - seconds["none"]) / iterations
        for name in functions
        if name != "none"
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default="1,4,16,64", help="comma-separated row counts")
    parser.add_argument("--keys", type=int, default=17)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--depth", type=int, default=48)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--d-model", type=int, default=192)
    parser.add_argument(
        "--copies", type=int, default=6, help="embeddings taking turns (default 6: 37 MB)"
    )
    parser.add_argument("--d-ff", type=int, default=768)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument(
        "--candidates", type=int, default=32000, help="top-k: candidates a row (beam · vocab)"
    )
    parser.add_argument("--top-k", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    if min(rows) < 1:
        parser.error("--rows must be positive integers, e.g. 1,4,16,64")
    if args.d_ff % args.d_model:
        parser.error(
            f"--d-ff {args.d_ff} must be a multiple of --d-model {args.d_model} "
            "(the layer products tile their inputs)"
        )
    report = {
        "benchmark": "inference_kernels",
        "tensorflow": tf.__version__,
        "keys": args.keys,
        "heads": args.heads,
        "depth": args.depth,
        "vocab": args.vocab,
        "d_model": args.d_model,
        "copies": args.copies,
        "d_ff": args.d_ff,
        "layers": args.layers,
        "candidates": args.candidates,
        "top_k": args.top_k,
        "results": [],
    }
    for count in rows:
        attention = attention_times(
            count, args.keys, args.heads, args.depth, args.iterations, args.repeats
        )
        logits = logits_times(
            count,
            args.vocab,
            args.d_model,
            args.copies,
            max(1, args.iterations // 10),
            args.repeats,
        )
        products = product_times(
            count, args.d_model, args.d_ff, args.layers, max(1, args.iterations // 3), args.repeats
        )
        top_k = top_k_times(count, args.candidates, args.top_k, args.iterations, args.repeats)
        report["results"].append(
            {
                "rows": count,
                "attention_us": attention,
                "logits_us": logits,
                "product_us": products,
                "top_k_us": top_k,
            }
        )
        groups = {
            "attention": attention,
            "logits": logits,
            "a layer product": products,
            "top-k": top_k,
        }
        print(
            f"rows {count}: "
            + "; ".join(
                name + " " + ", ".join(f"{k} {v:.1f} µs" for k, v in times.items())
                for name, times in groups.items()
            ),
            flush=True,
        )
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
