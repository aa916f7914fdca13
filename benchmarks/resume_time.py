"""Time to the first update of a resumed ``fit`` run, resumed at 10% and at 90% of a pass over a
long corpus, from the backup's input position and the old way (reading and dropping the batches
already used).

    python -m benchmarks.scale_corpus /tmp/big_corpus          # once: 4.5M pairs, ~600 MB
    python -m benchmarks.resume_time --corpus /tmp/big_corpus [--pairs N] [--json out.json]
    PYTHONPATH=OLD_CHECKOUT python benchmarks/resume_time.py --old-only ...  # an earlier commit

The input is the training program's for ``--config multi30k --set data.dir=CORPUS --set
training.cache=false`` (streamed from the text, tokenized, shuffled through 10,000 examples,
batched by length at 1,536 tokens a batch; ``training.inputs.datasets``), read by
``training.loop.fit_in_steps`` as the program's ``fit`` loop reads it. ``--pairs N`` trains on
the corpus's first N pairs (copied to a folder of their own): the old way's resume at 90% reads
most of a pass, and a pass over all 4.5M pairs takes ~13 minutes on a 2-core VM.

For each position p (``--positions``): a backup at update n (p of a pass, by the mean sentences a
batch of the first 200 batches) without the input's position (as written before positions were
saved) is resumed: the run reads and drops n batches, makes update n + 1, backs up (now with
the position), makes update n + 2 and is stopped there. That backup is then resumed from its
position. Each resume is timed from the call of ``fit_in_steps`` (weights restored, input
positioned, the step traced) to the end of its first update. The model is small (``tiny``
preset, one layer a side): the model's share (restore, tracing, the update) is the same both
ways; the input's is what differs. What else runs on the machine changes the seconds: the
report gives the load average before and after.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

POSITIONS = (0.1, 0.9)
SAMPLE_BATCHES = 200  # batches read to estimate the sentences a batch


def head_corpus(source: Path, pairs: int, out: Path) -> Path:
    """``out`` with the first ``pairs`` lines of ``source``'s ``train.src``/``train.tgt`` and
    its ``valid``/``test`` files (made once; kept)."""
    if (out / "train.tgt").is_file():
        return out
    from keras_transformer.files import replace_directory, staging_directory

    staging = staging_directory(out)
    try:
        for side in ("src", "tgt"):
            with (
                open(source / f"train.{side}", "rb") as reader,
                open(staging / f"train.{side}", "wb") as writer,
            ):
                writer.writelines(itertools.islice(reader, pairs))
            for split in ("valid", "test"):
                if (source / f"{split}.{side}").is_file():
                    shutil.copyfile(source / f"{split}.{side}", staging / f"{split}.{side}")
        replace_directory(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


class _Clock:
    """A Keras callback that notes the start of ``fit`` and the end of the first update, and
    stops the run at update ``stop_at``."""

    def __init__(self, stop_at: int):
        import keras

        from keras_transformer.training.loop import optimizer_step

        clock = self

        class Callback(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                if clock.fit_started is None:
                    clock.fit_started = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                if clock.first_update is None:
                    clock.first_update = time.perf_counter()
                if optimizer_step(self.model) >= stop_at:
                    raise _Stopped  # before StepBackup: the backup stays the one before

        self.fit_started = self.first_update = None
        self.callback = Callback()


class _Stopped(Exception):
    pass


def resume(model_fn, make_data, backup, stop_at: int) -> tuple[float, float]:
    """Seconds from the call of ``fit_in_steps`` (resuming from ``backup``) to the start of
    ``fit`` (weights restored, input positioned) and to the end of its first update; the run
    stops at update ``stop_at``."""
    from keras_transformer.training.loop import StepPlan, fit_in_steps

    model = model_fn()
    plan = StepPlan(steps_per_epoch=10**9, max_steps=stop_at + 1, backup_every_steps=1)
    clock = _Clock(stop_at)
    started = time.perf_counter()
    try:
        fit_in_steps(model, make_data, plan, backup=backup, callbacks=[clock.callback], verbose=0)
    except _Stopped:
        pass
    return clock.fit_started - started, clock.first_update - started


def measure(args) -> dict:
    import keras
    import numpy as np

    import keras_transformer as kt
    from keras_transformer.training.backup import TrainingBackup
    from keras_transformer.training.batches import datasets
    from keras_transformer.training.build import build_tokenizers
    from keras_transformer.training.corpora import load_corpus
    from keras_transformer.training.run_config import load_config

    work = Path(args.workdir or tempfile.mkdtemp(prefix="resume_time-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus_dir = args.corpus.resolve()
    if args.pairs:
        corpus_dir = head_corpus(corpus_dir, args.pairs, work / f"corpus_{args.pairs}")
    overrides = [
        f"data.dir={corpus_dir}",
        "data.prepare=false",
        "training.cache=false",
        f"tokenizer.max_sentences={args.tokenizer_sentences}",
        *args.set,
    ]
    config = load_config(args.config, overrides)
    corpus = load_corpus(config.data)
    pairs = len(corpus["train"])
    src_tok, tgt_tok = build_tokenizers(config, corpus, work / "tokenizer_run")

    def make_data():  # the training batches alone (no validation split to build)
        return datasets(config.training, {**corpus, "valid": []}, src_tok, tgt_tok)[0]

    rows = [int(batch[1].shape[0]) for batch in make_data().take(SAMPLE_BATCHES)]
    per_batch = float(np.mean(rows))
    options = config.training
    model_config = kt.TransformerConfig.from_preset(
        "tiny",
        src_vocab_size=src_tok.vocab_size,
        tgt_vocab_size=tgt_tok.vocab_size,
        max_length=max(options.max_src_length, options.max_tgt_length + 1),
        num_layers=1,
    )

    def model_fn():
        keras.utils.set_random_seed(0)
        model = kt.Transformer(model_config)
        model.build()
        model.compile(
            optimizer=kt.paper_adam(kt.TransformerSchedule(model_config.d_model, 4000)),
            loss=kt.MaskedLabelSmoothedCrossEntropy(0.1, pad_id=model_config.pad_id),
            steps_per_execution=1,
        )
        model.optimizer.build(model.trainable_variables)
        return model

    results = []
    for position in args.positions:
        step = max(1, round(position * pairs / per_batch))
        backup = TrainingBackup(work / f"backup_{position}")
        backup.delete()
        model = model_fn()
        model.optimizer.iterations.assign(step)
        backup.save(model, step=step, epoch=0)  # no input position: the old way
        print(f"position {position:.0%}: update {step}, the old way ...", flush=True)
        before = resume(model_fn, make_data, TrainingBackup(backup.directory), step + 2)
        print(f"  {before[1]:.1f} s; from the saved position ...", flush=True)
        # Each resume stops before its first update's backup: the next one resumes as it did.
        after = [
            resume(model_fn, make_data, TrainingBackup(backup.directory), step + 2)
            for _ in range(0 if args.old_only else args.repeats)
        ]
        print(f"  {', '.join(f'{run[1]:.1f}' for run in after)} s", flush=True)
        results.append(
            {
                "position": position,
                "step": step,
                "pairs_before": round(step * per_batch),
                "old_way": {"input_seconds": round(before[0], 2), "seconds": round(before[1], 2)},
                "from_position": after
                and {
                    "input_seconds": round(statistics.median(run[0] for run in after), 2),
                    "seconds": round(statistics.median(run[1] for run in after), 2),
                    "runs": [round(run[1], 2) for run in after],
                },
            }
        )
        backup.delete()
    return {
        "corpus": str(args.corpus),
        "pairs": pairs,
        "sentences_per_batch": round(per_batch, 1),
        "results": results,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--corpus", type=Path, required=True, help="train/valid/test .src/.tgt (scale_corpus)"
    )
    parser.add_argument(
        "--pairs", type=int, default=None, help="train on the first N pairs (default: all)"
    )
    parser.add_argument("--positions", type=float, nargs="+", default=list(POSITIONS))
    parser.add_argument("--config", default="multi30k")
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="config override"
    )
    parser.add_argument("--repeats", type=int, default=3, help="resumes from the position (median)")
    parser.add_argument(
        "--old-only",
        action="store_true",
        help="only the old way (e.g. with PYTHONPATH at an earlier checkout's training/)",
    )
    parser.add_argument("--tokenizer-sentences", type=int, default=100_000)
    parser.add_argument(
        "--workdir", type=Path, default=None, help="tokenizer, corpus head, backups (kept)"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not (args.corpus / "train.src").is_file():
        parser.error(f"--corpus {args.corpus} has no train.src.")
    if args.pairs is not None and args.pairs < 1:
        parser.error("--pairs must be at least 1.")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1.")
    if not all(0 < position < 1 for position in args.positions):
        parser.error("--positions are fractions of a pass, between 0 and 1.")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("training").setLevel(logging.INFO)  # how each run resumed
    load_before = os.getloadavg()
    measured = measure(args)
    report = {
        "benchmark": "resume_time",
        "date": datetime.date.today().isoformat(),
        "command": " ".join(["python -m benchmarks.resume_time", *(argv or sys.argv[1:])]),
        **measured,
        "load_average": {"before": load_before[0], "after": os.getloadavg()[0]},
    }
    print(
        "| position | update | pairs before it | the old way: input, first update, s | "
        "from the position: input, first update, s |"
    )
    print("|---|---:|---:|---:|---:|")
    for row in measured["results"]:
        old, new = row["old_way"], row["from_position"] or {}
        print(
            f"| {row['position']:.0%} | {row['step']:,} | {row['pairs_before']:,} | "
            f"{old['input_seconds']:.1f}, {old['seconds']:.1f} | "
            f"{new.get('input_seconds', '-')}, {new.get('seconds', '-')} |"
        )
    from benchmarks.report import emit

    emit(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
