"""The CPU a number came from, and the instruction-set features that decide its speed and numerics.

Speed and even some results depend on the CPU, not only on the code: bf16 runs on
hardware units on CPUs with AVX512-BF16 or AMX and is emulated (slower than
float32) on AVX2-only ones, and int8 matrix products accumulate exactly on CPUs
with VNNI dot-product instructions, while older int8 kernels (SSE4.1/AVX2
``pmaddubsw``) add pairs of products in saturating 16-bit integers. Every
benchmark record and every quality report therefore names its CPU with
``cpu_record()``.

Example:
    >>> from keras_transformer import hardware
    >>> sorted(hardware.cpu_record())  # doctest: +NORMALIZE_WHITESPACE
    ['avx2', 'avx512', 'bf16_units', 'cores', 'int8_dot_product', 'kind', 'model', 'vendor']
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

_CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's ``key: value`` lines of ``/proc/cpuinfo`` ({} where there is none)."""
    fields: dict[str, str] = {}
    try:
        text = _CPUINFO.read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def flags_line() -> str:
    """The raw feature-flag line (``flags`` on x86, ``Features`` on ARM); the
    processor name from ``platform`` where ``/proc/cpuinfo`` is missing."""
    info = _cpuinfo()
    return info.get("flags") or info.get("Features") or platform.processor()


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags, e.g. ``{"avx2", "avx512f", "avx512_bf16", ...}``."""
    return frozenset(flags_line().split())


def cpu_model() -> str:
    """The processor's marketing name, e.g. ``"Intel(R) Xeon(R) Platinum 8481C"``."""
    info = _cpuinfo()
    return (
        info.get("model name")
        or info.get("Processor")
        or platform.processor()
        or platform.machine()
    )


def has_bf16_units() -> bool:
    """Whether bfloat16 matrix products run on hardware units (AVX512-BF16 or
    AMX-BF16 on x86, BF16 on ARM); elsewhere TensorFlow emulates bf16 and
    mixed_bfloat16 trains slower than float32."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


def has_int8_dot_product() -> bool:
    """Whether int8 products accumulate exactly in 32-bit integers in one
    instruction (AVX512-VNNI, AVX-VNNI or AMX-INT8 on x86, the dot-product
    extension on ARM). Without it, x86 int8 kernels sum pairs of u8×s8 products
    in saturating 16-bit integers (``pmaddubsw``) and large pairs are clipped."""
    return bool(cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8", "asimddp"})


def cpu_kind() -> str:
    """Names the kind of CPU that decides speed: ``"AVX-512 + BF16"``, ``"AVX-512"`` or ``"AVX2"``.

    Returns:
        The kind, or the machine name (``platform.machine()``) for other CPUs.
    """
    flags = cpu_flags()
    if "avx512f" in flags:
        return "AVX-512 + BF16" if has_bf16_units() else "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    return platform.machine() or "unknown"


def cpu_record() -> dict:
    """Describes the CPU a benchmark record or a quality report came from.

    Returns:
        A JSON-able dict: ``model``, ``vendor``, ``cores``, ``kind``, ``avx2``,
        ``avx512`` (the AVX-512 flags), ``bf16_units`` and ``int8_dot_product``.
    """
    flags = cpu_flags()
    return {
        "model": cpu_model(),
        "vendor": _cpuinfo().get("vendor_id", platform.machine()),
        "cores": os.cpu_count(),
        "kind": cpu_kind(),
        "avx2": "avx2" in flags,
        "avx512": sorted(flag for flag in flags if flag.startswith("avx512")),
        "bf16_units": has_bf16_units(),
        "int8_dot_product": has_int8_dot_product(),
    }


def describe_cpu() -> str:
    """One line, e.g. ``"AMD EPYC, 2 cores: AVX2, no AVX-512, no bf16 units, no int8 dot"``."""
    record = cpu_record()
    features = [record["kind"] if record["kind"] != "AVX-512 + BF16" else "AVX-512"]
    if not record["avx512"]:
        features.append("no AVX-512")
    features.append("bf16 units" if record["bf16_units"] else "no bf16 units")
    features.append("int8 dot product" if record["int8_dot_product"] else "no int8 dot product")
    return f"{record['model']}, {record['cores']} cores: " + ", ".join(features)
