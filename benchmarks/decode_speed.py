"""Decoding speed of our cached greedy and beam search, forced to fixed lengths.

    python -m benchmarks.decode_speed [--steps 16 64 256] [--batch 64] [--repeats 3] [--json out.json]

The workload is issue #7's small model (shared vocabulary 8,192, d_model 256,
4+4 layers, 8 heads, d_ff 1,024) with random weights; ``min_length`` bans EOS
so every run decodes exactly the requested number of steps. Each measurement:
one warm-up call (tracing), then ``--repeats`` timed calls; median and minimum.
Prints a table and writes JSON. The "ms/step" column at 16 vs 256 steps shows
whether cost per generated token stays flat (the KV cache makes it linear).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.beam_search import beam_search
from keras_transformer.decoding import greedy_decode


def workload_model(max_length: int) -> kt.Transformer:
    config = kt.TransformerConfig.from_preset(
        "small", vocab_size=8192, share_embeddings=True, tie_embeddings=True,
        max_length=max(512, max_length + 1), dropout=0.1)
    model = kt.Transformer(config)
    model.build()
    return model


def sources(batch: int, length: int = 64, seed: int = 0) -> np.ndarray:
    """Random ids with ~15% padding at the ends, EOS last."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, 8192, size=(batch, length)).astype(np.int32)
    for row in ids:
        real = int(length * rng.uniform(0.7, 1.0))
        row[real - 1] = kt.EOS_ID
        row[real:] = kt.PAD_ID
    return ids


def timed(function, *args, repeats: int) -> dict:
    function(*args)  # trace + warm up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        out = function(*args)
        tf.nest.map_structure(lambda x: x.numpy(), out)
        times.append(time.perf_counter() - started)
    return {"median_s": statistics.median(times), "min_s": min(times)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 1])
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the results here too")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(0)
    model = workload_model(max(args.steps))
    rows = []
    for batch in args.batch:
        ids = tf.constant(sources(batch))
        for steps in args.steps:
            greedy = tf.function(lambda s, n=steps: greedy_decode(model, s, max_length=n, min_length=n))
            result = timed(greedy, ids, repeats=args.repeats)
            rows.append({"decoder": "greedy", "batch": batch, "steps": steps, **result})
        if args.beam > 1:
            steps = 64 if 64 in args.steps else args.steps[0]
            beam = tf.function(lambda s, n=steps: beam_search(model, s, beam_size=args.beam, max_length=n,
                                                              min_length=n))
            result = timed(beam, ids, repeats=args.repeats)
            rows.append({"decoder": f"beam{args.beam}", "batch": batch, "steps": steps, **result})
    for row in rows:
        row["ms_per_step"] = 1000 * row["median_s"] / row["steps"]

    report = {
        "benchmark": "decode_speed",
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
                    "tensorflow": tf.__version__, "keras": keras.__version__},
        "workload": {"vocab": 8192, "d_model": 256, "layers": "4+4", "heads": 8, "d_ff": 1024,
                     "source_length": 64, "weights": "random", "repeats": args.repeats},
        "results": rows,
    }
    print(f"{'decoder':<8} {'batch':>5} {'steps':>5} {'median s':>9} {'min s':>8} {'ms/step':>8}")
    for row in rows:
        print(f"{row['decoder']:<8} {row['batch']:>5} {row['steps']:>5} {row['median_s']:>9.3f} "
              f"{row['min_s']:>8.3f} {row['ms_per_step']:>8.2f}")
    print(json.dumps(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
