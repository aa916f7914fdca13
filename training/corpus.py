"""Where the training text comes from: the generated demo pairs or aligned files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from keras_transformer.data import demo_splits, read_text_file_pairs, read_tsv_pairs, tfds_pairs

SPLITS = ("train", "valid", "test")


def load_corpus(data: dict[str, Any], base_dir: Path | None = None) -> dict[str, list[tuple[str, str]]]:
    """``{"train": [(src, tgt), ...], "valid": ..., "test": ...}`` (test may be empty).

    - ``kind: synthetic`` generates the demo language pair from a seed;
    - ``kind: text`` reads ``{dir}/{split}.src`` / ``.tgt``;
    - ``kind: tsv`` reads ``tsv: {train: PATH, valid: PATH, test: PATH}`` (source
      and target in the first two columns);
    - ``kind: tfds`` loads ``tfds: {name, train, valid, test, data_dir}`` splits
      of a TFDS translation dataset (e.g. ``ted_hrlr_translate/pt_to_en``).

    Relative paths are resolved against ``base_dir`` (normally the checkout).
    """
    kind = data.get("kind")
    if kind == "synthetic":
        sizes = data["synthetic"]
        return demo_splits(train=sizes["train"], valid=sizes["valid"], test=sizes["test"],
                           seed=sizes.get("seed", 0))
    if kind == "text":
        if not data.get("dir"):
            raise ValueError("data.kind=text needs data.dir (a folder with train.src/train.tgt, ...).")
        directory = _resolve(data["dir"], base_dir)
        splits = {}
        for split in SPLITS:
            src, tgt = directory / f"{split}.src", directory / f"{split}.tgt"
            if not src.exists():
                if split == "train":
                    raise ValueError(f"No training data: {src} does not exist (check data.dir).")
                splits[split] = []
                continue
            splits[split] = _pairs(read_text_file_pairs(src, tgt))
        return splits
    if kind == "tsv":
        paths = data.get("tsv") or {}
        if not paths.get("train"):
            raise ValueError("data.kind=tsv needs data.tsv.train (a TSV file of source<TAB>target).")
        return {split: _pairs(read_tsv_pairs(_resolve(paths[split], base_dir))) if paths.get(split) else []
                for split in SPLITS}
    if kind == "tfds":
        options = data.get("tfds") or {}
        if not options.get("name"):
            raise ValueError("data.kind=tfds needs data.tfds.name, e.g. ted_hrlr_translate/pt_to_en.")
        return {
            split: _decode_pairs(tfds_pairs(options["name"], options[split], data_dir=options.get("data_dir")))
            if options.get(split) else []
            for split in SPLITS
        }
    raise ValueError(f"data.kind must be one of synthetic, text, tsv, tfds; got {kind!r}.")


def _resolve(path: str, base_dir: Path | None) -> Path:
    path = Path(path)
    return path if path.is_absolute() or base_dir is None else base_dir / path


def _pairs(text) -> list[tuple[str, str]]:
    return list(zip(text.sources, text.targets))


def _decode_pairs(dataset) -> list[tuple[str, str]]:
    """A TFDS split in memory: tokenizer training and the pipeline need the text."""
    return [(source.decode("utf-8"), target.decode("utf-8"))
            for source, target in dataset.as_numpy_iterator()]
