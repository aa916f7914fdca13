"""The translator as a TF Serving SavedModel: strings in, translations out,
SentencePiece inside the graph, only core TensorFlow and TF Text ops.

``export_saved_model(source, out)`` writes ``out/<version>/``, the layout TF
Serving watches, atomically: the model is saved to a hidden folder beside it
and renamed in; an existing version is replaced only with ``overwrite=True``,
and then the old folder is moved aside before the new one is renamed in, so a
watching server never sees the version missing. Each version carries
``assets.extra/tf_serving_warmup_requests``; ``out/models.config`` is an
example ``--model_config_file`` (``exporters.serving_files``). The decoders are
a ``TranslationGraph``'s, the ones ``keras_transformer.Translator`` runs in
this process; the signatures add the text around them.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.decoding import Limits, Search, check_decode_parts
from keras_transformer.exporters.serving_files import (
    WARMUP_SENTENCES,
    models_config,
    vocabulary_files,
    write_tokenizer_files,
    write_warmup_requests,
)
from keras_transformer.exporters.signatures import ExportedTranslator, export_options
from keras_transformer.files import replace_directory, staging_directory, write_text_atomically
from keras_transformer.progress import progress_bar
from keras_transformer.workdir import as_trained_model

log = logging.getLogger(__name__)


def export_saved_model(
    source,
    out: str | os.PathLike,
    search: Search | None = None,
    *,
    limits: Limits | None = None,
    version: int | None = None,
    overwrite: bool = False,
    warmup_sentences: Sequence[str] = WARMUP_SENTENCES,
    precision: str = "fp32",
    xla: bool = False,
    step_splits: int | None = None,
    step_products: str | None = None,
    decode_parts: int | None = None,
    progress: bool = False,
    **fields,
) -> Path:
    """Export ``source`` as a TF Serving model version, written atomically.

    Args:
        source: a ``TrainedModel`` (a model and its tokenizers, e.g. after
            ``model.fit`` in a notebook), a ``Workdir`` or a workdir path.
        out: the model folder; versions go below it (``out/1``, ``out/2``, ...).
        search: the search of ``serving_default``, fixed in the graph:
            ``decoding.Beam(...)`` (default: beam 4, α 0.6) or
            ``decoding.Greedy()``. The other signatures take its α.
        limits: the output ``decoding.Limits`` of every signature.
        version: the version number (default: the next free integer).
        overwrite: replace an existing version (atomically).
        warmup_sentences: the request TF Serving replays when it loads the model.
        precision: the graph's compute precision. fp32 runs on every server;
            bf16 is faster only on hardware with bf16 units (AVX512-BF16/AMX,
            TPU, recent GPUs). Weights are float32 either way.
        xla: also export ``translate_xla`` and ``translate_greedy_xla``, the
            decoders compiled by XLA (see ``ExportedTranslator``); the default
            signatures stay plain graphs either way.
        step_splits: the splits of the small-batch decoding step (a
            sentence or a beam): by default two, each with a half of every
            product's kernel, side by side on the server's inter-op threads;
            1 for a server that runs one inter-op thread
            (``decoding.ConstantSteps``).
        step_products: that step's products, ``"conv"`` (pointwise
            products) or ``"matmul"``: by default what suits the exporting
            process's TensorFlow (``kernels.step_products``), ``"matmul"``
            where its oneDNN rewrites are on (``kernels.onednn_rewrites``),
            else ``"conv"``. Choose for the server's CPU
            (``docs/kernels.md``).
        decode_parts: a batch of eight decoding rows or more (sentences ×
            beams) decodes as this many parts side by side, on the server's
            inter-op threads (``decoding.decode_in_parts``): by default
            ``DECODE_PARTS``, two; 1 for a server with one inter-op thread.
        progress: show a progress bar (needs ``tqdm``).
        **fields: shortcuts that replace the search's and the limits' fields
            (``beam_size=4, alpha=1.4``).

    Returns:
        The version folder, ``out/<version>``.

    Raises:
        ValueError: an option out of range (a search or limit,
            ``step_splits``, ``decode_parts``, ``step_products``, ``version``).
        FileExistsError: the version exists and ``overwrite`` is off.

    Example::

        from keras_transformer.exporters import export_saved_model
        export_saved_model("runs/demo", "exports/demo", beam_size=4)  # exports/demo/1
    """
    out = Path(out)
    search, limits = export_options(search, limits, **fields)  # refused before loading
    if step_splits is not None and step_splits < 1:
        raise ValueError(f"step_splits must be >= 1 (1: no splits), got {step_splits}.")
    check_decode_parts(decode_parts)
    if step_products is not None and step_products not in kernels.PRODUCT_OPS:
        raise ValueError(
            f"step_products must be one of {', '.join(kernels.PRODUCT_OPS)}, got {step_products!r}."
        )
    if version is not None and version < 1:
        raise ValueError(
            f"version must be a positive integer (TF Serving's version folders), got {version}."
        )
    if version is None:
        existing = (
            [int(p.name) for p in out.iterdir() if p.is_dir() and p.name.isdigit()]
            if out.is_dir()
            else []
        )
        version = max(existing, default=0) + 1
    target = out / str(version)
    if target.exists() and not overwrite:  # refused before the model is loaded
        raise FileExistsError(f"{target} exists; pass overwrite (--overwrite) or another version.")
    with progress_bar(progress, total=4, desc="SavedModel", unit="step") as bar:
        bar.set_postfix_str("loading")
        trained = as_trained_model(source, precision)
        bar.update()
        staging = staging_directory(target)
        try:
            with tempfile.TemporaryDirectory(prefix="keras_transformer_spm_") as spm_dir:
                src_path, tgt_path = write_tokenizer_files(trained, Path(spm_dir))
                module = ExportedTranslator(
                    trained.model,
                    trained.src_tokenizer,
                    trained.tgt_tokenizer,
                    max_src_length=trained.max_src_length,
                    search=search,
                    limits=limits,
                    src_model_path=src_path,
                    tgt_model_path=tgt_path,
                    vocabulary_paths=vocabulary_files(Path(spm_dir)),
                    xla=xla,
                    step_splits=step_splits,
                    step_products=step_products,
                    decode_parts=decode_parts,
                )
                if module.constant_steps is not None:
                    log.info(
                        "small-batch decoding step: %d split(s), %s products (%s)",
                        module.constant_steps.splits,
                        module.constant_steps.products,
                        "chosen"
                        if step_products
                        else "this TensorFlow's oneDNN rewrites are "
                        f"{'on' if kernels.onednn_rewrites() else 'off'}",
                    )
                bar.set_postfix_str("tracing and saving")
                tf.saved_model.save(module, str(staging), signatures=module.signatures())
                bar.update()
            write_warmup_requests(staging, warmup_sentences, model_name=out.name)
            bar.update()
            replace_directory(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        write_text_atomically(out / "models.config", models_config(out.name))
        bar.update()
    log.info("exported %s", target)
    return target
