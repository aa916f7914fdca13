"""Where the training text comes from: the generated demo pairs, aligned files or TFDS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from keras_transformer.data import PairSource, demo_splits

SPLITS = ("train", "valid", "test")


def load_corpus(data: dict[str, Any], base_dir: Path | None = None) -> dict[str, Any]:
    """``{"train": PairSource, "valid": [(src, tgt), ...], "test": [...]}``; valid, test may be [].

    The training split is a ``PairSource``: streamed, never read into memory
    whole (``len`` scans it once; ``dataset()`` feeds the pipeline; iterating
    gives ``(src, tgt)`` pairs). Valid and test are small and read into lists,
    with the same cleaning (evaluation needs their text).

    - ``kind: synthetic`` generates the demo language pair from a seed;
    - ``kind: text`` reads ``{dir}/{split}.src`` / ``.tgt`` (or ``.src.gz`` / ``.tgt.gz``);
    - ``kind: tsv`` reads ``tsv: {train: PATH, valid: PATH, test: PATH}`` (source
      and target in the first two columns; ``.gz`` read through gzip);
    - ``kind: tfds`` loads ``tfds: {name, train, valid, test, data_dir}`` splits
      of a TFDS translation dataset (e.g. ``ted_hrlr_translate/pt_to_en``), in
      the builder's direction or, with ``src_key``/``tgt_key``, the features named.

    Relative paths are resolved against ``base_dir`` (normally the checkout).
    """
    kind = data.get("kind")
    if kind == "synthetic":
        sizes = data["synthetic"]
        splits = demo_splits(
            train=sizes["train"],
            valid=sizes["valid"],
            test=sizes["test"],
            seed=sizes.get("seed", 0),
        )
        return {
            "train": PairSource.from_pairs(splits["train"]),
            "valid": splits["valid"],
            "test": splits["test"],
        }
    if kind == "text":
        if not data.get("dir"):
            raise ValueError(
                "data.kind=text needs data.dir (a folder with train.src/train.tgt, ...)."
            )
        directory = _resolve(data["dir"], base_dir)
        sources = {}
        for split in SPLITS:
            src, tgt = _text_files(directory, split)
            if src is None:
                if split == "train":
                    raise ValueError(
                        f"No training data: {directory / 'train.src'} does not exist "
                        "(check data.dir)."
                    )
                continue
            sources[split] = PairSource.from_text_files(src, tgt)
        return _splits(sources)
    if kind == "tsv":
        paths = data.get("tsv") or {}
        if not paths.get("train"):
            raise ValueError(
                "data.kind=tsv needs data.tsv.train (a TSV file of source<TAB>target)."
            )
        return _splits(
            {
                split: PairSource.from_tsv(_resolve(paths[split], base_dir))
                for split in SPLITS
                if paths.get(split)
            }
        )
    if kind == "tfds":
        options = data.get("tfds") or {}
        if not options.get("name"):
            raise ValueError(
                "data.kind=tfds needs data.tfds.name, e.g. ted_hrlr_translate/pt_to_en."
            )
        if not options.get("train"):
            raise ValueError(
                "data.kind=tfds needs data.tfds.train, the training split's name (e.g. train)."
            )
        return _splits(
            {
                split: PairSource.from_tfds(
                    options["name"],
                    options[split],
                    src_key=options.get("src_key"),
                    tgt_key=options.get("tgt_key"),
                    data_dir=options.get("data_dir"),
                )
                for split in SPLITS
                if options.get(split)
            }
        )
    raise ValueError(f"data.kind must be one of synthetic, text, tsv, tfds; got {kind!r}.")


def _resolve(path: str, base_dir: Path | None) -> Path:
    path = Path(path)
    return path if path.is_absolute() or base_dir is None else base_dir / path


def _text_files(directory: Path, split: str) -> tuple[Path | None, Path | None]:
    """``{split}.src`` / ``.tgt``, or their ``.gz``; ``(None, None)`` without a source file."""
    for suffix in ("", ".gz"):
        src = directory / f"{split}.src{suffix}"
        if src.exists():
            return src, directory / f"{split}.tgt{suffix}"
    return None, None


def _splits(sources: dict[str, PairSource]) -> dict[str, Any]:
    """The training split streamed, valid/test read into lists of pairs."""
    splits: dict[str, Any] = {"train": sources["train"]}
    for split in ("valid", "test"):
        splits[split] = list(sources[split]) if split in sources else []
    return splits
