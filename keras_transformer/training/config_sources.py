"""``data.sources``: several corpora, each with a weight, a tag and a name, as typed values.

Used by ``run_config``; imports no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
import typing
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from keras_transformer.training.config_checks import admits, allowed_values, describe, unknown_key

# The keys of one corpus in data.sources: those of a single-corpus data section, plus its share
# of the training pairs (weight), the token put before its source sentences (tag) and a name.
CORPUS_KEYS = ("kind", "dir", "synthetic", "tsv", "tfds")
SOURCE_KEYS = (*CORPUS_KEYS, "weight", "tag", "name")


@dataclasses.dataclass(frozen=True)
class CorpusSource:
    """One corpus of ``data.sources``: where it is read, its weight, tag and name."""

    kind: Literal["synthetic", "text", "tsv", "tfds"] = "text"
    dir: str | None = None
    synthetic: dict | None = None
    tsv: dict | None = None
    tfds: dict | None = None
    weight: float = 1.0  # its share of the sampled training pairs, relative to the others
    tag: str | None = None  # the piece put before each of its source sentences
    name: str = ""  # given, or made from where it is read (``_source_name``)

    def corpus(self) -> dict[str, Any]:
        """Where it is read, as a single-corpus ``data`` section (``load_corpus``)."""
        return {key: getattr(self, key) for key in CORPUS_KEYS}

    def to_dict(self) -> dict[str, Any]:
        """The corpus as ``data.sources`` lists it, the unused corpus keys left out."""
        return {
            "kind": self.kind,
            **{key: getattr(self, key) for key in CORPUS_KEYS[1:] if getattr(self, key)},
            "weight": self.weight,
            "tag": self.tag,
            "name": self.name,
        }


def _source_name(source: Mapping[str, Any], index: int) -> str:
    """A corpus's ``name``, or one made from where it is read."""
    if source.get("name"):
        return str(source["name"])
    for path in (source.get("dir"), (source.get("tsv") or {}).get("train")):
        if path:
            return Path(str(path)).name
    if (source.get("tfds") or {}).get("name"):
        return str(source["tfds"]["name"])
    return f"{source.get('kind', 'text')}{index}"


def check_tag(tag: Any, where: str) -> None:
    """Raise ``ValueError`` unless ``tag`` can be a reserved piece of the tokenizer: a
    non-empty string without whitespace (a tag is one piece, written before a sentence)."""
    if not isinstance(tag, str) or not tag:
        raise ValueError(f"{where}={tag!r}: a tag is a non-empty string such as '<bt>' or '<fr>'.")
    if any(character.isspace() for character in tag) or "\u2581" in tag:
        raise ValueError(
            f"{where}={tag!r}: a tag is one piece of the tokenizer and cannot hold whitespace "
            "(or '\u2581'); use e.g. '<bt>'."
        )
    if unicodedata.normalize("NFKC", tag) != tag:
        raise ValueError(
            f"{where}={tag!r}: the tokenizer's NFKC normalisation changes it, so it would not stay "
            f"one piece; write it as {unicodedata.normalize('NFKC', tag)!r}."
        )


def corpus_sources(data: Mapping[str, Any]) -> tuple[CorpusSource, ...] | None:
    """``data.sources`` checked, each corpus with its defaults (``kind: text``, ``weight: 1``,
    ``tag: null``, a ``name``), or ``None`` for a single-corpus ``data`` section.

    Args:
        data: the ``data`` section, as a mapping.

    Returns:
        The corpora, in order, or ``None`` without ``data.sources``.

    Raises:
        ValueError: ``sources`` is not a non-empty list of mappings, a corpus has an unknown
            key, a value of the wrong type, a weight that is not a positive number or a tag
            that cannot be one piece, or ``eval_source`` names no corpus.
    """
    sources = data.get("sources")
    if sources is None:
        return None
    if isinstance(sources, tuple) and all(isinstance(s, CorpusSource) for s in sources):
        sources = [source.to_dict() for source in sources]
    if not isinstance(sources, list) or not sources:
        raise ValueError(
            f"data.sources={sources!r}: list one corpus or more, e.g. [{{kind: text, dir: DIR, "
            "weight: 1}}, {kind: text, dir: DIR2, weight: 2, tag: '<bt>'}]; or drop the key for "
            "a single corpus."
        )
    hints = typing.get_type_hints(CorpusSource)
    resolved = []
    for index, source in enumerate(sources):
        where = f"data.sources[{index}]"
        if not isinstance(source, Mapping):
            raise ValueError(
                f"{where}={source!r}: each corpus is a mapping such as "
                "{kind: text, dir: DIR, weight: 1}."
            )
        for key in source:
            if key not in SOURCE_KEYS:
                raise ValueError(unknown_key("data.sources", f"{where}.{key}", SOURCE_KEYS))
        for key in CORPUS_KEYS:
            if key in source:
                allowed = allowed_values(hints[key])
                if not admits(allowed, source[key]):
                    raise ValueError(f"{where}.{key}={source[key]!r}: use {describe(allowed)}.")
        weight = source.get("weight", 1)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not math.isfinite(weight)
            or weight <= 0
        ):
            raise ValueError(
                f"{where}.weight={weight!r}: use a positive number (the corpus's share of the "
                "sampled training pairs, relative to the other weights)."
            )
        tag = source.get("tag")
        if tag is not None:
            check_tag(tag, f"{where}.tag")
        if source.get("name") is not None and not isinstance(source["name"], str):
            raise ValueError(f"{where}.name={source['name']!r}: use a string.")
        resolved.append(
            CorpusSource(
                **{key: source[key] for key in CORPUS_KEYS if key in source},
                weight=float(weight),
                tag=tag,
                name=_source_name(source, index),
            )
        )
    resolved = tuple(resolved)
    eval_source_index(data.get("eval_source", 0), resolved)
    return resolved


def eval_source_index(chosen: int | str, sources: Sequence[CorpusSource]) -> int:
    """The index in ``sources`` of the corpus that ``data.eval_source`` (``chosen``: an
    index, or a corpus's ``name``) names. Raises ``ValueError`` when it names none."""
    if isinstance(chosen, int) and not isinstance(chosen, bool):
        if not 0 <= chosen < len(sources):
            raise ValueError(
                f"data.eval_source={chosen}: use an index of data.sources (0 to "
                f"{len(sources) - 1}) or a corpus's name."
            )
        return chosen
    names = [source.name for source in sources]
    if names.count(chosen) != 1:
        raise ValueError(
            f"data.eval_source={chosen!r}: "
            + ("no corpus has that name" if chosen not in names else "several corpora have it")
            + f"; the names are {names} (or use an index)."
        )
    return names.index(chosen)
