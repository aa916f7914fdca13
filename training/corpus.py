"""Where the training text comes from: the generated demo pairs or aligned files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from keras_transformer.data import demo_splits, read_text_file_pairs

SPLITS = ("train", "valid", "test")


def load_corpus(data: dict[str, Any], base_dir: Path | None = None) -> dict[str, list[tuple[str, str]]]:
    """``{"train": [(src, tgt), ...], "valid": ..., "test": ...}`` (test may be empty).

    ``kind: synthetic`` generates the demo language pair from a seed;
    ``kind: text`` reads ``{dir}/{split}.src`` / ``.tgt`` (relative ``dir`` is
    resolved against ``base_dir``, normally the checkout).
    """
    kind = data.get("kind")
    if kind == "synthetic":
        sizes = data["synthetic"]
        return demo_splits(train=sizes["train"], valid=sizes["valid"], test=sizes["test"],
                           seed=sizes.get("seed", 0))
    if kind == "text":
        if not data.get("dir"):
            raise ValueError("data.kind=text needs data.dir (a folder with train.src/train.tgt, ...).")
        directory = Path(data["dir"])
        if not directory.is_absolute() and base_dir is not None:
            directory = base_dir / directory
        splits = {}
        for split in SPLITS:
            src, tgt = directory / f"{split}.src", directory / f"{split}.tgt"
            if not src.exists():
                if split == "train":
                    raise ValueError(f"No training data: {src} does not exist (check data.dir).")
                splits[split] = []
                continue
            text = read_text_file_pairs(src, tgt)
            splits[split] = list(zip(text.sources, text.targets))
        return splits
    raise ValueError(f"data.kind must be 'synthetic' or 'text', got {kind!r}.")
