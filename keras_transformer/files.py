"""Atomic writes of files and folders: readers never see a half-written one."""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


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


def staging_directory(target: str | os.PathLike, tag: str = "tmp") -> Path:
    """An empty hidden folder beside ``target`` (same file system, so it can be renamed
    onto it), with the permissions of a folder made by ``mkdir`` (``mkdtemp``'s are
    owner-only, which would hide an export from a server running as another user)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.{tag}-"))
    umask = os.umask(0o022)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)
    return staging


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``);
    False where the system or the file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    return (
        renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0
    )


def replace_directory(staging: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Rename the complete folder ``staging`` to ``target``, replacing any old one.

    A reader such as a TF Serving process watching the parent sees the old
    folder or the new one, never a half-written one, and the old one is
    deleted only once the new one is in place. On Linux the two are swapped
    in one atomic step; elsewhere the old folder is moved aside, the new one
    renamed in (the old one is put back if that fails), then the old one
    deleted.
    """
    staging, target = Path(staging), Path(target)
    if not target.exists():
        os.replace(staging, target)
        return target
    if sys.platform.startswith("linux") and _exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # now the old folder
        return target
    aside = staging_directory(target, "old")
    old = aside / target.name
    os.replace(target, old)
    try:
        os.replace(staging, target)
    except BaseException:
        os.replace(old, target)
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return target
