"""Training step speed and model FLOP utilisation (MFU) against this CPU's measured peak.

    python -m benchmarks.train_speed [--systems ours keras-hub] [--precision fp32 bf16] [--jit off on]
                                     [--steps 10] [--json out.json]

Workload: issue #7's small model (shared vocabulary 8,192, d_model 256, 4+4
layers, 8 heads, d_ff 1,024, dropout 0.1, post-LN), batch 64 pairs of source
and target length 64 with ~15% padding at the ends; one optimizer step =
forward, backward, Adam, timed between the ends of the first and last step
of each ``fit`` run (``benchmarks.timing``), five runs. MFU = analytic matmul FLOPs per step /
step time / the peak of a large ``tf.matmul`` measured in the same process and precision, right
before and after each run (``timed_steps_and_peaks``); the median over the runs is reported, and
the median step against the process's best peak beside it.
Each configuration runs in its own process (XLA and policies are global).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks.report import emit
from benchmarks.timing import fit_step_times

LENGTH, BATCH, VOCAB, D, FF, LAYERS = 64, 64, 8192, 256, 1024, 4
REPEATS = 5  # fit runs per configuration; medians over them


def matmul_flops_per_step() -> float:
    """2·m·n·k for every matmul of one training step (backward = 2 × forward)."""
    tokens = BATCH * LENGTH
    projections = 4 * D * D  # q, k, v, o
    ffn = 2 * D * FF
    attention = 2 * LENGTH * D  # QKᵀ and weights·V per query token
    encoder = LAYERS * (projections + ffn + attention)
    decoder = LAYERS * (2 * projections + ffn + 2 * attention)
    output = D * VOCAB
    forward = 2 * tokens * (encoder + decoder + output)
    return 3 * forward


def peak_flops(dtype: str, size: int = 2048, repeats: int = 10) -> float:
    import tensorflow as tf

    a = tf.random.normal([size, size], dtype=tf.float32)
    a = tf.cast(a, dtype)
    matmul = tf.function(lambda x: tf.matmul(x, x))
    matmul(a).numpy()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        matmul(a).numpy()
        times.append(time.perf_counter() - started)
    return 2 * size**3 / min(times)


def training_batch():
    """One fixed batch of the workload: ``(src, tgt_in, tgt)`` int32 ``[BATCH, LENGTH]``."""
    import numpy as np

    import keras_transformer as kt

    rng = np.random.default_rng(0)

    def ids(length_fraction_low):
        x = rng.integers(4, VOCAB, size=(BATCH, LENGTH)).astype(np.int32)
        for row in x:
            row[int(LENGTH * rng.uniform(length_fraction_low, 1.0)):] = 0
        return x

    src, tgt = ids(0.7), ids(0.7)
    tgt_in = np.concatenate([np.full((BATCH, 1), kt.BOS_ID, np.int32), tgt[:, :-1]], axis=1)
    return src, tgt_in, tgt


def compiled_workload(precision: str, jit: bool):
    """The small workload model, compiled as ``training.train`` does, and its dataset."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    src, tgt_in, tgt = training_batch()
    config = kt.TransformerConfig.from_preset("small", vocab_size=VOCAB, share_embeddings=True)
    model = kt.Transformer(config)
    model.compile(optimizer=kt.paper_adam(d_model=D), loss=kt.MaskedLabelSmoothedCrossEntropy(),
                  jit_compile=jit)
    dataset = tf.data.Dataset.from_tensors(((src, tgt_in), tgt)).repeat()
    return model, dataset, tgt


def timed_steps_and_peaks(model, dataset, steps: int, precision: str, repeats: int = REPEATS):
    """Seconds per step of ``repeats`` ``fit`` runs (``fit_step_times``), and the
    matmul peak (``peak_flops``, in ``precision``'s matmul dtype) measured before
    the first run and after each.

    This shared VM's speed drifts within minutes: ten fp32 processes of one
    half-hour measured peaks of 318–377 GFLOP/s, one process 280–315 between
    its runs, and one peak measured after all the runs, up to a minute away
    from some of them, gave the same code MFUs of 54.1–61.8%. Each run is
    compared with the peaks measured right before and after it instead
    (``mfu_figures``).
    """
    dtype = "bfloat16" if precision == "bf16" else "float32"
    peaks = [peak_flops(dtype)]
    times = []
    for _ in range(repeats):
        times += fit_step_times(model, dataset, steps, repeats=1)
        peaks.append(peak_flops(dtype))
    return times, peaks


def mfu_figures(flops: float, times: list[float], peaks: list[float]) -> dict:
    """MFU of each run against the higher of the two peaks around it, their
    median (``mfu``, the headline figure), and the median step against the
    highest peak of the whole process (``mfu_vs_best_peak``, the most
    conservative reading)."""
    per_run = [flops / t / max(before, after) for t, before, after in zip(times, peaks, peaks[1:])]
    return {
        "matmul_gflop_per_step": flops / 1e9,
        "peak_gflops": max(peaks) / 1e9,
        "peak_gflops_samples": [p / 1e9 for p in peaks],
        "mfu": statistics.median(per_run),
        "mfu_per_run": per_run,
        "mfu_vs_best_peak": flops / statistics.median(times) / max(peaks),
    }


def run_one(precision: str, jit: bool, steps: int) -> dict:
    model, dataset, tgt = compiled_workload(precision, jit)
    model.fit(dataset, steps_per_epoch=3, epochs=1, verbose=0)  # trace + warm up
    times, peaks = timed_steps_and_peaks(model, dataset, steps, precision)
    step = statistics.median(times)
    return {
        "precision": precision, "xla": jit, "ms_per_step": 1000 * step, "min_ms_per_step": 1000 * min(times),
        "target_tokens_per_s": float((tgt != 0).sum()) / step,
        **mfu_figures(matmul_flops_per_step(), times, peaks),
    }


SYSTEMS = ("ours", "keras-hub")


def run_system(system: str, precision: str, jit: bool, steps: int) -> dict:
    if system == "ours":
        return {"system": "ours", **run_one(precision, jit, steps)}
    if system == "keras-hub":
        from benchmarks.keras_hub_reference import train_step_time

        return train_step_time(jit, steps, precision)
    raise ValueError(f"Unknown system {system!r}; choose from {SYSTEMS}.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--jit", nargs="+", default=["off", "on"], choices=["off", "on"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json", default=None)
    parser.add_argument("--one", nargs=3, metavar=("SYSTEM", "PRECISION", "JIT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_system(args.one[0], args.one[1], args.one[2] == "on", args.steps)))
        return 0
    rows = []
    for system in args.systems:
        for precision in args.precision:
            for jit in args.jit:
                result = subprocess.run(
                    [sys.executable, "-m", "benchmarks.train_speed", "--one", system, precision, jit,
                     "--steps", str(args.steps)],
                    capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
                if result.returncode != 0:
                    rows.append({"system": system, "precision": precision, "xla": jit == "on",
                                 "error": result.stderr[-500:]})
                    continue
                rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
    print(f"{'system':<10} {'precision':<9} {'xla':<5} {'ms/step':>8} {'tokens/s':>9} {'peak GF/s':>9} {'MFU':>6} "
          f"{'MFU vs best peak':>16}")
    for row in rows:
        if "error" in row:
            print(f"{row['system']:<10} {row['precision']:<9} {str(row['xla']):<5} error: {row['error'][-120:]!r}")
            continue
        print(f"{row['system']:<10} {row['precision']:<9} {str(row['xla']):<5} {row['ms_per_step']:>8.1f} "
              f"{row['target_tokens_per_s']:>9.0f} {row['peak_gflops']:>9.1f} {row['mfu']:>6.1%} "
              f"{row['mfu_vs_best_peak']:>16.1%}")
    report = {"benchmark": "train_speed", "batch": BATCH, "length": LENGTH, "results": rows}
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
