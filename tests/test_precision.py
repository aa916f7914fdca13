"""``mixed_precision: auto``: the precision picked for each kind of hardware (faked devices)."""

import json

import pytest

from keras_transformer import Workdir
from keras_transformer.precision import (
    Accelerator,
    PrecisionChoice,
    choose_precision,
    dtype_policy,
    resolve_precision,
)

pytestmark = pytest.mark.quick

T4 = Accelerator("GPU", "Tesla T4", (7, 5))
V100 = Accelerator("GPU", "Tesla V100-SXM2-16GB", (7, 0))
A100 = Accelerator("GPU", "NVIDIA A100-SXM4-40GB", (8, 0))
H100 = Accelerator("GPU", "NVIDIA H100 80GB HBM3", (9, 0))
P100 = Accelerator("GPU", "Tesla P100-PCIE-16GB", (6, 0))
K80 = Accelerator("GPU", "Tesla K80", (3, 7))
ROCM = Accelerator("GPU", "AMD Instinct MI250X", None)
TPU = Accelerator("TPU", "/job:worker/replica:0/task:0/device:TPU:0")


@pytest.mark.parametrize(
    "accelerators, cpu_bf16, expected",
    [
        ([TPU] * 8, False, "bf16"),
        ([A100], False, "bf16"),
        ([H100, H100], False, "bf16"),
        ([T4], True, "fp16"),  # Colab's free GPU: fp16, whatever the host CPU has
        ([V100] * 4, False, "fp16"),
        ([A100, V100], False, "fp16"),  # the weakest GPU decides
        ([P100], False, "fp32"),
        ([K80], True, "fp32"),
        ([ROCM], False, "fp32"),
        ([], True, "bf16"),  # AVX512-BF16 / AMX CPU
        ([], False, "fp32"),  # AVX2 CPU: bf16 would be emulated
    ],
)
def test_auto_picks_what_the_hardware_does_well(accelerators, cpu_bf16, expected):
    choice = choose_precision(accelerators, cpu_has_bf16_units=cpu_bf16)
    assert isinstance(choice, PrecisionChoice) and choice.precision == expected
    assert choice.reason  # the log says why
    dtype_policy(choice.precision)


def test_reasons_name_the_device():
    assert "Tesla T4" in choose_precision([T4]).reason and "7.5" in choose_precision([T4]).reason
    assert "loss scaling" in choose_precision([T4]).reason
    assert "emulated" in choose_precision([], cpu_has_bf16_units=False).reason


def test_auto_reads_this_machine(monkeypatch):
    from keras_transformer import hardware

    monkeypatch.setattr(hardware, "has_bf16_units", lambda: True)
    assert choose_precision([]).precision == "bf16"
    monkeypatch.setattr(hardware, "has_bf16_units", lambda: False)
    assert choose_precision([]).precision == "fp32"
    assert choose_precision().precision in ("bf16", "fp16", "fp32")  # whatever TF sees here


def test_explicit_precisions_are_kept_and_names_checked():
    assert resolve_precision("fp16") == PrecisionChoice("fp16", "set in the config")
    assert resolve_precision("auto", accelerators=[T4]).precision == "fp16"
    with pytest.raises(ValueError, match="use one of"):
        resolve_precision("float16")


def test_workdir_reports_what_auto_picked(tmp_path):
    run = Workdir(tmp_path)
    run.save_config({"training": {"mixed_precision": "auto"}})
    assert run.precision == "auto"  # not finished: nothing picked yet
    run.metrics_path.write_text(json.dumps({"precision": {"config": "auto", "used": "bf16"}}))
    assert Workdir(tmp_path).precision == "bf16"
