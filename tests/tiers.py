"""The test tiers are pytest marks; a module's own marks are read here without importing it.

``pytestmark = pytest.mark.programs`` (or a list of marks) at a module's top level puts all of
its tests in that tier. conftest.py uses this to leave out, unimported, the modules of a tier
that the ``-m`` expression excludes (their imports of the checkout's programs or of the extras
may fail where only the library is installed); tests/test_packaging.py checks the tiers.
"""

from __future__ import annotations

import ast
from pathlib import Path

# Module-level marks that conftest.py honours before import: `-m "... not NAME ..."` skips the
# module whole.
SKIPPED_BEFORE_IMPORT = ("programs",)


def module_marks(path: Path) -> set[str]:
    """The marks of a test module's ``pytestmark`` (``pytest.mark.NAME`` or a list of them)."""
    for node in ast.parse(Path(path).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            getattr(target, "id", None) == "pytestmark" for target in node.targets
        ):
            values = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            return {ast.unparse(value).removeprefix("pytest.mark.") for value in values}
    return set()


def excluded_before_import(path: Path, markexpr: str) -> bool:
    """Whether ``-m markexpr`` excludes the whole module at ``path`` by one of its own marks."""
    if not markexpr or path.suffix != ".py" or not path.name.startswith("test_"):
        return False
    marks = module_marks(path)
    return any(f"not {mark}" in markexpr and mark in marks for mark in SKIPPED_BEFORE_IMPORT)
