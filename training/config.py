"""Training configs: YAML files in ``training/configs/`` plus ``--set a.b=value``
overrides; the resolved config is saved in the work directory
(``keras_transformer.Workdir.save_config``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
# data.prepare: train on the workdir's prepared shards when it has them (auto), prepare them
# on the first run (true), or always read the text (false).
PREPARE_MODES = ("auto", True, False)


def config_path(name_or_path: str) -> Path:
    """``demo`` → ``training/configs/demo.yaml``; an existing path is used as is."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ValueError(f"Config file {path} does not exist.")
        return path
    candidate = CONFIG_DIR / f"{name_or_path}.yaml"
    if not candidate.exists():
        known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
        raise ValueError(f"Unknown config {name_or_path!r}; use one of {known} or a YAML path.")
    return candidate


def load_config(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The config as nested dicts, with each ``section.key=value`` override applied.

    Values are parsed as YAML (``true``, ``3``, ``1e-3``, ``[1, 2]``). Only keys
    present in the file can be set, so a typo fails instead of being ignored;
    keys under a ``model`` section are free (they are TransformerConfig fields,
    validated there).
    """
    path = config_path(name_or_path)
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"{path} is not valid YAML: {error}") from error
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a mapping of sections (data, tokenizer, model, training, ...).")
    for override in overrides:
        apply_override(config, override)
    return config


def apply_override(config: dict[str, Any], override: str) -> None:
    if "=" not in override:
        raise ValueError(f"Override {override!r} must look like section.key=value.")
    dotted, raw = override.split("=", 1)
    keys = dotted.strip().split(".")
    node = config
    for depth, key in enumerate(keys[:-1]):
        if not isinstance(node.get(key), dict):
            raise ValueError(f"Override {override!r}: {'.'.join(keys[:depth + 1])!r} is not a config section.")
        node = node[key]
    last = keys[-1]
    if last not in node and keys[0] != "model":
        raise ValueError(
            f"Override {override!r}: no key {last!r} in section {'.'.join(keys[:-1]) or '<root>'!r}; "
            f"known keys: {sorted(node)}."
        )
    try:
        node[last] = yaml.safe_load(raw)
    except yaml.YAMLError as error:
        raise ValueError(f"Override {override!r}: the value is not valid YAML ({error}).") from error


def check_prepare_mode(config: dict[str, Any]) -> None:
    """Raise ``ValueError`` unless ``data.prepare`` is one of ``PREPARE_MODES``."""
    mode = (config.get("data") or {}).get("prepare", "auto")
    if not (mode == "auto" or mode is True or mode is False):
        raise ValueError(f"data.prepare={mode!r}: use auto (the prepared shards when the workdir has them), "
                         "true (prepare them on the first run) or false.")
