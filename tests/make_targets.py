"""Running the checkout's Makefile targets from tests: ``make`` with this interpreter as the
recipes' ``$(BIN)/python`` and the virtual environment's install step taken as done."""

import os
import subprocess
import sys
from pathlib import Path

from hang_guard import HANG_TIMEOUT

CHECKOUT = Path(__file__).resolve().parent.parent


def python_bin(folder: Path) -> Path:
    """A folder to pass as ``BIN=``: its ``python`` runs this interpreter."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "python"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    return folder


def make(*args: str, timeout: float = HANG_TIMEOUT) -> subprocess.CompletedProcess:
    """``make ARGS`` in the checkout (``-o .venv/.installed``: no install step), its output
    captured as text."""
    return subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed", *args],
        cwd=CHECKOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
