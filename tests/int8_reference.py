"""The int8 arithmetic of CTranslate2's CPU backends, emulated on our own model.

CTranslate2's ``int8`` model keeps every linear weight and embedding table as
int8 rows with one float scale each (``scale = 127 / max|row|``). At run time
each input row of a linear layer is quantized the same way, shifted by +128 to
uint8 (its u8×s8 GEMMs), multiplied by the int8 weight, corrected by
``128 · Σ w`` and scaled back. Two accumulations exist on x86:

* ``exact``: int32 sums of the products: Intel MKL (CTranslate2's default on
  Intel CPUs) and oneDNN on CPUs with VNNI dot-product instructions.
* ``saturating``: oneDNN (the default on other CPUs) on CPUs without VNNI
  sums each pair of adjacent u8×s8 products in a saturating int16
  (``pmaddubsw``, SSE4.1 to AVX2), so a pair above 32,767 is clipped.

Emulating both on the Keras model (float64, every matmul of the forward pass
goes through ``keras_transformer.kernels.project``) reproduces the
CTranslate2 int8 model's teacher-forced log-probabilities to ~0.002 nats on
average with the matching backend, while the two arithmetics differ from each
other by 0.13-0.19 nats and from float32 by 0.01 (exact) and 0.13-0.19
(saturating) on the test models.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import keras
import numpy as np
import tensorflow as tf
from hang_guard import HANG_TIMEOUT

from keras_transformer import hardware, kernels

ARITHMETICS = ("exact", "saturating")
# The one seam every projection of the forward pass goes through (``kernels.project``).
_PROJECT_USERS = (kernels,)


def quantize_rows(values: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Symmetric int8 per row: ``(integers in [-127, 127] as float64, scale)``."""
    values = tf.cast(values, tf.float64)
    amax = tf.reduce_max(tf.abs(values), axis=-1, keepdims=True)
    scale = tf.where(amax > 0, 127.0 / amax, tf.ones_like(amax))
    return tf.clip_by_value(tf.round(values * scale), -127.0, 127.0), scale


def int8_product(
    x, kernel, bias=None, relu=False, transpose_kernel=False, with_gradient=True, *, arithmetic: str
):
    """``keras_transformer.kernels.project`` computed as CTranslate2's int8 GEMM
    (a forward pass: ``with_gradient`` changes nothing here)."""
    weight = (
        kernel if transpose_kernel else tf.transpose(kernel)
    )  # [units, depth]: one scale per output
    weight_q, weight_scale = quantize_rows(weight)
    flat = tf.reshape(x, [-1, tf.shape(x)[-1]])
    x_q, x_scale = quantize_rows(flat)
    if arithmetic == "exact":
        accumulated = tf.matmul(x_q, weight_q, transpose_b=True)
    elif arithmetic == "saturating":
        unsigned = x_q + 128.0
        depth = tf.shape(unsigned)[-1]
        pairs = tf.reduce_sum(
            tf.reshape(unsigned, [-1, 1, depth // 2, 2])
            * tf.reshape(weight_q, [1, -1, depth // 2, 2]),
            axis=-1,
        )
        pairs = tf.clip_by_value(pairs, -32768.0, 32767.0)  # [tokens, units, depth / 2]
        accumulated = tf.reduce_sum(pairs, axis=-1) - 128.0 * tf.reduce_sum(weight_q, axis=-1)
    else:
        raise ValueError(f"arithmetic must be one of {ARITHMETICS}, got {arithmetic!r}.")
    y = accumulated / (x_scale * tf.transpose(weight_scale))
    if bias is not None:
        y = y + tf.cast(bias, tf.float64)
    if relu:
        y = tf.nn.relu(y)
    y = tf.cast(y, x.dtype)
    return tf.reshape(y, tf.concat([tf.shape(x)[:-1], tf.shape(y)[-1:]], axis=0))


@contextlib.contextmanager
def emulated_int8(model, arithmetic: str):
    """Run ``model`` as CTranslate2's int8 model would: int8 embedding rows and
    int8 products (restored on exit)."""
    tables = list(
        {
            id(layer.embeddings): layer.embeddings
            for layer in model._flatten_layers()
            if isinstance(layer, keras.layers.Embedding)
        }.values()
    )  # a shared table once
    saved = [table.numpy() for table in tables]
    calls = []

    def product(*args, **kwargs):
        calls.append(1)
        return int8_product(*args, **kwargs, arithmetic=arithmetic)

    try:
        for table in tables:
            integers, scale = quantize_rows(table)
            table.assign(tf.cast(integers / scale, table.dtype))
        with contextlib.ExitStack() as stack:
            for module in _PROJECT_USERS:
                stack.enter_context(mock.patch.object(module, "project", product))
            yield
        if not calls:
            raise AssertionError(
                "no product went through the int8 emulation: the model's matmuls moved"
            )
    finally:
        for table, value in zip(tables, saved):
            table.assign(value)


def ctranslate2_arithmetic(model_dir: Path) -> tuple[str, str]:
    """``(arithmetic, reason)`` of the int8 GEMM that CTranslate2 picks on this
    CPU, read from its own log (``CT2_VERBOSE=1``) while loading ``model_dir``."""
    script = (
        "import ctranslate2, sys; "
        "ctranslate2.Translator(sys.argv[1], device='cpu', compute_type='int8')"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(model_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "CT2_VERBOSE": "1"},
        timeout=HANG_TIMEOUT,
    )
    found = re.search(r"GEMM_S8 backend: (\w+)", result.stderr)
    if result.returncode != 0 or not found:
        raise RuntimeError(f"could not read CTranslate2's int8 backend:\n{result.stderr[-2000:]}")
    backend = found.group(1)
    if backend == "DNNL" and not hardware.has_int8_dot_product():
        return "saturating", (
            f"CTranslate2 uses oneDNN for int8 on this {hardware.cpu_model()}, which has no "
            "VNNI (avx512_vnni/avx_vnni): u8×s8 product pairs saturate at int16"
        )
    return "exact", f"CTranslate2's int8 backend is {backend} on {hardware.describe_cpu()}"


def absolute_differences(a: list[np.ndarray], b: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.abs(x - y) for x, y in zip(a, b)])
