"""Score a trained workdir on a test file: ``python -m training.evaluate --workdir DIR --src FILE --ref FILE``.

Greedy decoding; BLEU and chrF with sacrebleu (cased, 13a, detokenized) and
exact match, printed and written to ``--out`` (default ``DIR/eval.json``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import keras
import yaml

import keras_transformer  # noqa: F401  (registers the classes load_model needs)
from keras_transformer.data import read_text_file_pairs
from keras_transformer.files import write_text_atomically
from keras_transformer.tokenization import SubwordTokenizer, tokenizer_paths
from keras_transformer.translate import Translator
from training.scoring import score_translations


def load_workdir(workdir: Path):
    """The trained model and its tokenizers from a ``training.train`` workdir."""
    model_path = workdir / "model.keras"
    if not model_path.exists():
        raise ValueError(f"{model_path} not found: train first (python -m training.train ...).")
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    src, tgt = tokenizer_paths(workdir / "tokenizer", config["tokenizer"].get("shared", True))
    model = keras.models.load_model(model_path)
    return model, SubwordTokenizer.from_file(src), SubwordTokenizer.from_file(tgt), config


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--src", required=True, type=Path, help="source sentences, one per line")
    parser.add_argument("--ref", required=True, type=Path, help="reference translations, aligned")
    parser.add_argument("--out", type=Path, default=None, help="JSON output (default WORKDIR/eval.json)")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)

    model, src_tok, tgt_tok, config = load_workdir(args.workdir)
    text = read_text_file_pairs(args.src, args.ref)
    translator = Translator(model, src_tok, tgt_tok, max_src_length=config["training"]["max_src_length"])
    hypotheses = translator.translate(list(text.sources), batch_size=args.batch_size)
    scores = score_translations(hypotheses, list(text.targets))
    scores.update({"src": str(args.src), "ref": str(args.ref), "decoding": "greedy"})
    out = args.out or args.workdir / "eval.json"
    write_text_atomically(out, json.dumps(scores, indent=2))
    print(json.dumps(scores, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
