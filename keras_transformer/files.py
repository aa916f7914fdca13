"""Atomic file writes: readers never see a half-written file."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def write_atomically(files: dict[Path, bytes]) -> None:
    """Write files that live in one folder: each goes to a staging folder beside
    them, then is renamed into place (a rename within a file system is atomic)."""
    files = {Path(path): data for path, data in files.items()}
    directory = next(iter(files)).parent
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory, prefix=".staging-"))
    try:
        for path, data in files.items():
            (staging / path.name).write_bytes(data)
        for path in files:
            os.replace(staging / path.name, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    write_atomically({Path(path): text.encode("utf-8")})


def write_through_temp(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Call ``write(temp)`` on a hidden sibling of ``path`` that keeps its suffix
    (Keras checks ``.keras`` / ``.weights.h5``), then rename it over ``path``. A
    process killed mid-write leaves the previous ``path`` intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(".tmp-" + path.name)
    try:
        write(temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
