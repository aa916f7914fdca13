"""Runs a module's docstring examples (``>>>``) as doctests."""

import doctest
import importlib
import os
import pkgutil
from pathlib import Path

import keras_transformer

FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
DEMO = 'Workdir("runs/demo")'  # examples that start from the trained demo workdir


def modules_with_examples(missing_extras: list | None = None) -> dict[str, bool]:
    """Every library module with examples -> whether they start from ``runs/demo``.

    A module that needs an extra this environment lacks (its ``ImportError`` names
    the extra to install) is left out, and its name and message appended to
    ``missing_extras``; any other import error is raised."""
    names = ["keras_transformer"] + [
        info.name
        for info in pkgutil.walk_packages(keras_transformer.__path__, "keras_transformer.")
    ]
    found = {}
    for name in sorted(names):
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            if "pip install 'keras-transformer-nmt[" not in str(error):
                raise
            if missing_extras is not None:
                missing_extras.append((name, str(error)))
            continue
        tests = [test for test in doctest.DocTestFinder().find(module, name) if test.examples]
        if tests:
            found[name] = any(DEMO in example.source for test in tests for example in test.examples)
    return found


def run_examples(
    name: str, directory: Path, demo_workdir: Path | None = None
) -> doctest.TestResults:
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
