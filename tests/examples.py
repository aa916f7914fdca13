"""Runs a module's docstring examples (``>>>``) as doctests."""

import doctest
import importlib
import os
import pkgutil
from pathlib import Path

import keras_transformer

FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
DEMO = 'Workdir("runs/demo")'  # examples that start from the trained demo workdir


def modules_with_examples() -> dict[str, bool]:
    """Every library module with examples -> whether they start from ``runs/demo``."""
    names = ["keras_transformer"] + [
        info.name for info in pkgutil.walk_packages(keras_transformer.__path__, "keras_transformer.")]
    found = {}
    for name in sorted(names):
        tests = [test for test in doctest.DocTestFinder().find(importlib.import_module(name), name)
                 if test.examples]
        if tests:
            found[name] = any(DEMO in example.source for test in tests for example in test.examples)
    return found


def run_examples(name: str, directory: Path, demo_workdir: Path | None = None) -> doctest.TestResults:
    """Run module ``name``'s examples with its own globals, in ``directory`` (where
    ``runs/demo`` links to ``demo_workdir`` when given); returns the counts, and prints
    each failure (pytest shows it)."""
    module = importlib.import_module(name)
    if demo_workdir is not None:
        (directory / "runs").mkdir(exist_ok=True)
        (directory / "runs" / "demo").symlink_to(demo_workdir)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    previous = os.getcwd()
    os.chdir(directory)
    try:
        for test in doctest.DocTestFinder().find(module, name, globs=vars(module)):
            test.globs = dict(test.globs)  # an example must not change its module's names
            runner.run(test)
    finally:
        os.chdir(previous)
    return runner.summarize(verbose=False)
