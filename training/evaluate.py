"""Score a model on a test file:

    python -m training.evaluate --workdir DIR --src FILE --ref FILE [--beam 4]
    python -m training.evaluate --saved-model EXPORT_DIR/1 --src FILE --ref FILE

Greedy or beam decoding; BLEU and chrF with sacrebleu (cased, 13a,
detokenized) and exact match, printed and written to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import keras
import yaml

import keras_transformer as kt
from keras_transformer.data import read_text_file_pairs
from keras_transformer.files import write_text_atomically
from keras_transformer.hardware import cpu_record
from keras_transformer.tokenization import SubwordTokenizer, tokenizer_paths
from keras_transformer.translate import Translator
from training.config import PRECISIONS
from training.scoring import score_translations


def load_workdir(workdir: Path, precision: str | None = "fp32"):
    """The trained model and its tokenizers from a ``training.train`` workdir.

    ``precision`` is the compute precision of the returned model (``fp32``,
    ``bf16``, ``fp16``; ``None`` keeps the one it was trained in). fp32 is the
    default because a model trained under ``mixed_bfloat16`` keeps float32
    weights and every runtime runs float32 (TFLite builtins, CPUs without bf16
    units), while a bf16 graph would not convert to TFLite at all.
    """
    model_path = workdir / "model.keras"
    if not model_path.exists():
        raise ValueError(f"{model_path} not found: train first (python -m training.train ...).")
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    src, tgt = tokenizer_paths(workdir / "tokenizer", config["tokenizer"].get("shared", True))
    model = keras.models.load_model(model_path)
    if precision is not None:
        model = with_precision(model, precision)
    return model, SubwordTokenizer.from_file(src), SubwordTokenizer.from_file(tgt), config


def with_precision(model: kt.Transformer, precision: str) -> kt.Transformer:
    """``model`` computing in ``precision``: the same weights in a rebuilt model."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: use one of {sorted(PRECISIONS)}.")
    policy = PRECISIONS[precision]
    if model.dtype_policy.name == policy:
        return model
    rebuilt = kt.Transformer(model.config, dtype=policy, name=model.name)
    rebuilt.build()
    rebuilt.set_weights(model.get_weights())
    return rebuilt


def translate_with_saved_model(export_dir: Path, sources: list[str], beam: int | None,
                               batch_size: int) -> tuple[list[str], str]:
    """Translations from an exported SavedModel (``python -m export.saved_model``)."""
    import tensorflow as tf

    from export.translate import translate_lines

    model = tf.saved_model.load(str(export_dir))
    exported_beam = int(model.beam_size_tensor.numpy())
    if beam not in (None, 1, exported_beam):
        raise ValueError(f"--beam {beam}: {export_dir} decodes with beam {exported_beam}; use --beam 1 "
                         f"(greedy) or {exported_beam}, or re-export with --beam {beam}.")
    greedy = beam == 1 or exported_beam == 1
    hypotheses = list(translate_lines(model, sources, greedy=greedy, batch_size=batch_size, progress=False))
    return hypotheses, "greedy" if greedy else f"beam{exported_beam}"


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    model_source = parser.add_mutually_exclusive_group(required=True)
    model_source.add_argument("--workdir", type=Path, help="a training.train workdir")
    model_source.add_argument("--saved-model", type=Path, help="an export version folder (exports/NAME/1)")
    parser.add_argument("--src", required=True, type=Path, help="source sentences, one per line")
    parser.add_argument("--ref", required=True, type=Path, help="reference translations, aligned")
    parser.add_argument("--beam", type=int, default=None,
                        help="beam size (workdir: default 1 = greedy; SavedModel: default the exported beam)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty exponent for beam search")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON output (default WORKDIR/eval.json or SAVED_MODEL/../eval.json)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precision", choices=sorted(PRECISIONS), default="fp32",
                        help="workdir: compute precision of the model (the SavedModel has its own)")
    args = parser.parse_args(argv)

    text = read_text_file_pairs(args.src, args.ref)
    sources = list(text.sources)
    if args.saved_model:
        try:
            hypotheses, decoding = translate_with_saved_model(args.saved_model, sources, args.beam,
                                                              args.batch_size)
        except ValueError as error:
            parser.error(str(error))
        out = args.out or args.saved_model.parent / "eval.json"
    else:
        model, src_tok, tgt_tok, config = load_workdir(args.workdir, args.precision)
        beam = args.beam or 1
        translator = Translator(model, src_tok, tgt_tok, max_src_length=config["training"]["max_src_length"],
                                beam_size=beam, alpha=args.alpha)
        hypotheses = translator.translate(sources, batch_size=args.batch_size)
        decoding = "greedy" if beam == 1 else f"beam{beam}"
        out = args.out or args.workdir / "eval.json"
    scores = score_translations(hypotheses, list(text.targets))
    scores.update({"src": str(args.src), "ref": str(args.ref), "decoding": decoding, "cpu": cpu_record()})
    write_text_atomically(out, json.dumps(scores, indent=2))
    print(json.dumps(scores, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
