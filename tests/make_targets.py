"""Running the checkout's Makefile targets from tests: ``make`` with this interpreter as the
recipes' ``$(BIN)/python`` (and its ``kt``) and the virtual environment's install step taken as
done."""

import os
import subprocess
import sys
from pathlib import Path

from hang_guard import HANG_TIMEOUT

CHECKOUT = Path(__file__).resolve().parent.parent


def python_bin(folder: Path) -> Path:
    """A folder to pass as ``BIN=``: its ``python`` runs this interpreter, its ``kt`` the
    checkout's ``kt`` command (``python -m keras_transformer.cli.main``) with it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, command in (("python", ""), ("kt", " -m keras_transformer.cli.main")):
        shim = folder / name
        shim.write_text(f'#!/bin/sh\nexec {sys.executable}{command} "$@"\n')
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
