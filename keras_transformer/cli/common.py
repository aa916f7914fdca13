"""What the ``kt`` command's programs (``keras_transformer.cli``) share.

Nothing here imports TensorFlow (only ``keras_transformer.precision``'s names): a program parses
its arguments and checks its paths with this module first, so ``--help`` and
a bad invocation answer in a fraction of a second, as one line
(``prog: error: ...``, exit status 2), before TensorFlow is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from keras_transformer.precision import AUTO, PRECISIONS

# --precision's names (keras_transformer.precision imports no TensorFlow). Training also takes
# "auto": keras_transformer.precision.choose_precision picks one for the hardware.
PRECISION_NAMES = tuple(sorted(PRECISIONS))
TRAINING_PRECISIONS = (AUTO, *PRECISION_NAMES)
LOG_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"
USAGE_ERROR = 2


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` whose errors are one line on stderr (no usage block), exit status 2."""

    def __init__(self, prog: str, description: str | None = None, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(prog=prog, description=description, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(self.prog, f"{message} (see {self.prog} --help)")


def fail(prog: str, message: str) -> NoReturn:
    """Print ``prog: error: message`` on one line of stderr and exit with status 2."""
    message = " ".join(str(message).split())  # one line, whatever the exception's text held
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(USAGE_ERROR)


def setup_logging(level: int = logging.INFO) -> None:
    """Every program logs to stderr in one format; results go to stdout.

    TensorFlow's C++ start-up notices are hidden unless the user sets
    ``TF_CPP_MIN_LOG_LEVEL=0`` (warnings and errors still show; ``quiet_tensorflow``).
    """
    quiet_tensorflow()
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr, force=True)
    # absl's Python logger (TensorFlow's): its INFO lines ("Sharding callback duration")
    # are TensorFlow's bookkeeping, not the program's news.
    logging.getLogger("absl").setLevel(max(level, logging.WARNING))


def quiet_tensorflow() -> None:
    """Hide TensorFlow's C++ INFO logs (``TF_CPP_MIN_LOG_LEVEL=1``) unless the user set the
    variable; call it before TensorFlow is imported. What TensorFlow prints whatever the
    variable says is filtered by ``import_library``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


# What TensorFlow's C++ runtime prints on import and when it first looks for devices,
# whatever TF_CPP_MIN_LOG_LEVEL says (absl logs before its initialisation) or as errors:
# notices, not problems. A machine without a GPU has TensorFlow try CUDA and report that it
# failed (cuInit, "CUDA error", no driver); the CPU runs the program as asked.
_IMPORT_NOTICES = re.compile(
    r"All log messages before absl::InitializeLog|oneDNN custom operations are on|"
    r"Could not find cuda drivers|Unable to register cu(DNN|FFT|BLAS) factory|"
    r"computation placer already registered|TensorFlow binary is optimized to use|"
    r"rebuild TensorFlow with the appropriate compiler flags|"
    r"failed call to cuInit|CUDA error|cuda_(platform|executor|diagnostics|driver)\.cc|"
    r"Could not find TensorRT|TF-TRT Warning|no NVIDIA GPU device is present|"
    r"kernel driver does not appear to be running|successful NUMA node read"
)


def _tensorflow_notices_shown() -> bool:
    """Whether the user asked for all of TensorFlow's C++ logs: ``TF_CPP_MIN_LOG_LEVEL=0``."""
    return os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() == "0"


@contextlib.contextmanager
def _stderr_filtered(pattern: re.Pattern):
    """Collect what the process writes to file descriptor 2 and replay it
    afterwards, less the lines that match ``pattern``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [
                line
                for line in capture.read().decode("utf-8", "replace").splitlines(keepends=True)
                if not pattern.search(line)
            ]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


def import_library():
    """Import TensorFlow and ``keras_transformer`` without TensorFlow's start-up notices.

    TensorFlow also looks for its devices here (``tf.config.list_physical_devices``), so
    that the CUDA notices of a machine without a GPU are filtered too. Anything else it
    prints (a real warning, an error) still shows; with ``TF_CPP_MIN_LOG_LEVEL=0``
    everything does.
    """
    quiet_tensorflow()
    filtered = (
        contextlib.nullcontext()
        if _tensorflow_notices_shown()
        else _stderr_filtered(_IMPORT_NOTICES)
    )
    with filtered:
        import tensorflow

        import keras_transformer

        tensorflow.config.list_physical_devices()
    return keras_transformer


def existing_file(prog: str, path: Path | None, what: str) -> None:
    """Fail unless ``path`` is a file: a text input the program reads."""
    if path is not None and not Path(path).is_file():
        fail(prog, f"{what} {path} does not exist.")


def existing_path(prog: str, path: Path, what: str, hint: str = "") -> None:
    """Fail unless ``path`` exists, before TensorFlow is imported. What it must
    hold (a finished run, a SavedModel) the library checks: ``Workdir.check``
    and ``saved_model_version`` know the layouts, and their errors are one line too."""
    if not Path(path).exists():
        fail(prog, f"{what} {path} does not exist{f' ({hint})' if hint else ''}.")


WORKDIR_HINT = "train one with kt train --config C --workdir W"


def existing_workdir(prog: str, path: Path) -> None:
    """Fail unless the workdir ``path`` exists (``existing_path``), with how to make one."""
    existing_path(prog, path, "workdir", WORKDIR_HINT)


# Translator.sample's parameters, as --top-k, --top-p, --temperature and --seed.
SAMPLING_FLAGS = ("top_k", "top_p", "temperature", "seed")


def add_model_source(parser: argparse.ArgumentParser) -> None:
    """``--model SAVEDMODEL`` or ``--workdir W``, one of them required (``check_model_source``)."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--model",
        type=Path,
        help="an export version folder (exports/demo/1) or the folder above it",
    )
    group.add_argument("--workdir", type=Path, help="a kt train workdir")


def check_model_source(prog: str, args: argparse.Namespace) -> None:
    """Fail unless the ``--workdir`` or ``--model`` given exists (``existing_path``)."""
    if args.workdir is not None:
        existing_workdir(prog, args.workdir)
    else:
        existing_path(prog, args.model, "SavedModel")


def add_precision_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """``--precision``: the compute precision of the model a program loads, one of
    ``PRECISION_NAMES`` (default fp32); ``help`` says what it applies to."""
    parser.add_argument("--precision", choices=PRECISION_NAMES, default="fp32", help=help)


def check_at_least_one(parser: ArgumentParser, args: argparse.Namespace, *flags: str) -> None:
    """A usage error unless each of ``flags`` (``args`` names) given is at least 1."""
    for flag in flags:
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {value}")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """``--sample`` and its parameters ``--top-k``, ``--top-p``, ``--temperature``, ``--seed``
    (``None`` when not given: ``sampling_parameters``)."""
    parser.add_argument(
        "--sample", action="store_true", help="sample each translation instead of searching"
    )
    parser.add_argument(
        "--top-k", type=int, default=None, help="--sample among the K likeliest tokens (0: all)"
    )
    parser.add_argument(
        "--top-p", type=float, default=None, help="--sample in the nucleus of this probability"
    )
    parser.add_argument(
        "--temperature", type=float, default=None, help="--sample at this temperature (1)"
    )
    parser.add_argument("--seed", type=int, default=None, help="--sample's seed (0)")


def sampling_parameters(parser: ArgumentParser, args: argparse.Namespace) -> dict:
    """The sampling parameters given, by ``Translator.sample``'s names (the library's
    defaults stand for the others), checked before TensorFlow is imported: a parameter
    given without ``--sample``, or out of its range (``--top-k`` >= 0, ``--top-p`` in
    (0, 1], ``--temperature`` a finite number above 0), is a usage error."""
    given = {
        flag: getattr(args, flag) for flag in SAMPLING_FLAGS if getattr(args, flag) is not None
    }
    for flag in given:
        if not args.sample:
            parser.error(f"--{flag.replace('_', '-')} needs --sample")
    top_k, top_p, temperature = args.top_k, args.top_p, args.temperature
    if top_k is not None and top_k < 0:
        parser.error(f"--top-k must be >= 0 (0: no limit, 1: greedy), got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        parser.error(f"--top-p must be in (0, 1] (1: no nucleus), got {top_p}")
    if temperature is not None and not (temperature > 0.0 and math.isfinite(temperature)):
        parser.error(f"--temperature must be a finite number above 0, got {temperature}")
    return given


def check_alpha(parser: ArgumentParser, args: argparse.Namespace, *flags: str) -> None:
    """A usage error unless each of ``flags`` (``args`` names of length-penalty exponents,
    a number or a list) given is a finite number >= 0 (0: no length penalty)."""
    for flag in flags:
        value = getattr(args, flag)
        for alpha in value if isinstance(value, list) else [value]:
            if alpha is not None and not (math.isfinite(alpha) and alpha >= 0.0):
                parser.error(
                    f"--{flag.replace('_', '-')} must be a finite number >= 0 "
                    f"(0: no length penalty), got {alpha}"
                )


def add_tflite_search(parser: ArgumentParser) -> None:
    """The ``--quantize``, ``--beam`` and ``--alpha`` of a ``.tflite`` translator's export
    (``kt export tflite``, ``kt export web``); ``check_tflite_search`` checks them."""
    parser.add_argument(
        "--quantize", choices=["dynamic"], default=None, help="dynamic-range int8 weights"
    )
    parser.add_argument(
        "--beam",
        type=int,
        default=None,
        help="beam size fixed in the file (default and 1: greedy); the best hypothesis comes out",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="the beam search's length penalty exponent (default: 0.6, as kt export saved-model)",
    )


def check_tflite_search(parser: ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error for ``add_tflite_search``'s flags: ``--beam`` below 1, ``--alpha`` not a
    finite number >= 0, or ``--alpha`` without ``--beam``."""
    check_at_least_one(parser, args, "beam")
    check_alpha(parser, args, "alpha")
    if args.alpha is not None and args.beam is None:
        parser.error("--alpha is the beam search's length penalty: give --beam N as well")


def needs_module(prog: str, module: str, what: str, extra: str) -> None:
    """Fail unless ``module`` is installed (looked for, not imported): ``what`` needs it,
    and the ``extra`` of ``keras-transformer-nmt`` installs it."""
    if importlib.util.find_spec(module) is None:
        fail(prog, f"{what} needs {module}: pip install 'keras-transformer-nmt[{extra}]'.")


def run(
    prog: str,
    main: Callable[[], int | None],
    expected: tuple[type[BaseException], ...] = (),
    library: bool = True,
) -> int:
    """Run ``main``; missing files, existing outputs and ``expected`` exceptions become one
    ``prog: error: ...`` line and exit status 2, Ctrl-C exit status 130. Any other
    exception is a bug and keeps its traceback (``KERAS_TRANSFORMER_TRACEBACK=1``
    shows one for these too). ``library``: import TensorFlow and the library first,
    quietly (``import_library``)."""
    try:
        if library:
            import_library()
        return int(main() or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except (FileNotFoundError, FileExistsError, *expected) as error:
        if os.environ.get("KERAS_TRANSFORMER_TRACEBACK"):
            raise
        fail(prog, str(error) or type(error).__name__)
