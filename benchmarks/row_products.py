"""What a one-row product costs TensorFlow in a decoding loop, under each thread setting.

    python -m benchmarks.row_products [--intra-op-threads N] [--inter-op-threads N] \\
        [--rows 1] [--d-model 192] [--d-ff 768] [--layers 4] [--repeats 8] [--json out.json]

At one sentence a decoding step is a chain of one-row products, ``[1, k] @ [k,
n]``, each waiting for the one before (``--rows``: a few rows, as in a beam or
a batch's last sentences). This times such chains in a ``tf.while_loop`` in a
``tf.function`` (graph mode, as a SavedModel runs them), the loop's steps in µs:

* ``hot``: 24 products by one ``[d_model, d_model]`` kernel: the weights stay in
  the CPU's caches, so what remains is the cost of running a product;
* ``add``: 24 additions of a constant: the executor's cost of a node;
* ``decoder``: the products of a decoder's layers, ``layers`` × (fused query/key/
  value, attention output, cross query, cross output, FFN inner and outer), each
  with its own weights (8.3 MB for the Multi30k model's 4 layers, more
  than many CPUs' caches), as a decoding step reads them;
* ``hot_conv``, ``decoder_conv``: the same products as 1×1 convolutions, as the
  small-batch decoding step runs them (``kernels.projection.project_pointwise``).

``--intra-op-threads`` / ``--inter-op-threads`` set TensorFlow's pools as TF
Serving's ``--tensorflow_intra_op_parallelism`` / ``--tensorflow_inter_op_parallelism``
do; run the command once for each setting to compare them. The chains take the
fastest of ``--repeats`` calls of 40 steps each.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf

from benchmarks.report import emit
from benchmarks.timing import add_thread_arguments, set_thread_pools
from benchmarks.workload import decoder_product_shapes
from keras_transformer.kernels.projection import project_pointwise

STEPS = 40
CHAIN = 24


def chains(d_model: int, d_ff: int, layers: int) -> dict:
    """``{name: (tf.function(x, steps) → x, products a step)}``."""
    rng = np.random.default_rng(0)
    # A layer's products: the fused query, key and value first (its first d_model columns go on).
    layer_shapes = decoder_product_shapes(d_model, d_ff)
    kernels = [
        tf.Variable(rng.standard_normal(shape).astype(np.float32) * 0.05)
        for shape in layer_shapes * layers
    ]
    square = tf.Variable(rng.standard_normal((d_model, d_model)).astype(np.float32) * 0.05)

    def looped(body):
        @tf.function
        def run(x, steps):
            return tf.while_loop(
                lambda i, x: i < steps, lambda i, x: (i + 1, body(x)), (tf.constant(0), x)
            )[1]

        return run

    def matmul(x, kernel):
        return tf.matmul(x, kernel)

    def conv(x, kernel):
        return project_pointwise(x, (kernel, None))

    def hot(product):
        def body(x):
            kernel = square.read_value()
            for _ in range(CHAIN):
                x = product(x, kernel)
            return x

        return body

    def add(x):
        for _ in range(CHAIN):
            x = x + 1e-3
        return x

    def decoder(product):
        def body(x):
            h = x
            for i, kernel in enumerate(kernels):
                y = product(h, kernel.read_value())
                h = (
                    y[:, :d_model] if i % len(layer_shapes) == 0 else y
                )  # the query's third of the fused product
            return x + tf.reduce_mean(h) * 1e-6

        return body

    return {
        "hot": (looped(hot(matmul)), CHAIN),
        "add": (looped(add), CHAIN),
        "decoder": (looped(decoder(matmul)), len(kernels)),
        "hot_conv": (looped(hot(conv)), CHAIN),
        "decoder_conv": (looped(decoder(conv)), len(kernels)),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_thread_arguments(parser)
    parser.add_argument("--rows", type=int, default=1, help="rows a product (sentences, or beams)")
    parser.add_argument("--d-model", type=int, default=192)
    parser.add_argument("--d-ff", type=int, default=768)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if min(args.rows, args.d_model, args.d_ff, args.layers, args.repeats) < 1:
        parser.error("--rows, --d-model, --d-ff, --layers and --repeats must be >= 1")
    set_thread_pools(parser, args)
    report = {
        "benchmark": "row_products",
        "tensorflow": tf.__version__,
        "intra_op_threads": args.intra_op_threads,
        "inter_op_threads": args.inter_op_threads,
        "rows": args.rows,
        "d_model": args.d_model,
        "d_ff": args.d_ff,
        "layers": args.layers,
    }

    runs = chains(args.d_model, args.d_ff, args.layers)
    x = tf.ones([args.rows, args.d_model])
    for run, _ in runs.values():  # trace, and the first call's allocations
        run(x, tf.constant(2))
    fastest = dict.fromkeys(runs, float("inf"))
    for _ in range(args.repeats):  # the chains take turns
        for name, (run, _) in runs.items():
            started = time.perf_counter()
            run(x, tf.constant(STEPS)).numpy()
            fastest[name] = min(fastest[name], (time.perf_counter() - started) / STEPS)
    report["results"] = {
        name: {
            "us_per_step": round(seconds * 1e6, 1),
            "nodes_per_step": nodes,
            "us_per_node": round(seconds * 1e6 / nodes, 2),
        }
        for (name, (_, nodes)), seconds in zip(runs.items(), fastest.values())
    }
    for name, result in report["results"].items():
        print(
            f"{name:12s} {result['us_per_step']:8.1f} µs a step, "
            f"{result['us_per_node']:6.2f} µs each of {result['nodes_per_step']}"
        )
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
