"""A prepared corpus's ``manifest.json``: what its shards hold and what made them.

``PreparedShards`` is the manifest read back; ``preparation_fingerprint``
describes what decides the examples (tokenizer models, limits, length
filter, the source), so that ``PreparedShards.check`` finds a preparation
made with other settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.data.tokenizing import _LengthLimits, pad_id_of

PathLike = str | os.PathLike
FORMAT = 1
MANIFEST = "manifest.json"


class PreparationError(ValueError):
    """A folder that holds no usable prepared corpus; the message says what to do."""


class StalePreparationError(PreparationError):
    """A prepared corpus made with other tokenizers, limits or source than asked for."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tokenizer_digest(tokenizer) -> str:
    """What identifies a tokenizer's ids: its SentencePiece model, and for a
    tokenizer with its own vocabulary (``MarianSubwordTokenizer``) that
    vocabulary and its special ids too."""
    vocabulary = getattr(tokenizer, "vocabulary", None)
    if vocabulary is None:
        return _sha256(tokenizer.model_bytes)
    ids = [tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id]
    return _sha256(tokenizer.model_bytes + json.dumps([list(vocabulary), ids]).encode("utf-8"))


def special_ids_of(src_tokenizer, tgt_tokenizer) -> dict[str, int]:
    """The ids reading a prepared corpus adds back: the source's EOS, the
    target's BOS and EOS, and the pad id of both."""
    return {
        "pad_id": pad_id_of(src_tokenizer, tgt_tokenizer),
        "src_eos_id": int(src_tokenizer.eos_id),
        "tgt_bos_id": int(tgt_tokenizer.bos_id),
        "tgt_eos_id": int(tgt_tokenizer.eos_id),
    }


# The special ids of a corpus prepared before manifests recorded them (SubwordTokenizer's).
DEFAULT_SPECIAL_IDS = {
    "pad_id": PAD_ID,
    "src_eos_id": EOS_ID,
    "tgt_bos_id": BOS_ID,
    "tgt_eos_id": EOS_ID,
}


def preparation_fingerprint(
    src_tokenizer,
    tgt_tokenizer,
    *,
    max_src_length: int,
    max_tgt_length: int,
    length_filter: str,
    source: Any = None,
) -> dict[str, Any]:
    """Describes what decides which examples a preparation holds, as a JSON-able dict.

    The shuffle seed and shard size are not part of it: they change the order
    and the files, not the examples.

    Args:
        src_tokenizer: the source-side tokenizer (its model is hashed).
        tgt_tokenizer: the target-side tokenizer.
        max_src_length: the source length limit.
        max_tgt_length: the target length limit.
        length_filter: ``"drop"`` or ``"truncate"``.
        source: a JSON-serializable description of the corpus (e.g. a config's
            ``data`` section).

    Returns:
        The fingerprint, a dict that ``json.dumps`` accepts.
    """
    limits = _LengthLimits(max_src_length, max_tgt_length, length_filter)
    return _fingerprint(src_tokenizer, tgt_tokenizer, limits, source)


def _fingerprint(
    src_tokenizer, tgt_tokenizer, limits: _LengthLimits, source: Any
) -> dict[str, Any]:
    """``preparation_fingerprint`` of limits held together."""
    try:
        source = json.loads(json.dumps(source, sort_keys=True))
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"source must be JSON-serializable (a dict of settings, a name), got {source!r}."
        ) from error
    return {
        "format": FORMAT,
        "src_tokenizer": _tokenizer_digest(src_tokenizer),
        "tgt_tokenizer": _tokenizer_digest(tgt_tokenizer),
        "max_src_length": int(limits.max_src_length),
        "max_tgt_length": int(limits.max_tgt_length),
        "length_filter": limits.length_filter,
        "source": source,
    }


@dataclasses.dataclass(frozen=True)
class PreparedShards:
    """A prepared corpus, as its ``manifest.json`` describes it.

    ``prepare_shards`` writes one and ``PreparedShards.load`` reads it back;
    ``sharded_dataset`` batches it.

    Args:
        directory: the folder of the shards.
        files: shard file names, in order.
        examples_per_file: examples in each shard.
        pairs_read: pairs the source yielded.
        dropped_too_long: pairs dropped by the length limits (``"drop"``).
        max_src_length: the source length limit applied.
        max_tgt_length: the target length limit applied.
        length_filter: ``"drop"`` or ``"truncate"``.
        id_dtype: how ids are stored (``"uint16"`` or ``"int32"``).
        seed: the shuffle's seed.
        examples_per_shard: the examples per shard asked for.
        src_tokens: ``src_ids`` over all examples, EOS included.
        tgt_tokens: ``tgt_out_ids`` over all examples, EOS included.
        longest_src: the longest ``src_ids``.
        longest_tgt: the longest ``tgt_out_ids``.
        fingerprint: ``preparation_fingerprint`` of what made it.
        special_ids: the ids reading adds back (pad, the source's EOS, the
            target's BOS and EOS).
    """

    directory: Path
    files: tuple[str, ...]
    examples_per_file: tuple[int, ...]
    pairs_read: int
    dropped_too_long: int
    max_src_length: int
    max_tgt_length: int
    length_filter: str
    id_dtype: str
    seed: int
    examples_per_shard: int
    src_tokens: int
    tgt_tokens: int
    longest_src: int
    longest_tgt: int
    fingerprint: dict[str, Any]
    special_ids: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_SPECIAL_IDS)
    )

    @property
    def examples(self) -> int:
        """The examples over all shards."""
        return sum(self.examples_per_file)

    @property
    def paths(self) -> tuple[Path, ...]:
        """The shard files' paths, in order."""
        return tuple(self.directory / name for name in self.files)

    @staticmethod
    def exists(directory: PathLike) -> bool:
        """Tells whether ``directory`` holds a manifest (``load`` checks the rest).

        Args:
            directory: the folder to look in.

        Returns:
            ``True`` when ``directory/manifest.json`` exists.
        """
        return (Path(directory) / MANIFEST).is_file()

    @classmethod
    def load(cls, directory: PathLike) -> PreparedShards:
        """Reads a prepared corpus from its ``manifest.json``.

        Args:
            directory: the folder ``prepare_shards`` wrote.

        Returns:
            The ``PreparedShards``.

        Raises:
            PreparationError: the manifest is missing, of another format, or names
                a shard that is not there.
        """
        directory = Path(directory)
        path = directory / MANIFEST
        if not path.is_file():
            raise PreparationError(
                f"{directory} holds no prepared corpus ({path} not found); "
                "write one with prepare_shards (kt prepare)."
            )
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            if manifest.get("format") != FORMAT:
                raise PreparationError(
                    f"{path} is format {manifest.get('format')!r}, this library reads "
                    f"format {FORMAT}: prepare the corpus again."
                )
            fields = {field.name for field in dataclasses.fields(cls)} - {
                "directory",
                "files",
                "examples_per_file",
            }
            shards = manifest["shards"]
            prepared = cls(
                directory=directory,
                files=tuple(shard["file"] for shard in shards),
                examples_per_file=tuple(int(shard["examples"]) for shard in shards),
                **{name: manifest[name] for name in fields if name != "special_ids"},
                special_ids=manifest.get("special_ids", DEFAULT_SPECIAL_IDS),
            )
            if set(prepared.special_ids) != set(DEFAULT_SPECIAL_IDS):
                raise ValueError(f"special_ids holds {sorted(prepared.special_ids)}")
        except (KeyError, TypeError, ValueError) as error:
            if isinstance(error, PreparationError):
                raise
            raise PreparationError(
                f"{path} is not a prepared corpus's manifest ({error!r}): prepare the corpus again."
            ) from error
        missing = [p.name for p in prepared.paths if not p.is_file()]
        if missing:
            raise PreparationError(
                f"{directory} lacks shard(s) {', '.join(missing[:3])} named in its "
                "manifest: prepare the corpus again."
            )
        return prepared

    def to_json(self) -> dict[str, Any]:
        """Gives the manifest's content.

        Returns:
            The fields as a JSON-able dict, the shards listed with their counts.
        """
        record = {"format": FORMAT, "examples": self.examples}
        for field in dataclasses.fields(self):
            if field.name not in ("directory", "files", "examples_per_file"):
                record[field.name] = getattr(self, field.name)
        record["shards"] = [
            {"file": name, "examples": count}
            for name, count in zip(self.files, self.examples_per_file)
        ]
        return record

    def check(
        self,
        src_tokenizer,
        tgt_tokenizer,
        *,
        max_src_length: int,
        max_tgt_length: int,
        length_filter: str = "drop",
        source: Any = None,
    ) -> PreparedShards:
        """Checks that the shards were made with these tokenizers, limits and source.

        Args:
            src_tokenizer: the source-side tokenizer training uses.
            tgt_tokenizer: the target-side tokenizer training uses.
            max_src_length: the source length limit training uses.
            max_tgt_length: the target length limit training uses.
            length_filter: ``"drop"`` or ``"truncate"``.
            source: the corpus description given to ``prepare_shards``.

        Returns:
            ``self``, when everything matches.

        Raises:
            StalePreparationError: something differs; the message names it.
        """
        wanted = preparation_fingerprint(
            src_tokenizer,
            tgt_tokenizer,
            max_src_length=max_src_length,
            max_tgt_length=max_tgt_length,
            length_filter=length_filter,
            source=source,
        )
        differ = [key for key in wanted if self.fingerprint.get(key) != wanted[key]]
        if differ:
            details = "; ".join(
                f"{key}: prepared with {_short(self.fingerprint.get(key))}, now "
                f"{_short(wanted[key])}"
                for key in differ
            )
            raise StalePreparationError(
                f"the prepared corpus in {self.directory} is stale ({details})."
            )
        return self


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
