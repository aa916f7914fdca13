"""The Colab notebooks in colab/ run top to bottom, and are committed clean.

Each notebook is executed with nbclient in smoke mode, the way papermill injects
parameters: a cell tagged ``injected-parameters`` is inserted right after the cell
tagged ``parameters`` and overrides its values (``SMOKE = True``, and output folders
under pytest's tmp_path). The kernel is ``python3`` started from this interpreter
(jupyter_client launches the ``python`` of that kernelspec as ``sys.executable``), the
working directory is the checkout, and any cell error fails the test.
"""

import base64
import importlib.metadata
import os
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest
from hang_guard import HANG_TIMEOUT
from record_check import verify_record

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = CHECKOUT / "colab"
NOTEBOOKS = ["train_translate_export.ipynb", "layers_walkthrough.ipynb"]
KERNEL_CHECK = "import sys\nprint('KERNEL_PREFIX=' + sys.prefix)"


def _read(name: str):
    return nbformat.read(NOTEBOOK_DIR / name, as_version=nbformat.NO_CONVERT)


def _parameters_index(notebook) -> int:
    tagged = [
        index
        for index, cell in enumerate(notebook.cells)
        if "parameters" in cell.get("metadata", {}).get("tags", [])
    ]
    assert len(tagged) == 1, f"expected exactly one cell tagged 'parameters', found {len(tagged)}"
    assert notebook.cells[tagged[0]].cell_type == "code"
    return tagged[0]


def inject_parameters(notebook, parameters: dict, in_colab: bool = False):
    """Insert a cell setting ``parameters`` after the ``parameters`` cell (papermill's convention).

    With ``in_colab``, the cell also registers a stand-in ``google.colab`` module, as Colab's kernel
    has it imported, so that the setup cell takes its Colab branch."""
    lines = ["# Parameters injected by tests/test_notebooks.py"]
    if in_colab:
        lines += [
            "import sys, types",
            'sys.modules.setdefault("google.colab", types.ModuleType("google.colab"))',
        ]
    lines += [f"{name} = {value!r}" for name, value in parameters.items()]
    cell = nbformat.v4.new_code_cell(
        "\n".join(lines) + "\n" + KERNEL_CHECK, id="injected-parameters"
    )
    cell.metadata["tags"] = ["injected-parameters"]
    notebook.cells.insert(_parameters_index(notebook) + 1, cell)
    return notebook


def execute(notebook):
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "KERAS_BACKEND": "tensorflow",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    client = nbclient.NotebookClient(
        notebook,
        timeout=HANG_TIMEOUT,
        kernel_name="python3",
        extra_arguments=["--InteractiveShell.colors=nocolor"],  # plain tracebacks
        resources={"metadata": {"path": str(CHECKOUT)}},
        allow_errors=False,
    )
    client.execute(
        env=env
    )  # raises CellExecutionError (with the traceback) on the first failing cell
    return notebook


def _text(cell) -> str:
    return "".join(
        output.get("text", "")
        for output in cell.get("outputs", [])
        if output.output_type == "stream"
    )


def _images(notebook) -> list[bytes]:
    return [
        base64.b64decode(output.data["image/png"])
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "image/png" in output.get("data", {})
    ]


def _cell(notebook, cell_id: str):
    return next(cell for cell in notebook.cells if cell.get("id") == cell_id)


def _check_kernel(notebook) -> None:
    """The kernel ran in this virtual environment, not some other Python on PATH."""
    printed = _text(_cell(notebook, "injected-parameters"))
    assert f"KERNEL_PREFIX={sys.prefix}" in printed, (printed, sys.prefix)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_is_clean(name):
    notebook = _read(name)
    nbformat.validate(notebook)
    assert notebook.nbformat == 4
    parameters = notebook.cells[_parameters_index(notebook)]
    assert "SMOKE = False" in parameters.source
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], (
                f"cell {cell.id} has stored outputs; clear them before committing"
            )
            assert cell.execution_count is None, f"cell {cell.id} has an execution count"
            assert not [output for output in cell.outputs if output.output_type == "error"]
    ids = [cell.id for cell in notebook.cells]
    assert len(ids) == len(set(ids)), "duplicate cell ids"


@pytest.mark.slow  # a training and an export; its library calls: test_library_api.py
def test_train_translate_export_runs_in_smoke_mode(tmp_path):
    notebook = inject_parameters(
        _read(NOTEBOOKS[0]),
        {"SMOKE": True, "WORKDIR": str(tmp_path / "run"), "EXPORT_DIR": str(tmp_path / "export")},
    )
    execute(notebook)
    nbformat.write(
        notebook, tmp_path / NOTEBOOKS[0]
    )  # for a look after a failure: pytest --basetemp=DIR
    _check_kernel(notebook)

    assert "Found " in _text(
        _cell(notebook, "accelerator")
    )  # which accelerator, and the strategy for it
    assert len(_images(notebook)) >= 3  # loss + learning rate, cross-attention (mean and per head)
    assert '"bleu":' in _text(_cell(notebook, "bleu"))
    saved = _text(_cell(notebook, "savedmodel"))
    assert "serving_default" in saved and "→" in saved
    assert "same ids as decode" in _text(_cell(notebook, "tflite"))
    assert "docker run" in _text(_cell(notebook, "serving"))
    # The workdir has the layout of `python -m training.train`; the export is a TF Serving model
    # version.
    for path in (
        "run/config.yaml",
        "run/model.keras",
        "run/tokenizer/spm_shared.model",
        "run/translator.tflite",
        "export/1/saved_model.pb",
        "export/1/assets.extra/tf_serving_warmup_requests",
    ):
        assert (tmp_path / path).exists(), path


# What Colab's runtime brings and an install must keep (the distributions' names).
RUNTIME = ("tensorflow", "keras", "tensorflow-text")


@pytest.mark.colab_runtime  # pip-installs the checkout into this venv: make test-colab runs it
def test_train_translate_export_installs_and_runs_as_in_colab(tmp_path):
    """The notebook as Colab runs it: the setup cell's Colab branch installs this checkout (as its
    clone) with colab/install_runtime.py, then smoke mode runs top to bottom. The runtime's
    TensorFlow, Keras and TF Text are kept: the same versions, every file of their RECORD intact."""
    before = {name: importlib.metadata.version(name) for name in RUNTIME}
    parameters = {
        "SMOKE": True,
        "REPO_DIR": str(CHECKOUT),
        "WORKDIR": str(tmp_path / "run"),
        "EXPORT_DIR": str(tmp_path / "export"),
    }
    notebook = inject_parameters(_read(NOTEBOOKS[0]), parameters, in_colab=True)
    try:
        execute(notebook)
    finally:
        nbformat.write(notebook, tmp_path / NOTEBOOKS[0])  # for a look: pytest --basetemp=DIR
    _check_kernel(notebook)

    setup = _text(_cell(notebook, "setup"))
    assert "pip install -q -e .[train,tfds,tflite,plots]" in setup, setup
    assert f"checkout: {CHECKOUT}" in setup
    assert importlib.metadata.version("keras-transformer-nmt")
    after = {name: importlib.metadata.version(name) for name in RUNTIME}
    assert after == before
    site_packages = Path(importlib.metadata.distribution("tensorflow").locate_file(""))
    for name in RUNTIME:
        assert verify_record(name, site_packages) == [], f"pip changed files of {name}"
    assert '"bleu":' in _text(_cell(notebook, "bleu"))
    assert "same ids as decode" in _text(_cell(notebook, "tflite"))
    assert (tmp_path / "export/1/saved_model.pb").exists()


def test_layers_walkthrough_runs(tmp_path):
    notebook = inject_parameters(_read(NOTEBOOKS[1]), {"SMOKE": True})
    execute(notebook)
    _check_kernel(notebook)
    assert len(_images(notebook)) >= 5  # PE, masks, heads, schedule, label smoothing
    masks = _text(_cell(notebook, "masks"))
    assert "weight on padded keys: 0.0 · weight on future keys: 0.0" in masks
