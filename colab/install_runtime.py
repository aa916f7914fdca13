"""Install keras-transformer into a notebook runtime without replacing its TensorFlow.

A runtime such as Colab's comes with TensorFlow, Keras and often TF Text already installed and
imported. A plain ``pip install .`` keeps an installed TensorFlow only while every requirement
accepts it: where TF Text is missing, pip picks the newest TF Text, which needs the newest
TensorFlow, and replaces the runtime's own (a restart, a second download, and the runtime's
other packages left mismatched). This module pins what the runtime has whenever it is in the
project's supported range (read from ``pyproject.toml``), and adds the TF Text that matches
TensorFlow when none is installed. On a TPU runtime (``tensorflow-tpu``) it takes the README's
TPU path: ``--no-deps``, then ``requirements/tpu.txt``. It needs only the standard library,
since it runs before the project is installed.

    python colab/install_runtime.py [--extras train,tfds] [--editable] [--dry-run] [CHECKOUT]

The notebooks in ``colab/`` call :func:`install` from their setup cell.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

# The runtime's packages that an install must keep when they are in the supported range.
RUNTIME = ("tensorflow", "keras", "tensorflow-text")
# tensorflow-metadata 1.21 (TFDS's) is generated for protobuf >= 6.31 but declares >= 4.25.2: with
# the protobuf 5 that TensorFlow 2.19 pins, `import tensorflow_datasets` fails. Below protobuf 6,
# the [tfds] extra asks for an earlier one.
PROTOBUF_5_TFDS = "tensorflow-metadata<1.21"
# Imported modules whose distribution an install may have replaced under a running kernel.
IMPORTED = {"numpy": "numpy", "tensorflow": "tensorflow", "keras": "keras"}
# TF Text ships for the plain TensorFlow; its Python files are what the TPU build uses too.
TPU_BUILD = "tensorflow-tpu"


def version_tuple(version: str, parts: int = 3) -> tuple[int, ...]:
    """The leading numbers of a version string: ``"2.19.0rc1"`` → ``(2, 19, 0)``."""
    numbers = re.findall(r"\d+", version.split("+")[0])[:parts]
    return tuple(int(number) for number in numbers)


def supported_range(checkout: Path, name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ``>=low,<high`` bounds of ``name`` among ``pyproject.toml``'s dependencies.

    Raises:
        ValueError: the dependency is missing or not written as ``name>=X.Y,<X.Y``.
    """
    text = (Path(checkout) / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(rf'"{re.escape(name)}>=([\d.]+),<([\d.]+)"', text)
    if not match:
        raise ValueError(f'pyproject.toml has no "{name}>=X.Y,<X.Y" dependency')
    return version_tuple(match.group(1)), version_tuple(match.group(2))


def in_range(version: str | None, bounds: tuple[tuple[int, ...], tuple[int, ...]]) -> bool:
    """Whether ``version`` lies in ``[low, high)`` (``None``, not installed, never does)."""
    if version is None:
        return False
    low, high = bounds
    parts = version_tuple(version)
    return low <= parts[: len(low)] and parts[: len(high)] < high


def installed_versions(names=(*RUNTIME, TPU_BUILD, "protobuf")) -> dict[str, str | None]:
    """The installed version of each distribution, ``None`` where it is missing."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def runtime_pins(checkout: Path, versions: dict[str, str | None]) -> list[str]:
    """The requirements that keep the runtime's TensorFlow, Keras and TF Text.

    Each is pinned to its installed version when that lies in the supported range. Where
    TensorFlow is kept and TF Text is missing (or of another minor version), TF Text of
    TensorFlow's minor version is asked for, so that pip does not upgrade TensorFlow for it.
    A TensorFlow outside the range is not pinned: pip then installs a supported one.
    """
    tensorflow = versions.get("tensorflow")
    if not in_range(tensorflow, supported_range(checkout, "tensorflow")):
        return []
    pins = [f"tensorflow=={tensorflow}"]
    if in_range(versions.get("keras"), supported_range(checkout, "keras")):
        pins.append(f"keras=={versions['keras']}")
    minor = ".".join(str(part) for part in version_tuple(tensorflow, 2))
    tf_text = versions.get("tensorflow-text")
    if tf_text is not None and version_tuple(tf_text, 2) == version_tuple(tensorflow, 2):
        pins.append(f"tensorflow-text=={tf_text}")
    else:
        pins.append(f"tensorflow-text=={minor}.*")
    return pins


def extra_requirements(checkout: Path, extras: list[str]) -> list[str]:
    """The requirements of ``extras`` as ``pyproject.toml`` lists them (for the TPU path)."""
    text = (Path(checkout) / "pyproject.toml").read_text(encoding="utf-8")
    requirements = []
    for extra in extras:
        match = re.search(rf"^{re.escape(extra)} = \[(.*?)\]", text, flags=re.MULTILINE | re.DOTALL)
        if not match:
            raise ValueError(f"pyproject.toml has no [{extra}] extra")
        requirements += re.findall(r'"([^"]+)"', match.group(1))
    return requirements


def pip_commands(
    checkout: Path,
    extras: list[str],
    versions: dict[str, str | None],
    editable: bool = False,
) -> list[list[str]]:
    """The ``pip install`` argument lists that install ``checkout`` into this runtime.

    Args:
        checkout: the clone of the repository (the folder of ``pyproject.toml``).
        extras: the project's extras to install, e.g. ``["train", "tfds"]``.
        versions: installed versions, as :func:`installed_versions` returns them.
        editable: install the clone in editable mode (``-e``).

    Returns:
        One or two argument lists for ``python -m pip``.
    """
    pip = ["install", "-q"]
    target = ["-e", "."] if editable else ["."]
    tpu_build = versions.get(TPU_BUILD)
    if tpu_build:  # the README's TPU path: nothing may pull the plain tensorflow over it
        minor = ".".join(str(part) for part in version_tuple(tpu_build, 2))
        return [
            pip + ["--no-deps", f"tensorflow-text=={minor}.*", *target],
            pip + ["-r", "requirements/tpu.txt", *extra_requirements(checkout, extras)],
        ]
    spec = f"{target[-1]}[{','.join(extras)}]" if extras else target[-1]
    pins = runtime_pins(checkout, versions)
    protobuf = versions.get("protobuf")
    if "tfds" in extras and protobuf is not None and version_tuple(protobuf, 1) < (6,):
        pins.append(PROTOBUF_5_TFDS)
    return [pip + [*target[:-1], spec, *pins]]


def replaced_imports() -> list[str]:
    """The imported modules among numpy, tensorflow and keras whose installed version changed."""
    stale = []
    for module, distribution in IMPORTED.items():
        if module in sys.modules:
            loaded = getattr(sys.modules[module], "__version__", None)
            if loaded is not None and loaded != importlib.metadata.version(distribution):
                stale.append(module)
    return stale


def install(
    checkout: str | Path = ".",
    extras: list[str] | tuple[str, ...] = (),
    editable: bool = False,
    dry_run: bool = False,
) -> list[str]:
    """Install the clone ``checkout`` into this Python, keeping a supported runtime.

    Args:
        checkout: the clone of the repository.
        extras: the project's extras to install.
        editable: install in editable mode (the notebooks import ``training/`` from the clone).
        dry_run: print the commands, run nothing.

    Returns:
        The modules that were imported before and whose distribution pip replaced: the kernel
        must be restarted before they are used. Empty when the runtime was kept.

    Raises:
        subprocess.CalledProcessError: pip failed.
    """
    checkout = Path(checkout).resolve()
    commands = pip_commands(checkout, list(extras), installed_versions(), editable)
    for command in commands:
        print("pip", " ".join(command))
        if not dry_run:
            subprocess.run([sys.executable, "-m", "pip", *command], cwd=checkout, check=True)
    return [] if dry_run else replaced_imports()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", nargs="?", default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--extras", default="", help="comma-separated extras, e.g. train,tfds")
    parser.add_argument("--editable", action="store_true", help="pip install -e")
    parser.add_argument("--dry-run", action="store_true", help="print the pip commands only")
    args = parser.parse_args(argv)
    if not (Path(args.checkout) / "pyproject.toml").is_file():
        parser.error(f"{args.checkout} is not a keras-transformer checkout (no pyproject.toml)")
    extras = [extra for extra in args.extras.split(",") if extra]
    try:
        stale = install(args.checkout, extras, args.editable, args.dry_run)
    except subprocess.CalledProcessError as error:
        print(f"pip failed (exit {error.returncode}); see its output above", file=sys.stderr)
        return 1
    if stale:
        print(f"pip replaced {stale}, already imported here: restart the Python process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
