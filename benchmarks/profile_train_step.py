"""Where a training step's time goes: a per-op breakdown from the TF profiler.

    python -m benchmarks.profile_train_step [--precision fp32|bf16] [--jit] [--serial] \
        [--steps 5] [--top 25]

Runs the benchmarks' small training workload (``benchmarks.train_speed``) under
``tf.profiler``, reads the host trace (``*.xplane.pb``, parsed with the
protobuf that ships in TensorFlow: no TensorBoard plugin needed) and sums the
duration of every executed TF op by op type and by category (matmul,
attention softmax, loss, normalization, dropout RNG, optimizer, embedding,
layout, element-wise). Times are per step and per executor thread: ops that
run concurrently on the inter-op threads each count in full, so the shares
are of total op time, not of wall time (both are printed). ``--serial`` runs
one op at a time, so that the op times add up to the wall time and each is
what that op costs alone: the breakdown to read for "what would removing
this save".
"""

from __future__ import annotations

import argparse
import collections
import glob
import re
import sys
import tempfile

from benchmarks.report import emit
from benchmarks.timing import fit_step_times

CATEGORIES = (  # first match wins; patterns are matched against the op type
    ("matmul", r"MatMul|Einsum|Conv|_MklFused|FusedMatMul"),
    ("softmax / log-softmax", r"Softmax"),
    ("dropout RNG", r"Random|Stateless|RngSkip|RngReadAndSkip"),
    ("normalization (LayerNorm)", r"Moments|Mean|Rsqrt|SquaredDifference|BatchNorm|LayerNorm"),
    ("embedding gather/scatter", r"Gather|Scatter|UnsortedSegment|SparseSegment"),
    ("optimizer update", r"ApplyAdam|AssignSub|AssignAdd|AssignVariable|ReadVariable|Sqrt"),
    ("reductions", r"Sum|Max|Min|Prod|ArgMax|All|Any"),
    (
        "layout (transpose/reshape/concat/pad/cast)",
        r"Transpose|Reshape|Concat|Pad|Cast|Slice|Tile|Pack|Unpack|Split|Squeeze|ExpandDims|Identity|Shape|Fill|Broadcast",
    ),
    ("element-wise", r".*"),
)


def op_breakdown(xplane_path: str) -> tuple[dict[str, float], dict[str, int]]:
    """Total picoseconds and counts per op type on the host executor threads."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as handle:
        space.ParseFromString(handle.read())
    totals: dict[str, float] = collections.Counter()
    counts: dict[str, int] = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" not in name or name.startswith(("ThreadpoolListener", "ExecutorState")):
                    continue
                op_type = name.rsplit(":", 1)[1]
                totals[op_type] += event.duration_ps
                counts[op_type] += 1
    return dict(totals), dict(counts)


def categorize(op_type: str) -> str:
    for category, pattern in CATEGORIES:
        if re.search(pattern, op_type):
            return category
    return "element-wise"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument(
        "--jit", action="store_true", help="XLA: the trace then shows one cluster op"
    )
    parser.add_argument(
        "--serial",
        action="store_true",
        help="one op at a time (inter-op threads = 1): op times then add up to the "
        "wall time and each is that op's cost alone",
    )
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import tensorflow as tf

    if args.serial:  # before the runtime starts: the setting is fixed at the first op
        tf.config.threading.set_inter_op_parallelism_threads(1)
    from benchmarks.train_speed import compiled_workload

    model, dataset, _ = compiled_workload(args.precision, args.jit)
    model.fit(dataset, steps_per_epoch=3, epochs=1, verbose=0)  # trace + warm up
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        # Wall time between step ends, as train_speed measures it (fit's tear-down excluded).
        [wall] = fit_step_times(model, dataset, args.steps, repeats=1)
        tf.profiler.experimental.stop()
        totals, counts = op_breakdown(
            sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1]
        )

    traced_steps = args.steps + 1  # fit_step_times runs one step more than it times
    per_step = {op: ps / 1e9 / traced_steps for op, ps in totals.items()}  # ms
    total = sum(per_step.values())
    by_category: dict[str, float] = collections.Counter()
    for op, ms in per_step.items():
        by_category[categorize(op)] += ms
    print(
        f"wall {1000 * wall:.1f} ms/step; op time {total:.1f} ms/step (summed over executor "
        "threads)"
    )
    print(f"\n{'category':<45} {'ms/step':>8} {'share':>6}")
    for category, ms in sorted(by_category.items(), key=lambda kv: -kv[1]):
        print(f"{category:<45} {ms:>8.1f} {ms / total:>6.1%}")
    print(f"\n{'op type':<32} {'ms/step':>8} {'share':>6} {'calls/step':>10}")
    for op, ms in sorted(per_step.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{op:<32} {ms:>8.2f} {ms / total:>6.1%} {counts[op] / traced_steps:>10.0f}")
    report = {
        "benchmark": "profile_train_step",
        "precision": args.precision,
        "xla": args.jit,
        "serial": args.serial,
        "wall_ms_per_step": 1000 * wall,
        "op_ms_per_step": total,
        "categories": dict(by_category),
        "ops": per_step,
    }
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
