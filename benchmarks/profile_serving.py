"""Where the exported decoders spend their time, per decoding step.

    python -m benchmarks.profile_serving --workdir runs/multi30k \\
        --src ../shared/corpora/multi30k_de_en/test.src [--beam 4] [--alpha 1.4] [--sentences 256]
        [--json out.json]

For greedy decoding and beam search as ``export_saved_model`` traces them
(graph mode, no XLA), at batch 64 and batch 1:

* ``ops_per_step``: the nodes of the ``tf.while_loop`` body, the graph one
  decoding step executes (the largest ``while_body`` function of the traced
  signature: the step for few rows, where the decoders have two), with its
  most frequent op types;
* ``steps``: decoding steps the loops ran, over the batches, against the
  output tokens they produced (greedy stops when every row ended; beam search
  when no live hypothesis could still beat the finished ones);
* ``ms_per_step`` and ``us_per_op``: time over steps, and over the ops those
  steps executed (the executor's cost a node, kernels included).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from benchmarks.report import emit
from keras_transformer import Workdir
from keras_transformer.data.sequences import encode_sources
from keras_transformer.decoding import Beam, decode


def loop_body_ops(concrete) -> tuple[int, list[tuple[str, int]]]:
    """Nodes of the largest while-loop body in ``concrete``'s graph, and the
    ten most frequent op types there."""
    bodies = [
        function
        for function in concrete.graph.as_graph_def().library.function
        if "while_body" in function.signature.name
    ]
    if not bodies:
        raise ValueError("no tf.while_loop body in the traced decoder")
    body = max(bodies, key=lambda function: len(function.node_def))
    kinds = collections.Counter(node.op for node in body.node_def)
    return len(body.node_def), kinds.most_common(10)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--src", required=True, type=Path)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument(
        "--sentences", type=int, default=256, help="sentences at batch 64 (batch 1: a quarter)"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    trained = Workdir(args.workdir).check().load("fp32")
    model, pad = trained.model, trained.model.config.pad_id
    sentences = args.src.read_text(encoding="utf-8").splitlines()[: args.sentences]

    def greedy(source_ids):
        out = decode(model, source_ids)
        return out.tokens[:, 0, :], out.steps

    def beam(source_ids):
        out = decode(model, source_ids, Beam(size=args.beam, alpha=args.alpha))
        return out.tokens[:, 0, :], out.steps

    rows = []
    spec = tf.TensorSpec([None, None], tf.int32)
    for name, decoder in (("greedy", greedy), (f"beam{args.beam}", beam)):
        function = tf.function(decoder, input_signature=[spec])
        ops, common = loop_body_ops(function.get_concrete_function())
        for batch in (64, 1):
            subset = sentences if batch > 1 else sentences[: max(1, len(sentences) // 4)]
            batches = [
                tf.cast(
                    encode_sources(
                        trained.src_tokenizer,
                        tf.constant(subset[i : i + batch]),
                        trained.max_src_length,
                    ).to_tensor(),
                    tf.int32,
                )
                for i in range(0, len(subset), batch)
            ]
            function(batches[0])  # warm up
            steps = tokens = 0
            started = time.perf_counter()
            for source_ids in batches:
                out, ran = function(source_ids)
                steps += int(ran)
                tokens += int(np.count_nonzero(out.numpy() != pad))
            seconds = time.perf_counter() - started
            rows.append(
                {
                    "decoder": name,
                    "batch": batch,
                    "sentences": len(subset),
                    "ops_per_step": ops,
                    "common_ops": common,
                    "steps": steps,
                    "output_tokens": tokens,
                    "steps_per_batch": round(steps / len(batches), 1),
                    "ms_per_step": round(1000 * seconds / steps, 3),
                    "us_per_op": round(1e6 * seconds / (steps * ops), 2),
                    "seconds": round(seconds, 2),
                }
            )
            row = rows[-1]
            print(
                f"{name:<7} batch {batch:>2}: {ops} ops a step, {row['steps_per_batch']} steps a "
                "batch, "
                f"{row['ms_per_step']} ms a step, {row['us_per_op']} µs an op",
                flush=True,
            )
    emit(
        {
            "benchmark": "profile_serving",
            "workdir": str(args.workdir),
            "beam": args.beam,
            "alpha": args.alpha,
            "tensorflow": tf.__version__,
            "results": rows,
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
