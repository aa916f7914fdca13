"""LiteRT's ``LOG_SOFTMAX`` against its formula as ``REDUCE_MAX``, ``EXP``, ``SUM``, ``LOG``.

    python -m benchmarks.litert_log_softmax [--rows 4] [--vocab 8000] [--spreads 1 3 10 30] \\
        [--calls 2000] [--json out.json]

Each formula is converted alone to a float32 ``.tflite`` of one
``[rows, vocab]`` input: ``tf.nn.log_softmax`` (the converter makes it
``LOG_SOFTMAX``) and ``kernels.log_softmax_by_logsumexp``. LiteRT runs each,
1 thread, on normal logits of standard deviation ``spread`` (a trained
model's logits spread widely: its next token is far likelier than the rest),
``--calls`` invocations after one warm-up; µs a call. Beam search takes
log-probabilities of ``beam · vocab`` logits a step, which is why the
``.tflite`` exporter takes the second (``KernelChoice(log_softmax="logsumexp")``).
A table and a JSON line (``--json`` also writes it) that names the CPU.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.report import emit


def _flatbuffer(function, rows: int, vocab: int) -> bytes:
    import tensorflow as tf

    traced = tf.function(function, input_signature=[tf.TensorSpec([rows, vocab], tf.float32)])
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [traced.get_concrete_function()], traced
    )
    return converter.convert()


def _microseconds(flatbuffer: bytes, logits: np.ndarray, calls: int) -> float:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=flatbuffer, num_threads=1)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], logits)
    interpreter.invoke()
    start = time.perf_counter()
    for _ in range(calls):
        interpreter.invoke()
    return 1e6 * (time.perf_counter() - start) / calls


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=4, help="decoding rows (a beam of 4)")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--spreads", type=float, nargs="+", default=[1.0, 3.0, 10.0, 30.0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    for flag in ("rows", "vocab", "calls"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")

    import tensorflow as tf

    from keras_transformer import kernels

    files = {
        "LOG_SOFTMAX": _flatbuffer(tf.nn.log_softmax, args.rows, args.vocab),
        "logsumexp": _flatbuffer(kernels.log_softmax_by_logsumexp, args.rows, args.vocab),
    }
    normal = np.random.default_rng(0).standard_normal([args.rows, args.vocab]).astype(np.float32)
    results = []
    print(f"{'spread':>7} {'LOG_SOFTMAX µs':>15} {'logsumexp µs':>13}")
    for spread in args.spreads:
        logits = normal * np.float32(spread)
        times = {name: _microseconds(file, logits, args.calls) for name, file in files.items()}
        results.append({"spread": spread, **{f"{k}_us": round(v, 1) for k, v in times.items()}})
        print(f"{spread:7g} {times['LOG_SOFTMAX']:15.1f} {times['logsumexp']:13.1f}")
    report = {
        "benchmark": "litert_log_softmax",
        "rows": args.rows,
        "vocab": args.vocab,
        "calls": args.calls,
        "results": results,
    }
    emit(report, args.json)
    return report


if __name__ == "__main__":
    main()
