"""A full-size OPUS-MT checkpoint through the programs: import, export, and the
PyTorch model's logits against ours.

    python -m benchmarks.pretrained_import [--layers 6] [--d-model 512] [--vocab 58101] \
        [--json out.json]

No hub is reachable here, so the checkpoint is made the way ``save_pretrained``
writes a real one, with the shape of Helsinki-NLP/opus-mt-de-en by default (6+6
layers, d_model 512, 8 heads, d_ff 2048, a 58,101-piece vocabulary, swish, pad =
the last id): a randomly initialised ``MarianMTModel`` (needs ``torch`` and
``transformers``) and a tokenizer whose SentencePiece models are trained on the
demo language pair, its ``vocab.json`` filled up to the vocabulary size. Then
each program runs in its own process, as a user runs it, with its wall time and
peak RSS (``ru_maxrss``):

1. ``training.import_checkpoint marian`` (the weights read with NumPy);
2. ``export.saved_model`` (beam 4) and the SavedModel's size;
3. ``export.tflite`` (source 64, target 64 subwords) and the file's size;
4. ``export.ctranslate2`` (float32).

Last, the largest difference between our teacher-forced logits and PyTorch's on
a padded batch of random ids, in float32.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.report import emit
from benchmarks.scale_check import measure

CHECKOUT = Path(__file__).resolve().parent.parent


def _size_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / 1e6, 1)


def write_checkpoint(
    directory: Path,
    layers: int,
    d_model: int,
    heads: int,
    d_ff: int,
    vocab_size: int,
    seed: int = 0,
) -> None:
    """A random Marian checkpoint of the given sizes, written by ``save_pretrained``."""
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    from keras_transformer.data import generate_pairs

    directory.mkdir(parents=True)
    pairs = generate_pairs(2000, seed=seed)
    raw = directory / "raw"
    raw.mkdir()
    pieces = ["</s>", "<unk>"]
    for side, sentences in (("source", [s for s, _ in pairs]), ("target", [t for _, t in pairs])):
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_prefix=str(raw / side),
            vocab_size=500,
            model_type="unigram",
            hard_vocab_limit=False,
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=-1,
            minloglevel=2,
        )
        model = spm.SentencePieceProcessor(model_file=str(raw / f"{side}.model"))
        pieces += [
            model.id_to_piece(i)
            for i in range(model.get_piece_size())
            if not (model.is_control(i) or model.is_unknown(i))
        ]
    pieces = list(dict.fromkeys(pieces))
    pieces += [f"\u2581filler{i}" for i in range(vocab_size - 1 - len(pieces))] + ["<pad>"]
    (raw / "vocab.json").write_text(
        json.dumps({piece: i for i, piece in enumerate(pieces)}), encoding="utf-8"
    )
    MarianTokenizer(
        source_spm=str(raw / "source.model"),
        target_spm=str(raw / "target.model"),
        vocab=str(raw / "vocab.json"),
    ).save_pretrained(str(directory))
    for path in raw.iterdir():
        path.unlink()
    raw.rmdir()
    torch.manual_seed(seed)
    pad = vocab_size - 1
    config = MarianConfig(
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=d_ff,
        decoder_ffn_dim=d_ff,
        max_position_embeddings=512,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
    )
    model = MarianMTModel(config)
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.1)
    model.save_pretrained(str(directory))


def logits_difference(checkpoint: Path, workdir: Path, vocab_size: int, seed: int = 0) -> float:
    """The largest |ours − PyTorch's| teacher-forced logit, at the positions that are
    not padding, on a batch of 4 random sentences of 5 to 30 ids."""
    import tensorflow as tf
    import torch
    from transformers import MarianMTModel

    from keras_transformer import Workdir

    rng = np.random.default_rng(seed)
    pad = vocab_size - 1
    lengths = [30, 17, 9, 5]
    sources = np.full((4, 30), pad, np.int32)
    targets = np.full((4, 30), pad, np.int32)
    for row, length in enumerate(lengths):
        sources[row, :length] = np.append(rng.integers(2, pad, length - 1), 0)
        targets[row, 1:length] = rng.integers(2, pad, length - 1)
    theirs = MarianMTModel.from_pretrained(str(checkpoint)).eval()
    with torch.no_grad():
        expected = theirs(
            input_ids=torch.tensor(sources, dtype=torch.long),
            attention_mask=torch.tensor(sources != pad),
            decoder_input_ids=torch.tensor(targets, dtype=torch.long),
        ).logits.numpy()
    ours = (
        Workdir(workdir)
        .load_model()((tf.constant(sources), tf.constant(targets)), training=False)
        .numpy()
    )
    return float(
        max(
            np.abs(ours[row, :length] - expected[row, :length]).max()
            for row, length in enumerate(lengths)
        )
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--d-ff", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=58101)
    parser.add_argument(
        "--work", type=Path, default=None, help="keep the files here (default: a temp folder)"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="pretrained_import_"))
    checkpoint, workdir = work / "checkpoint", work / "run"
    started = time.monotonic()
    write_checkpoint(checkpoint, args.layers, args.d_model, args.heads, args.d_ff, args.vocab)
    made = time.monotonic() - started
    python = [sys.executable, "-m"]
    steps = {
        "import": [
            *python,
            "training.import_checkpoint",
            "marian",
            str(checkpoint),
            "--workdir",
            str(workdir),
        ],
        "saved_model": [
            *python,
            "export.saved_model",
            "--workdir",
            str(workdir),
            "--out",
            str(work / "export"),
            "--version",
            "1",
            "--beam",
            "4",
        ],
        "tflite": [
            *python,
            "export.tflite",
            "--workdir",
            str(workdir),
            "--out",
            str(work / "model.tflite"),
            "--max-src-length",
            "64",
            "--max-tgt-length",
            "64",
        ],
        "ctranslate2": [
            *python,
            "export.ctranslate2",
            "--workdir",
            str(workdir),
            "--out",
            str(work / "ct2"),
        ],
    }
    results = {}
    for name, command in steps.items():
        run = measure(command, work / f"{name}.log")
        if run["returncode"]:
            sys.stderr.write((work / f"{name}.log").read_text(errors="replace")[-3000:])
            raise SystemExit(f"{name} failed: see {work / f'{name}.log'}")
        results[name] = {"wall_seconds": run["wall_seconds"], "max_rss_mb": run["max_rss_mb"]}
    sizes = {
        "safetensors": _size_mb(checkpoint / "model.safetensors"),
        "model.keras": _size_mb(workdir / "model.keras"),
        "saved_model": _size_mb(work / "export" / "1"),
        "tflite": _size_mb(work / "model.tflite"),
        "ctranslate2": _size_mb(work / "ct2"),
    }
    for name, size in zip(
        ("import", "saved_model", "tflite", "ctranslate2"),
        ("model.keras", "saved_model", "tflite", "ctranslate2"),
    ):
        results[name]["output_mb"] = sizes[size]
    difference = logits_difference(checkpoint, workdir, args.vocab)
    report = {
        "benchmark": "pretrained_import",
        "shape": {
            "layers": args.layers,
            "d_model": args.d_model,
            "heads": args.heads,
            "d_ff": args.d_ff,
            "vocab": args.vocab,
        },
        "checkpoint_mb": sizes["safetensors"],
        "checkpoint_seconds": round(made, 1),
        "steps": results,
        "max_abs_logit_difference": difference,
        "work": str(work),
    }
    print(
        f"checkpoint {sizes['safetensors']} MB ({args.layers}+{args.layers} layers, d_model "
        f"{args.d_model}, "
        f"vocabulary {args.vocab})",
        file=sys.stderr,
    )
    print(f"{'step':<12} {'seconds':>8} {'peak RSS MB':>12} {'output MB':>10}", file=sys.stderr)
    for name, result in results.items():
        print(
            f"{name:<12} {result['wall_seconds']:>8} {result['max_rss_mb']:>12} "
            f"{result['output_mb']:>10}",
            file=sys.stderr,
        )
    print(f"largest |logit difference| against PyTorch: {difference:.2e}", file=sys.stderr)
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.exit(main())
