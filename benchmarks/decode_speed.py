"""Decoding speed, side by side: our cached greedy and beam search (graph and
XLA), CTranslate2 running our own weights (fp32, int8) and keras-hub.

    python -m benchmarks.decode_speed \
        [--systems ours ours-xla ct2-fp32 ct2-int8 keras-hub keras-hub-xla] \
        [--steps 16 64 256] [--batch 64 1] [--repeats 3] [--json out.json]

The workload is ``benchmarks.workload``'s small model (shared vocabulary 8,192,
d_model 256, 4+4 layers, 8 heads, d_ff 1,024) with random weights (seed 0: every process
builds the same model); EOS is banned until the requested length, so every run
decodes exactly that many steps. Each system runs in its own process (XLA and
thread pools are process-wide): one warm-up call (tracing/compiling), then
``--repeats`` timed calls; median and minimum. CTranslate2 gets the model
through ``export.ctranslate2.KerasTransformerConverter`` (the production
export path) and uses all cores. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile

from benchmarks.report import emit
from benchmarks.timing import timed_calls
from benchmarks.workload import DEFAULT, decoder_runs

SYSTEMS = ("ours", "ours-xla", "ct2-fp32", "ct2-int8", "keras-hub", "keras-hub-xla")


def workload_model(max_length: int):
    import keras

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    model = kt.Transformer(DEFAULT.config(tie_embeddings=True, max_length=max(512, max_length + 1)))
    model.build()
    return model


def _timed_rows(batches, steps_list, beam: int, repeats: int, decoding) -> list[dict]:
    """A row a batch and run (``decoder_runs``): ``decoding(batch, beam_size, steps)``, a
    call of no arguments that decodes ``batch`` sentences, timed (``timed_calls``)."""
    return [
        {
            "decoder": decoder,
            "batch": batch,
            "steps": steps,
            **timed_calls(decoding(batch, size, steps), repeats=repeats),
        }
        for batch in batches
        for decoder, size, steps in decoder_runs(steps_list, beam)
    ]


def _ours(jit: bool, batches, steps_list, beam: int, repeats: int) -> list[dict]:
    import tensorflow as tf

    from keras_transformer.decoding import Beam, Greedy, KernelChoice, Limits, decode

    model = workload_model(max(steps_list))
    # XLA needs fixed shapes: the fixed-size KV cache and output buffer.
    choice = KernelChoice(static_shapes=jit)

    def decoding(batch: int, size: int, steps: int):
        ids = tf.constant(DEFAULT.sources(batch))
        search = Beam(size=size, alpha=0.6) if size > 1 else Greedy()
        limits = Limits(max_length=steps, min_length=steps)
        function = tf.function(
            lambda s: decode(model, s, search, limits, n=size, choice=choice), jit_compile=jit
        )
        return lambda: tf.nest.map_structure(lambda x: x.numpy(), function(ids))

    return _timed_rows(batches, steps_list, beam, repeats, decoding)


class _IdPieces:
    """Stands in for a tokenizer in the CTranslate2 converter: piece ``i`` of
    the random-weight model is ``▁t{i}`` (ids 0-3 are the reserved pieces)."""

    reserved = ("<pad>", "<unk>", "<s>", "</s>")
    vocab_size = DEFAULT.vocab

    def piece(self, i: int) -> str:
        return self.reserved[i] if i < 4 else f"▁t{i}"


def _ctranslate2(quantization: str, batches, steps_list, beam: int, repeats: int) -> list[dict]:
    import ctranslate2

    from keras_transformer.exporters.ctranslate2 import KerasTransformerConverter

    model = workload_model(max(steps_list))
    pieces = _IdPieces()
    with tempfile.TemporaryDirectory() as directory:
        KerasTransformerConverter(model, pieces, pieces).convert(
            directory, quantization=quantization, force=True
        )
        translator = ctranslate2.Translator(
            directory, device="cpu", inter_threads=1, intra_threads=os.cpu_count() or 1
        )

        def decoding(batch: int, size: int, steps: int):
            # CTranslate2 appends the source EOS itself (add_source_eos).
            tokens = [
                [pieces.piece(int(i)) for i in row if i > 3] for row in DEFAULT.sources(batch)
            ]
            return lambda: translator.translate_batch(
                tokens,
                beam_size=size,
                max_batch_size=batch,
                max_input_length=0,
                min_decoding_length=steps,
                max_decoding_length=steps,
            )

        return _timed_rows(batches, steps_list, beam, repeats, decoding)


def _keras_hub(jit: bool, batches, steps_list, beam: int, repeats: int) -> list[dict]:
    from benchmarks import keras_hub_reference

    return keras_hub_reference.decode_rows(
        jit=jit, batches=batches, steps_list=steps_list, beam=beam, repeats=repeats
    )


def run_system(system: str, batches, steps_list, beam: int, repeats: int) -> list[dict]:
    if system in ("ours", "ours-xla"):
        rows = _ours(system == "ours-xla", batches, steps_list, beam, repeats)
    elif system in ("ct2-fp32", "ct2-int8"):
        rows = _ctranslate2(
            "float32" if system == "ct2-fp32" else "int8", batches, steps_list, beam, repeats
        )
    elif system in ("keras-hub", "keras-hub-xla"):
        rows = _keras_hub(system == "keras-hub-xla", batches, steps_list, beam, repeats)
    else:
        raise ValueError(f"Unknown system {system!r}; choose from {SYSTEMS}.")
    for row in rows:
        row["system"] = system
        row["ms_per_step"] = 1000 * row["median_s"] / row["steps"]
    return rows


def versions() -> dict:
    import importlib.metadata as metadata

    found = {"python": sys.version.split()[0]}
    for package in ("tensorflow", "keras", "ctranslate2", "keras-hub"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--steps", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 1])
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the report here too")
    parser.add_argument(
        "--one", default=None, help=argparse.SUPPRESS
    )  # run one system in this process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_system(args.one, args.batch, args.steps, args.beam, args.repeats)))
        return 0

    rows = []
    for system in args.systems:
        command = [
            sys.executable,
            "-m",
            "benchmarks.decode_speed",
            "--one",
            system,
            "--beam",
            str(args.beam),
            "--repeats",
            str(args.repeats),
            "--steps",
            *map(str, args.steps),
            "--batch",
            *map(str, args.batch),
        ]
        result = subprocess.run(
            command, capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        )
        if result.returncode != 0:
            rows.append({"system": system, "error": result.stderr.strip()[-600:]})
            print(f"{system}: failed\n{result.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.extend(json.loads(result.stdout.strip().splitlines()[-1]))

    report = {
        "benchmark": "decode_speed",
        "machine": {"platform": platform.platform()},  # the CPU: emit's "cpu" record
        "versions": versions(),
        "workload": {
            **dataclasses.asdict(DEFAULT),
            "weights": "random (seed 0)",
            "repeats": args.repeats,
        },
        "results": rows,
    }
    print(
        f"{'system':<14} {'decoder':<7} {'batch':>5} {'steps':>5} {'median s':>9} {'min s':>8} "
        f"{'ms/step':>8}"
    )
    for row in rows:
        if "error" in row:
            print(f"{row['system']:<14} error: {row['error'][-200:]!r}")
            continue
        print(
            f"{row['system']:<14} {row['decoder']:<7} {row['batch']:>5} {row['steps']:>5} "
            f"{row['median_s']:>9.3f} {row['min_s']:>8.3f} {row['ms_per_step']:>8.2f}"
        )
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
