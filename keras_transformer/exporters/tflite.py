"""The translator as a TFLite model with builtin ops only.

The model takes token ids for one sentence, ``source_ids`` int32
``[1, max_src_length]`` (subword ids + EOS, padded with the config's
``pad_id``, 0 in the paper's layout: that of
``keras_transformer.data.encode_sources``), and returns ``target_ids`` int32
``[1, max_tgt_length + 1]`` (the target, EOS, then ``pad_id``). Decoding is greedy
inside a ``tf.while_loop`` over a fixed-size KV cache written in place, and
stops at EOS: no Flex delegate (SELECT_TF_OPS) is needed, so any stock LiteRT
runtime runs it (``ai_edge_litert.interpreter.Interpreter``, the ``[tflite]``
extra). Tokenize on the device with the SentencePiece model of the run.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import tensorflow as tf

from keras_transformer.decoding import DecodeOptions, KernelChoice, decode
from keras_transformer.exporters.saved_model import attach_model
from keras_transformer.files import write_atomically
from keras_transformer.progress import progress_bar
from keras_transformer.workdir import as_trained_model

log = logging.getLogger(__name__)
QUANTIZATIONS = ("dynamic",)


class TFLiteTranslator(tf.Module):
    """The ``tf.Module`` that ``export_tflite`` converts: batch-1 greedy decoding over ids.

    Args:
        model: a ``keras_transformer.Transformer``.
        max_src_length: the input width.
        max_tgt_length: the output width.
    """

    def __init__(self, model, max_src_length: int, max_tgt_length: int):
        super().__init__(name="tflite_translator")
        attach_model(self, model)
        self.max_src_length = int(max_src_length)
        self.max_tgt_length = int(max_tgt_length)

    def signature(self):
        """The ``serving_default`` function: ``source_ids [1, max_src_length]`` → ``target_ids``.

        Returns:
            A ``tf.function`` with a fixed input signature, as the TFLite converter needs it.
        """

        @tf.function(
            input_signature=[tf.TensorSpec([1, self.max_src_length], tf.int32, name="source_ids")]
        )
        def translate(source_ids):
            out = decode(
                self.model,
                source_ids,
                DecodeOptions(max_length=self.max_tgt_length),
                choice=KernelChoice(static_shapes=True),
            )
            return {"target_ids": out.tokens[:, 0]}

        return translate


def convert(model, max_src_length: int, max_tgt_length: int, quantize: str | None = None) -> bytes:
    """``model`` as TFLite flatbuffer bytes, TFLITE_BUILTINS only.

    Goes through a SavedModel: that is the path on which the converter freezes
    the variables read inside the decoding loop and keeps the signature names.

    Args:
        model: a ``keras_transformer.Transformer`` (float32).
        max_src_length, max_tgt_length: the input and output widths.
        quantize: ``None`` (float32) or ``"dynamic"`` (int8 weights).

    Returns:
        The flatbuffer, with a ``serving_default`` signature (``source_ids``
        → ``target_ids`` of ``max_tgt_length`` ids).

    Raises:
        ValueError: ``quantize`` is not one of ``QUANTIZATIONS``.
    """
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be None or one of {QUANTIZATIONS}, got {quantize!r}.")
    module = TFLiteTranslator(model, max_src_length, max_tgt_length)
    with tempfile.TemporaryDirectory() as directory:
        tf.saved_model.save(module, directory, signatures={"serving_default": module.signature()})
        return _convert_saved_model(directory, quantize)


def _convert_saved_model(directory: str, quantize: str | None) -> bytes:
    converter = tf.lite.TFLiteConverter.from_saved_model(directory)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize == "dynamic":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]  # int8 weights, float activations
    return converter.convert()


def export_tflite(
    source,
    out: str | os.PathLike,
    *,
    quantize: str | None = None,
    max_src_length: int | None = None,
    max_tgt_length: int | None = None,
    progress: bool = False,
) -> Path:
    """Convert ``source`` into the ``.tflite`` file ``out``, written atomically.

    Args:
        source: a ``TrainedModel``, ``Workdir`` or workdir path.
        out: the ``.tflite`` file to write.
        quantize: ``None`` (float32) or ``"dynamic"`` (int8 weights, float activations).
        max_src_length: the input width (default: the length trained on).
        max_tgt_length: the output width (default: the longest target trained on + 1, for EOS).
        progress: show a progress bar (needs ``tqdm``).

    Returns:
        ``out``, as a ``Path``.

    Raises:
        ValueError: ``quantize`` is not one of ``QUANTIZATIONS``, or ``out``
            is a directory.

    Example::

        from keras_transformer.exporters import export_tflite
        export_tflite("runs/demo", "demo.tflite", quantize="dynamic")
    """
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be None or one of {QUANTIZATIONS}, got {quantize!r}.")
    if Path(out).is_dir():
        raise ValueError(f"{out} is a directory; give the path of the .tflite file to write.")
    with progress_bar(progress, total=2, desc="TFLite", unit="step") as bar:
        bar.set_postfix_str("loading")
        trained = as_trained_model(source, "fp32")  # TFLite builtins: a float32 graph
        bar.update()
        bar.set_postfix_str("converting")
        flatbuffer = convert(
            trained.model,
            max_src_length or trained.max_src_length,
            max_tgt_length or trained.max_tgt_length + 1,
            quantize,
        )
        write_atomically({Path(out): flatbuffer})
        bar.update()
    log.info("wrote %s (%.1f MB)", out, len(flatbuffer) / 1e6)
    return Path(out)
