"""The library's shape: modules of one job each, and a beam search one can read."""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick

LIBRARY = Path(__file__).resolve().parent.parent / "keras_transformer"
MOST_LINES = 600  # a module longer than this holds more than one job: split it by its jobs
BEAM_SEARCH_CODE_LINES = 130  # beam search's own code, docstrings aside (flax's reads in ~120)


def _code_lines(source: str, node: ast.AST) -> int:
    """The lines of ``node`` that hold code: not blank, not a comment, not a docstring."""
    docstrings = set()
    for inner in ast.walk(node):
        body = getattr(inner, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = source.splitlines()
    return sum(
        1
        for number in range(node.lineno, node.end_lineno + 1)
        if number not in docstrings
        and lines[number - 1].strip()
        and not lines[number - 1].strip().startswith("#")
    )


def test_no_library_module_is_over_600_lines():
    long = {
        str(path.relative_to(LIBRARY.parent)): lines
        for path in sorted(LIBRARY.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MOST_LINES
    }
    assert not long, f"split these modules by their jobs: {long}"


def test_beam_search_reads_in_about_120_lines():
    path = LIBRARY / "decoding" / "beam.py"
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    strategy = next(
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "BeamStrategy"
    )
    assert _code_lines(source, strategy) <= BEAM_SEARCH_CODE_LINES
