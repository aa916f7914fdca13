"""Where a one-sentence request goes: its fixed cost and its cost a decoding step.

    python -m benchmarks.one_sentence --saved-model runs/multi30k/export/1 \\
        --src ../shared/corpora/multi30k_de_en/test.src [--sentences 150] [--passes 3] \\
        [--json out.json]

The SavedModel is loaded by the TF1 session loader, as TF Serving loads it.
Each sentence of ``--src`` is translated alone by ``translate_greedy`` and
``serving_default``, ``--passes`` times, and keeps its fastest time. A least
squares line through (output tokens, ms) splits a request into

* ``fixed_ms``: what a request costs whatever its output: the call,
  tokenization, the encoder, the loop's set-up and detokenization;
* ``ms_per_token``: what each output token adds. For greedy decoding, each
  token is a decoding step (the output's SentencePiece pieces and EOS: alone, a
  sentence stops at its own EOS); beam search's steps depend on when its
  finished hypotheses can no longer be beaten, so its line is by output token.

``r2`` says how well the line fits.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from benchmarks.ct2_translate import spm_processors
from benchmarks.report import emit
from benchmarks.serving_speed import session_signatures

SIGNATURES = {"greedy": "translate_greedy", "beam": "serving_default"}


def line_fit(tokens: np.ndarray, ms: np.ndarray) -> dict:
    """The least squares line ``ms ≈ fixed_ms + ms_per_token · tokens``, and its ``r2``.

    Args:
        tokens: ``[n]`` output tokens of each request.
        ms: ``[n]`` its time.

    Returns:
        ``{"fixed_ms", "ms_per_token", "r2"}``, rounded.

    Example:
        >>> line_fit(np.array([1.0, 2.0, 3.0]), np.array([5.0, 7.0, 9.0]))
        {'fixed_ms': 3.0, 'ms_per_token': 2.0, 'r2': 1.0}
    """
    design = np.stack([np.ones_like(tokens, dtype=float), tokens.astype(float)], axis=1)
    (fixed, per_token), *_ = np.linalg.lstsq(design, ms, rcond=None)
    residual = ms - design @ np.array([fixed, per_token])
    spread = float(np.sum((ms - ms.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual**2)) / spread if spread > 0 else 1.0
    return {
        "fixed_ms": round(float(fixed), 3),
        "ms_per_token": round(float(per_token), 4),
        "r2": round(r2, 3),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--saved-model", required=True, type=Path, help="an export's version")
    parser.add_argument("--src", required=True, type=Path, help="source sentences, one per line")
    parser.add_argument("--sentences", type=int, default=150)
    parser.add_argument("--passes", type=int, default=3, help="each sentence keeps its fastest")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    sentences = args.src.read_text(encoding="utf-8").splitlines()[: args.sentences]
    _, target_sp = spm_processors(args.saved_model / "assets")

    translators = session_signatures(args.saved_model, SIGNATURES.values())
    rows = []
    for decoder, name in SIGNATURES.items():
        translate = translators[name]
        for sentence in sentences[:3]:  # warm-up: the first calls optimise the graph
            translate([sentence])
        ms = np.full(len(sentences), np.inf)
        texts = [""] * len(sentences)
        for _ in range(args.passes):
            for i, sentence in enumerate(sentences):
                started = time.perf_counter()
                (texts[i],) = translate([sentence])
                ms[i] = min(ms[i], 1000 * (time.perf_counter() - started))
        # Each output's tokens and EOS (every pass translates alike: the last one's).
        tokens = np.array([len(target_sp.encode(text)) + 1 for text in texts])
        row = {
            "decoder": decoder,
            "signature": name,
            "sentences": len(sentences),
            "mean_ms": round(float(ms.mean()), 3),
            "mean_tokens": round(float(tokens.mean()), 2),
            **line_fit(tokens, ms),
        }
        rows.append(row)
        print(
            f"{decoder:<6} {row['mean_ms']:.2f} ms a sentence, {row['mean_tokens']} tokens: "
            f"{row['fixed_ms']:.2f} ms fixed + {row['ms_per_token']:.3f} ms a token "
            f"(r² {row['r2']})",
            flush=True,
        )
    emit(
        {
            "benchmark": "one_sentence",
            "saved_model": str(args.saved_model),
            "passes": args.passes,
            "tensorflow": tf.__version__,
            "results": rows,
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
