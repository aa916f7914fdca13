"""What the paper's base recipe costs: measured on this CPU, estimated for GPUs and TPUs.

    python -m benchmarks.recipe_estimate [--preset base] [--vocab 37000] [--batch 64] [--length 64]
                                         [--steps 2] [--precision auto] [--json out.json]

Measures the seconds of one ``model.fit`` update of ``preset`` (shared
vocabulary ``vocab``, tied embeddings, as ``training/configs/wmt14_ende.yaml``
builds it) on a fixed ``batch × length`` micro-batch, in the precision
``auto`` picks here, and counts the update's matmul FLOPs analytically
(``matmul_flops``). From those:

* this CPU's hours for the recipe (``TOKENS_PER_UPDATE`` target tokens an
  update, ``UPDATES`` updates), scaled by FLOPs from the measured micro-batch;
* an estimate for each accelerator in ``ACCELERATORS``: the recipe's FLOPs at
  the device's published dense peak, times the utilisation the paper itself
  reached (base model, 100k steps in 12 hours on 8 P100 GPUs, section 5.2),
  ``PAPER_UTILISATION``. Real utilisation differs by model size, input
  pipeline and software; the figures say which hardware makes the recipe a
  matter of hours, not a promise.
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.report import emit
from benchmarks.timing import fit_step_times
from benchmarks.workload import matmul_flops

TOKENS_PER_UPDATE = 25_000  # the paper: ~25k source and ~25k target tokens a batch
UPDATES = 100_000
AVERAGE_LENGTH = 28  # WMT14 En-De sentences in 37k BPE pieces, roughly: sets the attention term
# The paper's base run: 100k updates, 12 hours, 8 P100 GPUs (fp32 peak 10.6 TFLOP/s, SXM2).
PAPER = {"updates": 100_000, "hours": 12.0, "devices": 8, "peak_tflops": 10.6}
# Published dense peaks, TFLOP/s, in the precision `mixed_precision: auto` picks on them.
ACCELERATORS = {
    "NVIDIA T4 (Colab free tier), fp16": 65.0,
    "NVIDIA V100, fp16": 125.0,
    "NVIDIA L4, bf16": 121.0,
    "NVIDIA A100, bf16": 312.0,
    "NVIDIA H100 SXM, bf16": 989.0,
    "TPU v2-8 (8 cores), bf16": 180.0,
    "TPU v5e-1, bf16": 197.0,
}


def paper_utilisation() -> float:
    """The fraction of the P100s' peak the paper's base run used (by this FLOP count)."""
    import keras_transformer as kt

    config = kt.TransformerConfig.from_preset("base", vocab_size=37_000, share_embeddings=True)
    total = PAPER["updates"] * matmul_flops(
        config, TOKENS_PER_UPDATE, TOKENS_PER_UPDATE, AVERAGE_LENGTH
    )
    seconds = PAPER["hours"] * 3600 * PAPER["devices"]
    return total / seconds / (PAPER["peak_tflops"] * 1e12)


def measure(preset: str, vocab: int, batch: int, length: int, steps: int, precision: str) -> dict:
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.precision import dtype_policy, resolve_precision

    choice = resolve_precision(precision)
    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy(dtype_policy(choice.precision))
    config = kt.TransformerConfig.from_preset(
        preset, vocab_size=vocab, share_embeddings=True, tie_embeddings=True
    )
    model = kt.Transformer(config)
    model.compile(
        optimizer=kt.paper_adam(d_model=config.d_model), loss=kt.MaskedLabelSmoothedCrossEntropy()
    )
    rng = np.random.default_rng(0)
    src = rng.integers(4, vocab, size=(batch, length)).astype(np.int32)
    tgt = rng.integers(4, vocab, size=(batch, length)).astype(np.int32)
    tgt_in = np.concatenate([np.full((batch, 1), kt.BOS_ID, np.int32), tgt[:, :-1]], axis=1)
    dataset = tf.data.Dataset.from_tensors(((src, tgt_in), tgt)).repeat()
    model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)  # trace and warm up
    times = fit_step_times(model, dataset, steps, repeats=1)
    seconds = statistics.median(times)
    micro_flops = matmul_flops(config, batch * length, batch * length, length)
    recipe_flops = UPDATES * matmul_flops(
        config, TOKENS_PER_UPDATE, TOKENS_PER_UPDATE, AVERAGE_LENGTH
    )
    utilisation = paper_utilisation()
    return {
        "preset": preset,
        "vocab": vocab,
        "parameters": model.count_params(),
        "precision": choice.precision,
        "precision_reason": choice.reason,
        "micro_batch": [batch, length],
        "seconds_per_micro_batch": seconds,
        "micro_batch_gflop": micro_flops / 1e9,
        "cpu_gflops_achieved": micro_flops / seconds / 1e9,
        "recipe": {
            "tokens_per_update": TOKENS_PER_UPDATE,
            "updates": UPDATES,
            "pflop": recipe_flops / 1e15,
        },
        "cpu_seconds_per_update": seconds * recipe_flops / UPDATES / micro_flops,
        "cpu_days": seconds * recipe_flops / micro_flops / 86400,
        "paper_utilisation": utilisation,
        "accelerator_hours": {
            name: recipe_flops / (peak * 1e12 * utilisation) / 3600
            for name, peak in ACCELERATORS.items()
        },
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.recipe_estimate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab", type=int, default=37_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    report = measure(args.preset, args.vocab, args.batch, args.length, args.steps, args.precision)
    print(
        f"{args.preset}, vocabulary {args.vocab}, {report['parameters']:,} parameters, "
        f"{report['precision']} ({report['precision_reason']})"
    )
    print(
        f"this CPU: {report['seconds_per_micro_batch']:.2f} s per {args.batch}x{args.length} "
        "micro-batch "
        f"({report['cpu_gflops_achieved']:.0f} GFLOP/s): {report['cpu_seconds_per_update']:.0f} s "
        "per "
        f"{TOKENS_PER_UPDATE:,}-token update, {report['cpu_days']:.0f} days for {UPDATES:,} updates"
    )
    print(
        f"| accelerator | published peak, TFLOP/s | hours for {UPDATES:,} updates at the paper's "
        f"{100 * report['paper_utilisation']:.0f}% utilisation |"
    )
    print("|---|---:|---:|")
    for name, hours in report["accelerator_hours"].items():
        print(f"| {name} | {ACCELERATORS[name]:.0f} | {hours:.1f} |")
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
