"""The translator as a TFLite model with builtin ops only.

The model takes token ids for one sentence, ``source_ids`` int32
``[1, max_src_length]`` (subword ids + EOS, padded with the config's
``pad_id``, 0 in the paper's layout: that of
``keras_transformer.data.encode_sources``), and returns ``target_ids`` int32
``[1, max_tgt_length + 1]`` (the target, EOS, then ``pad_id``). Decoding is greedy
(the default) or a beam search of ``beam`` hypotheses with the length penalty
``alpha`` (``export_tflite(..., beam=4)``: the best hypothesis comes out, the
signature is the same), inside a ``tf.while_loop`` over a fixed-size KV cache
written in place (a row a beam), and stops at EOS, or once the beam search is
done: no Flex delegate (SELECT_TF_OPS) is needed, so any stock LiteRT runtime
runs it (``ai_edge_litert.interpreter.Interpreter``, the ``[tflite]`` extra).
The search is the library's (``decoding.decode`` with static shapes), so a
file gives the ids of ``Translator`` and the SavedModel with the same search
(within its output width).
Tokenize on the device with the SentencePiece model of the run;
``LiteRTTranslator`` runs such a file on the host, text in and text out.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_transformer.data.normalize import normalize_whitespace_tf
from keras_transformer.data.sequences import encode_sources
from keras_transformer.decoding import Beam, Greedy, KernelChoice, Limits, Search, decode
from keras_transformer.exporters.signatures import attach_model, export_options
from keras_transformer.files import write_atomically
from keras_transformer.progress import progress_bar
from keras_transformer.workdir import Workdir, as_trained_model

log = logging.getLogger(__name__)
QUANTIZATIONS = ("dynamic",)
# The name of the file's metadata entry that records a beam search (a greedy file has none):
# JSON {"beam": size, "alpha": ..., "stopping": ...}, read by LiteRTTranslator.
SEARCH_METADATA = "keras_transformer.search"


def tflite_search(beam: int | None = None, alpha: float | None = None) -> Search:
    """The search of a ``.tflite`` translator: greedy, or a beam of ``beam`` hypotheses.

    Args:
        beam: the beam size; ``None`` or 1: greedy decoding.
        alpha: the beam search's length penalty exponent (default: the
            SavedModel's, ``Beam().alpha``); given only with ``beam``.

    Returns:
        ``Greedy()`` or ``Beam(beam, alpha)`` (the SavedModel's stopping rule).

    Raises:
        ValueError: ``beam`` below 1, ``alpha`` not a finite number, or
            ``alpha`` without ``beam``.

    Example:
        >>> tflite_search(), tflite_search(beam=4)
        (Greedy(), Beam(size=4, alpha=0.6, stopping='heuristic'))
    """
    if beam is None:
        if alpha is not None:
            raise ValueError(
                f"alpha={alpha} is the beam search's length penalty: give beam=N as well "
                "(greedy decoding has none)."
            )
        return Greedy()
    fields = {"beam_size": beam} if alpha is None else {"beam_size": beam, "alpha": alpha}
    return export_options(Greedy(), **fields)[0]


class TFLiteTranslator(tf.Module):
    """The ``tf.Module`` that ``export_tflite`` converts: batch-1 decoding over ids.

    Args:
        model: a ``keras_transformer.Transformer``.
        max_src_length: the input width.
        max_tgt_length: the output width.
        search: ``Greedy()`` (the default) or ``Beam(...)``: its best
            hypothesis is the output.

    Raises:
        ValueError: ``search`` is not greedy or a beam (a ``Sample``).
    """

    def __init__(
        self, model, max_src_length: int, max_tgt_length: int, search: Search | None = None
    ):
        super().__init__(name="tflite_translator")
        attach_model(self, model)
        self.max_src_length = int(max_src_length)
        self.max_tgt_length = int(max_tgt_length)
        self.search = search or Greedy()
        if not isinstance(self.search, (Greedy, Beam)):
            raise ValueError(
                f"a .tflite translator decodes greedy or by beam search, got {self.search!r}."
            )

    def signature(self):
        """The ``serving_default`` function: ``source_ids [1, max_src_length]`` → ``target_ids``.

        Returns:
            A ``tf.function`` with a fixed input signature, as the TFLite converter needs it.
        """

        @tf.function(
            input_signature=[tf.TensorSpec([1, self.max_src_length], tf.int32, name="source_ids")],
            autograph=False,
        )
        def translate(source_ids):
            out = decode(
                self.model,
                source_ids,
                self.search,
                Limits(max_length=self.max_tgt_length),
                choice=KernelChoice(static_shapes=True, log_softmax="logsumexp"),
            )
            return {"target_ids": out.tokens[:, 0]}

        return translate


def convert(
    model,
    max_src_length: int,
    max_tgt_length: int,
    quantize: str | None = None,
    search: Search | None = None,
) -> bytes:
    """``model`` as TFLite flatbuffer bytes, TFLITE_BUILTINS only.

    Goes through a SavedModel: that is the path on which the converter freezes
    the variables read inside the decoding loop and keeps the signature names.

    Args:
        model: a ``keras_transformer.Transformer`` (float32).
        max_src_length, max_tgt_length: the input and output widths.
        quantize: ``None`` (float32) or ``"dynamic"`` (int8 weights).
        search: ``Greedy()`` (the default) or ``Beam(...)`` (``tflite_search``).

    Returns:
        The flatbuffer, with a ``serving_default`` signature (``source_ids``
        → ``target_ids`` of ``max_tgt_length`` ids: the best hypothesis).

    Raises:
        ValueError: ``quantize`` is not one of ``QUANTIZATIONS``, or
            ``search`` is not greedy or a beam.
    """
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be None or one of {QUANTIZATIONS}, got {quantize!r}.")
    module = TFLiteTranslator(model, max_src_length, max_tgt_length, search)
    with tempfile.TemporaryDirectory() as directory:
        tf.saved_model.save(module, directory, signatures={"serving_default": module.signature()})
        flatbuffer = _convert_saved_model(directory, quantize)
    if isinstance(module.search, Beam):
        flatbuffer = _with_search_metadata(flatbuffer, module.search)
    return flatbuffer


def _with_search_metadata(flatbuffer: bytes, search: Beam) -> bytes:
    """``flatbuffer`` with a ``SEARCH_METADATA`` entry that records ``search``."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(flatbuffer))
    record = {"beam": search.size, "alpha": search.alpha, "stopping": search.stopping}
    buffer = schema.BufferT()
    buffer.data = json.dumps(record).encode("utf-8")
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name, entry.buffer = SEARCH_METADATA, len(model.buffers) - 1
    model.metadata = [*(model.metadata or []), entry]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def read_search_metadata(flatbuffer: bytes) -> dict | None:
    """The beam search a ``.tflite`` file of ``export_tflite`` records, or ``None`` (greedy).

    Args:
        flatbuffer: the file's bytes.

    Returns:
        ``{"beam": size, "alpha": ..., "stopping": ...}``, or ``None`` for a
        file without the ``SEARCH_METADATA`` entry (a greedy file).
    """
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.Model.GetRootAs(flatbuffer, 0)
    for index in range(model.MetadataLength()):
        entry = model.Metadata(index)
        if entry.Name() == SEARCH_METADATA.encode():
            data = model.Buffers(entry.Buffer()).DataAsNumpy()
            return json.loads(data.tobytes().decode("utf-8"))
    return None


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
    beam: int | None = None,
    alpha: float | None = None,
    progress: bool = False,
) -> Path:
    """Convert ``source`` into the ``.tflite`` file ``out``, written atomically.

    The file decodes greedy, or by a beam search of ``beam`` hypotheses
    (a fixed-size cache of ``beam`` rows), and returns the best hypothesis:
    the signature is the same either way.

    Args:
        source: a ``TrainedModel``, ``Workdir`` or workdir path.
        out: the ``.tflite`` file to write.
        quantize: ``None`` (float32) or ``"dynamic"`` (int8 weights, float activations).
        max_src_length: the input width (default: the length trained on).
        max_tgt_length: the output width (default: the longest target trained on + 1, for EOS).
        beam: the beam size (``None`` or 1: greedy decoding, the default).
        alpha: the beam search's length penalty exponent (default: the
            SavedModel's, 0.6); only with ``beam``.
        progress: show a progress bar (needs ``tqdm``).

    Returns:
        ``out``, as a ``Path``.

    Raises:
        ValueError: ``quantize`` is not one of ``QUANTIZATIONS``, ``out``
            is a directory, ``beam`` is below 1, or ``alpha`` is not a
            finite number or is given without ``beam`` (``tflite_search``).

    Example::

        from keras_transformer.exporters import export_tflite
        export_tflite("runs/demo", "demo.tflite", quantize="dynamic")
        export_tflite("runs/demo", "demo.beam4.tflite", beam=4, alpha=0.6)
    """
    search = tflite_search(beam, alpha)  # refused before loading
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
            search,
        )
        write_atomically({Path(out): flatbuffer})
        bar.update()
    decoding = f"beam {search.size}, alpha {search.alpha}" if isinstance(search, Beam) else "greedy"
    log.info("wrote %s (%.1f MB, %s)", out, len(flatbuffer) / 1e6, decoding)
    return Path(out)


@dataclasses.dataclass(frozen=True)
class LiteRTRun:
    """What ``LiteRTTranslator.run`` gives: the translations and the time the model took.

    Args:
        texts: one translation a sentence, in input order.
        target_ids: the model's output, ``[sentences, max_tgt_length + 1]`` int32 (the
            target, EOS, then ``pad_id``).
        seconds: the time spent in the interpreter, every sentence once, one at a time
            (tokenizing and detokenizing are outside it, as on a device that runs the
            SentencePiece library beside the model).
    """

    texts: list[str]
    target_ids: np.ndarray
    seconds: float

    @property
    def ms_per_sentence(self) -> float:
        """The interpreter's milliseconds a sentence (0.0 for no sentence)."""
        return 1000.0 * self.seconds / len(self.texts) if self.texts else 0.0


class LiteRTTranslator:
    """Runs a ``.tflite`` translator from ``export_tflite`` in LiteRT: text in, text out.

    The file's only shape is batch 1, so sentences are translated one at a time,
    by the search inside the file (greedy or a beam search: the same signature).
    Text is read as ``Translator`` and the SavedModel read it: whitespace
    normalised, tokenized with the run's source tokenizer (``encode_sources``,
    cut to the file's ``max_src_length``), and a sentence with nothing left
    translates to ``""``. The interpreter is
    ``ai_edge_litert.interpreter.Interpreter`` (the ``[tflite]`` extra).

    Args:
        path: the ``.tflite`` file.
        src_tokenizer: the run's source tokenizer (``Workdir.load_tokenizers``).
        tgt_tokenizer: its target tokenizer.
        num_threads: the interpreter's CPU threads (1: one core, as a phone app gets).

    Attributes:
        beam: the beam size the file searches with (1: greedy), as its
            metadata records it.
        alpha: its length penalty exponent (``None`` for greedy).
        max_src_length: the file's input width.

    Raises:
        ValueError: there is no file at ``path``, it is not a translator of
            ``export_tflite`` (no ``source_ids`` → ``target_ids`` signature),
            ``num_threads`` is below 1, or ``ai_edge_litert`` is not installed.

    Example::

        translator = LiteRTTranslator.from_workdir("demo.tflite", "runs/demo")
        translator.translate(["the hungry boy sees 3 red cats"])
    """

    def __init__(self, path: str | os.PathLike, src_tokenizer, tgt_tokenizer, num_threads: int = 1):
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"No .tflite file at {path}: write one with kt export tflite.")
        if int(num_threads) < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}.")
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError as error:
            raise ValueError(
                "Running a .tflite file needs LiteRT: pip install 'keras-transformer-nmt[tflite]'."
            ) from error
        self.path = path
        self.num_threads = int(num_threads)
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        interpreter = Interpreter(model_path=str(path), num_threads=self.num_threads)
        signatures = interpreter.get_signature_list()
        inputs = signatures.get("serving_default", {}).get("inputs", [])
        outputs = signatures.get("serving_default", {}).get("outputs", [])
        if "source_ids" not in inputs or "target_ids" not in outputs:
            raise ValueError(
                f"{path} is not a translator of export_tflite: its signatures are {signatures}, "
                "not serving_default: source_ids -> target_ids."
            )
        self._runner = interpreter.get_signature_runner("serving_default")
        self.max_src_length = int(self._runner.get_input_details()["source_ids"]["shape"][1])
        search = read_search_metadata(path.read_bytes())
        self.beam = 1 if search is None else int(search["beam"])
        self.alpha = None if search is None else float(search["alpha"])

    @classmethod
    def from_workdir(
        cls, path: str | os.PathLike, workdir: str | os.PathLike | Workdir, num_threads: int = 1
    ) -> LiteRTTranslator:
        """Loads ``path`` with the tokenizers of the run it was exported from.

        Args:
            path: the ``.tflite`` file.
            workdir: that run's ``Workdir`` or its path.
            num_threads: the interpreter's CPU threads.

        Returns:
            The ``LiteRTTranslator``.

        Raises:
            WorkdirError: the workdir has no tokenizers.
            ValueError: as the constructor.
        """
        workdir = workdir if isinstance(workdir, Workdir) else Workdir(workdir)
        src, tgt = workdir.load_tokenizers()
        return cls(path, src, tgt, num_threads=num_threads)

    @property
    def decoding(self) -> str:
        """The file's search, as ``kt evaluate`` names it: ``"greedy"`` or ``"beam<N>"``."""
        return "greedy" if self.beam == 1 else f"beam{self.beam}"

    @property
    def size_bytes(self) -> int:
        """The size of the ``.tflite`` file."""
        return self.path.stat().st_size

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """Gives the model's input for each sentence, as the training read its sources.

        Args:
            sentences: the source sentences.

        Returns:
            ``[sentences, max_src_length]`` int32: each row the subword ids and EOS,
            padded with the tokenizer's ``pad_id``.
        """
        return self._prepare(sentences)[0]

    def _prepare(self, sentences: Sequence[str]) -> tuple[np.ndarray, list[bool]]:
        """``encode``'s ids, and which sentences are blank once whitespace is normalised."""
        texts = normalize_whitespace_tf(tf.constant(list(sentences), tf.string))
        ids = encode_sources(self.src_tokenizer, texts, self.max_src_length)
        shape = [len(sentences), self.max_src_length]
        padded = ids.to_tensor(default_value=self.src_tokenizer.pad_id, shape=shape)
        blank = (tf.strings.length(texts) == 0).numpy().tolist()
        return tf.cast(padded, tf.int32).numpy(), blank

    def run(
        self, sentences: Sequence[str], warm_up: bool = True, progress: bool = False
    ) -> LiteRTRun:
        """Translates ``sentences`` one at a time and times the interpreter.

        Args:
            sentences: the source sentences.
            warm_up: run the first sentence once, untimed, before the timed pass
                (the interpreter allocates its tensors on the first call).
            progress: show a progress bar (needs ``tqdm``).

        Returns:
            A ``LiteRTRun``: the translations, the output ids and the seconds.
        """
        ids, blank = self._prepare(sentences)
        if warm_up and len(ids):
            self._runner(source_ids=ids[:1])
        outputs = []
        seconds = 0.0
        with progress_bar(progress, total=len(ids), desc="LiteRT", unit="sentence") as bar:
            for row in ids:
                started = time.perf_counter()
                out = self._runner(source_ids=row[np.newaxis])["target_ids"]
                seconds += time.perf_counter() - started
                outputs.append(out[0])
                bar.update()
        target_ids = np.stack(outputs) if outputs else np.zeros((0, 0), np.int32)
        return LiteRTRun(self._texts(blank, target_ids), target_ids, seconds)

    def translate(self, sentences: Sequence[str], progress: bool = False) -> list[str]:
        """Translates ``sentences`` one at a time, by the file's search.

        Args:
            sentences: the source sentences.
            progress: show a progress bar (needs ``tqdm``).

        Returns:
            One translation a sentence, in input order.
        """
        return self.run(sentences, warm_up=False, progress=progress).texts

    def _texts(self, blank: list[bool], target_ids: np.ndarray) -> list[str]:
        """Detokenized ``target_ids``, ``""`` for a blank source."""
        if not len(target_ids):
            return []
        texts = self.tgt_tokenizer.detokenize(target_ids).numpy()
        return ["" if empty else text.decode("utf-8") for empty, text in zip(blank, texts)]
