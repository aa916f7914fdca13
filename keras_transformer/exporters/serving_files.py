"""The files beside an export's graph: tokenizer models, TF Serving's warm-up requests
and an example ``--model_config_file``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

from keras_transformer.tokenization import (
    MARIAN_SOURCE_SPM,
    MARIAN_TARGET_SPM,
    MARIAN_TARGET_VOCAB,
    MARIAN_VOCAB,
    MarianSubwordTokenizer,
    write_marian_tokenizer_files,
)
from keras_transformer.workdir import TrainedModel

WARMUP_SENTENCES = ("Hello world.", "")
SIGNATURE = "serving_default"
INPUT_KEY = "inputs"


def write_tokenizer_files(trained: TrainedModel, directory: Path) -> tuple[Path, Path]:
    """The (source, target) SentencePiece models as files in ``directory``, named as
    in a workdir: ``spm_shared.model`` once for a shared vocabulary, else
    ``spm_src.model`` and ``spm_tgt.model``; for Marian tokenizers the files of
    a Marian checkpoint (``source.spm``, ``target.spm``, and ``vocab.json``,
    see ``vocabulary_files``)."""
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(trained.src_tokenizer, MarianSubwordTokenizer):
        paths = write_marian_tokenizer_files(
            trained.src_tokenizer, trained.tgt_tokenizer, directory
        )
        return paths[MARIAN_SOURCE_SPM], paths[MARIAN_TARGET_SPM]
    if trained.shared_tokenizer_model:
        path = directory / "spm_shared.model"
        path.write_bytes(trained.src_tokenizer.model_bytes)
        return path, path
    src, tgt = directory / "spm_src.model", directory / "spm_tgt.model"
    src.write_bytes(trained.src_tokenizer.model_bytes)
    tgt.write_bytes(trained.tgt_tokenizer.model_bytes)
    return src, tgt


def vocabulary_files(directory: Path) -> dict[str, Path]:
    """The Marian vocabularies ``write_tokenizer_files`` wrote into ``directory``
    (none for SentencePiece-numbered tokenizers), ``{file name: path}``."""
    return {
        name: directory / name
        for name in (MARIAN_VOCAB, MARIAN_TARGET_VOCAB)
        if (directory / name).is_file()
    }


# TF Serving's warm-up file holds PredictionLog protos. They are encoded here
# from their field numbers (tensorflow_serving/apis/*.proto), so that an export
# needs no tensorflow-serving-api, which would pull the plain tensorflow
# distribution onto a TPU machine. tests/test_export.py checks the bytes
# against tensorflow-serving-api's own classes.
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings, bytes, messages."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def predict_request_bytes(
    sentences: Sequence[str], model_name: str, signature_name: str = SIGNATURE
) -> bytes:
    """A serialized ``tensorflow.serving.PredictRequest`` for ``serving_default``."""
    model_spec = _field(1, model_name.encode("utf-8")) + _field(3, signature_name.encode("utf-8"))
    tensor = tf.make_tensor_proto(list(sentences), dtype=tf.string).SerializeToString()
    inputs_entry = _field(1, INPUT_KEY.encode("utf-8")) + _field(
        2, tensor
    )  # map<string, TensorProto>
    return _field(1, model_spec) + _field(2, inputs_entry)


def warmup_record(sentences: Sequence[str], model_name: str) -> bytes:
    """A serialized ``PredictionLog`` whose ``predict_log.request`` is the request above."""
    predict_log = _field(1, predict_request_bytes(sentences, model_name))
    return _field(6, predict_log)


def write_warmup_requests(export_dir: Path, sentences: Sequence[str], model_name: str) -> None:
    """TF Serving replays these at load time, so the first user request does not pay for tracing."""
    extra = Path(export_dir) / "assets.extra"
    extra.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(extra / "tf_serving_warmup_requests")) as writer:
        writer.write(warmup_record(sentences, model_name))


def models_config(name: str) -> str:
    """A ``--model_config_file`` for tensorflow_model_server, with the model folder
    mounted at ``/models/NAME`` in the container."""
    return (
        "model_config_list {\n"
        "  config {\n"
        f'    name: "{name}"\n'
        f'    base_path: "/models/{name}"  # this folder, mounted into the server\'s container\n'
        '    model_platform: "tensorflow"\n'
        "  }\n"
        "}\n"
    )
