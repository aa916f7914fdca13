"""Tokenize the training split once, into shuffled shards:
``kt prepare --config base --workdir runs/base --set data.dir=DATA``.

Trains the workdir's tokenizers as ``kt train`` does (or reuses them),
then writes the training pairs, tokenized, length-filtered and shuffled, to
``W/prepared/`` (``keras_transformer.data.prepare_shards``); with
``data.sources``, each corpus (tagged) to ``W/prepared/source-N/``. A training run
with the same config and workdir reads them instead of the text
(``data.prepare: auto``); one whose tokenizers, length limits or data settings
differ stops and says so. A matching preparation is kept unless ``--force``.
Prints a JSON summary on stdout.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from keras_transformer.cli.common import ArgumentParser, existing_path, fail, run, setup_logging
from keras_transformer.training.run_config import RunConfig, load_config, resolve_path

PROG = "kt prepare"


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    parser.add_argument(
        "--config", required=True, help="a built-in config (demo, multi30k, ...) or a YAML path"
    )
    parser.add_argument("--workdir", required=True, type=Path, help="the training run's folder")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable), as for kt train",
    )
    parser.add_argument(
        "--force", action="store_true", help="prepare again even if a matching preparation exists"
    )
    return parser.parse_args(argv)


def checked_config(args) -> RunConfig:
    """The config with ``--set`` applied and its corpus paths checked, before TensorFlow."""
    try:
        config = load_config(args.config, args.set)
    except ValueError as error:
        fail(PROG, str(error))
    if args.workdir.exists() and not args.workdir.is_dir():
        fail(PROG, f"--workdir {args.workdir} is a file, not a folder.")
    data = config.data

    if data.sources is not None:
        return config  # each corpus is checked as it is read, a missing one named
    if data.kind == "text":
        if not data.dir:
            fail(
                PROG,
                "data.kind=text needs data.dir (a folder with train.src/train.tgt, ...): "
                "add --set data.dir=PATH.",
            )
        existing_path(PROG, resolve_path(data.dir) / "train.src", "training file")
    elif data.kind == "tsv" and (data.tsv or {}).get("train"):
        existing_path(PROG, resolve_path(data.tsv["train"]), "training file")
    return config


COUNTS = ("shards", "examples", "pairs_read", "dropped_too_long", "src_tokens", "tgt_tokens")


def _summary(prepared) -> dict:
    """A preparation's folder and counts, for the JSON summary."""
    return {
        "directory": str(prepared.directory),
        "shards": len(prepared.files),
        "examples": prepared.examples,
        "pairs_read": prepared.pairs_read,
        "dropped_too_long": prepared.dropped_too_long,
        "src_tokens": prepared.src_tokens,
        "tgt_tokens": prepared.tgt_tokens,
    }


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)
    config = checked_config(args)

    def prepare() -> int:
        from keras_transformer.training.build import build_tokenizers
        from keras_transformer.training.corpora import load_corpus
        from keras_transformer.training.prepared import prepared_train_split

        started = time.perf_counter()
        corpus = load_corpus(config.data)
        src_tok, tgt_tok = build_tokenizers(config, corpus, args.workdir)
        prepared = prepared_train_split(
            config, args.workdir, corpus, src_tok, tgt_tok, rebuild=args.force
        )
        seconds = round(time.perf_counter() - started, 1)
        if isinstance(prepared, tuple):  # data.sources: one preparation per corpus
            names = [source.name for source in corpus["train"].sources]
            rows = [{"name": name, **_summary(one)} for name, one in zip(names, prepared)]
            totals = {key: sum(row[key] for row in rows) for key in COUNTS}
            summary = {"directory": str(prepared[0].directory.parent), **totals, "sources": rows}
        else:
            summary = _summary(prepared)
        print(json.dumps({**summary, "seconds": seconds}))
        return 0

    return run(PROG, prepare, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
