"""Compute precisions by name: ``fp32``, ``bf16``, ``fp16``, and ``auto`` for training.

The names are the ones configs and command lines use; each maps to a Keras
dtype policy. Weights stay float32 under every policy, so the same trained
weights can be run in any precision (``with_precision``).

``auto`` (``training.mixed_precision: auto``) picks what the hardware does well
(``choose_precision``):

* TPUs: ``bf16`` (their matrix units compute in bfloat16);
* GPUs with bf16 tensor cores (compute capability 8.0 and newer: A100, L4,
  H100, RTX 30xx/40xx): ``bf16``;
* GPUs with fp16 tensor cores only (compute capability 7.x: V100, T4, RTX
  20xx): ``fp16``, with Keras' dynamic loss scaling;
* older GPUs, and GPUs that report no compute capability: ``fp32``;
* CPUs with bf16 units (AVX512-BF16 or AMX on x86, BF16 on ARM): ``bf16``;
* other CPUs: ``fp32`` (they emulate bf16, slower than float32).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from keras_transformer import hardware

if TYPE_CHECKING:  # the names import without TensorFlow: kt's --help lists them
    import keras

# training.mixed_precision / --precision names → Keras dtype policies.
PRECISIONS = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
AUTO = "auto"  # training only: resolved by choose_precision
BF16_COMPUTE_CAPABILITY = (8, 0)  # Ampere: bf16 tensor cores
FP16_COMPUTE_CAPABILITY = (7, 0)  # Volta/Turing: fp16 tensor cores


def dtype_policy(precision: str) -> str:
    """The Keras dtype policy name of ``precision`` (``"bf16"`` → ``"mixed_bfloat16"``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: use one of {sorted(PRECISIONS)}.")
    return PRECISIONS[precision]


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """A device that is not the CPU, as ``choose_precision`` sees it.

    Args:
        kind: ``"GPU"`` or ``"TPU"``.
        name: what the device calls itself, e.g. ``"Tesla T4"``.
        compute_capability: a CUDA GPU's ``(major, minor)``; ``None`` where
            the device reports none (TPUs, ROCm GPUs).
    """

    kind: str
    name: str = ""
    compute_capability: tuple[int, int] | None = None


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    """The precision ``auto`` resolved to, and why (one sentence for the log)."""

    precision: str
    reason: str


def local_accelerators() -> tuple[Accelerator, ...]:
    """The GPUs TensorFlow sees and the TPU cores it is connected to.

    TPU cores are listed once the TPU system is initialised (building a
    ``TPUStrategy`` does it), so call this after creating the strategy.
    """
    import tensorflow as tf

    found = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        capability = details.get("compute_capability")
        found.append(
            Accelerator(
                "GPU",
                details.get("device_name", device.name),
                tuple(capability) if capability else None,
            )
        )
    for device in tf.config.list_logical_devices("TPU"):
        found.append(Accelerator("TPU", device.name))
    return tuple(found)


def _capability(value: tuple[int, int]) -> str:
    return f"{value[0]}.{value[1]}"


def choose_precision(
    accelerators: Sequence[Accelerator] | None = None, cpu_has_bf16_units: bool | None = None
) -> PrecisionChoice:
    """What ``training.mixed_precision: auto`` trains in on this hardware.

    Args:
        accelerators: the devices training runs on; ``None`` asks TensorFlow
            (``local_accelerators``). An empty sequence means the CPU alone.
        cpu_has_bf16_units: whether the CPU multiplies bf16 in hardware;
            ``None`` reads it from the CPU (``hardware.has_bf16_units``).

    Example:
        >>> choose_precision([Accelerator("GPU", "Tesla T4", (7, 5))]).precision
        'fp16'
        >>> choose_precision([], cpu_has_bf16_units=False).precision
        'fp32'
    """
    if accelerators is None:
        accelerators = local_accelerators()
    tpus = [device for device in accelerators if device.kind == "TPU"]
    gpus = [device for device in accelerators if device.kind == "GPU"]
    if tpus:
        return PrecisionChoice(
            "bf16", f"{len(tpus)} TPU core(s): their matrix units compute in bfloat16"
        )
    if gpus:
        capabilities = [device.compute_capability for device in gpus]
        names = ", ".join(sorted({device.name or "GPU" for device in gpus}))
        if any(capability is None for capability in capabilities):
            return PrecisionChoice(
                "fp32", f"GPU {names} reports no compute capability: float32 is the safe choice"
            )
        lowest = min(capabilities)
        if lowest >= BF16_COMPUTE_CAPABILITY:
            return PrecisionChoice(
                "bf16",
                f"GPU {names} (compute capability {_capability(lowest)}) has bf16 tensor cores",
            )
        if lowest >= FP16_COMPUTE_CAPABILITY:
            return PrecisionChoice(
                "fp16",
                f"GPU {names} (compute capability {_capability(lowest)}) has fp16 tensor cores "
                "but no bf16 ones: float16 with dynamic loss scaling",
            )
        return PrecisionChoice(
            "fp32",
            f"GPU {names} (compute capability {_capability(lowest)}) has no tensor cores: "
            "mixed precision would gain little",
        )
    if cpu_has_bf16_units is None:
        cpu_has_bf16_units = hardware.has_bf16_units()
    if cpu_has_bf16_units:
        return PrecisionChoice("bf16", "no GPU or TPU; the CPU has bf16 units (AVX512-BF16/AMX)")
    return PrecisionChoice(
        "fp32",
        "no GPU or TPU; the CPU has no bf16 units, where bf16 is emulated and slower than float32",
    )


def resolve_precision(precision: str, **choose_options) -> PrecisionChoice:
    """``precision`` itself for ``fp32``/``bf16``/``fp16``; ``auto`` by ``choose_precision``."""
    if precision == AUTO:
        return choose_precision(**choose_options)
    dtype_policy(precision)  # checks the name
    return PrecisionChoice(precision, "set in the config")


def with_precision(model: keras.Model, precision: str) -> keras.Model:
    """Rebuilds ``model`` to compute in ``precision``, with the same weights.

    Args:
        model: a built ``Transformer``.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"``.

    Returns:
        A new model computing in ``precision``, or ``model`` itself when it
        already does.

    Raises:
        ValueError: ``precision`` is not a key of ``PRECISIONS``.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", vocab_size=40))
    >>> model.build()
    >>> with_precision(model, "bf16").dtype_policy.name
    'mixed_bfloat16'
    """
    policy = dtype_policy(precision)
    if model.dtype_policy.name == policy:
        return model
    rebuilt = type(model)(model.config, dtype=policy, name=model.name)
    rebuilt.build()
    rebuilt.set_weights(model.get_weights())
    return rebuilt
