"""Every ``>>>`` example in the library's docstrings runs, and prints what it says.

Each module's examples run in a fresh temporary directory with the module's own globals
(an example may use what its module imports: ``tf``, its classes). The examples that
start from a trained workdir (``Workdir("runs/demo")``) run in the program suite, which
has one (tests/test_ctranslate2.py).
"""

import pytest
from examples import modules_with_examples, run_examples

pytestmark = pytest.mark.quick

MISSING_EXTRAS: list = []
MODULES = modules_with_examples(MISSING_EXTRAS)


def test_the_library_has_examples_to_run():
    """The core modules' examples run everywhere; only a module of an optional extra
    (the CTranslate2 exporter, where ``ctranslate2`` is not installed) may be missing."""
    assert {
        "keras_transformer.model",
        "keras_transformer.layers.attention",
        "keras_transformer.layers.encoder",
        "keras_transformer.precision",
    } <= set(MODULES)
    assert {name for name, _ in MISSING_EXTRAS} <= {"keras_transformer.exporters.ctranslate2"}


@pytest.mark.parametrize("name", [name for name, needs_demo in MODULES.items() if not needs_demo])
def test_docstring_examples_run(name, tmp_path):
    result = run_examples(name, tmp_path)
    assert result.attempted > 0 and result.failed == 0, (
        f"{result.failed} of {result.attempted} failed"
    )
