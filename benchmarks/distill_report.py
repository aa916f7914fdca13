"""The report of ``make distill``: the teacher, the student on references and the distilled
student side by side, and the distillation's goals as measured ratios.

    python -m benchmarks.distill_report --run runs/distill --teacher runs/multi30k

Reads what the recipe wrote in ``--run``: ``scores/NAME.SET.json`` (``python -m
training.evaluate``: BLEU, chrF; for a ``.tflite``, its size and LiteRT's milliseconds a
sentence), the students' workdirs ``student_ref`` and ``student_kd``, and the teacher's
workdir. Writes ``RUN/distill.json`` and ``RUN/distill.md`` (a markdown table, also printed):
per model its parameters (counted on the model built from ``model_config.json``), file size
and, per test set, BLEU, chrF and ms/sentence. The goals, per test set:

- the int8 distilled student ≥ 4× smaller than the teacher's float TFLite;
- ≥ 3× faster (LiteRT, the threads of the scores, batch 1);
- within 2 BLEU of the teacher's SavedModel (beam);
- ≥ 1 BLEU above the same student, also int8, trained on the references.

What was not measured (a step not run yet) shows as "–" and its goal as not measured. The
CPU is the one the timings came from (each score JSON names it); the report says so when
they differ.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

from keras_transformer.cli.common import ArgumentParser, fail, run

PROG = "python -m benchmarks.distill_report"
# (score name, model, artifact, workdir key): the report's rows, in order. The workdir key
# names the run whose parameters a row has: the teacher's, or a student's under --run.
ROWS = (
    ("teacher.saved_model", "teacher", "SavedModel", "teacher"),
    ("teacher", "teacher", "TFLite float32", "teacher"),
    ("student_ref", "student on references", "TFLite float32", "student_ref"),
    ("student_ref.int8", "student on references", "TFLite int8", "student_ref"),
    ("student_kd.int8", "distilled student", "TFLite int8", "student_kd"),
)
# (key, what, comparison, bound): the goals, each a measured value against a bound.
GOALS = (
    ("smaller", "int8 distilled student: times smaller than the teacher's float TFLite", ">=", 4),
    ("faster", "int8 distilled student: times faster than the teacher's float TFLite", ">=", 3),
    ("bleu_below_teacher", "distilled student: BLEU below the teacher's SavedModel", "<=", 2),
    ("bleu_over_references", "distilled student: BLEU above the student on references", ">=", 1),
)


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    parser.add_argument("--run", required=True, type=Path, help="make distill's DISTILL_RUN")
    parser.add_argument("--teacher", required=True, type=Path, help="the teacher's workdir")
    args = parser.parse_args(argv)
    for path, what in ((args.run, "--run"), (args.teacher, "--teacher")):
        if not path.is_dir():
            fail(PROG, f"{what} {path} is not a folder.")
    return args


def read_scores(folder: Path) -> dict[str, dict[str, dict]]:
    """``{score name: {test set: the evaluation's JSON}}`` from ``NAME.SET.json`` files."""
    scores: dict[str, dict[str, dict]] = {}
    for path in sorted(folder.glob("*.json")):
        name, _, test_set = path.stem.rpartition(".")
        if name:
            scores.setdefault(name, {})[test_set] = json.loads(path.read_text(encoding="utf-8"))
    return scores


def parameters(workdir: Path) -> int | None:
    """The parameters of the model that ``workdir/model_config.json`` describes (``None``
    without one)."""
    import keras_transformer as kt

    if not (workdir / "model_config.json").is_file():
        return None
    model = kt.Transformer(kt.Workdir(workdir).transformer_config())
    model.build()
    return int(model.count_params())


def training_summary(workdir: Path) -> dict | None:
    """A finished run's training: its seed and budget (``config.yaml``), and the updates,
    seconds, epochs and precision it used (``metrics.json``); ``None`` for an unfinished run."""
    import keras_transformer as kt

    path = workdir / "metrics.json"
    if not path.is_file():
        return None
    metrics = json.loads(path.read_text(encoding="utf-8"))
    training = kt.Workdir(workdir).config.get("training", {})
    return {
        "seed": training.get("seed"),
        "max_minutes": training.get("max_minutes"),
        "max_steps": training.get("max_steps"),
        "optimizer_steps": metrics.get("optimizer_steps"),
        "train_seconds": metrics.get("train_seconds"),
        "epochs": len(metrics.get("history", {}).get("loss", [])),
        "precision": metrics.get("precision", {}).get("used"),
    }


def ratio(numerator, denominator) -> float | None:
    return None if not numerator or not denominator else round(numerator / denominator, 2)


def difference(first, second) -> float | None:
    return None if first is None or second is None else round(first - second, 2)


def goals(models: dict, test_set: str) -> dict:
    """The goals on ``test_set``: ``{key: {"value", "goal", "met"}}`` (``value`` ``None``
    where what it needs was not measured)."""

    def field(name: str, key: str):
        return models.get(name, {}).get("sets", {}).get(test_set, {}).get(key)

    teacher_bytes = models.get("teacher", {}).get("size_bytes")
    student_bytes = models.get("student_kd.int8", {}).get("size_bytes")
    values = {
        "smaller": ratio(teacher_bytes, student_bytes),
        "faster": ratio(
            field("teacher", "ms_per_sentence"), field("student_kd.int8", "ms_per_sentence")
        ),
        "bleu_below_teacher": difference(
            field("teacher.saved_model", "bleu"), field("student_kd.int8", "bleu")
        ),
        "bleu_over_references": difference(
            field("student_kd.int8", "bleu"), field("student_ref.int8", "bleu")
        ),
    }
    out = {}
    for key, what, comparison, bound in GOALS:
        value = values[key]
        met = None if value is None else (value <= bound if comparison == "<=" else value >= bound)
        out[key] = {"what": what, "value": value, "goal": f"{comparison} {bound}", "met": met}
    return out


def collect(run_dir: Path, teacher: Path) -> dict:
    """The report of the distillation run in ``run_dir`` with the teacher ``teacher``."""
    from keras_transformer.hardware import cpu_record

    scores = read_scores(run_dir / "scores")
    workdirs = {
        "teacher": teacher,
        "student_ref": run_dir / "student_ref",
        "student_kd": run_dir / "student_kd",
    }
    counted = {key: parameters(path) for key, path in workdirs.items()}
    models = {}
    for name, model, artifact, workdir in ROWS:
        sets = scores.get(name, {})
        first = next(iter(sets.values()), {})
        models[name] = {
            "model": model,
            "artifact": artifact,
            "decoding": first.get("decoding"),
            "workdir": str(workdirs[workdir]),
            "parameters": counted[workdir],
            "file": first.get("tflite"),
            "size_bytes": first.get("size_bytes"),
            "threads": first.get("threads"),
            "sets": {
                test_set: {
                    key: result.get(key)
                    for key in ("bleu", "chrf", "sentences", "ms_per_sentence", "src")
                }
                for test_set, result in sets.items()
            },
        }
    test_sets = sorted({test_set for sets in scores.values() for test_set in sets})
    timed_cpus = {
        json.dumps(result["cpu"], sort_keys=True)
        for sets in scores.values()
        for result in sets.values()
        if "ms_per_sentence" in result and "cpu" in result
    }
    return {
        "benchmark": "distill",
        "date": datetime.date.today().isoformat(),
        "run": str(run_dir),
        "teacher": str(teacher),
        "cpu": json.loads(next(iter(timed_cpus))) if len(timed_cpus) == 1 else cpu_record(),
        "timings_on_one_cpu": len(timed_cpus) <= 1,
        "training": {key: training_summary(path) for key, path in workdirs.items()},
        "test_sets": test_sets,
        "models": models,
        "goals": {test_set: goals(models, test_set) for test_set in test_sets},
    }


def _number(value, digits: int = 2) -> str:
    if value is None:
        return "–"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.{digits}f}"


def markdown(report: dict) -> str:
    """The report as markdown: the models' table, then the goals' table."""
    cpu = report["cpu"]
    test_sets = report["test_sets"]
    threads = "/".join(
        str(n) for n in sorted({m["threads"] for m in report["models"].values() if m["threads"]})
    )
    lines = [
        f"Distillation (`make distill`), {report['date']}: {cpu['model']} ({cpu['kind']}, "
        f"{cpu['cores']} cores); LiteRT (`ai_edge_litert`), threads: {threads or '–'}, batch 1; "
        "BLEU: sacrebleu, cased, 13a.",
        "",
    ]
    if not report["timings_on_one_cpu"]:
        lines += ["The timings come from more than one CPU: compare them with care.", ""]
    header = ["model", "artifact", "decoding", "parameters", "size MB"]
    for test_set in test_sets:
        header += [f"{test_set} BLEU", f"{test_set} chrF", f"{test_set} ms/sentence"]
    lines += ["| " + " | ".join(header) + " |", "|---|---|---|" + "---:|" * (len(header) - 3)]
    for model in report["models"].values():
        size = model["size_bytes"]
        cells = [
            model["model"],
            model["artifact"],
            model["decoding"] or "–",
            _number(model["parameters"]),
            _number(None if size is None else size / 1e6, 1),
        ]
        for test_set in test_sets:
            result = model["sets"].get(test_set, {})
            cells += [
                _number(result.get("bleu")),
                _number(result.get("chrf")),
                _number(result.get("ms_per_sentence"), 1),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| goal | bound | " + " | ".join(test_sets) + " |",
        "|---|---|" + "---|" * len(test_sets),
    ]
    for key, what, comparison, bound in GOALS:
        cells = []
        for test_set in test_sets:
            goal = report["goals"][test_set][key]
            met = {True: "met", False: "not met", None: "not measured"}[goal["met"]]
            cells.append(f"{_number(goal['value'])} ({met})")
        lines.append(f"| {what} | {comparison} {bound} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)

    def report() -> int:
        from keras_transformer.files import write_text_atomically

        result = collect(args.run, args.teacher)
        text = markdown(result)
        write_text_atomically(args.run / "distill.json", json.dumps(result, indent=2))
        write_text_atomically(args.run / "distill.md", text)
        print(text, end="")
        return 0

    return run(PROG, report, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
