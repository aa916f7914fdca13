"""Every public name's docstring states its contract first (the keras-hub layout).

For each name in the ``__all__`` of ``keras_transformer``, ``keras_transformer.data``,
``keras_transformer.layers``, ``keras_transformer.tokenization`` and
``keras_transformer.exporters``, the translators, the Marian importer, and the public
methods of those classes: the docstring exists, its first line is one sentence, a
function or method with parameters has an ``Args:`` section and one that returns a value
has ``Returns:`` (a generator ``Yields:``); a class documents its constructor's arguments
in its own docstring or its ``__init__``'s.

Constants (``PAD_ID``, ``PRESETS``) carry no docstring of their own and are skipped; a
module needs a docstring with a one-sentence first line.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import re
import textwrap
import types

import pytest

import keras_transformer
import keras_transformer.data
import keras_transformer.decoding
import keras_transformer.decoding.beam
import keras_transformer.decoding.greedy
import keras_transformer.decoding.loop
import keras_transformer.decoding.options
import keras_transformer.decoding.sampling
import keras_transformer.decoding.scoring
import keras_transformer.decoding.steps
import keras_transformer.exporters
import keras_transformer.layers
import keras_transformer.marian
import keras_transformer.tokenization
import keras_transformer.translate

# The decoding package's modules: their public names besides those the package exports.
DECODING_MODULES = (
    keras_transformer.decoding.options,
    keras_transformer.decoding.loop,
    keras_transformer.decoding.steps,
    keras_transformer.decoding.greedy,
    keras_transformer.decoding.beam,
    keras_transformer.decoding.sampling,
    keras_transformer.decoding.scoring,
    keras_transformer.decoding.tokens,
    keras_transformer.decoding.limits,
    keras_transformer.decoding.parts,
    keras_transformer.decoding.xla,
)

# Names audited elsewhere or exempt: none.
PENDING_OTHER_BRANCH: set[str] = set()

# The Marian importer's public names (the module has no __all__).
MARIAN_IMPORTER = [
    "CheckpointError",
    "MarianCheckpoint",
    "import_marian",
    "load_model",
    "load_weights",
    "read_weights",
    "transformer_config",
    "weight_names",
    "workdir_config",
]

# Keras and TensorFlow hooks: their contract is the framework's, documented there.
FRAMEWORK_HOOKS = {
    "build",
    "build_from_config",
    "call",
    "compile_from_config",
    "compute_mask",
    "compute_output_shape",
    "compute_output_spec",
    "from_config",
    "get_build_config",
    "get_compile_config",
    "get_config",
    "result",
    "reset_state",
    "test_step",
    "train_step",
    "update_state",
}
# Where a summary may stop inside its line without ending the sentence.
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.")


def _public(namespace, names) -> list[tuple[str, object]]:
    found = []
    for name in names:
        qualified = f"{namespace.__name__}.{name}"
        if qualified in PENDING_OTHER_BRANCH:
            continue
        try:
            value = getattr(namespace, name)
        except (
            ImportError
        ):  # an optional extra's name (the CTranslate2 exporter); its tests cover it
            continue
        found.append((qualified, value))
    return found


def _module_public(module) -> list[str]:
    """A module's ``__all__``, else its public functions and classes defined in it."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and isinstance(value, (types.FunctionType, type))
        and value.__module__ == module.__name__
    ]


def _documented_names() -> list[tuple[str, object]]:
    entries = (
        _public(keras_transformer, keras_transformer.__all__)
        + _public(keras_transformer.data, keras_transformer.data.__all__)
        + _public(keras_transformer.layers, keras_transformer.layers.__all__)
        + _public(keras_transformer.tokenization, keras_transformer.tokenization.__all__)
        + _public(keras_transformer.exporters, keras_transformer.exporters.__all__)
        + _public(keras_transformer.translate, ["Translator"])
        + _public(keras_transformer.decoding, _module_public(keras_transformer.decoding))
        + [
            entry
            for module in DECODING_MODULES
            for entry in _public(module, _module_public(module))
        ]
        + _public(keras_transformer.marian, MARIAN_IMPORTER)
    )
    unique: dict[int, tuple[str, object]] = {}
    for qualified, value in entries:
        if isinstance(value, (types.FunctionType, type, types.ModuleType)):
            unique.setdefault(id(value), (qualified, value))
    names = list(unique.values())
    for qualified, value in list(names):
        if isinstance(value, type):
            names += [
                (f"{qualified}.{name}", member)
                for name, member in _own_methods(value)
                if f"{qualified}.{name}" not in PENDING_OTHER_BRANCH
            ]
    return names


def _own_methods(cls: type) -> list[tuple[str, object]]:
    """The public methods and properties ``cls`` defines, itself or through a base class
    of this package (not Keras' or TensorFlow's)."""
    members = []
    seen = set()
    package_classes = [
        base for base in cls.__mro__ if base.__module__.startswith("keras_transformer")
    ]
    for name, member in [item for base in package_classes for item in vars(base).items()]:
        if name.startswith("_") or name in FRAMEWORK_HOOKS or name in seen:
            continue
        seen.add(name)
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if isinstance(member, functools.cached_property):
            member = property(member.func)
        if isinstance(member, (types.FunctionType, property)):
            members.append((name, member))
    return members


def _own_doc(value) -> str | None:
    """The docstring written for ``value`` (not a dataclass's generated one)."""
    doc = value.__doc__ if not isinstance(value, property) else value.fget.__doc__
    if not doc:
        return None
    generated = isinstance(value, type) and dataclasses.is_dataclass(value)
    if generated and doc.startswith(f"{value.__name__}("):
        return None
    return inspect.cleandoc(doc)


def _parameters(function) -> list[str]:
    return [name for name in inspect.signature(function).parameters if name not in ("self", "cls")]


class _Returns(ast.NodeVisitor):
    """Whether a function's own body returns a value or yields (nested scopes aside)."""

    def __init__(self):
        self.returns = self.yields = False

    def visit_Return(self, node):
        if node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None
        ):
            self.returns = True

    def visit_Yield(self, node):
        self.yields = True

    visit_YieldFrom = visit_Yield

    def visit_FunctionDef(self, node):  # a nested function's returns are its own
        pass

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef


def _returns_and_yields(function) -> tuple[bool, bool]:
    source = textwrap.dedent(inspect.getsource(function))
    node = ast.parse(source).body[0]
    visitor = _Returns()
    for statement in node.body:
        visitor.visit(statement)
    return visitor.returns, visitor.yields


def _problems(qualified: str, value) -> list[str]:
    doc = _own_doc(value)
    if doc is None:
        return [f"{qualified}: no docstring"]
    problems = []
    lines = doc.splitlines()
    summary = lines[0].strip()
    if not summary.endswith((".", "?", "!")):
        problems.append(f"{qualified}: the first line is not a whole sentence: {summary!r}")
    if len(lines) > 1 and lines[1].strip():
        problems.append(f"{qualified}: the summary runs past its first line")
    inner = summary
    for abbreviation in ABBREVIATIONS:
        inner = inner.replace(abbreviation, "")
    if re.search(r"[.!?]\s+[A-Z`]", inner[:-1]):
        problems.append(f"{qualified}: the first line holds more than one sentence")
    if isinstance(value, types.ModuleType):
        return problems
    if isinstance(value, property):
        return problems  # the docstring describes the value
    if isinstance(value, type):
        init = vars(value).get("__init__")
        if init is not None and _parameters(init):
            init_doc = inspect.cleandoc(init.__doc__ or "")
            if "Args:" not in doc and "Args:" not in init_doc:
                problems.append(f"{qualified}: the constructor's arguments have no Args:")
        return problems
    if _parameters(value) and "Args:" not in doc:
        problems.append(f"{qualified}: parameters {_parameters(value)} but no Args:")
    returns, yields = _returns_and_yields(value)
    if yields and "Yields:" not in doc and "Returns:" not in doc:
        problems.append(f"{qualified}: yields values but has no Yields:")
    elif returns and not yields and "Returns:" not in doc:
        problems.append(f"{qualified}: returns a value but has no Returns:")
    return problems


NAMES = _documented_names()


def test_the_audit_covers_the_public_api():
    audited = {qualified for qualified, _ in NAMES}
    for name in (
        "keras_transformer.Transformer",
        "keras_transformer.Workdir",
        "keras_transformer.TrainedModel",
        "keras_transformer.SubwordTokenizer",
        "keras_transformer.data.PairSource",
        "keras_transformer.data.make_dataset",
        "keras_transformer.tokenization.train_tokenizers",
    ):
        assert name in audited


def _resolves(qualified: str) -> bool:
    """Whether ``qualified`` (a module's name, or a name or method in one) still exists."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        rest = parts[cut:]
        if len(rest) == 1 and rest[0] in getattr(value, "__all__", ()):
            return True  # without importing a lazily loaded extra
        for part in rest:
            if not hasattr(value, part):
                return False
            value = getattr(value, part)
        return True
    return False


def test_pending_names_exist():
    """Every name set aside for the other branch is still public (no stale entries)."""
    assert [name for name in sorted(PENDING_OTHER_BRANCH) if not _resolves(name)] == []


@pytest.mark.parametrize("qualified, value", NAMES, ids=[qualified for qualified, _ in NAMES])
def test_docstring_states_the_contract(qualified, value):
    assert _problems(qualified, value) == []
