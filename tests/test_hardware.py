"""The CPU record that every benchmark and quality report carries: read from
``/proc/cpuinfo`` (faked here for the kinds of CPU this project runs on)."""

import json

import pytest

from keras_transformer import hardware

pytestmark = pytest.mark.quick

AMD_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse4_1 avx fma avx2 bmi2

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse4_1 avx fma avx2 bmi2
"""
INTEL_AVX512_BF16 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_int8
"""
INTEL_AVX512 = """vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU @ 2.00GHz
flags\t\t: fpu avx avx2 avx512f avx512bw
"""
ARM = """processor\t: 0
Features\t: fp asimd asimddp bf16
"""


@pytest.fixture
def cpuinfo(tmp_path, monkeypatch):
    def use(text):
        path = tmp_path / "cpuinfo"
        path.write_text(text)
        monkeypatch.setattr(hardware, "_CPUINFO", path)
        hardware._cpuinfo.cache_clear()

    yield use
    hardware._cpuinfo.cache_clear()


@pytest.mark.parametrize(
    "text, kind, bf16, int8_dot",
    [
        (AMD_AVX2, "AVX2", False, False),
        (INTEL_AVX512_BF16, "AVX-512 + BF16", True, True),
        (INTEL_AVX512, "AVX-512", False, False),
        (ARM, None, True, True),
    ],
)
def test_the_kind_of_cpu_and_its_units_come_from_its_flags(cpuinfo, text, kind, bf16, int8_dot):
    cpuinfo(text)
    assert hardware.has_bf16_units() is bf16
    assert hardware.has_int8_dot_product() is int8_dot
    if kind is not None:
        assert hardware.cpu_kind() == kind


def test_the_record_names_the_model_and_the_avx512_flags(cpuinfo):
    cpuinfo(INTEL_AVX512_BF16)
    record = hardware.cpu_record()
    assert record["model"] == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert record["vendor"] == "GenuineIntel"
    assert record["avx512"] == ["avx512_bf16", "avx512_fp16", "avx512_vnni", "avx512bw", "avx512f"]
    assert record["bf16_units"] and record["int8_dot_product"] and record["avx2"]
    assert json.loads(json.dumps(record)) == record
    assert hardware.describe_cpu().startswith("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, ")


def test_an_avx2_cpu_is_described_by_what_it_lacks(cpuinfo):
    cpuinfo(AMD_AVX2)
    assert hardware.cpu_record()["avx512"] == []
    assert hardware.describe_cpu().endswith(
        ": AVX2, no AVX-512, no bf16 units, no int8 dot product"
    )


def test_without_cpuinfo_the_record_still_has_every_field(cpuinfo, tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "_CPUINFO", tmp_path / "missing")
    hardware._cpuinfo.cache_clear()
    record = hardware.cpu_record()
    assert set(record) == {
        "model",
        "vendor",
        "cores",
        "kind",
        "avx2",
        "avx512",
        "bf16_units",
        "int8_dot_product",
    }
    assert not record["bf16_units"] and record["avx512"] == []


@pytest.mark.programs
def test_every_benchmark_report_carries_the_cpu(capsys, tmp_path):
    from benchmarks.report import emit

    emit({"benchmark": "example", "results": []}, str(tmp_path / "out.json"))
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    written = json.loads((tmp_path / "out.json").read_text())
    assert printed == written and written["cpu"] == hardware.cpu_record()
