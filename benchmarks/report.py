"""The one way every benchmark ends: its report as a JSON line on stdout, and in a file if asked."""

from __future__ import annotations

import json


def emit(report: dict, path: str | None) -> None:
    print(json.dumps(report))
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
