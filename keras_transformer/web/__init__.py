"""The web page that ``keras_transformer.exporters.web.export_web`` copies (package data: HTML,
ES modules, and the npm ``package.json``/``package-lock.json`` of the JavaScript it vendors), and
the ``npm ci`` of those packages into a cache folder.

No TensorFlow here: ``make test``/``make web`` install the packages with
``python -c "from keras_transformer.web import install_node_modules; install_node_modules()"``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

from keras_transformer.files import replace_directory, staging_directory

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parent  # the page, package.json and package-lock.json
# page path -> path in node_modules
VENDOR = {
    "vendor/litertjs-core.js": "@litertjs/core/dist/index.js",
    "vendor/litertjs-wasm-utils.js": "@litertjs/wasm-utils/dist/index.js",
    "vendor/sentencepiece.js": "@sctg/sentencepiece-js/dist/index.js",
}
LITERT_WASM_DIR = "litert/"
LITERT_WASM = tuple(
    f"{name}.{kind}"
    for name in ("litert_wasm_internal", "litert_wasm_compat_internal")
    for kind in ("js", "wasm")
)
LICENSES = {  # page path -> path in node_modules, where the package ships one
    "vendor/LICENSE.sentencepiece-js": "@sctg/sentencepiece-js/LICENSE",
}
NPM_FIX = "install Node.js and npm (apt-get install -y nodejs npm), or pass --node-modules DIR"


def lock_hash() -> str:
    """The first 12 hex digits of the SHA-256 of ``package-lock.json``: the cache folder's key."""
    return hashlib.sha256((WEB_DIR / "package-lock.json").read_bytes()).hexdigest()[:12]


def cache_dir(dev: bool = False) -> Path:
    """The folder that ``npm ci`` installs the page's packages into (``dev``: with
    puppeteer-core, for the tests and benchmarks), one per lock file.

    Args:
        dev: with the devDependencies.

    Returns:
        ``$KT_WEB_CACHE/web-HASH[-dev]``, where ``KT_WEB_CACHE`` defaults to
        ``$XDG_CACHE_HOME/keras-transformer`` (``~/.cache/keras-transformer``).
    """
    root = os.environ.get("KT_WEB_CACHE")
    if not root:
        cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        root = Path(cache) / "keras-transformer"
    return Path(root) / f"web-{lock_hash()}{'-dev' if dev else ''}"


def _missing(modules: Path) -> list[str]:
    """The files of ``VENDOR`` and ``LITERT_WASM`` that ``modules`` lacks."""
    wanted = [*VENDOR.values(), *(f"@litertjs/core/wasm/{name}" for name in LITERT_WASM)]
    return [name for name in wanted if not (modules / name).is_file()]


def install_node_modules(dev: bool = False) -> Path:
    """The ``node_modules`` of the page's lock file, installed with ``npm ci`` unless it is there.

    The install goes to a temp folder beside the cache folder, then is renamed in.

    Args:
        dev: with the devDependencies (puppeteer-core).

    Returns:
        The ``node_modules`` folder.

    Raises:
        ValueError: npm is missing or ``npm ci`` failed.

    Example::

        from keras_transformer.web import install_node_modules
        install_node_modules(dev=True)
    """
    target = cache_dir(dev)
    modules = target / "node_modules"
    if modules.is_dir() and not _missing(modules):
        return modules
    npm = shutil.which("npm")
    if npm is None:
        raise ValueError(f"npm not found, needed for the page's JavaScript packages: {NPM_FIX}.")
    staging = staging_directory(target)
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(WEB_DIR / name, staging / name)
        command = [npm, "ci", "--no-audit", "--no-fund", *([] if dev else ["--omit=dev"])]
        log.info("installing the page's JavaScript packages into %s", target)
        result = subprocess.run(command, cwd=staging, capture_output=True, text=True)
        if result.returncode != 0:
            lines = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
            raise ValueError(f"npm ci failed in {staging} ({lines[-1]}): {NPM_FIX}.")
        replace_directory(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return modules


def find_node_modules(node_modules: str | os.PathLike | None = None) -> Path:
    """``node_modules`` checked, or the cached install (``install_node_modules``) when ``None``.

    Args:
        node_modules: a ``node_modules`` folder made by ``npm ci`` from the page's lock file.

    Returns:
        The folder.

    Raises:
        ValueError: the folder lacks a file the page needs, npm is missing or ``npm ci`` failed.
    """
    if node_modules is None:
        return install_node_modules()
    modules = Path(node_modules)
    missing = _missing(modules)
    if missing:
        raise ValueError(
            f"{modules} lacks {missing[0]}: give the node_modules of `npm ci` run beside "
            f"{WEB_DIR / 'package-lock.json'}."
        )
    return modules
