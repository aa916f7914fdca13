"""TensorFlow custom ops for CPU training, compiled from source on first use.

TensorFlow's CPU kernels leave element-wise work that a training step of
this model spends ~6% of its time on: LayerNorm alone is ~30 full passes
over its input (forward and backward), where one kernel needs three. The
ops here are that kernel. They are compiled on the machine that runs them
(against the installed TensorFlow's headers, for its CPU), once, into a
cache, because a prebuilt binary would have to match TensorFlow's exact
version and ABI.

They are an accelerator, never a requirement: callers fall back to
TensorFlow's own ops when there is no C++ compiler, the build fails, the
process sees a GPU or TPU, the graph is XLA-compiled, or
``KERAS_TRANSFORMER_NATIVE_OPS=0`` is set. Exported graphs never contain
them (see ``layers.layer_norm``), so SavedModels load in TF Serving and
convert to TFLite as before.

Environment:
    ``KERAS_TRANSFORMER_NATIVE_OPS=0``: never build or load the ops.
    ``KERAS_TRANSFORMER_CACHE``: where built ops are kept (default
    ``$XDG_CACHE_HOME/keras_transformer`` or ``~/.cache/keras_transformer``).
    ``CXX``: the C++ compiler (default ``c++``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import subprocess
import tempfile
import threading
from pathlib import Path
from types import ModuleType

import tensorflow as tf

from keras_transformer import hardware
from keras_transformer.files import write_atomically

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("layer_norm.cc")
_DISABLE_VARIABLE = "KERAS_TRANSFORMER_NATIVE_OPS"
_CACHE_VARIABLE = "KERAS_TRANSFORMER_CACHE"
_BUILD_TIMEOUT_S = 300  # the build takes ~8 s; a hung compiler must not hang training
_lock = threading.Lock()


def enabled() -> bool:
    """False when ``KERAS_TRANSFORMER_NATIVE_OPS`` is ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get(_DISABLE_VARIABLE, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
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
    tail = [str(SOURCE), "-o", str(output), *tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()]
    return [head + ["-mno-avx512fp16"] + tail, head + tail]


def library_path() -> Path:
    """Where the built library for this source, TensorFlow, compiler and CPU lives."""
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), tf.__version__.encode(),
                 " ".join(_compile_commands(Path("out"))[0]).encode(),  # compiler, flags, TF's headers
                 platform.machine().encode(), _cpu_features().encode()):
        key.update(part)
        key.update(b"\0")
    return cache_dir() / f"layer_norm-{key.hexdigest()[:20]}.so"


def _build(path: Path) -> None:
    """Compile into a temporary folder, then move the library into the cache in
    one rename: a concurrent process or a killed build never leaves a partial
    library where ``load`` would pick it up."""
    with tempfile.TemporaryDirectory(prefix="keras_transformer_build_") as build:
        output = Path(build) / path.name
        errors = []
        for command in _compile_commands(output):
            result = subprocess.run(command, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
            if result.returncode == 0:
                write_atomically({path: output.read_bytes()})
                return
            last_lines = result.stderr.strip().splitlines()[-3:]
            errors.append(f"exit status {result.returncode}" + "".join(f" / {line}" for line in last_lines))
        raise RuntimeError(f"{_compiler()} failed: " + " | ".join(errors))


def load() -> ModuleType | None:
    """The ops module, building it on first use; ``None`` where it is disabled
    or cannot be built (logged once, with the reason)."""
    if not enabled():
        return None
    return _load_once()


@functools.lru_cache(maxsize=None)
def _load_once() -> ModuleType | None:
    with _lock:
        try:
            path = library_path()
            if not path.exists():
                logger.info("Building keras_transformer's native LayerNorm op into %s (once; ~10 s).", path)
                _build(path)
            return tf.load_op_library(str(path))
        except (OSError, RuntimeError, subprocess.SubprocessError, tf.errors.OpError) as error:
            logger.warning(
                "keras_transformer's native LayerNorm op is unavailable (%s); training uses "
                "TensorFlow's ops, a few percent slower on CPU. Install a C++ compiler (or set CXX) "
                "to build it, or set %s=0 to silence this.", error, _DISABLE_VARIABLE)
            return None


@functools.lru_cache(maxsize=None)
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
    """The ops module when the op being traced can run it: a CPU-only process,
    outside XLA, with the ops enabled and built (``load``). ``None`` otherwise."""
    if not _cpu_only_process() or _in_xla_context():
        return None
    return load()
