"""Check an installed distribution's files against its ``.dist-info/RECORD``.

Every installed file is listed in RECORD with ``sha256=<urlsafe base64, no padding>`` and
its size. When two distributions ship the same paths (tensorflow and tensorflow-tpu both
ship ``tensorflow/``), the one installed last overwrites the other's files, and only the
hashes tell: ``verify_record("tensorflow_tpu", site_packages)`` is empty only while every
file is still tensorflow-tpu's.

    python tests/record_check.py tensorflow_tpu [SITE_PACKAGES]

prints the mismatches and exits 1 if there are any (SITE_PACKAGES defaults to the
running interpreter's purelib directory).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import re
import sys
import sysconfig
from pathlib import Path
from typing import NamedTuple


class Mismatch(NamedTuple):
    path: str  # as written in RECORD, relative to site-packages
    problem: str  # "missing", "size 12 != 34" or "sha256 mismatch"


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def find_dist_info(dist_name: str, site_packages: str | Path) -> Path:
    """The ``<name>-<version>.dist-info`` folder of ``dist_name`` (any spelling of the name)."""
    wanted = _normalize(dist_name)
    found = [
        path
        for path in Path(site_packages).glob("*.dist-info")
        if _normalize(path.name[: -len(".dist-info")].rsplit("-", 1)[0]) == wanted
    ]
    if len(found) != 1:
        raise LookupError(
            f"{len(found)} dist-info folders for {dist_name!r} in {site_packages}: {found}"
        )
    return found[0]


def file_hash(path: Path, algorithm: str = "sha256") -> str:
    """RECORD's spelling of a file's digest: urlsafe base64 without the ``=`` padding."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")


def verify_record(dist_name: str, site_packages: str | Path) -> list[Mismatch]:
    """Every file of ``dist_name``'s RECORD that is missing or whose size or hash differs.

    Entries without a hash (RECORD itself, byte-code) are not checked."""
    site_packages = Path(site_packages)
    record = find_dist_info(dist_name, site_packages) / "RECORD"
    mismatches = []
    with open(record, newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            if not row or not row[1]:
                continue
            relative, hash_spec, size = row[0], row[1], row[2] if len(row) > 2 else ""
            path = site_packages / relative
            algorithm, _, expected = hash_spec.partition("=")
            if not path.is_file():
                mismatches.append(Mismatch(relative, "missing"))
            elif size and path.stat().st_size != int(size):
                mismatches.append(Mismatch(relative, f"size {path.stat().st_size} != {size}"))
            elif file_hash(path, algorithm) != expected:
                mismatches.append(Mismatch(relative, f"{algorithm} mismatch"))
    return mismatches


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python tests/record_check.py DIST_NAME [SITE_PACKAGES]", file=sys.stderr)
        return 2
    site_packages = argv[1] if len(argv) == 2 else sysconfig.get_paths()["purelib"]
    record = find_dist_info(argv[0], site_packages) / "RECORD"
    mismatches = verify_record(argv[0], site_packages)
    for mismatch in mismatches:
        print(f"{mismatch.problem}: {mismatch.path}")
    with open(record, newline="", encoding="utf-8") as f:
        checked = sum(1 for row in csv.reader(f) if len(row) > 1 and row[1])
    print(f"{record.parent.name}: {checked} files checked, {len(mismatches)} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
