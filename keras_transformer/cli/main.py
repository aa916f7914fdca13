"""The ``kt`` command: one entry point that runs the package's programs as subcommands.

    kt train --config demo --workdir runs/demo
    kt export saved-model --workdir runs/demo --out runs/demo/export
    kt translate --model runs/demo/export/1 "a sentence"
    kt --help | kt COMMAND --help | kt --version

Each subcommand is a program of ``keras_transformer.cli`` with its own flags
(``kt COMMAND --help``); the dispatcher imports only that program's module, so
``--help``, ``--version`` and a mistyped command answer without TensorFlow. A
usage error is one line, ``kt: error: ...``, and exit status 2.
"""

from __future__ import annotations

import difflib
import importlib
import sys

from keras_transformer.cli.common import fail

PROG = "kt"

# name -> (module of keras_transformer.cli with main(argv), one line for kt --help);
# `export` takes a format, each a program of its own (EXPORTS).
COMMANDS = {
    "train": ("train", "train a Transformer from a run config (demo, multi30k, ... or a YAML)"),
    "prepare": ("prepare", "tokenize the training split once, into shuffled shards"),
    "evaluate": ("evaluate", "score a workdir, SavedModel or .tflite file with BLEU and chrF"),
    "tune-decoding": ("tune_decoding", "pick the beam size and length penalty on validation"),
    "import-checkpoint": ("import_checkpoint", "import a pretrained OPUS-MT (Marian) model"),
    "export": (None, "export a workdir: saved-model, tflite, ctranslate2 or web"),
    "translate": ("translate", "translate sentences or stdin with an exported SavedModel"),
    "translate-corpus": ("translate_corpus", "translate a file into another, resumably"),
    "score": ("score", "the log-probability of given translations"),
    "client": ("client", "ask a TF Serving server for translations (REST or gRPC)"),
}
EXPORTS = {
    "saved-model": ("export_saved_model", "a TF Serving SavedModel (strings in, strings out)"),
    "tflite": ("export_tflite", "a TFLite translator with builtin ops only"),
    "ctranslate2": ("export_ctranslate2", "a CTranslate2 model directory"),
    "web": ("export_web", "a static web page that translates offline (LiteRT.js)"),
}


def _listing(commands: dict[str, tuple[str | None, str]]) -> str:
    """``commands`` one a line: the name, then its line for ``--help``, in one column."""
    width = max(len(name) for name in commands) + 2
    return "\n".join(f"  {name:<{width}}{about}" for name, (_, about) in commands.items())


def usage() -> str:
    """What ``kt --help`` prints: the usage line and every subcommand with one line each."""
    commands = {name: entry for name, entry in COMMANDS.items() if name != "export"}
    commands.update({f"export {name}": entry for name, entry in EXPORTS.items()})
    return (
        f"usage: {PROG} [--version] [--help] COMMAND [ARGS ...]\n\n"
        "The original encoder-decoder Transformer: train, evaluate, export, translate.\n\n"
        f"commands:\n{_listing(commands)}\n\n"
        f"'{PROG} COMMAND --help' gives a command's options.\n"
    )


def export_usage() -> str:
    """What ``kt export --help`` prints: the formats, one line each."""
    return (
        f"usage: {PROG} export FORMAT [ARGS ...]\n\n"
        f"Export a trained workdir (kt train) for serving.\n\n"
        f"formats:\n{_listing(EXPORTS)}\n\n"
        f"'{PROG} export FORMAT --help' gives a format's options.\n"
    )


def _choose(name: str, commands: dict, what: str) -> str:
    """The module of subcommand ``name``, or a one-line usage error naming the choices."""
    if name in commands:
        return commands[name][0]
    if name.startswith("-"):
        fail(PROG, f"unrecognized arguments: {name} (see {PROG} --help)")
    close = difflib.get_close_matches(name, commands, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    fail(PROG, f"unknown {what} {name!r}: {hint}use one of {', '.join(commands)}")


def main(argv: list[str] | None = None) -> int:
    """Run ``kt ARGV``: the chosen program's ``main(rest of ARGV)``, or the help or version.

    Args:
        argv: the arguments after ``kt`` (default: ``sys.argv[1:]``).

    Returns:
        The program's exit status (0: success).

    Raises:
        SystemExit: status 2 with one line on stderr for a usage error (also a program's).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        fail(PROG, f"give a command: {', '.join(COMMANDS)} (see {PROG} --help)")
    first, rest = argv[0], argv[1:]
    if first in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0
    if first == "--version":
        if rest:
            fail(PROG, f"--version takes no arguments, got {' '.join(rest)}")
        from keras_transformer import __version__

        print(f"{PROG} {__version__}")
        return 0
    module = _choose(first, COMMANDS, "command")
    if module is None:  # kt export FORMAT ...
        if not rest:
            fail(PROG, f"kt export needs a format: {', '.join(EXPORTS)} (see kt export --help)")
        if rest[0] in ("-h", "--help"):
            sys.stdout.write(export_usage())
            return 0
        module, rest = _choose(rest[0], EXPORTS, "export format"), rest[1:]
    program = importlib.import_module(f"keras_transformer.cli.{module}")
    return int(program.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
