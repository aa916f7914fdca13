"""CTranslate2's side of the serving benchmarks, without TensorFlow: the SentencePiece
models an export ships, CTranslate2 translators strings in and out, and the backend
probe ``serving_vs_ct2`` runs in a fresh interpreter (which then imports neither
TensorFlow nor Keras: only CTranslate2 and SentencePiece load)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import sentencepiece as spm

EXTRA_LENGTH = 50  # the exported decoders' output limit: source length + this (the paper's)
PROBE_SENTENCES = (
    40  # translated one at a time by each backend's probe (``probe_ct2``), then 64 at once
)


def spm_processors(
    directory: Path,
) -> tuple[spm.SentencePieceProcessor, spm.SentencePieceProcessor]:
    """The (source, target) SentencePiece models an export ships in ``directory``
    (a SavedModel's ``assets``, a CTranslate2 folder): ``spm_shared.model``, or
    ``spm_src.model`` and ``spm_tgt.model``."""
    shared = directory / "spm_shared.model"
    source, target = (
        (shared, shared)
        if shared.exists()
        else (directory / "spm_src.model", directory / "spm_tgt.model")
    )
    if not (source.exists() and target.exists()):
        raise ValueError(f"No SentencePiece model in {directory}: is it an export of ours?")
    return spm.SentencePieceProcessor(model_file=str(source)), spm.SentencePieceProcessor(
        model_file=str(target)
    )


def ct2_translators(
    path: Path,
    *,
    beam: int,
    alpha: float,
    max_input_length: int,
    max_length: int,
    extra_length: int = EXTRA_LENGTH,
) -> dict[str, Callable[[list[str]], list[str]]]:
    import ctranslate2

    src_sp, tgt_sp = spm_processors(path)
    translator = ctranslate2.Translator(
        str(path), device="cpu", inter_threads=1, intra_threads=os.cpu_count()
    )

    def call(beam_size: int):
        def translate(batch: list[str]) -> list[str]:
            pieces = src_sp.encode(batch, out_type=str)
            # The SavedModel's limit: each source's ids (EOS included) + extra_length, within the
            # position table; CTranslate2 takes one limit a batch, the longest source's.
            longest = min(max(len(p) for p in pieces) + 1, max_input_length)
            results = translator.translate_batch(
                pieces,
                beam_size=beam_size,
                length_penalty=alpha if beam_size > 1 else 0,
                max_input_length=max_input_length,
                max_decoding_length=min(longest + extra_length, max_length),
                min_decoding_length=0,
                max_batch_size=len(batch),
            )
            return [tgt_sp.decode(result.hypotheses[0]) for result in results]

        return translate

    return {"greedy": call(1), "beam": call(beam)}


def probe_ct2(path: str, sentences: str, limits: str) -> None:
    """Prints a JSON list: greedy ms a sentence of the CTranslate2 model at
    ``path`` by ``ct2_translators``, one sentence at a time over the first
    ``PROBE_SENTENCES`` of ``sentences`` (JSON) and then all of them at once,
    the faster of two passes each; ``limits``: JSON of ``ct2_translators``'
    length limits. ``serving_vs_ct2.choose_ct2_backend`` runs it in a fresh
    interpreter, under each backend."""
    sentences = json.loads(sentences)
    translate = ct2_translators(Path(path), beam=1, alpha=0.0, **json.loads(limits))["greedy"]
    translate(sentences[:8])
    best = []
    for batches in ([[sentence] for sentence in sentences[:PROBE_SENTENCES]], [sentences]):
        times = []
        for _ in range(2):
            start = time.perf_counter()
            for batch in batches:
                translate(batch)
            times.append(time.perf_counter() - start)
        best.append(1000 * min(times) / sum(len(batch) for batch in batches))
    print(json.dumps(best))
