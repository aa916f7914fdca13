"""Train a Transformer: ``kt train --config demo --workdir runs/demo``.

``--config`` is a built-in config's name (demo, multi30k, student, base, big, ...) or
a YAML path; ``--set section.key=value`` overrides any key (values parsed as
YAML); ``--print-config`` prints the resolved config as YAML and exits. Re-running
the same command after an interruption resumes from the
last backup at its step, on the batches an uninterrupted run would have used
next, from the input position saved with it (no batch before it is read
again). The workdir's layout is ``keras_transformer.Workdir``'s.
"""

from __future__ import annotations

import sys
from pathlib import Path

from keras_transformer.cli.common import (
    TRAINING_PRECISIONS,
    ArgumentParser,
    fail,
    run,
    setup_logging,
)
from keras_transformer.training.run_config import RunConfig, load_config
from keras_transformer.training.steps import StepPlan
from keras_transformer.training.strategy import STRATEGIES, StrategyError

PROG = "kt train"


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    parser.add_argument(
        "--config", required=True, help="a built-in config (demo, multi30k, ...) or a YAML path"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="where tokenizers, checkpoints, logs and metrics go (required to train)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable)",
    )
    parser.add_argument("--strategy", choices=STRATEGIES, default=None)
    parser.add_argument(
        "--mixed-precision",
        choices=TRAINING_PRECISIONS,
        default=None,
        help="compute precision; auto picks what the hardware does well",
    )
    parser.add_argument(
        "--jit", action="store_true", default=None, help="compile the train step with XLA"
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config as YAML and exit (nothing is trained)",
    )
    args = parser.parse_args(argv)
    if args.workdir is None and not args.print_config:
        parser.error("the following arguments are required: --workdir")
    return args


def resolved_config(args) -> RunConfig:
    """The config with ``--set`` and the switches applied; a bad name or value fails here,
    as one line, before TensorFlow loads."""
    switches = {}
    if args.strategy:
        switches["strategy"] = args.strategy
    if args.mixed_precision:
        switches["mixed_precision"] = args.mixed_precision
    if args.jit:
        switches["jit"] = True
    try:
        config = load_config(args.config, args.set)
        if switches:
            config = config.replace("training", **switches)
        StepPlan.from_options(config.training)
    except ValueError as error:
        fail(PROG, str(error))
    if args.workdir is not None and args.workdir.exists() and not args.workdir.is_dir():
        fail(PROG, f"--workdir {args.workdir} is a file, not a folder.")
    return config


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)
    config = resolved_config(args)
    if args.print_config:
        sys.stdout.write(config.to_yaml())
        return 0

    def train() -> int:
        from keras_transformer.training.trainer import run as run_training

        run_training(config, args.workdir)
        return 0

    # ValueError: what the config or the corpus got wrong (a misaligned corpus, an unbounded
    # shuffle of a large one, a stale W/prepared, ...); the message says what to fix.
    return run(PROG, train, expected=(StrategyError, ValueError))


if __name__ == "__main__":
    sys.exit(main())
