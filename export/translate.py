"""Translate with an exported SavedModel (only TensorFlow and TF Text needed):

    python -m export.translate --model exports/demo/1 [--beam 4] < input.txt > output.txt
    python -m export.translate --model exports/demo/1 --plot-attention sentence.png "a sentence"

``--beam`` must be 1 (greedy) or the beam size fixed at export time.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
from tqdm import tqdm


def _batches(lines: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(lines), size):
        yield list(lines[start:start + size])


def translate_lines(model, lines: Sequence[str], greedy: bool = False, batch_size: int = 32,
                    progress: bool = True) -> Iterable[str]:
    signature = model.signatures["translate_greedy" if greedy else "serving_default"]
    with tqdm(total=len(lines), unit="sent", disable=not progress, file=sys.stderr) as bar:
        for batch in _batches(lines, batch_size):
            for text in signature(inputs=tf.constant(batch))["translations"].numpy():
                yield text.decode("utf-8")
            bar.update(len(batch))


def plot_attention(model, sentence: str, path: Path) -> str:
    """Heatmap of the last decoder layer's cross-attention (mean over heads)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = model.signatures["cross_attention"](sentence=tf.constant(sentence))
    weights = out["weights"].numpy()
    source = [p.decode("utf-8") for p in out["source_pieces"].numpy()]
    target = [p.decode("utf-8") for p in out["target_pieces"].numpy()]
    figure, axes = plt.subplots(figsize=(max(4, 0.45 * len(source) + 2), max(3, 0.4 * len(target) + 1.5)))
    image = axes.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0)
    axes.set_xticks(range(len(source)), source, rotation=60, ha="right")
    axes.set_yticks(range(len(target)), target)
    axes.set_xlabel("source pieces")
    axes.set_ylabel("target pieces")
    translation = out["translation"].numpy().decode("utf-8")
    axes.set_title(translation if len(translation) < 70 else translation[:67] + "...", fontsize=9)
    figure.colorbar(image, ax=axes, fraction=0.046)
    figure.tight_layout()
    temp = path.with_name(".tmp-" + path.name)
    figure.savefig(temp, dpi=120, format=path.suffix.lstrip(".") or "png")
    plt.close(figure)
    temp.replace(path)
    return translation


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path, help="an export version folder, e.g. exports/demo/1")
    parser.add_argument("--beam", type=int, default=None, help="1 = greedy; default: the exported beam")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--plot-attention", type=Path, default=None, metavar="PNG",
                        help="draw the cross-attention of the (first) sentence given as argument")
    parser.add_argument("sentences", nargs="*", help="sentences to translate (default: stdin lines)")
    args = parser.parse_args(argv)

    model = tf.saved_model.load(str(args.model))
    exported_beam = int(model.beam_size_tensor.numpy())
    if args.beam not in (None, 1) and args.beam != exported_beam:
        parser.error(f"--beam {args.beam}: this export decodes with beam {exported_beam}; use --beam 1 "
                     f"(greedy) or re-export with python -m export.saved_model --beam {args.beam}.")
    if args.plot_attention is not None:
        if not args.sentences:
            parser.error("--plot-attention needs the sentence as an argument.")
        print(plot_attention(model, args.sentences[0], args.plot_attention))
        return 0
    lines = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    for translation in translate_lines(model, lines, greedy=args.beam == 1, batch_size=args.batch_size,
                                       progress=not args.sentences):
        print(translation)
    return 0


if __name__ == "__main__":
    sys.exit(main())
