"""Peak memory and wall time of a short training run on Multi30k and on a corpus ~155x larger.

    python -m benchmarks.scale_corpus /tmp/big_corpus          # once: 4.5M pairs, ~600 MB
    python -m benchmarks.scale_check --big /tmp/big_corpus [--small DIR] [--json out.json]

Each corpus gets the same command in a fresh workdir (tokenizers trained from
scratch), one at a time::

    python -m training.train --config multi30k --workdir W --set data.dir=DIR
        --set training.epochs=1 --set training.steps_per_epoch=60 --set training.max_minutes=null
        --set evaluation.bleu_sentences=0 --set evaluation.max_sentences=20 --set
        training.average_last=1

Measured per run: the wall time, the peak resident set size from the kernel
(``wait4``'s ``ru_maxrss``: the high-water mark of the largest process) and the
peak of the whole process tree's summed RSS (sampled every 0.1 s with psutil),
and the tokenizer time from the run's log. The report compares the two runs
with the targets: peak RSS on the large corpus at most 1.3x Multi30k's, wall
time at most 240 s more. Wall time depends on what else the machine runs;
peak RSS does not.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.scale_corpus import CHECKOUT, default_source

RSS_RATIO_TARGET = 1.3
EXTRA_SECONDS_TARGET = 240
CHECK_OVERRIDES = (
    "training.epochs=1",
    "training.steps_per_epoch=60",
    "training.max_minutes=null",
    "evaluation.bleu_sentences=0",
    "evaluation.max_sentences=20",
    "training.average_last=1",
)
TOKENIZER_LOG = re.compile(r"trained tokenizers in ([0-9.]+)s")


def check_command(data_dir: Path, workdir: Path) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "training.train",
        "--config",
        "multi30k",
        "--workdir",
        str(workdir),
        "--set",
        f"data.dir={data_dir}",
    ]
    for override in CHECK_OVERRIDES:
        command += ["--set", override]
    return command


def _tree_rss(process) -> int:
    import psutil

    total = 0
    try:
        members = [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def measure(command: list[str], log_path: Path) -> dict:
    """Run ``command`` (output to ``log_path``); its wall time, peak RSS and exit status."""
    import psutil

    started = time.monotonic()
    with open(log_path, "wb") as log:
        child = subprocess.Popen(
            command,
            cwd=CHECKOUT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        process = psutil.Process(child.pid)
        tree_peak = 0
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            tree_peak = max(tree_peak, _tree_rss(process))
            time.sleep(0.1)
    wall = time.monotonic() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    text = log_path.read_text(encoding="utf-8", errors="replace")
    tokenizer = TOKENIZER_LOG.search(text)
    return {
        "returncode": child.returncode,
        "wall_seconds": round(wall, 1),
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),  # kilobytes on Linux
        "tree_rss_peak_mb": round(tree_peak / 2**20, 1),
        "tokenizer_seconds": float(tokenizer.group(1)) if tokenizer else None,
    }


def corpus_facts(directory: Path) -> dict:
    src, tgt = directory / "train.src", directory / "train.tgt"
    with open(src, "rb") as handle:
        pairs = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 24), b""))
    return {
        "dir": str(directory),
        "train_pairs": pairs,
        "train_mb": round((src.stat().st_size + tgt.stat().st_size) / 1e6, 1),
    }


def compare(small: dict, big: dict) -> dict:
    ratio = big["max_rss_mb"] / small["max_rss_mb"]
    extra = big["wall_seconds"] - small["wall_seconds"]
    return {
        "rss_ratio": round(ratio, 3),
        "extra_wall_seconds": round(extra, 1),
        "rss_target_met": ratio <= RSS_RATIO_TARGET,
        "wall_target_met": extra <= EXTRA_SECONDS_TARGET,
    }


def table_row(report: dict) -> str:
    small, big, verdict = report["runs"]["small"], report["runs"]["big"], report["comparison"]
    return (
        f"| {report['date']} | {report['corpora']['big']['train_pairs']:,} | "
        f"{small['max_rss_mb']:,.0f} / {big['max_rss_mb']:,.0f} MB ({verdict['rss_ratio']:.2f}×) | "
        f"{small['wall_seconds']:.0f} / {big['wall_seconds']:.0f} s "
        f"(+{verdict['extra_wall_seconds']:.0f} s) | "
        f"{small['tokenizer_seconds']} / {big['tokenizer_seconds']} s |"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--big", type=Path, required=True, help="the large corpus (benchmarks.scale_corpus)"
    )
    parser.add_argument(
        "--small", type=Path, default=None, help="default: the multi30k config's data.dir"
    )
    parser.add_argument(
        "--workdirs", type=Path, default=None, help="where the runs go (default: a temp folder)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the runs' workdirs and logs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    small_dir = (args.small or default_source()).resolve()
    big_dir = args.big.resolve()
    for directory in (small_dir, big_dir):
        if not (directory / "train.src").is_file():
            parser.error(f"{directory} has no train.src.")
    base = Path(tempfile.mkdtemp(prefix="scale_check-", dir=args.workdirs))
    runs = {}
    try:
        for name, directory in (("small", small_dir), ("big", big_dir)):
            print(f"{name}: {directory} ...", flush=True)
            runs[name] = measure(check_command(directory, base / name), base / f"{name}.log")
            print(f"{name}: {runs[name]}", flush=True)
            if runs[name]["returncode"] != 0:
                tail = (base / f"{name}.log").read_text(encoding="utf-8", errors="replace")[-3000:]
                print(tail, file=sys.stderr)
                args.keep = True
                return 1
    finally:
        if args.keep:
            print(f"runs kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    report = {
        "benchmark": "scale_check",
        "date": datetime.date.today().isoformat(),
        "command": " ".join(check_command(Path("DIR"), Path("W"))[1:]),
        "corpora": {"small": corpus_facts(small_dir), "big": corpus_facts(big_dir)},
        "runs": runs,
        "comparison": compare(runs["small"], runs["big"]),
        "targets": {
            "rss_ratio_max": RSS_RATIO_TARGET,
            "extra_wall_seconds_max": EXTRA_SECONDS_TARGET,
        },
    }
    print(
        "| date | big corpus pairs | peak RSS, Multi30k / big | wall, Multi30k / big | tokenizers, "
        "Multi30k / big |"
    )
    print(table_row(report))
    from benchmarks.report import emit

    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
