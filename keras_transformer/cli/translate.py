"""Translate with an exported SavedModel (only TensorFlow and TF Text run):

    kt translate --model exports/demo/1 [--beam 1] < input.txt > output.txt
    kt translate --model exports/demo "a sentence"          # the newest version
    kt translate --model exports/demo/1 --plot-attention sentence.png "a sentence"
    kt translate --model exports/demo --n-best 4 < input.txt > nbest.txt
    kt translate --model exports/demo --prefix prefixes.txt < input.txt
    kt translate --model exports/demo --sample --top-k 10 --seed 1 < input.txt

``--beam`` must be 1 (greedy) or the beam size fixed at export time. The
library call is ``keras_transformer.Translator.from_saved_model`` and its
``translate_iterable`` (``n_best``, ``translate(prefixes=...)``, ``sample``).

``--n-best N`` writes each sentence's N best distinct translations (at most
the beam size), best first, one a line in the Moses n-best format
``INDEX ||| TEXT ||| LOG_PROB``: INDEX the input line's number from 0, LOG_PROB
the text's log-probability (natural log, EOS included, no length penalty, as
``kt score`` gives it); a sentence may have fewer lines, and an
empty one has one, ``INDEX |||  ||| 0.0000``. ``--prefix FILE`` forces the
start of each translation: one target-side prefix a line, aligned with the
input (an empty line leaves its sentence free). ``--sample`` draws each
translation token by token (``--top-k`` likeliest tokens, 0: all; nucleus
``--top-p``; ``--temperature``), keyed by ``--seed`` and the sentence, so a
run gives the same samples again.

Standard input is read ``--window`` lines at a time; each window is sorted by
length, batched by ``--batch-tokens`` (the padded source tokens of a batch:
sentences × longest source; a longer sentence goes alone), translated, and its
translations are written in input order before the next window is read, so a
file of any length needs one window in memory. Lines are split on ``\\n``
only and decoded as UTF-8, an invalid byte as U+FFFD
(``keras_transformer.corpus.text_lines``). The output has one line a line of
input, an empty line for an empty one. On a terminal a progress bar shows on
stderr (with the ``[train]`` extra's tqdm). To translate a file into another,
resumably after a crash, use ``kt translate-corpus``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from keras_transformer.cli.common import (
    ArgumentParser,
    add_sampling_arguments,
    check_at_least_one,
    existing_file,
    existing_path,
    fail,
    needs_module,
    run,
    sampling_parameters,
    setup_logging,
)
from keras_transformer.translation.batching import BATCH_TOKENS, WINDOW

PROG = "kt translate"


def add_batch_tokens_argument(parser: ArgumentParser) -> None:
    """``--batch-tokens N``: the translator's token budget a batch (default ``BATCH_TOKENS``)."""
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=BATCH_TOKENS,
        metavar="N",
        help="padded source tokens a batch: sentences x longest source, the sentences sorted by "
        f"length (default: {BATCH_TOKENS})",
    )


def add_window_argument(parser: ArgumentParser, after_each: str) -> None:
    """``--window N``: the lines read, sorted and translated at a time (default ``WINDOW``);
    ``after_each`` says what the program does after each window."""
    parser.add_argument(
        "--window",
        type=int,
        default=WINDOW,
        metavar="N",
        help=f"lines read, sorted and translated at a time; {after_each} (default: {WINDOW})",
    )


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


def write_n_best(translator, lines, args, total: int | None) -> int:
    """The n-best lists of ``lines``, ``INDEX ||| TEXT ||| LOG_PROB`` a line, a window at a time."""
    from keras_transformer.translate import n_best_moses

    lists = translator.n_best_iterable(
        lines,
        args.n_best,
        args.batch_size,
        progress=not args.sentences,
        batch_tokens=args.batch_tokens,
        window=args.window,
        total=total,
    )
    for index, hypotheses in enumerate(lists):
        sys.stdout.write(n_best_moses(index, hypotheses))
        if (index + 1) % args.window == 0:  # a window's lists out before the next is read
            sys.stdout.flush()
    return 0


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
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="at most N sentences a batch (default: as many as --batch-tokens allows)",
    )
    add_batch_tokens_argument(parser)
    add_window_argument(parser, "their translations are written before the next are read")
    parser.add_argument(
        "--plot-attention",
        type=Path,
        default=None,
        metavar="PNG",
        help="draw the cross-attention of the (first) sentence given as argument",
    )
    parser.add_argument(
        "--n-best",
        type=int,
        default=None,
        metavar="N",
        help="write the N best translations a sentence, INDEX ||| TEXT ||| LOG_PROB a line",
    )
    parser.add_argument(
        "--prefix",
        type=Path,
        default=None,
        metavar="FILE",
        help="target-side prefixes, one a line aligned with the input: each translation begins "
        "with its prefix (an empty line: free)",
    )
    add_sampling_arguments(parser)
    parser.add_argument(
        "sentences", nargs="*", help="sentences to translate (default: stdin lines)"
    )
    args = parser.parse_args(argv)
    if args.plot_attention is not None and not args.sentences:
        parser.error("--plot-attention needs the sentence as an argument")
    modes = [
        flag
        for flag, on in (
            ("--plot-attention", args.plot_attention is not None),
            ("--n-best", args.n_best is not None),
            ("--prefix", args.prefix is not None),
            ("--sample", args.sample),
        )
        if on
    ]
    if len(modes) > 1:
        parser.error(f"{' and '.join(modes)} do not go together: choose one")
    args.sampling = sampling_parameters(parser, args)
    if args.n_best is not None and args.n_best < 1:
        parser.error(f"--n-best must be >= 1, got {args.n_best}")
    existing_file(PROG, args.prefix, "--prefix")
    check_at_least_one(parser, args, "beam", "batch_size", "batch_tokens", "window")
    if args.plot_attention is not None:
        needs_module(PROG, "matplotlib", "--plot-attention", "plots")
    existing_path(PROG, args.model, "SavedModel")
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def translate() -> int:
        from keras_transformer.file_translation import lines_in, text_lines
        from keras_transformer.translate import Translator, one_line

        translator = Translator.from_saved_model(args.model, beam_size=args.beam)
        if args.plot_attention is not None:
            print(plot_attention(translator, args.sentences[0], args.plot_attention))
            return 0
        if args.sentences:
            lines, total = args.sentences, None
        else:
            lines = text_lines(sys.stdin.buffer)
            total = lines_in(sys.stdin) if sys.stderr.isatty() else None  # the bar's length
        if args.n_best is not None:
            return write_n_best(translator, lines, args, total)
        if args.prefix is not None:
            with open(args.prefix, encoding="utf-8") as file:
                prefixes = [line.rstrip("\n") for line in file]
            translations = translator.translate(
                list(lines),
                args.batch_size,
                progress=not args.sentences,
                prefixes=prefixes,
                batch_tokens=args.batch_tokens,
                window=args.window,
            )
            for translation in translations:
                print(one_line(translation))
            return 0
        stream_options = {
            "batch_size": args.batch_size,
            "progress": not args.sentences,
            "batch_tokens": args.batch_tokens,
            "window": args.window,
            "total": total,
        }
        if args.sample:
            translations = translator.sample_iterable(lines, **args.sampling, **stream_options)
        else:
            translations = translator.translate_iterable(lines, **stream_options)
        for written, translation in enumerate(translations, 1):
            print(one_line(translation))
            if written % args.window == 0:  # a window's translations out before the next is read
                sys.stdout.flush()
        return 0

    return run(PROG, translate, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
