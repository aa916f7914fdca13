"""Input pipeline throughput with no model attached: examples/s and tokens/s.

    python -m benchmarks.input_pipeline [--pairs 1000000 | --src F.src --tgt F.tgt] [--vocab 8000]
                                        [--batch-tokens 4096] [--max-length 128]
                                        [--examples-per-shard 100000] [--json out.json]

Corpus: ``--pairs`` generated demo pairs (``generate_pairs``, seed 0), or the
aligned text files ``--src`` / ``--tgt``. A shared SentencePiece model
(unigram, ``--vocab``) is trained on the first ``--tokenizer-sample`` pairs.
Then, one after the other in one process:

* ``text``: text → tokenize → batch (``make_dataset``, no cache, shuffle
  buffer 10,000, buckets of ``--batch-tokens``), one full pass;
* ``prepare``: ``prepare_shards`` (tokenize once, shuffle, write the shards
  to a temporary folder): examples/s of preparing;
* ``shards``: prepared shards → batch (``sharded_dataset``, the same
  batching), one full pass.

A pass is consumed inside TensorFlow (``count_tokens``: one ``tf.data``
reduce over the batches), so no Python per-batch cost is counted: the
figure is what the pipeline can feed a training loop. Tokens are non-pad
ids (source ids and target-output ids, EOS included).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import emit


def stage(
    name: str,
    seconds: float,
    examples: int,
    src_tokens: int | None = None,
    tgt_tokens: int | None = None,
) -> dict:
    row = {
        "stage": name,
        "seconds": round(seconds, 3),
        "examples": examples,
        "examples_per_second": round(examples / seconds, 1),
    }
    if src_tokens is not None:
        row.update(src_tokens=src_tokens, tgt_tokens=tgt_tokens)
        row["src_tokens_per_second"] = round(src_tokens / seconds, 1)
        row["tgt_tokens_per_second"] = round(tgt_tokens / seconds, 1)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pairs", type=int, default=1_000_000, help="generated pairs (without --src/--tgt)"
    )
    parser.add_argument("--src", type=Path, default=None)
    parser.add_argument("--tgt", type=Path, default=None)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--tokenizer-sample", type=int, default=100_000)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--examples-per-shard", type=int, default=100_000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if (args.src is None) != (args.tgt is None):
        parser.error("give both --src and --tgt, or neither (generated pairs).")

    import tensorflow as tf

    from keras_transformer.data import (
        PairSource,
        count_tokens,
        generate_pairs,
        make_dataset,
        prepare_shards,
        sharded_dataset,
    )
    from keras_transformer.tokenization import SubwordTokenizer, train_tokenizers

    if args.src is None:
        pairs = generate_pairs(args.pairs, seed=0)
        corpus = f"generate_pairs({args.pairs}, seed=0)"
    else:
        text = PairSource.from_text_files(args.src, args.tgt).read()
        pairs = list(zip(text.sources, text.targets))
        corpus = f"{args.src} / {args.tgt}"
    limits = dict(max_src_length=args.max_length, max_tgt_length=args.max_length - 1)
    batching = dict(batch_tokens=args.batch_tokens, shuffle_buffer=10_000, seed=0)

    with tempfile.TemporaryDirectory(prefix="input-pipeline-") as scratch:
        started = time.perf_counter()
        sample = pairs[: args.tokenizer_sample]
        src_path, _ = train_tokenizers(
            [s for s, _ in sample],
            [t for _, t in sample],
            Path(scratch) / "spm",
            vocab_size=args.vocab,
            shared=True,
        )
        tokenizer = SubwordTokenizer.from_file(src_path)
        tokenizer_seconds = time.perf_counter() - started
        dataset = PairSource.from_pairs(pairs).dataset()

        started = time.perf_counter()
        counts = count_tokens(
            make_dataset(dataset, tokenizer, tokenizer, **limits, **batching, cache=False)
        )
        results = [
            stage(
                "text",
                time.perf_counter() - started,
                counts.sentences,
                counts.src_tokens,
                counts.tgt_tokens,
            )
        ]

        started = time.perf_counter()
        prepared = prepare_shards(
            dataset,
            tokenizer,
            tokenizer,
            Path(scratch) / "prepared",
            **limits,
            examples_per_shard=args.examples_per_shard,
            seed=0,
        )
        results.append(stage("prepare", time.perf_counter() - started, prepared.examples))

        started = time.perf_counter()
        counts = count_tokens(sharded_dataset(prepared, **batching))
        results.append(
            stage(
                "shards",
                time.perf_counter() - started,
                counts.sentences,
                counts.src_tokens,
                counts.tgt_tokens,
            )
        )
        shard_bytes = sum(path.stat().st_size for path in prepared.paths)

    print(
        f"{'stage':<8} {'seconds':>9} {'examples':>10} {'examples/s':>12} {'src tok/s':>12} "
        f"{'tgt tok/s':>12}"
    )
    for row in results:
        tokens = "".join(
            f" {row[key]:>12,.0f}" if key in row else f" {'-':>12}"
            for key in ("src_tokens_per_second", "tgt_tokens_per_second")
        )
        print(
            f"{row['stage']:<8} {row['seconds']:>9.2f} {row['examples']:>10,} "
            f"{row['examples_per_second']:>12,.0f}{tokens}"
        )
    emit(
        {
            "benchmark": "input_pipeline",
            "corpus": corpus,
            "pairs": len(pairs),
            "vocab": tokenizer.vocab_size,
            "batch_tokens": args.batch_tokens,
            "max_length": args.max_length,
            "tokenizer_seconds": round(tokenizer_seconds, 1),
            "shards": len(prepared.files),
            "shard_megabytes": round(shard_bytes / 2**20, 1),
            "dropped_too_long": prepared.dropped_too_long,
            "tensorflow": tf.__version__,
            "results": results,
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
