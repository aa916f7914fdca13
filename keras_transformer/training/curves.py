"""The learning curve of a run as a PNG: training and validation loss, and
validation BLEU, per epoch (from the history that ``metrics.json`` stores)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from keras_transformer.files import write_atomically


def plot_learning_curves(
    history: Mapping[str, Sequence[float]], path: Path, title: str = ""
) -> Path:
    """Loss curves on the left, validation BLEU/chrF on the right (if recorded)."""
    import io

    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    import matplotlib.pyplot as plt

    if not history.get("loss"):
        raise ValueError("history has no 'loss': nothing to plot.")
    epochs = range(1, len(history["loss"]) + 1)
    has_bleu = bool(history.get("val_bleu"))
    figure, axes = plt.subplots(
        1, 2 if has_bleu else 1, figsize=(11 if has_bleu else 6, 4), squeeze=False
    )
    loss_axis = axes[0][0]
    for key, label in (("loss", "train loss (label-smoothed)"), ("val_loss", "validation loss")):
        if history.get(key):
            loss_axis.plot(epochs[: len(history[key])], history[key], marker="o", label=label)
    loss_axis.set_xlabel("epoch")
    loss_axis.set_ylabel("loss")
    loss_axis.legend()
    loss_axis.grid(alpha=0.3)
    if has_bleu:
        score_axis = axes[0][1]
        for key, label in (("val_bleu", "validation BLEU"), ("val_chrf", "validation chrF")):
            if history.get(key):
                score_axis.plot(epochs[: len(history[key])], history[key], marker="o", label=label)
        score_axis.set_xlabel("epoch")
        score_axis.set_ylabel("score (sacrebleu)")
        score_axis.legend()
        score_axis.grid(alpha=0.3)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    write_atomically({Path(path): buffer.getvalue()})
    return Path(path)
