"""Peak memory of training the paper's ``base`` model, and whether it grows.

    python -m benchmarks.train_memory [--steps 1000] [--batch 16] [--length 64] [--every 100] \
        [--json out.json]

``base`` (6+6 layers, d_model 512, d_ff 2048, 8 heads) with the benchmarks' shared
8,192 vocabulary, trained with ``model.fit`` on one fixed batch of
``batch × length`` pairs (~15% padding), fp32. The process's resident set size
(RSS, from /proc) is sampled every ``--every`` steps; reported: the peak RSS
(``ru_maxrss``), RSS after warm-up, at the end, and the growth between them
(the leak check: a few MB of allocator noise is expected, steady growth is not).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from benchmarks.report import emit


def rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as handle:
        pages = int(handle.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.steps % args.every:
        parser.error("--steps must be a multiple of --every.")

    import keras
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)

    def ids():
        x = rng.integers(4, 8192, size=(args.batch, args.length)).astype(np.int32)
        for row in x:
            row[int(args.length * rng.uniform(0.7, 1.0)) :] = 0
        return x

    src, tgt = ids(), ids()
    tgt_in = np.concatenate([np.full((args.batch, 1), kt.BOS_ID, np.int32), tgt[:, :-1]], axis=1)
    config = kt.TransformerConfig.from_preset("base", vocab_size=8192, share_embeddings=True)
    model = kt.Transformer(config)
    model.compile(
        optimizer=kt.paper_adam(d_model=config.d_model),
        loss=kt.MaskedLabelSmoothedCrossEntropy(),
        steps_per_execution=args.every,
    )
    dataset = tf.data.Dataset.from_tensors(((src, tgt_in), tgt)).repeat()

    samples = []

    class Sample(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            samples.append(
                {
                    "step": (epoch + 1) * args.every,
                    "rss_mb": round(rss_mb(), 1),
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
            print(
                f"step {samples[-1]['step']:>5}  RSS {samples[-1]['rss_mb']:8.1f} MB  "
                f"{samples[-1]['seconds']:7.1f} s",
                flush=True,
            )

    model.fit(dataset, steps_per_epoch=args.every, epochs=1, verbose=0)  # warm-up: trace, allocate
    warm = rss_mb()
    started = time.perf_counter()
    model.fit(
        dataset,
        steps_per_epoch=args.every,
        epochs=args.steps // args.every,
        verbose=0,
        callbacks=[Sample()],
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report = {
        "benchmark": "train_memory",
        "model": "base",
        "vocab": 8192,
        "parameters": model.count_params(),
        "batch": args.batch,
        "length": args.length,
        "steps": args.steps,
        "rss_after_warmup_mb": round(warm, 1),
        "rss_end_mb": samples[-1]["rss_mb"],
        "growth_mb": round(samples[-1]["rss_mb"] - warm, 1),
        "growth_second_half_mb": round(
            samples[-1]["rss_mb"] - samples[len(samples) // 2 - 1]["rss_mb"], 1
        ),
        "peak_rss_mb": round(peak, 1),
        "ms_per_step": round(1000 * samples[-1]["seconds"] / args.steps, 1),
        "samples": samples,
    }
    print(
        f"peak RSS {report['peak_rss_mb']:.0f} MB; RSS after warm-up {warm:.0f} MB, after "
        f"{args.steps} steps "
        f"{report['rss_end_mb']:.0f} MB (growth {report['growth_mb']:+.1f} MB, second half "
        f"{report['growth_second_half_mb']:+.1f} MB); {report['ms_per_step']:.0f} ms/step"
    )
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
