"""Where the training text comes from: the generated demo pairs, aligned files or TFDS; one
corpus, or several (``data.sources``) sampled by weight, each with an optional tag."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from keras_transformer.data import PairSource, demo_splits
from keras_transformer.tokenization import sample_sentences
from keras_transformer.training.run_config import DataSection, resolve_path

SPLITS = ("train", "valid", "test")


@dataclasses.dataclass(frozen=True)
class WeightedSource:
    """One training corpus of ``data.sources``: its pairs, weight and tag."""

    name: str
    pairs: PairSource
    weight: float
    tag: str | None = None


@dataclasses.dataclass(frozen=True)
class SourceMix:
    """The training split of several corpora: each pair is drawn from corpus i with
    probability ``shares[i]`` (its weight over the sum of the weights)."""

    sources: tuple[WeightedSource, ...]

    def __len__(self) -> int:
        return sum(len(source.pairs) for source in self.sources)

    @property
    def shares(self) -> list[float]:
        total = sum(source.weight for source in self.sources)
        return [source.weight / total for source in self.sources]

    @property
    def tags(self) -> list[str]:
        """The distinct tags, in the order of the corpora."""
        return list(dict.fromkeys(source.tag for source in self.sources if source.tag))

    def describe(self) -> list[dict[str, Any]]:
        """Per corpus: name, pairs, weight, share and tag (for the log and metrics.json)."""
        return [
            {
                "name": source.name,
                "pairs": len(source.pairs),
                "weight": source.weight,
                "share": round(share, 6),
                "tag": source.tag,
            }
            for source, share in zip(self.sources, self.shares)
        ]

    def sentences(self, side: str, size: int | None, seed: int = 0) -> list[str]:
        """``side`` of as many pairs as the corpora hold (at most ``size``), drawn by weight:
        corpus i gives ``round(n * shares[i])`` of the n, its whole text repeated as often as
        that exceeds it and a seeded uniform sample of the rest. Tags are left out."""
        size = len(self) if size is None else min(size, len(self))
        text: list[str] = []
        for index, (source, share) in enumerate(zip(self.sources, self.shares)):
            quota = round(size * share)
            pairs = len(source.pairs)
            whole, rest = divmod(quota, pairs)
            if whole:
                text += list(source.pairs.sentences(side)) * whole
            if rest:
                text += sample_sentences(source.pairs.sentences(side), rest, seed=seed + index)
        return text


def tagged(pairs: list[tuple[str, str]], tag: str | None) -> list[tuple[str, str]]:
    """``pairs`` with ``tag`` and a space put before each source sentence (unchanged without)."""
    if not tag:
        return pairs
    return [(f"{tag} {source}", target) for source, target in pairs]


def load_sources(data: DataSection, base_dir: Path | None = None) -> dict[str, Any]:
    """``load_corpus`` for ``data.sources``: ``train`` is a ``SourceMix``; ``valid`` and
    ``test`` are those of ``data.eval_source`` (the first corpus by default), tagged with
    its tag. A corpus that cannot be read is a ``ValueError`` naming it."""
    chosen = data.eval_source_index()
    weighted, evaluation = [], None
    for index, source in enumerate(data.sources):
        label = f"data.sources[{index}] ({source.name})"
        try:
            splits = load_corpus(source.corpus(), base_dir)
        except (ValueError, FileNotFoundError) as error:
            raise ValueError(f"{label}: {error}") from error
        if not len(splits["train"]):
            raise ValueError(f"{label}: the training split has no pairs.")
        weighted.append(WeightedSource(source.name, splits["train"], source.weight, source.tag))
        if index == chosen:
            evaluation = {split: tagged(splits[split], source.tag) for split in SPLITS[1:]}
    return {"train": SourceMix(tuple(weighted)), **evaluation}


def load_corpus(
    data: DataSection | Mapping[str, Any], base_dir: Path | None = None
) -> dict[str, Any]:
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

    With ``data.sources`` (several corpora, each a mapping of the keys above plus
    ``weight``, ``tag`` and ``name``), ``train`` is a ``SourceMix`` (``load_sources``).

    Relative paths are resolved against ``base_dir``, or without one by
    ``run_config.resolve_path`` (the current folder, then a source checkout).

    Args:
        data: the config's ``data`` section, or one corpus's keys (kind, dir, synthetic,
            tsv, tfds) as a mapping.
        base_dir: what relative paths are relative to (``None``: ``resolve_path``).
    """
    if isinstance(data, DataSection):
        if data.sources is not None:
            return load_sources(data, base_dir)
        data = data.corpus()
    kind = data.get("kind")
    if kind == "synthetic":
        sizes = data.get("synthetic")
        if not isinstance(sizes, dict) or "train" not in sizes:
            raise ValueError(
                "data.kind=synthetic needs data.synthetic: {train: N, valid: N, test: N, seed: S}."
            )
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
    if base_dir is None:
        return resolve_path(path)
    return path if path.is_absolute() else base_dir / path


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
