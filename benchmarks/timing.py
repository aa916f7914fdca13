"""Timing for the speed benchmarks: calls, training steps (without what ``model.fit``
does around them), the matmul peak, and MFU against the peaks around each run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

REPEATS = 5  # fit runs per configuration; medians over them


def fit_step_times(model, dataset, steps: int, repeats: int = 3) -> list[float]:
    """Seconds per step of ``repeats`` ``model.fit`` runs of ``steps`` steps.

    Each run fits ``steps + 1`` steps and times from the end of the first to
    the end of the last, so a run's figure is ``steps`` whole steps (data,
    forward, backward, update) and nothing else. Timing the ``fit`` call
    instead also counts its set-up and tear-down: on this 2-core machine
    about one ``fit`` return in three was ~0.4 s late per step run, with
    the process idle (tf.data iterator tear-down; not seen with tf.data
    autotuning off), which made a 1.2 s step read 2.05 s.
    """
    import keras

    class StepClock(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.ends = []

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())

    times = []
    for _ in range(repeats):
        clock = StepClock()
        model.fit(dataset, steps_per_epoch=steps + 1, epochs=1, verbose=0, callbacks=[clock])
        times.append((clock.ends[-1] - clock.ends[0]) / steps)
    return times


def timed_calls(function: Callable, *args, repeats: int) -> dict:
    """Warm-up call, then median and minimum of ``repeats`` calls (outputs fetched)."""
    started = time.perf_counter()
    function(*args)
    warmup = time.perf_counter() - started
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function(*args)
        times.append(time.perf_counter() - started)
    return {"median_s": statistics.median(times), "min_s": min(times), "warmup_s": warmup}


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


def add_thread_arguments(parser) -> None:
    """``--inter-op-threads`` and ``--intra-op-threads`` on ``parser``: TensorFlow's
    pools, as TF Serving's ``--tensorflow_inter_op_parallelism`` and
    ``--tensorflow_intra_op_parallelism`` set them (``set_thread_pools``)."""
    parser.add_argument(
        "--inter-op-threads",
        type=int,
        default=0,
        help="TensorFlow's inter-op pool (TF Serving: --tensorflow_inter_op_parallelism); 0: its "
        "choice",
    )
    parser.add_argument(
        "--intra-op-threads",
        type=int,
        default=0,
        help="TensorFlow's intra-op pool (TF Serving: --tensorflow_intra_op_parallelism); 0: its "
        "choice",
    )


def set_thread_pools(parser, args) -> None:
    """Set TensorFlow's pools from ``add_thread_arguments``' flags, before it runs
    its first op; a negative count is the parser's error."""
    import tensorflow as tf

    if args.inter_op_threads < 0 or args.intra_op_threads < 0:
        parser.error("thread counts must be >= 0 (0: TensorFlow's choice)")
    if args.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    if args.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
