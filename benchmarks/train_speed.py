"""Training step speed and model FLOP utilisation (MFU) against this CPU's measured peak.

    python -m benchmarks.train_speed [--systems ours keras-hub] [--precision fp32 bf16] \
        [--jit off on] [--steps 10] [--json out.json]

Workload: ``benchmarks.workload`` (the small model with a shared vocabulary of 8,192, batch 64
pairs of source and target length 64 with ~15% padding at the ends); one optimizer step =
forward, backward, Adam, timed between the ends of the first and last step of each ``fit`` run
(``benchmarks.timing``), five runs. MFU = analytic matmul FLOPs per step (counted from the
config of the model that is built) / step time / the peak of a large ``tf.matmul`` measured in
the same process and precision, right before and after each run (``timed_steps_and_peaks``);
the median over the runs is reported, and the median step against the process's best peak
beside it.
Each configuration runs in its own process (XLA and policies are global).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks.report import emit
from benchmarks.timing import mfu_figures, timed_steps_and_peaks
from benchmarks.workload import DEFAULT


def compiled_workload(precision: str, jit: bool):
    """The small workload model, compiled as ``training.train`` does, and its dataset."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    src, tgt_in, tgt = DEFAULT.training_batch()
    model = kt.Transformer(DEFAULT.config())
    model.compile(
        optimizer=kt.paper_adam(d_model=DEFAULT.d_model),
        loss=kt.MaskedLabelSmoothedCrossEntropy(),
        jit_compile=jit,
    )
    dataset = tf.data.Dataset.from_tensors(((src, tgt_in), tgt)).repeat()
    return model, dataset, tgt


def run_one(precision: str, jit: bool, steps: int) -> dict:
    model, dataset, tgt = compiled_workload(precision, jit)
    model.fit(dataset, steps_per_epoch=3, epochs=1, verbose=0)  # trace + warm up
    times, peaks = timed_steps_and_peaks(model, dataset, steps, precision)
    step = statistics.median(times)
    return {
        "precision": precision,
        "xla": jit,
        "ms_per_step": 1000 * step,
        "min_ms_per_step": 1000 * min(times),
        "target_tokens_per_s": float((tgt != 0).sum()) / step,
        **mfu_figures(DEFAULT.matmul_flops_per_step(), times, peaks),
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
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument(
        "--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"]
    )
    parser.add_argument("--jit", nargs="+", default=["off", "on"], choices=["off", "on"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--one", nargs=3, metavar=("SYSTEM", "PRECISION", "JIT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_system(args.one[0], args.one[1], args.one[2] == "on", args.steps)))
        return 0
    rows = []
    for system in args.systems:
        for precision in args.precision:
            for jit in args.jit:
                result = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.train_speed",
                        "--one",
                        system,
                        precision,
                        jit,
                        "--steps",
                        str(args.steps),
                    ],
                    capture_output=True,
                    text=True,
                    env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                )
                if result.returncode != 0:
                    rows.append(
                        {
                            "system": system,
                            "precision": precision,
                            "xla": jit == "on",
                            "error": result.stderr[-500:],
                        }
                    )
                    continue
                rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
    print(
        f"{'system':<10} {'precision':<9} {'xla':<5} {'ms/step':>8} {'tokens/s':>9} "
        f"{'peak GF/s':>9} {'MFU':>6} "
        f"{'MFU vs best peak':>16}"
    )
    for row in rows:
        if "error" in row:
            print(
                f"{row['system']:<10} {row['precision']:<9} {str(row['xla']):<5} error: "
                f"{row['error'][-120:]!r}"
            )
            continue
        print(
            f"{row['system']:<10} {row['precision']:<9} {str(row['xla']):<5} "
            f"{row['ms_per_step']:>8.1f} "
            f"{row['target_tokens_per_s']:>9.0f} {row['peak_gflops']:>9.1f} {row['mfu']:>6.1%} "
            f"{row['mfu_vs_best_peak']:>16.1%}"
        )
    report = {
        "benchmark": "train_speed",
        "batch": DEFAULT.batch,
        "length": DEFAULT.length,
        "results": rows,
    }
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
