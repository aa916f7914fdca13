"""The SavedModel backend of ``keras_transformer.Translator``: an export's signatures.

The graph is the one TF Serving runs, with tokenization inside it (only
TensorFlow and TF Text run). The backend relies only on what every export
holds: its signatures, ``beam_size_tensor``, and where present
``max_length_tensor`` and the SentencePiece assets (``source_spm``,
``target_spm``), so exports made by earlier versions load too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import weakref
from pathlib import Path

import numpy as np
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the export's graph)

from keras_transformer.data.normalize import normalize_whitespace_tf
from keras_transformer.translation.signature_loading import load_signature
from keras_transformer.translation.text import blank_answers, check_target_lengths, n_best_lists


def saved_model_version(path: str | os.PathLike) -> Path:
    """``path`` if it holds a SavedModel, else its highest numbered version folder.

    Args:
        path: a version folder or the model folder above it.

    Returns:
        The version folder.

    Raises:
        FileNotFoundError: no SavedModel there or in a version folder below it.
    """
    path = Path(path)
    if (path / "saved_model.pb").is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"No SavedModel at {path}: the path does not exist.")
    versions = [p for p in path.iterdir() if p.name.isdigit() and (p / "saved_model.pb").is_file()]
    if not versions:
        raise FileNotFoundError(
            f"No SavedModel at {path}: no saved_model.pb in it or in a version folder "
            "below it (export one with kt export saved-model)."
        )
    return max(versions, key=lambda p: int(p.name))


def _export_files(path: Path) -> dict:
    """The export's graph and variables index: ``{name: [size, mtime_ns]}``."""
    files = {}
    for name in ("saved_model.pb", "variables/variables.index"):
        if (path / name).is_file():
            stat = (path / name).stat()
            files[name] = [stat.st_size, stat.st_mtime_ns]
    return files


# SavedModels loaded in this process, whole or one signature at a time, while a translator
# holds one: by version folder and files (and signature).
_LOADED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _files_key(path: Path) -> tuple[str, str]:
    return (str(path.resolve()), repr(sorted(_export_files(path).items())))


def _load_saved_model(path: Path):
    """``tf.saved_model.load(path)``, shared with the translators over the same files (a greedy
    and a beam translator of one export load it once); an export written again loads anew."""
    key = _files_key(path)
    loaded = _LOADED.get(key)
    if loaded is None:
        loaded = tf.saved_model.load(str(path))
        _LOADED[key] = loaded
    return loaded


def _load_one_signature(path: Path, name: str):
    """Signature ``name`` of the export and its objects (``load_signature``), shared as
    ``_load_saved_model``'s; the whole export where it cannot be loaded alone."""
    key = (*_files_key(path), name)
    loaded = _LOADED.get(key) or _LOADED.get(key[:2])
    if loaded is None:
        loaded = load_signature(path, name)
        if loaded is None:
            return _load_saved_model(path)
        _LOADED[key] = loaded
    return loaded


# Grappler's rewrites of an export's functions, made when a function first runs, cost seconds
# and change nothing measurable in how fast the exported graph runs (its steps are written
# with fused kernels already); an export's signatures are called without them here. The
# option is process-wide in TensorFlow: it is set around each call and restored, under a lock.
_REWRITES_LOCK = threading.RLock()


@contextlib.contextmanager
def exported_graph_as_written():
    """Run the functions called inside without Grappler's graph rewrites.

    Example:

    >>> double = tf.function(lambda x: 2 * x, input_signature=[tf.TensorSpec([], tf.float32)])
    >>> with exported_graph_as_written():
    ...     print(double(tf.constant(1.5)).numpy())
    3.0
    """
    with _REWRITES_LOCK:
        before = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer")
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
        try:
            yield
        finally:
            tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": bool(before)})


def _as_written(function):
    """``function`` (a signature), called under ``exported_graph_as_written``."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        with exported_graph_as_written():
            return function(*args, **kwargs)

    return call


def _decoded(texts) -> list[str]:
    return [text.decode("utf-8") for text in texts.numpy()]


class SavedModelBackend:
    """An exported SavedModel's signatures, run in this process.

    ``beam_size`` is the export's (``serving_default``, ``translate_prefix``,
    ``n_best``) unless 1 is asked for (``translate_greedy``,
    ``translate_prefix_greedy``; ``n_best`` of one is then the greedy
    translation, its log-probability by ``score``); other beam sizes need a
    new export. Prefixes and targets are checked against the model's limit
    here, by the export's target SentencePiece model, before any request;
    the graph checks them again.

    Args:
        path: a version folder or the model folder above it (its highest version).
        beam_size: ``None`` for the export's beam, or 1 for greedy.

    Raises:
        FileNotFoundError: no SavedModel at ``path``.
        ValueError: ``beam_size`` is neither 1 nor the export's beam.
    """

    def __init__(self, path: str | os.PathLike, beam_size: int | None = None):
        self.path = saved_model_version(path)
        # One signature is loaded now, the one this backend translates with; the others
        # (prefixes, n-best, scores, samples) when first called.
        name = "translate_greedy" if beam_size == 1 else "serving_default"
        self._main = _load_one_signature(self.path, name)
        self._exports = {name: self._main}
        self.exported_beam_size = int(self._main.beam_size_tensor.numpy())
        if beam_size not in (None, 1, self.exported_beam_size):
            raise ValueError(
                f"beam size {beam_size}: {self.path} decodes with beam {self.exported_beam_size}; "
                f"use 1 (greedy) or {self.exported_beam_size}, or re-export with beam {beam_size}."
            )
        self.beam_size = self.exported_beam_size if beam_size is None else beam_size
        self._greedy = self.beam_size == 1 and self.exported_beam_size != 1
        self._signature = _as_written(self._main.signatures[name])
        self._count_pieces = None  # by the export's source SentencePiece model, at first use
        self._count_target_pieces = None  # and its target one

    @property
    def saved_model(self):
        """The whole export, as ``tf.saved_model.load`` gives it (loaded on first use)."""
        return _load_saved_model(self.path)

    def identity(self) -> dict:
        """The export (its version folder, and its graph's and variables' sizes and times)
        and the beam size, as JSON values: ``translate_corpus`` resumes under the same."""
        model = {"saved_model": str(self.path.resolve()), "files": _export_files(self.path)}
        return {"model": model, "search": {"beam_size": self.beam_size}}

    def _signature_of(self, name: str):
        """The export's signature ``name``; an export made before it has none: one line."""
        export = self._exports.get(name)
        if export is None:
            export = self._exports[name] = _load_one_signature(self.path, name)
        signatures = export.signatures
        if name not in signatures:
            raise ValueError(
                f"{self.path} has no {name} signature (an older export): export it again with "
                "kt export saved-model."
            )
        return _as_written(signatures[name])

    def _spm_counter(self, asset_name: str):
        """``texts → piece counts`` by the export's SentencePiece asset, or ``None``."""
        asset = getattr(self._main, asset_name, None)
        if asset is None:
            return None
        model = spm.SentencePieceProcessor(model_file=asset.asset_path.numpy().decode())
        return lambda batch: [len(ids) for ids in model.encode(batch)]

    def prepare(self, texts: list[str]) -> tuple[list[int], list[str]]:
        """Each text's source pieces + EOS (by the export's SentencePiece model), and the texts."""
        if self._count_pieces is None:
            # Not one of our exports: words for pieces.
            self._count_pieces = self._spm_counter("source_spm") or (
                lambda batch: [len(text.split()) for text in batch]
            )
        return [pieces + 1 for pieces in self._count_pieces(texts)], texts

    def target_ids(self, texts, what: str, with_eos: bool) -> list[str]:
        """The texts themselves (the signatures tokenize them), each checked against the
        model's limit by the export's target SentencePiece model (no check without one:
        the graph answers)."""
        texts = list(texts)
        limit = getattr(self._main, "max_length_tensor", None)
        if not texts or limit is None:
            return texts
        if self._count_target_pieces is None:
            self._count_target_pieces = (
                self._spm_counter("target_spm")
                or self._spm_counter("source_spm")
                or (lambda batch: [0] * len(batch))
            )
        normalized = _decoded(normalize_whitespace_tf(tf.constant(texts, tf.string)))
        check_target_lengths(
            self._count_target_pieces(normalized), int(limit.numpy()), what, with_eos
        )
        return texts

    @staticmethod
    def _inputs(texts: list[str], rows: list[int]) -> tf.Tensor:
        return tf.constant([texts[row] for row in rows], dtype=tf.string)

    def translate(self, texts: list[str], rows: list[int], extras, capacity: int) -> list[str]:
        return _decoded(self._signature(inputs=self._inputs(texts, rows))["translations"])

    def prefix(self, texts: list[str], rows: list[int], prefixes, capacity: int) -> list[str]:
        name = "translate_prefix_greedy" if self._greedy else "translate_prefix"
        out = self._signature_of(name)(
            inputs=self._inputs(texts, rows), prefixes=tf.constant(prefixes, tf.string)
        )
        return _decoded(out["translations"])

    def n_best(self, texts: list[str], rows: list[int], extras, capacity: int, n: int) -> list:
        inputs = self._inputs(texts, rows)
        if self._greedy:  # the greedy translation, and the log-probability of its text
            translations = self._signature(inputs=inputs)["translations"]
            scored = self._signature_of("score")(inputs=inputs, targets=translations)
            answers = blank_answers(
                normalize_whitespace_tf(inputs), translations, scored["log_probs"]
            )
            return n_best_lists(*(part.numpy()[:, np.newaxis] for part in answers))
        out = self._signature_of("n_best")(inputs=inputs, n=tf.constant(n, tf.int32))
        return n_best_lists(out["translations"].numpy(), out["log_probs"].numpy())

    def score(self, texts: list[str], rows: list[int], targets, capacity: int) -> list[float]:
        out = self._signature_of("score")(
            inputs=self._inputs(texts, rows), targets=tf.constant(targets, tf.string)
        )
        return [float(log_prob) for log_prob in out["log_probs"].numpy()]

    def sample(self, texts: list[str], rows: list[int], extras, capacity: int, params) -> list:
        top_k, top_p, temperature, seed = params
        out = self._signature_of("sample")(
            inputs=self._inputs(texts, rows),
            top_k=tf.constant(top_k, tf.int32),
            top_p=tf.constant(top_p, tf.float32),
            temperature=tf.constant(temperature, tf.float32),
            seed=tf.constant(seed, tf.int64),
        )
        return _decoded(out["translations"])

    def cross_attention(self, sentence: str) -> dict:
        """See ``Translator.cross_attention``: the ``cross_attention`` signature's outputs."""
        out = self._signature_of("cross_attention")(sentence=tf.constant(sentence))
        return {
            "translation": out["translation"].numpy().decode("utf-8"),
            "source_pieces": [p.decode("utf-8") for p in out["source_pieces"].numpy()],
            "target_pieces": [p.decode("utf-8") for p in out["target_pieces"].numpy()],
            "weights": out["weights"].numpy(),
        }
