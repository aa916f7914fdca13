import os

from hang_guard import HANG_TIMEOUT

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import fcntl  # noqa: E402
import logging  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import keras  # noqa: E402
import pytest  # noqa: E402
from tiers import excluded_before_import  # noqa: E402

CHECKOUT = Path(__file__).resolve().parent.parent


def pytest_ignore_collect(collection_path, config):
    """``-m "not programs"`` leaves the program modules out before importing them: where only the
    library is installed (the TPU and Colab-runtime jobs), their imports would fail."""
    if excluded_before_import(Path(collection_path), config.getoption("markexpr", "")):
        return True
    return None


@pytest.fixture(autouse=True)
def _seed_and_policy():
    """Every test starts seeded, in float32, and leaves the global policy alone, and the root
    logger: a program's ``main`` run in process (``setup_logging``) adds a handler writing to
    that test's captured stderr, closed once the test ends; it goes with the test (pytest's
    own handlers are its to manage)."""
    keras.utils.set_random_seed(1234)
    policy = keras.config.dtype_policy()
    handlers, level = set(logging.root.handlers), logging.root.level
    yield
    keras.config.set_dtype_policy(policy)
    for handler in logging.root.handlers[:]:
        if type(handler) is logging.StreamHandler and handler not in handlers:
            logging.root.removeHandler(handler)
    logging.root.setLevel(level)


@pytest.fixture(scope="session")
def tiny_workdir(tmp_path_factory) -> Path:
    """A workdir trained by the real CLI on the demo task (tiny, ~25 s), shared by
    the export tests (SavedModel, TFLite, CTranslate2). Tests must not modify it.
    Under pytest-xdist the workers share one: the first to ask trains it while the
    others wait for it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's base, above each worker's own
    path, done = root / "tiny_train" / "run", root / "tiny_train" / "done"
    with open(root / "tiny_train.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(path, ignore_errors=True)  # what a worker that failed left
            command = [
                sys.executable,
                "-m",
                "training.train",
                "--config",
                "demo",
                "--workdir",
                str(path),
                "--set",
                "data.synthetic={train: 2000, valid: 20, test: 20, seed: 1}",
                "--set",
                "tokenizer.vocab_size=300",
                "--set",
                "training.epochs=2",
                "--set",
                "training.steps_per_epoch=60",
                "--set",
                "training.steps_per_execution=10",
                "--set",
                "training.batch_tokens=512",
                "--set",
                "evaluation.max_sentences=4",
            ]
            result = subprocess.run(
                command,
                cwd=CHECKOUT,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                capture_output=True,
                text=True,
                timeout=HANG_TIMEOUT,
            )
            assert result.returncode == 0, result.stderr[-4000:]
            done.touch()
    return path
