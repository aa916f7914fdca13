"""pyproject.toml, requirements/tpu.txt and the test suites agree; the RECORD checker works.

The TPU install path (requirements/tpu.txt's header) puts the project and TF Text in with
`--no-deps`, then tpu.txt: nothing in it may pull the plain `tensorflow`, whose files would
overwrite tensorflow-tpu's (.ci/tpu_path checks that on a real install)."""

import ast
import base64
import hashlib
import importlib.metadata
import re
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from record_check import Mismatch, verify_record
from tiers import excluded_before_import, module_marks

pytestmark = pytest.mark.quick

CHECKOUT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS = PROJECT["optional-dependencies"]
TPU_TXT = CHECKOUT / "requirements" / "tpu.txt"

# Distributions that install the `tensorflow` package itself.
TENSORFLOW_DISTRIBUTIONS = re.compile(
    r"^(tensorflow(-cpu|-gpu|-intel|-macos|-aarch64|-tpu)?|tf-nightly.*)$"
)
# Known packages that require one of them (what the installed metadata shows where present).
NEEDS_TENSORFLOW = {
    "tensorflow-text",
    "tensorflow-serving-api",
    "tf-keras",
    "keras-hub",
    "keras-nlp",
    "tensorflow-hub",
    "tensorflow-decision-forests",
    "tensorflow-io",
    "tensorflow-addons",
}
# Extras allowed to pull the plain tensorflow, and why.
EXTRAS_WITH_TENSORFLOW = {
    "serving": "tensorflow-serving-api requires tensorflow",
    "bench": "keras-hub requires tensorflow-text",
    "all": "includes serving",
}


def requirement_lines(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def is_tensorflow_related(requirement: str) -> bool:
    return (
        bool(TENSORFLOW_DISTRIBUTIONS.match(name(requirement)))
        or name(requirement) in NEEDS_TENSORFLOW
    )


def path_to_tensorflow(requirements: list[str]):
    """Following the installed distributions' metadata from `requirements`: the chain of names
    that ends at a TensorFlow distribution (None if none does), and the names not installed."""
    missing, seen = set(), set()
    stack = [(Requirement(r), ()) for r in requirements]
    while stack:
        requirement, chain = stack.pop()
        key = canonicalize_name(requirement.name)
        chain = (*chain, key)
        if TENSORFLOW_DISTRIBUTIONS.match(key):
            return chain, missing
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = importlib.metadata.distribution(key).requires or []
        except importlib.metadata.PackageNotFoundError:
            missing.add(key)
            continue
        for line in requires:
            sub = Requirement(line)
            extras = requirement.extras or {""}
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in extras):
                stack.append((sub, chain))
    return None, missing


# --------------------------------------------------------------------------- requirements/tpu.txt


def test_tpu_requirements_are_the_dependencies_without_tensorflow_plus_train():
    expected = [
        r for r in PROJECT["dependencies"] if name(r) not in {"tensorflow", "tensorflow-text"}
    ]
    expected += EXTRAS["train"]
    assert requirement_lines(TPU_TXT) == expected


def test_tpu_requirements_name_nothing_that_needs_tensorflow():
    assert [r for r in requirement_lines(TPU_TXT) if is_tensorflow_related(r)] == []


def test_tpu_install_command_takes_tf_text_for_tensorflow_tpu():
    """The header's `pip install --no-deps "tensorflow-text..." .`: a TF Text for the newest
    tensorflow-tpu (2.20) that the project's own range allows."""
    commands = re.findall(r'pip install --no-deps "([^"]+)" \.', TPU_TXT.read_text())
    assert len(commands) == 1, "requirements/tpu.txt's header names the first command once"
    tf_text = Requirement(commands[0])
    (project_tf_text,) = [
        Requirement(r) for r in PROJECT["dependencies"] if name(r) == "tensorflow-text"
    ]
    assert canonicalize_name(tf_text.name) == "tensorflow-text"
    assert tf_text.specifier.contains("2.20.1") and not tf_text.specifier.contains("2.21.0")
    assert project_tf_text.specifier.contains("2.20.1")
    assert "pip install -r requirements/tpu.txt" in TPU_TXT.read_text()


def test_installed_tpu_requirements_do_not_pull_tensorflow():
    """Through the metadata of what is installed here, tpu.txt never reaches a TensorFlow
    distribution (tensorboard, keras, sacrebleu... do not depend on it)."""
    chain, missing = path_to_tensorflow(requirement_lines(TPU_TXT))
    direct = {name(r) for r in requirement_lines(TPU_TXT)}
    if direct & missing:
        pytest.skip(f"not installed here: {sorted(direct & missing)}")
    assert chain is None, " -> ".join(chain)


# --------------------------------------------------------------------------- pyproject.toml


def test_only_the_core_dependencies_name_tensorflow():
    core = [r for r in PROJECT["dependencies"] if is_tensorflow_related(r)]
    assert sorted(name(r) for r in core) == ["tensorflow", "tensorflow-text"]
    for extra, requirements in EXTRAS.items():
        named = [r for r in requirements if is_tensorflow_related(r)]
        if extra not in EXTRAS_WITH_TENSORFLOW:
            assert named == [], f"[{extra}] would put the plain tensorflow over tensorflow-tpu"


@pytest.mark.parametrize("extra", sorted(set(EXTRAS) - set(EXTRAS_WITH_TENSORFLOW)))
def test_installed_extras_do_not_pull_tensorflow(extra):
    chain, missing = path_to_tensorflow(EXTRAS[extra])
    if {name(r) for r in EXTRAS[extra]} & missing:
        pytest.skip(f"[{extra}] is not installed here")
    assert chain is None, " -> ".join(chain)


def test_all_is_every_runtime_extra():
    (all_,) = EXTRAS["all"]
    requirement = Requirement(all_)
    assert canonicalize_name(requirement.name) == canonicalize_name(PROJECT["name"])
    assert requirement.extras == set(EXTRAS) - {"all", "test", "bench"}


# Colab's announced runtime (TensorFlow 2.19.0, Keras 3.10.0, TF Text 2.19.0), the newest
# tensorflow-tpu (2.20.0), and the newest TensorFlow tested (2.21).
COLAB_RUNTIME = {"tensorflow": "2.19.0", "keras": "3.10.0", "tensorflow-text": "2.19.0"}


@pytest.mark.parametrize("package", ["tensorflow", "tensorflow-text", "tensorflow-serving-api"])
def test_tensorflow_range_is_colabs_runtime_through_the_newest_tested(package):
    """2.19 (Colab's runtime) through 2.21 for TensorFlow and the packages built against it."""
    requirements = PROJECT["dependencies"] + EXTRAS["serving"]
    (requirement,) = [Requirement(r) for r in requirements if name(r) == package]
    for version in ("2.19.0", "2.19.1", "2.20.0", "2.21.0"):
        assert requirement.specifier.contains(version), (package, version)
    for version in ("2.18.1", "2.22.0"):
        assert not requirement.specifier.contains(version), (package, version)


def test_colabs_runtime_satisfies_every_core_requirement_on_it():
    """pip keeps an installed runtime only while every requirement accepts it."""
    for line in PROJECT["dependencies"] + EXTRAS["train"]:
        pinned = COLAB_RUNTIME.get(name(line))
        if pinned is not None:
            assert Requirement(line).specifier.contains(pinned), line
    (tensorboard,) = [Requirement(r) for r in EXTRAS["train"] if name(r) == "tensorboard"]
    assert tensorboard.specifier.contains("2.19.0")  # TF 2.19 requires tensorboard~=2.19.0


# --------------------------------------------------------------------------- test tiers (markers)

TEST_FILES = sorted((CHECKOUT / "tests").glob("test_*.py"))


def test_every_mark_is_declared():
    """--strict-markers fails on an unknown mark; the tiers' marks are the declared ones."""
    declared = {
        line.split(":")[0] for line in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]
    }
    tiers = {"slow", "install", "programs", "xla_cpu", "quick", "colab_runtime", "runtime"}
    assert tiers <= declared
    for path in TEST_FILES:
        assert module_marks(path) <= declared, path.name


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda path: path.name)
def test_library_tests_import_no_program(path):
    """The library suite (every test not marked ``programs``) runs where only the package is
    installed: a module without the ``programs`` mark imports none of the checkout's programs at
    module level and uses no trained demo workdir (its tests marked ``programs`` may import them
    inside). A new test file is in the library suite unless it says otherwise."""
    if "programs" in module_marks(path):
        return
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"^(from|import) (training|export|benchmarks)\b", text, re.MULTILINE)
    assert not re.search(r"def \w+\([^)]*\btiny_workdir\b", text)  # the trained demo workdir


def test_not_programs_leaves_program_modules_out_unimported():
    programs = [path for path in TEST_FILES if "programs" in module_marks(path)]
    assert len(programs) >= 14
    for path in programs:
        assert excluded_before_import(path, "not slow and not programs and not xla_cpu")
        assert not excluded_before_import(path, "not slow")
    library = [path for path in TEST_FILES if "programs" not in module_marks(path)]
    assert not any(excluded_before_import(path, "not programs") for path in library)


def test_the_quick_tier_is_library_tests():
    """`make test-quick` runs library tests only (no trained workdir, no program)."""
    quick = [path for path in TEST_FILES if "quick" in module_marks(path)]
    quick += [path for path in TEST_FILES if "@pytest.mark.quick" in path.read_text()]
    assert len(quick) >= 10
    for path in quick:
        assert "programs" not in module_marks(path), path.name


def test_the_runtime_tier_is_library_tests():
    """The Colab-runtime job (.ci/colab_runtime) runs the ``runtime`` tier with ``not programs``:
    a module of the ``runtime`` tier must be a library module, or the job would leave it out
    unseen."""
    runtime = [path for path in TEST_FILES if "runtime" in module_marks(path)]
    assert len(runtime) >= 5
    for path in runtime:
        assert "programs" not in module_marks(path), path.name
    job = (CHECKOUT / ".ci" / "colab_runtime").read_text()
    assert '-m "runtime and not slow and not install and not programs' in job


# --------------------------------------------------------------------------- import circles

IMPORT_ROOTS = ("keras_transformer", "training", "export", "benchmarks")


def import_graph(root: Path, packages=IMPORT_ROOTS) -> dict[str, set[str]]:
    """Module name -> the modules of ours it imports, at the top or inside a function."""
    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path

    def ours(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(ours(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                targets.update(ours(f"{base}.{alias.name}") or ours(base) for alias in node.names)
        graph[name] = targets - {None, name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a longer loop."""
    reachable = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for target in graph[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        reachable[start] = seen
    circles = {
        tuple(
            sorted(
                m for m in graph if m == start or (m in reachable[start] and start in reachable[m])
            )
        )
        for start in graph
        if start in reachable[start]
    }
    return sorted(list(circle) for circle in circles)


def test_no_module_imports_itself_back():
    """No import circle, not even through an import inside a function: each module can be
    read, and imported, after the ones it uses."""
    assert import_circles(import_graph(CHECKOUT)) == []


def test_the_circle_check_finds_a_circle_through_a_function_level_import(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "__init__.py").write_text("")
    (tmp_path / "benchmarks" / "a.py").write_text("from benchmarks.b import f\n")
    (tmp_path / "benchmarks" / "b.py").write_text("def f():\n    from benchmarks import c\n")
    (tmp_path / "benchmarks" / "c.py").write_text("from . import a\n")
    (tmp_path / "benchmarks" / "d.py").write_text("import benchmarks.a\n")
    graph = import_graph(tmp_path, packages=("benchmarks",))
    assert graph["benchmarks.d"] == {"benchmarks.a"}
    assert import_circles(graph) == [["benchmarks.a", "benchmarks.b", "benchmarks.c"]]


# --------------------------------------------------------------------------- record_check


def _fake_dist(site: Path, files: dict[str, bytes]) -> Path:
    info = site / "fake_pkg-1.0.dist-info"
    info.mkdir(parents=True)
    rows = []
    for relative, content in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(content)
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
        rows.append(f"{relative},sha256={digest},{len(content)}")
    rows += ["fake_pkg/__pycache__/good.cpython-311.pyc,,", "fake_pkg-1.0.dist-info/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return info


def test_verify_record_accepts_untouched_files(tmp_path):
    _fake_dist(tmp_path, {"fake_pkg/good.py": b"x = 1\n", "fake_pkg/data.bin": b"\x00\x01"})
    assert verify_record("fake-pkg", tmp_path) == []
    assert verify_record("Fake.Pkg", tmp_path) == []


def test_verify_record_reports_tampered_and_missing_files(tmp_path):
    _fake_dist(
        tmp_path,
        {
            "fake_pkg/good.py": b"x = 1\n",
            "fake_pkg/bad.py": b"y = 2\n",
            "fake_pkg/resized.py": b"z = 3\n",
            "fake_pkg/gone.py": b"",
        },
    )
    (tmp_path / "fake_pkg/bad.py").write_bytes(b"y = 3\n")  # same size, other bytes
    (tmp_path / "fake_pkg/resized.py").write_bytes(b"z = 30\n")
    (tmp_path / "fake_pkg/gone.py").unlink()
    assert sorted(verify_record("fake_pkg", tmp_path)) == [
        Mismatch("fake_pkg/bad.py", "sha256 mismatch"),
        Mismatch("fake_pkg/gone.py", "missing"),
        Mismatch("fake_pkg/resized.py", "size 7 != 6"),
    ]


def test_verify_record_needs_the_distribution(tmp_path):
    with pytest.raises(LookupError):
        verify_record("fake_pkg", tmp_path)


def test_an_installed_distribution_matches_its_record():
    """A real RECORD: pytest's own files, as pip installed them."""
    site = Path(importlib.metadata.distribution("pytest").locate_file(""))
    assert verify_record("pytest", site) == []
