"""colab/install_runtime.py: the pip commands that install a clone into a notebook runtime.

A runtime's TensorFlow, Keras and TF Text in the supported range are pinned, so pip keeps them;
a missing TF Text is asked for at TensorFlow's minor version; a TPU runtime takes the TPU path.
The real install into Colab's runtime runs in `make test-colab` (.ci/colab_runtime).
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "install_runtime", CHECKOUT / "colab" / "install_runtime.py"
)
install_runtime = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_runtime)

COLAB = {"tensorflow": "2.19.0", "keras": "3.10.0", "tensorflow-text": "2.19.0"}


def commands(versions, extras=(), editable=False):
    return install_runtime.pip_commands(CHECKOUT, list(extras), versions, editable)


def test_supported_ranges_are_pyproject_s():
    text = (CHECKOUT / "pyproject.toml").read_text()
    for name in ("tensorflow", "keras", "tensorflow-text"):
        low, high = re.search(rf'"{name}>=([\d.]+),<([\d.]+)"', text).groups()
        bounds = install_runtime.supported_range(CHECKOUT, name)
        assert bounds == (
            tuple(map(int, low.split("."))),
            tuple(map(int, high.split("."))),
        )


def test_colabs_runtime_is_in_range_and_pinned_whole():
    """Colab's announced runtime (TF 2.19.0, Keras 3.10.0, TF Text 2.19.0) is kept as it is."""
    (command,) = commands(COLAB, extras=["train", "tfds"], editable=True)
    assert command == [
        "install",
        "-q",
        "-e",
        ".[train,tfds]",
        "tensorflow==2.19.0",
        "keras==3.10.0",
        "tensorflow-text==2.19.0",
    ]


def test_tfds_on_protobuf_5_takes_a_tensorflow_metadata_generated_for_it():
    """tensorflow-metadata 1.21 declares protobuf >= 4.25.2 but needs >= 6.31 at import."""
    (command,) = commands({**COLAB, "protobuf": "5.29.6"}, extras=["train", "tfds"])
    assert command[-1] == "tensorflow-metadata<1.21"
    (command,) = commands({**COLAB, "protobuf": "5.29.6"}, extras=["train"])
    assert "tensorflow-metadata<1.21" not in command
    (command,) = commands({**COLAB, "protobuf": "6.31.1"}, extras=["tfds"])
    assert "tensorflow-metadata<1.21" not in command


def test_missing_tf_text_is_asked_for_at_tensorflows_minor_version():
    """Without it pip would take the newest TF Text, and the newest TensorFlow with it."""
    (command,) = commands({"tensorflow": "2.20.0", "keras": "3.12.0"})
    assert command[-3:] == ["tensorflow==2.20.0", "keras==3.12.0", "tensorflow-text==2.20.*"]
    (command,) = commands({**COLAB, "tensorflow-text": "2.18.1"})  # another minor: replaced
    assert command[-1] == "tensorflow-text==2.19.*"


@pytest.mark.parametrize("tensorflow", ["2.18.1", "2.22.0", None])
def test_tensorflow_out_of_range_is_left_to_pip(tensorflow):
    (command,) = commands({**COLAB, "tensorflow": tensorflow})
    assert command == ["install", "-q", "."]


def test_keras_out_of_range_is_not_pinned():
    (command,) = commands({**COLAB, "keras": "3.9.2"})
    assert "keras==3.9.2" not in command and "tensorflow==2.19.0" in command


def test_a_tpu_runtime_takes_the_tpu_path():
    """--no-deps for the project and TF Text, then requirements/tpu.txt and the extras' packages."""
    first, second = commands({"tensorflow-tpu": "2.20.0", "keras": "3.10.0"}, ["tfds"], True)
    assert first == ["install", "-q", "--no-deps", "tensorflow-text==2.20.*", "-e", "."]
    assert second[:4] == ["install", "-q", "-r", "requirements/tpu.txt"]
    assert second[4:] == install_runtime.extra_requirements(CHECKOUT, ["tfds"])
    assert all("tensorflow>" not in r and "tensorflow=" not in r for r in second)


def test_in_range_reads_versions_as_numbers():
    bounds = ((2, 19), (2, 22))
    assert install_runtime.in_range("2.19.0", bounds)
    assert install_runtime.in_range("2.21.3rc1", bounds)
    assert not install_runtime.in_range("2.9.0", bounds)
    assert not install_runtime.in_range("2.22.0", bounds)
    assert not install_runtime.in_range(None, bounds)


def test_dry_run_prints_the_command_for_this_interpreter():
    result = subprocess.run(
        [sys.executable, "colab/install_runtime.py", "--dry-run", "--extras", "train"],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        check=True,
    )
    versions = install_runtime.installed_versions()
    expected = " ".join(commands(versions, ["train"])[-1])
    assert result.stdout.strip().splitlines()[-1] == f"pip {expected}"


def test_not_a_checkout_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(CHECKOUT / "colab" / "install_runtime.py"), str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "is not a keras-transformer checkout" in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr
