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

# The modules that take longest in the default suite, longest first (test time measured on 2
# cores). conftest.py collects them first and `make test` runs with --no-loadscope-reorder, so
# pytest-xdist hands out the long modules before the short ones and its workers finish
# together (its own reorder, by number of tests, left the few-test recipe chains for last, one
# worker running them alone). Only an order: a module not listed runs after these.
LONGEST_FIRST = (
    "test_export.py",
    "test_training_program.py",
    "test_distill.py",
    "test_benchmarks.py",
    "test_back_translation.py",
    "test_marian_import.py",
    "test_library_api.py",
    "test_corpus_translation.py",
    "test_ctranslate2.py",
    "test_translator_features.py",
    "test_data.py",
    "test_multi30k_tatoeba.py",
    "test_encoding.py",
    "test_decoding.py",
    "test_model.py",
    "test_tflite.py",
)


def longest_first(items: list) -> list:
    """``items`` (pytest's collected tests) with LONGEST_FIRST's modules first, in its order;
    the order within a module and of the other modules is kept."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    return sorted(items, key=lambda item: rank.get(Path(str(item.path)).name, len(rank)))


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
