"""Convert a trained workdir to a TFLite translator with builtin ops only:
``python -m export.tflite --workdir runs/demo --out demo.tflite [--quantize dynamic]``.

The model takes token ids for one sentence, ``source_ids`` int32
``[1, max_src_length]`` (subword ids + EOS, padded with 0: the layout of
``keras_transformer.data.encode_sources``), and returns ``target_ids`` int32
``[1, max_tgt_length]`` (EOS, then 0). Decoding is greedy inside a
``tf.while_loop`` over a fixed-size KV cache written in place, and stops at
EOS: no Flex delegate (SELECT_TF_OPS) is needed, so any stock LiteRT runtime
runs it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import tensorflow as tf

from export.serving import raw_variables
from keras_transformer.decoding import greedy_decode
from keras_transformer.files import write_atomically
from training.evaluate import load_workdir

log = logging.getLogger("export")


class TFLiteTranslator(tf.Module):
    def __init__(self, model, max_src_length: int, max_tgt_length: int):
        super().__init__(name="tflite_translator")
        self.model = model
        self.model_variables = raw_variables(model)
        self.max_src_length = int(max_src_length)
        self.max_tgt_length = int(max_tgt_length)

    def signature(self):
        @tf.function(input_signature=[tf.TensorSpec([1, self.max_src_length], tf.int32, name="source_ids")])
        def translate(source_ids):
            tokens, _ = greedy_decode(self.model, source_ids, max_length=self.max_tgt_length,
                                      static_shapes=True)
            return {"target_ids": tokens}

        return translate


def convert(model, max_src_length: int, max_tgt_length: int, quantize: str | None = None) -> bytes:
    """TFLite flatbuffer bytes (TFLITE_BUILTINS only), with a ``serving_default``
    signature (``source_ids`` → ``target_ids``).

    Goes through a SavedModel: that is the path on which the converter freezes
    the variables read inside the decoding loop and keeps the signature names.
    """
    module = TFLiteTranslator(model, max_src_length, max_tgt_length)
    with tempfile.TemporaryDirectory() as directory:
        tf.saved_model.save(module, directory, signatures={"serving_default": module.signature()})
        return _convert_saved_model(directory, quantize)


def _convert_saved_model(directory: str, quantize: str | None) -> bytes:
    converter = tf.lite.TFLiteConverter.from_saved_model(directory)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize == "dynamic":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]  # int8 weights, float activations
    elif quantize is not None:
        raise ValueError(f"quantize must be None or 'dynamic', got {quantize!r}.")
    return converter.convert()


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--quantize", choices=["dynamic"], default=None,
                        help="dynamic-range int8 weights")
    parser.add_argument("--max-src-length", type=int, default=None, help="default: training.max_src_length")
    parser.add_argument("--max-tgt-length", type=int, default=None,
                        help="default: training.max_tgt_length + 1 (room for EOS)")
    args = parser.parse_args(argv)
    model, _, _, config = load_workdir(args.workdir, "fp32")  # TFLite builtins: float32 graph
    max_src = args.max_src_length or config["training"]["max_src_length"]
    max_tgt = args.max_tgt_length or config["training"]["max_tgt_length"] + 1
    flatbuffer = convert(model, max_src, max_tgt, args.quantize)
    write_atomically({args.out: flatbuffer})
    log.info("wrote %s (%.1f MB)", args.out, len(flatbuffer) / 1e6)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
