"""How long a program takes to its first translation: ``kt translate --model M "one sentence"``.

Usage: python -m benchmarks.program_start --model EXPORT [--sentence S] [--repeats 3]
       [--json out.json]

Each repeat starts a new process that imports TensorFlow (timed), then runs the
``kt translate`` program's ``main`` on one sentence (timed from the moment the
import returned until the translation is printed: loading the SavedModel, its
first call, tokenization). A second new process runs the whole command, as a
user types it, for its wall time. The medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.report import emit

CHILD = """
import json, sys, time
started = time.perf_counter()
import tensorflow
imported = time.perf_counter()
from keras_transformer.cli.translate import main
code = main(["--model", sys.argv[1], sys.argv[2]])
done = time.perf_counter()
print(json.dumps({"import_s": imported - started, "after_import_s": done - imported,
                  "code": code}), file=sys.stderr)
"""


def _child_env() -> dict:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def timed_in_process(model: Path, sentence: str) -> dict:
    """One new process: import TensorFlow, then the program's ``main``; their seconds."""
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(model), sentence],
        capture_output=True,
        text=True,
        env=_child_env(),
        check=True,
    )
    record = json.loads(result.stderr.strip().splitlines()[-1])
    record["translation"] = result.stdout.strip()
    return record


def timed_command(model: Path, sentence: str) -> float:
    """One new process running ``python -m keras_transformer.cli.translate``: its wall seconds."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "keras_transformer.cli.translate", "--model", str(model), sentence],
        capture_output=True,
        env=_child_env(),
        check=True,
    )
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="an export (version folder)")
    parser.add_argument("--sentence", default="Ein Mann fährt mit dem Fahrrad die Straße entlang.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the report here")
    args = parser.parse_args(argv)
    runs = [timed_in_process(args.model, args.sentence) for _ in range(args.repeats)]
    walls = [timed_command(args.model, args.sentence) for _ in range(args.repeats)]
    report = {
        "benchmark": "program_start",
        "model": str(args.model),
        "command": f'kt translate --model {args.model} "{args.sentence}"',
        "import_tensorflow_s": round(statistics.median(r["import_s"] for r in runs), 2),
        "first_translation_after_import_s": round(
            statistics.median(r["after_import_s"] for r in runs), 2
        ),
        "command_wall_s": round(statistics.median(walls), 2),
        "repeats": args.repeats,
        "translation": runs[0]["translation"],
    }
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
