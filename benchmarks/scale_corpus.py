"""Generate a large parallel text corpus for the scale check (``benchmarks/scale_check.py``).

    python -m benchmarks.scale_corpus OUT_DIR [--pairs 4500000] [--seed 0] [--source DIR]

Each generated pair joins the beginning of one training pair of ``--source``
(default: the ``multi30k`` config's ``data.dir``) to the end of another: the
source side cuts both German sentences at the same fraction of their words,
the target side both English ones, so the lengths, the words and their
frequencies stay those of the real corpus (what SentencePiece and the batcher
see) while almost every pair is new. With Multi30k and the default 4.5M pairs
that is about 330 MB of source and 280 MB of target text (~73 and ~62
characters a line). ``valid`` and ``test`` are copies of the source's.
``OUT_DIR`` is written whole or not at all (built beside it, then renamed);
it must lie outside the checkout, which must not hold corpora.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
from pathlib import Path

import yaml

CHECKOUT = Path(__file__).resolve().parent.parent
SPLITS = ("valid", "test")
CHUNK = 100_000  # pairs generated and written at a time


def default_source() -> Path:
    config = yaml.safe_load(
        (CHECKOUT / "training" / "configs" / "multi30k.yaml").read_text(encoding="utf-8")
    )
    return (CHECKOUT / config["data"]["dir"]).resolve()


def _words(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text(encoding="utf-8").split("\n")[:-1]]


def recombined_pairs(src_words: list[list[str]], tgt_words: list[list[str]], count: int, seed: int):
    """``count`` pairs, each the head of one source pair joined to the tail of another.

    Yields lists of ``(source, target)`` lines, ``CHUNK`` pairs at a time.
    """
    rng = random.Random(seed)
    n = len(src_words)
    made = 0
    while made < count:
        chunk = []
        for _ in range(min(CHUNK, count - made)):
            a, b = rng.randrange(n), rng.randrange(n)
            cut = rng.random()
            sides = []
            for words in (src_words, tgt_words):
                head, tail = words[a], words[b]
                joined = head[: round(cut * len(head))] + tail[round(cut * len(tail)) :]
                sides.append(" ".join(joined) if joined else " ".join(head))
            chunk.append((sides[0], sides[1]))
        made += len(chunk)
        yield chunk


def generate(out_dir: Path, pairs: int, seed: int, source: Path) -> dict:
    """Write ``out_dir/{train,valid,test}.{src,tgt}``; returns line and byte counts."""
    from keras_transformer.files import replace_directory, staging_directory

    src_words, tgt_words = _words(source / "train.src"), _words(source / "train.tgt")
    if len(src_words) != len(tgt_words) or not src_words:
        raise ValueError(f"{source}/train.src and train.tgt must be non-empty and aligned.")
    staging = staging_directory(out_dir)
    try:
        with (
            open(staging / "train.src", "w", encoding="utf-8") as src,
            open(staging / "train.tgt", "w", encoding="utf-8") as tgt,
        ):
            for chunk in recombined_pairs(src_words, tgt_words, pairs, seed):
                src.write("".join(s + "\n" for s, _ in chunk))
                tgt.write("".join(t + "\n" for _, t in chunk))
        for split in SPLITS:
            for side in ("src", "tgt"):
                if (source / f"{split}.{side}").exists():
                    shutil.copyfile(source / f"{split}.{side}", staging / f"{split}.{side}")
        replace_directory(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {
        "pairs": pairs,
        "seed": seed,
        "source": str(source),
        "train_src_bytes": (out_dir / "train.src").stat().st_size,
        "train_tgt_bytes": (out_dir / "train.tgt").stat().st_size,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--pairs", type=int, default=4_500_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--source", type=Path, default=None, help="folder with train/valid/test .src/.tgt"
    )
    args = parser.parse_args(argv)
    source = args.source or default_source()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1.")
    if not (source / "train.src").is_file():
        parser.error(f"--source {source} has no train.src.")
    out_dir = args.out_dir.resolve()
    if out_dir == CHECKOUT or CHECKOUT in out_dir.parents:
        parser.error(
            f"{out_dir} is inside the checkout; write the corpus elsewhere (e.g. /tmp/big_corpus)."
        )
    report = generate(out_dir, args.pairs, args.seed, source)
    print(
        f"wrote {args.pairs:,} pairs to {out_dir} ({report['train_src_bytes'] / 1e6:.0f} MB "
        "source, "
        f"{report['train_tgt_bytes'] / 1e6:.0f} MB target)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
