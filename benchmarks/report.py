"""The one way every benchmark ends: its report as a JSON line on stdout, and in a file if asked."""

from __future__ import annotations

import json

from keras_transformer.hardware import cpu_record


def emit(report: dict, path: str | None) -> None:
    """Print ``report`` (with the CPU it ran on under ``"cpu"``) and write it to ``path``."""
    report = {**report, "cpu": cpu_record()}
    print(json.dumps(report))
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
