"""Translate with an exported SavedModel (only TensorFlow and TF Text run):

    python -m export.translate --model exports/demo/1 [--beam 1] < input.txt > output.txt
    python -m export.translate --model exports/demo "a sentence"          # the newest version
    python -m export.translate --model exports/demo/1 --plot-attention sentence.png "a sentence"

``--beam`` must be 1 (greedy) or the beam size fixed at export time. The
library call is ``keras_transformer.Translator.from_saved_model``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from programs import ArgumentParser, existing_path, fail, run, setup_logging

PROG = "python -m export.translate"


def plot_attention(translator, sentence: str, path: Path) -> str:
    """Heatmap of the last decoder layer's cross-attention (mean over heads); needs matplotlib."""
    try:
        import matplotlib
    except ImportError:
        fail(PROG, "--plot-attention needs matplotlib: pip install 'keras-transformer-nmt[plots]'.")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = translator.cross_attention(sentence)
    source, target, weights = out["source_pieces"], out["target_pieces"], out["weights"]
    figure, axes = plt.subplots(
        figsize=(max(4, 0.45 * len(source) + 2), max(3, 0.4 * len(target) + 1.5))
    )
    image = axes.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0)
    axes.set_xticks(range(len(source)), source, rotation=60, ha="right")
    axes.set_yticks(range(len(target)), target)
    axes.set_xlabel("source pieces")
    axes.set_ylabel("target pieces")
    translation = out["translation"]
    axes.set_title(translation if len(translation) < 70 else translation[:67] + "...", fontsize=9)
    figure.colorbar(image, ax=axes, fraction=0.046)
    figure.tight_layout()
    temp = path.with_name(".tmp-" + path.name)
    figure.savefig(temp, dpi=120, format=path.suffix.lstrip(".") or "png")
    plt.close(figure)
    temp.replace(path)
    return translation


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    parser.add_argument(
        "--model",
        required=True,
        type=Path,
        help="an export version folder (exports/demo/1) or the folder above it",
    )
    parser.add_argument(
        "--beam", type=int, default=None, help="1 = greedy; default: the exported beam"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--plot-attention",
        type=Path,
        default=None,
        metavar="PNG",
        help="draw the cross-attention of the (first) sentence given as argument",
    )
    parser.add_argument(
        "sentences", nargs="*", help="sentences to translate (default: stdin lines)"
    )
    args = parser.parse_args(argv)
    if args.plot_attention is not None and not args.sentences:
        parser.error("--plot-attention needs the sentence as an argument")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be >= 1, got {args.batch_size}")
    existing_path(PROG, args.model, "SavedModel")
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def translate() -> int:
        from keras_transformer.translate import Translator

        translator = Translator.from_saved_model(args.model, beam_size=args.beam)
        if args.plot_attention is not None:
            print(plot_attention(translator, args.sentences[0], args.plot_attention))
            return 0
        lines = args.sentences or [line.rstrip("\n") for line in sys.stdin]
        for translation in translator.translate(
            lines, batch_size=args.batch_size, progress=not args.sentences
        ):
            print(translation)
        return 0

    return run(PROG, translate, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
