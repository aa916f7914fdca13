"""Export a trained workdir as a TF Serving SavedModel:
``python -m export.saved_model --workdir runs/demo --out exports/demo [--version 1] [--beam 4]``.

Writes ``OUT/<version>/`` (the layout TF Serving watches) atomically: the model
is saved to a temporary folder beside it and renamed; an existing version is
never overwritten unless ``--overwrite`` is given. Includes
``assets.extra/tf_serving_warmup_requests`` and, one level up, an example
``models.config``.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import tensorflow as tf

from export.serving import ExportedTranslator
from keras_transformer.files import write_text_atomically
from keras_transformer.tokenization import tokenizer_paths
from training.config import PRECISIONS
from training.evaluate import load_workdir

log = logging.getLogger("export")
WARMUP_SENTENCES = ("Hello world.", "")


def export_saved_model(workdir: Path, out: Path, version: int | None = None, beam_size: int = 4,
                       alpha: float = 0.6, overwrite: bool = False,
                       warmup_sentences: Sequence[str] = WARMUP_SENTENCES, precision: str = "fp32") -> Path:
    """Export and return ``out/<version>``. ``version`` defaults to the next integer.

    ``precision`` is the exported graph's compute precision: fp32 runs on every
    server; bf16 is faster only on hardware with bf16 units (AVX512-BF16/AMX, TPU, GPU).
    """
    model, src_tok, tgt_tok, config = load_workdir(workdir, precision)
    out.mkdir(parents=True, exist_ok=True)
    if version is None:
        existing = [int(p.name) for p in out.iterdir() if p.is_dir() and p.name.isdigit()]
        version = max(existing, default=0) + 1
    target = out / str(version)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} exists; pass --overwrite or another --version.")
    src_path, tgt_path = tokenizer_paths(workdir / "tokenizer", config["tokenizer"].get("shared", True))
    module = ExportedTranslator(
        model, src_tok, tgt_tok, max_src_length=config["training"]["max_src_length"],
        beam_size=beam_size, alpha=alpha, src_model_path=src_path, tgt_model_path=tgt_path,
    )
    staging = Path(tempfile.mkdtemp(dir=out, prefix=f".tmp-{version}-"))
    try:
        tf.saved_model.save(module, str(staging), signatures={
            "serving_default": module.translate,
            "translate_greedy": module.translate_greedy,
            "translate_ids": module.translate_ids,
            "cross_attention": module.cross_attention,
        })
        write_warmup_requests(staging, warmup_sentences)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_text_atomically(out / "models.config", models_config(out.name, out.resolve()))
    log.info("exported %s", target)
    return target


def write_warmup_requests(export_dir: Path, sentences: Sequence[str]) -> None:
    """TF Serving replays these at load time so the first user request does not pay for tracing."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=export_dir.name, signature_name="serving_default"))
    request.inputs["inputs"].CopyFrom(tf.make_tensor_proto(list(sentences), dtype=tf.string))
    log_entry = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
    extra = export_dir / "assets.extra"
    extra.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(extra / "tf_serving_warmup_requests")) as writer:
        writer.write(log_entry.SerializeToString())


def models_config(name: str, base_path: Path) -> str:
    """A ``--model_config_file`` for tensorflow_model_server (paths as seen inside the container
    if you mount the export folder at /models/NAME)."""
    return (
        "model_config_list {\n"
        "  config {\n"
        f"    name: \"{name}\"\n"
        f"    base_path: \"/models/{name}\"  # host folder: {base_path}\n"
        "    model_platform: \"tensorflow\"\n"
        "  }\n"
        "}\n"
    )


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True, type=Path, help="a training.train workdir")
    parser.add_argument("--out", required=True, type=Path, help="model folder; versions go below it")
    parser.add_argument("--version", type=int, default=None, help="default: next free integer")
    parser.add_argument("--beam", type=int, default=4, help="beam size fixed in the export (1 = greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty exponent")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing version")
    parser.add_argument("--precision", choices=sorted(PRECISIONS), default="fp32",
                        help="compute precision of the exported graph (weights are float32 either way)")
    args = parser.parse_args(argv)
    try:
        path = export_saved_model(args.workdir, args.out, args.version, args.beam, args.alpha, args.overwrite,
                                  precision=args.precision)
    except (FileExistsError, ValueError) as error:
        parser.error(str(error))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
