"""TensorFlow custom ops for CPU training, opt-in, compiled from source on first use.

TensorFlow's CPU kernels run LayerNorm as ~30 full passes over its input
(forward and backward), where one kernel needs three. The ops here are that
kernel (``docs/kernels.md`` has what they save). They are compiled on the
machine that runs them (against the installed TensorFlow's headers, for its
CPU), once, into a private cache, because a prebuilt binary would have to
match TensorFlow's exact version and ABI. They serve CPU training only, not
inference, GPUs or TPUs.

They are **off by default**: nothing is compiled or loaded, and nothing is
logged, unless they are enabled by one of

* ``keras_transformer.kernels.native.set_enabled(True)`` (also ``keras_transformer.native``)
(``False`` turns them off,
  ``None`` returns to the environment's choice), which wins over
* the environment: ``KERAS_TRANSFORMER_NATIVE_OPS=1`` (or ``true``, ``yes``,
  ``on``); unset, ``0``, ``false``, ``no``, ``off`` or empty: off;
* in ``kt train``, the config key ``training.native_ops: true``.

Once enabled they remain an accelerator, never a requirement: callers fall
back to TensorFlow's own ops, with one logged warning, when there is no C++
compiler, the build fails or the cache is not safe to use; and silently when
the process sees a GPU or TPU or the graph is XLA-compiled. Exported graphs
never contain them (see ``kernels.layer_norm``), so SavedModels load in TF
Serving and convert to TFLite as before.

The cache holds native code that the process will execute, so it is checked
before every load:

* the directory (``KERAS_TRANSFORMER_CACHE``, or
  ``$XDG_CACHE_HOME/keras_transformer``, or ``~/.cache/keras_transformer``)
  is created with mode 0700; an existing one must be a directory owned by
  the current user with no group or world permissions, and every directory
  above it must be owned by the user or root and not writable by others
  (unless sticky, like ``/tmp``), so nobody else can swap it between the
  checks and the load. Otherwise the ops are refused.
* the library must be a regular file (not a symlink) owned by the current
  user, not group or world writable, and its sha256 must equal the one
  recorded beside it (``NAME.sha256``, ``sha256sum`` format) when it was
  built. Any of these failing refuses the library, except a hash that does
  not match or was never recorded: only the owner can write in the private
  directory, so that is a truncated, stale or damaged file, and it is
  rebuilt in place.
* builds write the library (0700) and then its hash (0600) to temporary
  files in the directory, each renamed into place, under a lock file, so a
  concurrent or killed build never leaves a library that ``load`` would
  take.

Environment:
    ``KERAS_TRANSFORMER_NATIVE_OPS``: ``1`` to enable the ops (see above).
    ``KERAS_TRANSFORMER_CACHE``: where built ops are kept.
    ``CXX``: the C++ compiler (default ``c++``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import stat
import subprocess
import tempfile
import threading
from pathlib import Path
from types import ModuleType

import tensorflow as tf

from keras_transformer import hardware

try:
    import fcntl
except ImportError:  # not POSIX: builds are still atomic, only not serialized
    fcntl = None

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("layer_norm.cc")
_ENABLE_VARIABLE = "KERAS_TRANSFORMER_NATIVE_OPS"
_CACHE_VARIABLE = "KERAS_TRANSFORMER_CACHE"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
_BUILD_TIMEOUT_S = 300  # the build takes ~8 s; a hung compiler must not hang training
_lock = threading.Lock()
_switch: bool | None = None


class UnsafeCache(RuntimeError):
    """The cache directory or a library in it failed a safety check."""


def set_enabled(value: bool | None) -> None:
    """Turn the native ops on or off for this process, over ``KERAS_TRANSFORMER_NATIVE_OPS``.

    Takes effect for graphs traced afterwards; a library already loaded stays
    loaded, but is no longer used once the ops are turned off.

    Args:
        value: ``True`` (on), ``False`` (off), or ``None``: the environment decides.

    Raises:
        TypeError: ``value`` is not ``True``, ``False`` or ``None``.
    """
    global _switch
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"set_enabled takes True, False or None, not {value!r}")
    _switch = value


def enabled() -> bool:
    """Whether the native ops may be built and loaded. Off by default.

    Returns:
        ``set_enabled``'s value, else whether ``KERAS_TRANSFORMER_NATIVE_OPS``
        is ``1``, ``true``, ``yes`` or ``on``.
    """
    if _switch is not None:
        return _switch
    value = os.environ.get(_ENABLE_VARIABLE, "").strip().lower()
    if value in _TRUE:
        return True
    if value not in _FALSE:
        _warn_unknown_value(value)
    return False


@functools.cache
def _warn_unknown_value(value: str) -> None:
    logger.warning(
        "%s=%r is neither 1/true/yes/on nor 0/false/no/off; the native ops stay off.",
        _ENABLE_VARIABLE,
        value,
    )


def cache_dir() -> Path:
    """The native ops' build cache folder.

    ``$KERAS_TRANSFORMER_CACHE``, else ``$XDG_CACHE_HOME/keras_transformer`` (``~/.cache``)."""
    if os.environ.get(_CACHE_VARIABLE):
        return Path(os.environ[_CACHE_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "keras_transformer"


def _cpu_features() -> str:
    """The CPU's feature flags: a library built with ``-march=native`` is only
    valid on CPUs that have them (a cache on a shared home directory)."""
    return hardware.flags_line()


def _compiler() -> str:
    return os.environ.get("CXX", "c++")


def _compile_commands(output: Path) -> list[list[str]]:
    """The build command, then the same without ``-mno-avx512fp16`` for
    compilers that do not know the flag. TensorFlow's Eigen headers do not
    compile with AVX512-FP16 enabled, which ``-march=native`` does on CPUs
    that have it (Sapphire Rapids)."""
    head = [_compiler(), "-std=c++17", "-shared", "-fPIC", "-O3", "-march=native", "-fopenmp-simd"]
    tail = [
        str(SOURCE),
        "-o",
        str(output),
        *tf.sysconfig.get_compile_flags(),
        *tf.sysconfig.get_link_flags(),
    ]
    return [head + ["-mno-avx512fp16"] + tail, head + tail]


def library_path() -> Path:
    """Where the built library for this source, TensorFlow, compiler and CPU lives."""
    key = hashlib.sha256()
    for part in (
        SOURCE.read_bytes(),
        tf.__version__.encode(),
        " ".join(_compile_commands(Path("out"))[0]).encode(),  # compiler, flags, TF's headers
        platform.machine().encode(),
        _cpu_features().encode(),
    ):
        key.update(part)
        key.update(b"\0")
    return cache_dir() / f"layer_norm-{key.hexdigest()[:20]}.so"


def _hash_path(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


# --- the private cache directory ---------------------------------------------------------------


def _private_cache_dir() -> Path:
    """``cache_dir()`` resolved, created 0700 if missing, checked either way."""
    directory = Path(os.path.realpath(cache_dir()))
    for parent in reversed([p for p in directory.parents if not p.exists()]):
        _make_private(parent)
    _check_ancestors(directory)
    if _make_private(directory):
        os.chmod(directory, 0o700)  # exactly 0700, whatever the umask
    _check_private_directory(directory)
    return directory


def _make_private(path: Path) -> bool:
    """Create ``path`` with mode 0700; ``False`` if it exists (checked by the caller)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return False
    return True


def _check_private_directory(directory: Path) -> None:
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeCache(f"{directory} is not a directory")
    if info.st_uid != os.geteuid():
        raise UnsafeCache(
            f"the cache directory {directory} is owned by uid {info.st_uid}, "
            f"not by this user (uid {os.geteuid()})"
        )
    if info.st_mode & 0o077:
        raise UnsafeCache(
            f"the cache directory {directory} has mode {stat.S_IMODE(info.st_mode):04o}; "
            f"it must be private (chmod 700 it, or remove it: it holds only built ops)"
        )


def _check_ancestors(directory: Path) -> None:
    """Nobody but this user and root can rename or replace ``directory``."""
    for parent in directory.parents:
        info = os.stat(parent)
        if info.st_uid not in (0, os.geteuid()):
            raise UnsafeCache(f"{parent}, above the cache directory, is owned by uid {info.st_uid}")
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise UnsafeCache(
                f"{parent}, above the cache directory, is writable by others "
                f"(mode {stat.S_IMODE(info.st_mode):04o})"
            )


class _DirectoryLock:
    """An exclusive ``flock`` on ``directory/.lock`` (a no-op where there is no fcntl)."""

    def __init__(self, directory: Path):
        self._path = directory / ".lock"
        self._fd = None

    def __enter__(self):
        if fcntl is not None:
            flags = (
                os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            )
            self._fd = os.open(self._path, flags, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
        return False


# --- checking, building, loading ---------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_owned_file(path: Path, what: str) -> None:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeCache(f"the {what} {path} is a symbolic link")
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeCache(f"the {what} {path} is not a regular file")
    if info.st_uid != os.geteuid():
        raise UnsafeCache(f"the {what} {path} is owned by uid {info.st_uid}, not by this user")
    if info.st_mode & 0o022:
        raise UnsafeCache(
            f"the {what} {path} is writable by others (mode {stat.S_IMODE(info.st_mode):04o})"
        )


def _recorded_hash(library: Path) -> str | None:
    record = _hash_path(library)
    if not os.path.lexists(record):
        return None
    _check_owned_file(record, "hash record")
    fields = record.read_text(encoding="ascii", errors="replace").split()
    return fields[0].lower() if fields else None


def _verified(library: Path) -> str | None:
    """``None`` when the existing ``library`` passes every check; else why it must
    be rebuilt (no recorded hash, another hash). Raises ``UnsafeCache`` for
    what a rebuild must not paper over (a symlink, another owner, loose modes)."""
    _check_owned_file(library, "library")
    expected = _recorded_hash(library)
    if expected is None:
        return "no sha256 recorded for it"
    actual = _sha256(library.read_bytes())
    if actual != expected:
        return f"its sha256 {actual[:16]}... is not the recorded {expected[:16]}..."
    return None


def _compile() -> bytes:
    """The built library's bytes, compiled in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="keras_transformer_build_") as build:
        output = Path(build) / "layer_norm.so"
        errors = []
        for command in _compile_commands(output):
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S
            )
            if result.returncode == 0:
                return output.read_bytes()
            last_lines = result.stderr.strip().splitlines()[-3:]
            errors.append(
                f"exit status {result.returncode}" + "".join(f" / {line}" for line in last_lines)
            )
        raise RuntimeError(f"{_compiler()} failed: " + " | ".join(errors))


def _write_private(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a new temporary file beside ``path`` with ``mode``,
    then rename it over ``path`` (which replaces a symlink, never its target)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".tmp-{path.name}-")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)


def _build(library: Path) -> None:
    """Compile, then install the library and then its hash: until both are in
    place, ``_verified`` reports a stale or missing hash, never a library to load."""
    data = _compile()
    _write_private(library, data, 0o700)
    _write_private(_hash_path(library), f"{_sha256(data)}  {library.name}\n".encode("ascii"), 0o600)


def load() -> ModuleType | None:
    """The ops module, built on first use.

    Returns:
        The module; ``None`` where the ops are not enabled (``enabled``: off
        by default, nothing built or logged), cannot be built, or the cache
        fails its checks (logged once, with the reason).
    """
    if not enabled():
        return None
    return _load_once()


@functools.cache
def _load_once() -> ModuleType | None:
    with _lock:
        try:
            directory = _private_cache_dir()
            library = directory / library_path().name
            with _DirectoryLock(directory):
                built = os.path.lexists(library)
                problem = _verified(library) if built else None
                if not built or problem is not None:
                    if problem is not None:
                        logger.warning("Not loading %s: %s; rebuilding it.", library, problem)
                    logger.info(
                        "Building keras_transformer's native LayerNorm op into %s (once; ~10 s).",
                        library,
                    )
                    _build(library)
                    problem = _verified(library)
                    if problem is not None:
                        raise UnsafeCache(
                            f"{library} failed its check right after the build: {problem}"
                        )
                return tf.load_op_library(str(library))
        except UnsafeCache as error:
            logger.warning(
                "Refusing keras_transformer's native LayerNorm op: %s. Training uses TensorFlow's "
                "ops. "
                "Fix or remove the cache (%s sets where it is).",
                error,
                _CACHE_VARIABLE,
            )
            return None
        except (
            OSError,
            RuntimeError,
            ValueError,
            subprocess.SubprocessError,
            tf.errors.OpError,
        ) as error:
            logger.warning(
                "keras_transformer's native LayerNorm op is unavailable (%s); training uses "
                "TensorFlow's ops, a few percent slower on CPU. Install a C++ compiler (or set "
                "CXX) "
                "to build it, or leave the op off (unset %s) to silence this.",
                error,
                _ENABLE_VARIABLE,
            )
            return None


@functools.cache
def _cpu_only_process() -> bool:
    return all(device.device_type == "CPU" for device in tf.config.list_logical_devices())


def _in_xla_context() -> bool:
    """Whether the graph being traced will be compiled by XLA, which has no
    kernel for custom ops. Where TensorFlow's check cannot be imported, assume it will."""
    try:
        from tensorflow.python.framework import ops
        from tensorflow.python.ops import control_flow_util
    except ImportError:
        return True
    return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())


def usable() -> ModuleType | None:
    """The ops module when the op being traced can run it, else ``None``.

    Returns:
        ``load()`` in a CPU-only process, outside XLA, with the ops enabled;
        ``None`` otherwise.
    """
    if not enabled() or not _cpu_only_process() or _in_xla_context():
        return None
    return load()
