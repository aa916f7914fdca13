"""Pretrained OPUS-MT (Marian) translators, imported into a workdir.

The ~1,500 OPUS-MT models of the Helsinki-NLP group ("MarianMT" in Hugging Face
``transformers``) are this project's model: the paper's post-LN Transformer with
sinusoidal positions, shared embeddings, a tied output projection and
SentencePiece. ``import_marian`` turns a Hugging Face Marian checkpoint directory
into a standard workdir, which every program reads like a trained one
(evaluation, decoding tuning, the SavedModel, TFLite and CTranslate2 exporters,
``Translator.from_workdir``) and which ``kt train`` can fine-tune
(``--set model.init_from=W``).

A checkpoint directory is what ``save_pretrained`` writes, or what a hub download
gives::

    config.json             the MarianConfig
    model.safetensors       the weights (or pytorch_model.bin, see below)
    source.spm, target.spm  the SentencePiece models
    vocab.json              piece → id, shared by both sides
    tokenizer_config.json   the special tokens

Weights are read with the ``safetensors`` package's NumPy API, so importing needs
no PyTorch (``pip install "keras-transformer-nmt[marian]"``). A
``pytorch_model.bin`` is a pickle, which can run code when it is read: it is read
only with ``allow_pickle=True`` (``--allow-pickle``), and needs ``torch``.

What maps onto what (the ``TransformerConfig`` options that express Marian):

=================================  ===========================================
``config.json``                    ``TransformerConfig``
=================================  ===========================================
``d_model``                        ``d_model``
``encoder_layers``/``decoder_...``  ``num_encoder_layers``/``num_decoder_layers``
``*_attention_heads``              ``num_heads`` (equal on both sides)
``*_ffn_dim``                      ``d_ff`` (equal on both sides)
``activation_function``            ``activation`` (``swish``/``silu`` → ``swish``)
``max_position_embeddings``        ``max_length``
(sin features, then cos)           ``position_encoding="halves"``
``scale_embedding``                ``embedding_scale`` (``None`` = √d_model, or 1.0)
``final_logits_bias``              ``final_logits_bias=True``
``pad_token_id``                   ``pad_id``
``decoder_start_token_id``         ``bos_id`` (the pad id: the decoder starts from it)
``eos_token_id``                   ``eos_id``
``<unk>`` of ``vocab.json``         ``unk_id``
(PyTorch's LayerNorm)              ``layer_norm_epsilon=1e-5``
``dropout``, ``attention_dropout``,  the same, for fine-tuning
``activation_dropout``
=================================  ===========================================

Supported: the bilingual OPUS-MT models (``opus-mt-SRC-TGT``) and the
``opus-mt-tc-*`` models with one shared vocabulary. Multilingual models whose
target language is chosen by a token such as ``>>fra<<`` import too: the token
goes at the start of each source sentence, as with ``MarianTokenizer``.
Refused with a message that says why: pre-LN or embedding-LayerNorm variants
(``normalize_before``, ``normalize_embedding``), learned positions, an output
projection that is not tied to the embeddings, and different encoder and
decoder widths.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from keras_transformer.config import TransformerConfig
from keras_transformer.files import replace_directory, staging_directory, write_through_temp
from keras_transformer.layers.positional import sinusoidal_table
from keras_transformer.tokenization import load_marian_tokenizers
from keras_transformer.workdir import Workdir

PathLike = str | os.PathLike

# The files a Hugging Face Marian checkpoint directory holds (the weights aside).
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json")
OPTIONAL_TOKENIZER_FILES = ("target_vocab.json", "special_tokens_map.json")
SAFETENSORS = "model.safetensors"
PICKLE = "pytorch_model.bin"
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which Marian uses
DEFAULT_MAX_LENGTH = 512  # MarianTokenizer's model_max_length
# config.json keys of older conversions that describe other architectures: (key, the value Marian
# has).
_MARIAN_ONLY = {
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "static_position_embeddings": True,
    "tie_word_embeddings": True,
}


class CheckpointError(ValueError):
    """A checkpoint directory this importer cannot read; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class MarianCheckpoint:
    """A Hugging Face Marian checkpoint directory, read and checked.

    Make one with ``MarianCheckpoint.read``.

    Args:
        path: the directory.
        hf_config: its ``config.json``.
        config: the ``TransformerConfig`` that computes the same function.
        weights_file: ``model.safetensors`` or ``pytorch_model.bin``.
    """

    path: Path
    hf_config: dict
    config: TransformerConfig
    weights_file: Path

    @classmethod
    def read(cls, path: PathLike, allow_pickle: bool = False) -> MarianCheckpoint:
        """Reads and checks a checkpoint directory.

        Args:
            path: the folder ``save_pretrained`` wrote (or a downloaded OPUS-MT model).
            allow_pickle: accept ``pytorch_model.bin`` when there is no
                ``model.safetensors`` (a pickle runs code: only for trusted files).

        Returns:
            The ``MarianCheckpoint``.

        Raises:
            CheckpointError: a file is missing or malformed, or the model is a
                variant this package cannot compute.
        """
        path = Path(path)
        if not path.is_dir():
            raise CheckpointError(
                f"{path} is not a directory: give the folder that save_pretrained wrote "
                "(or a downloaded OPUS-MT model)."
            )
        missing = [
            name for name in ("config.json", *TOKENIZER_FILES) if not (path / name).is_file()
        ]
        if missing:
            raise CheckpointError(
                f"{path} has no {', '.join(missing)}: a Marian checkpoint needs config.json, "
                f"{', '.join(TOKENIZER_FILES)} and {SAFETENSORS}."
            )
        hf_config = _read_json(path / "config.json")
        return cls(
            path,
            hf_config,
            transformer_config(hf_config, _unk_id(path)),
            _weights_file(path, allow_pickle),
        )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON ({error}).") from error


def _unk_id(path: Path) -> int:
    tokens = _read_json(path / "tokenizer_config.json")
    unk = tokens.get("unk_token", "<unk>")
    unk = unk.get("content", "<unk>") if isinstance(unk, dict) else unk
    vocab = _read_json(path / "vocab.json")
    if unk not in vocab:
        raise CheckpointError(f"{path / 'vocab.json'} has no unknown-token piece {unk!r}.")
    return int(vocab[unk])


def _weights_file(path: Path, allow_pickle: bool) -> Path:
    if (path / SAFETENSORS).is_file():
        return path / SAFETENSORS
    if (path / PICKLE).is_file():
        if not allow_pickle:
            raise CheckpointError(
                f"{path} has only {PICKLE}, a pickle, which can run code when read. Convert it to "
                f"{SAFETENSORS} (MarianMTModel.from_pretrained(dir).save_pretrained(dir)), or pass "
                "--allow-pickle (allow_pickle=True) if you trust its source (needs torch)."
            )
        return path / PICKLE
    raise CheckpointError(f"{path} has no {SAFETENSORS} (nor {PICKLE}).")


def transformer_config(hf_config: Mapping[str, Any], unk_id: int) -> TransformerConfig:
    """Maps a Marian ``config.json`` to the ``TransformerConfig`` that computes the same function.

    Args:
        hf_config: the parsed ``config.json``.
        unk_id: the unknown-token id (from ``vocab.json``).

    Returns:
        The ``TransformerConfig``.

    Raises:
        CheckpointError: the config is not Marian's, lacks a key, or describes
            a variant this model cannot compute.
    """
    c = dict(hf_config)
    if c.get("model_type") != "marian":
        raise CheckpointError(
            f"config.json has model_type={c.get('model_type')!r}; only Marian "
            "(OPUS-MT) checkpoints can be imported."
        )
    for key, marian_value in _MARIAN_ONLY.items():
        if key in c and bool(c[key]) != marian_value:
            raise CheckpointError(
                f"config.json has {key}={c[key]!r}; only the standard Marian architecture "
                f"({key}={marian_value}) can be imported."
            )
    pairs = [
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ]
    for encoder_key, decoder_key in pairs:
        if c.get(encoder_key) != c.get(decoder_key):
            raise CheckpointError(
                f"config.json has {encoder_key}={c.get(encoder_key)} but {decoder_key}="
                f"{c.get(decoder_key)}; this model needs them equal."
            )
    activation = str(c.get("activation_function", "swish")).lower()
    if activation not in ACTIVATIONS:
        raise CheckpointError(
            f"config.json has activation_function={activation!r}; supported: {sorted(ACTIVATIONS)}."
        )
    shared = bool(c.get("share_encoder_decoder_embeddings", True))
    vocab_size = int(c["vocab_size"])
    tgt_vocab_size = vocab_size if shared else int(c.get("decoder_vocab_size") or vocab_size)
    pad_id = int(c["pad_token_id"])
    start_id = c.get("decoder_start_token_id")
    start_id = pad_id if start_id is None else int(start_id)
    try:
        return TransformerConfig(
            src_vocab_size=vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            num_encoder_layers=int(c["encoder_layers"]),
            num_decoder_layers=int(c["decoder_layers"]),
            d_model=int(c["d_model"]),
            num_heads=int(c["encoder_attention_heads"]),
            d_ff=int(c["encoder_ffn_dim"]),
            dropout=float(c.get("dropout", 0.1)),
            attention_dropout=float(c.get("attention_dropout", 0.0)),
            activation_dropout=float(c.get("activation_dropout", 0.0)),
            activation=ACTIVATIONS[activation],
            norm_first=False,
            layer_norm_epsilon=LAYER_NORM_EPSILON,
            max_length=int(c["max_position_embeddings"]),
            learned_positions=False,
            position_encoding="halves",
            embedding_scale=None if c.get("scale_embedding", False) else 1.0,
            final_logits_bias=True,
            share_embeddings=shared,
            tie_embeddings=True,
            pad_id=pad_id,
            unk_id=unk_id,
            bos_id=start_id,
            eos_id=int(c["eos_token_id"]),
        )
    except KeyError as error:
        raise CheckpointError(f"config.json has no {error.args[0]!r}.") from error
    except ValueError as error:
        raise CheckpointError(
            f"config.json describes a model this package cannot build: {error}"
        ) from error


def read_weights(checkpoint: MarianCheckpoint) -> dict[str, np.ndarray]:
    """Reads the checkpoint's tensors.

    Args:
        checkpoint: the checkpoint.

    Returns:
        ``{tensor name: float32 NumPy array}``.

    Raises:
        CheckpointError: the file cannot be read, or the package it needs
            (safetensors, or torch for a pickle) is missing.
    """
    path = checkpoint.weights_file
    if path.name == SAFETENSORS:
        try:
            from safetensors.numpy import load_file
        except ImportError as error:
            raise CheckpointError(
                "reading model.safetensors needs the safetensors package: "
                'pip install "keras-transformer-nmt[marian]".'
            ) from error
        try:
            tensors = load_file(str(path))
        except Exception as error:  # safetensors raises its own SafetensorError
            raise CheckpointError(f"{path} could not be read ({error}).") from error
    else:
        try:
            import torch
        except ImportError as error:
            raise CheckpointError(
                f"reading {PICKLE} needs torch; or convert it to {SAFETENSORS}."
            ) from error
        state = torch.load(str(path), map_location="cpu", weights_only=False)
        tensors = {name: value.float().numpy() for name, value in state.items()}
    return {name: np.asarray(value, dtype=np.float32) for name, value in tensors.items()}


def _per_layer(stack: str, index: int, decoder: bool) -> dict[str, tuple[str, bool]]:
    """Our weight path → (checkpoint tensor name, transposed) for one layer."""
    ours, theirs = f"{stack}/layer_{index}", f"model.{stack}.layers.{index}"
    attentions = [("self_attention", "self_attn")] + (
        [("cross_attention", "encoder_attn")] if decoder else []
    )
    names: dict[str, tuple[str, bool]] = {}
    for our_block, their_block in attentions:
        for our_proj, their_proj in (
            ("query", "q_proj"),
            ("key", "k_proj"),
            ("value", "v_proj"),
            ("output", "out_proj"),
        ):
            names[f"{ours}/{our_block}/{our_proj}/kernel"] = (
                f"{theirs}.{their_block}.{their_proj}.weight",
                True,
            )
            names[f"{ours}/{our_block}/{our_proj}/bias"] = (
                f"{theirs}.{their_block}.{their_proj}.bias",
                False,
            )
        names[f"{ours}/{our_block}_norm/gamma"] = (
            f"{theirs}.{their_block}_layer_norm.weight",
            False,
        )
        names[f"{ours}/{our_block}_norm/beta"] = (f"{theirs}.{their_block}_layer_norm.bias", False)
    for our_proj, their_proj in (("inner", "fc1"), ("outer", "fc2")):
        names[f"{ours}/feed_forward/{our_proj}/kernel"] = (f"{theirs}.{their_proj}.weight", True)
        names[f"{ours}/feed_forward/{our_proj}/bias"] = (f"{theirs}.{their_proj}.bias", False)
    names[f"{ours}/feed_forward_norm/gamma"] = (f"{theirs}.final_layer_norm.weight", False)
    names[f"{ours}/feed_forward_norm/beta"] = (f"{theirs}.final_layer_norm.bias", False)
    return names


def _first(tensors: Mapping[str, np.ndarray], *names: str) -> str:
    for name in names:
        if name in tensors:
            return name
    raise CheckpointError(f"the checkpoint has none of {list(names)}.")


def weight_names(
    config: TransformerConfig, tensors: Mapping[str, np.ndarray]
) -> dict[str, tuple[str, bool]]:
    """Maps each weight of a ``Transformer`` built from ``config`` to its checkpoint tensor.

    PyTorch's ``Linear`` keeps ``[out, in]`` and Keras' ``Dense`` ``[in, out]``,
    so such kernels are transposed.

    Args:
        config: the model's config (``transformer_config``).
        tensors: the checkpoint's tensors by name.

    Returns:
        ``{weight path without the model's name: (tensor name, transposed)}``.

    Raises:
        CheckpointError: the checkpoint has no embedding tensor.
    """
    source = _first(tensors, "model.shared.weight", "model.encoder.embed_tokens.weight")
    names = {"source_embedding/token_embedding/embeddings": (source, False)}
    if not config.share_embeddings:
        names["target_embedding/token_embedding/embeddings"] = (
            _first(tensors, "model.decoder.embed_tokens.weight"),
            False,
        )
    for index in range(config.num_encoder_layers):
        names.update(_per_layer("encoder", index, decoder=False))
    for index in range(config.num_decoder_layers):
        names.update(_per_layer("decoder", index, decoder=True))
    names["final_logits_bias"] = ("final_logits_bias", False)
    return names


def _check_copies(
    tensors: Mapping[str, np.ndarray],
    config: TransformerConfig,
    names: Mapping[str, tuple[str, bool]],
) -> None:
    """Tensors the model does not take (``names``: ``weight_names``) must be copies
    of the embeddings it does take (tied embeddings written under several names)
    or the position tables it computes."""
    source = names["source_embedding/token_embedding/embeddings"][0]
    target = names.get("target_embedding/token_embedding/embeddings", (source,))[0]
    copies = {
        "model.shared.weight": source,
        "model.encoder.embed_tokens.weight": source,
        "model.decoder.embed_tokens.weight": target,
        "lm_head.weight": target,
    }
    used = {name for name, _ in names.values()}
    for name in sorted(set(tensors) - used):
        if name.endswith("embed_positions.weight"):
            table = sinusoidal_table(tensors[name].shape[0], config.d_model, "halves")
            if tensors[name].shape != table.shape or not np.allclose(
                tensors[name], table, atol=1e-5
            ):
                raise CheckpointError(
                    f"the checkpoint's {name} is not Marian's sinusoidal table; "
                    "only fixed sinusoidal positions can be imported."
                )
        elif name in copies:
            if not np.array_equal(tensors[name], tensors[copies[name]]):
                what = "output projection" if name == "lm_head.weight" else "embeddings"
                raise CheckpointError(
                    f"the checkpoint's {name} differs from {copies[name]}: untied {what} "
                    "cannot be imported."
                )
        else:
            raise CheckpointError(
                f"the checkpoint has a tensor this model has no place for: {name}."
            )


def load_weights(model, tensors: Mapping[str, np.ndarray]) -> None:
    """Assigns a Marian checkpoint's tensors to a built ``Transformer``.

    The model's config came from ``transformer_config``; every weight is set
    exactly once and every tensor is used (or is a copy of a used one).

    Args:
        model: the built ``Transformer``.
        tensors: the checkpoint's tensors by name (``read_weights``).

    Raises:
        CheckpointError: a weight has no tensor or the wrong shape, or a tensor
            has no place in the model.
    """
    names = weight_names(model.config, tensors)
    weights = {variable.path.split("/", 1)[1]: variable for variable in model.weights}
    unset = sorted(set(weights) - set(names))
    if unset:
        raise CheckpointError(f"no checkpoint tensor for the model's weights {unset[:5]}.")
    for path, variable in weights.items():
        name, transposed = names[path]
        if name not in tensors:
            raise CheckpointError(f"the checkpoint has no {name} (for {path}).")
        value = tensors[name].T if transposed else tensors[name]
        value = value.reshape(-1) if path == "final_logits_bias" else value
        if tuple(value.shape) != tuple(variable.shape):
            raise CheckpointError(
                f"{name} has shape {tuple(tensors[name].shape)}, but {path} needs "
                f"{tuple(variable.shape)}: config.json does not match the weights."
            )
        variable.assign(value)
    _check_copies(tensors, model.config, names)


def load_model(checkpoint: MarianCheckpoint | PathLike, allow_pickle: bool = False):
    """Builds a float32 ``Transformer`` with the checkpoint's weights.

    Args:
        checkpoint: a ``MarianCheckpoint`` or its directory.
        allow_pickle: as in ``MarianCheckpoint.read``.

    Returns:
        The built model.

    Raises:
        CheckpointError: the checkpoint cannot be read or does not fit the model.
    """
    import keras

    from keras_transformer.model import Transformer

    if not isinstance(checkpoint, MarianCheckpoint):
        checkpoint = MarianCheckpoint.read(checkpoint, allow_pickle)
    model = Transformer(checkpoint.config, dtype=keras.dtype_policies.DTypePolicy("float32"))
    model.build()
    load_weights(model, read_weights(checkpoint))
    return model


def workdir_config(
    config: TransformerConfig, max_src_length: int, max_tgt_length: int
) -> dict[str, Any]:
    """Builds the ``config.yaml`` of an imported workdir.

    It has the training schema's sections, with the model's own lengths and no
    corpus (fine-tuning brings its own).

    Args:
        config: the model's ``TransformerConfig``.
        max_src_length: the source length limit.
        max_tgt_length: the target length limit.

    Returns:
        The config, a YAML-serializable dict.
    """
    return {
        "data": {"kind": "text", "dir": None},
        "tokenizer": {"vocab_size": config.tgt_vocab_size, "shared": False},
        "model": config.to_dict(),
        "training": {
            "max_src_length": max_src_length,
            "max_tgt_length": max_tgt_length,
            "mixed_precision": "fp32",
        },
        "evaluation": {},
    }


def import_marian(
    checkpoint: PathLike,
    workdir: PathLike,
    *,
    max_src_length: int | None = None,
    max_tgt_length: int | None = None,
    allow_pickle: bool = False,
    overwrite: bool = False,
) -> Workdir:
    """Writes a Hugging Face Marian checkpoint directory as a workdir.

    ``W/model.keras`` holds the model, ``W/model_config.json`` its config,
    ``W/tokenizer/`` the checkpoint's tokenizer files as they are, and
    ``W/config.yaml`` the length limits (default: 512 subwords, or the model's
    ``max_position_embeddings`` if smaller, one less for targets, which end with
    EOS). The workdir is written beside ``W`` and renamed into place, so a
    failed import leaves nothing half-written; an existing ``W`` is replaced only
    with ``overwrite=True``.

    Args:
        checkpoint: the directory ``save_pretrained`` wrote (or a hub download).
        workdir: where the workdir goes.
        max_src_length: sources are truncated to this many subwords.
        max_tgt_length: translations stop at this many subwords.
        allow_pickle: read ``pytorch_model.bin`` when there is no
            ``model.safetensors`` (a pickle runs code: only for trusted files).
        overwrite: replace an existing ``workdir``.

    Returns:
        The ``Workdir``; ``Workdir(workdir).load()`` gives the translator's parts.

    Raises:
        CheckpointError: the checkpoint cannot be read or does not fit the model.
        FileExistsError: ``workdir`` exists and ``overwrite`` is not set.
        ValueError: a length limit is outside the model's range.
    """
    checkpoint = MarianCheckpoint.read(checkpoint, allow_pickle)
    target = Path(workdir)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} exists; choose another --workdir or pass --overwrite.")
    limit = checkpoint.config.max_length
    max_src_length = (
        min(DEFAULT_MAX_LENGTH, limit) if max_src_length is None else int(max_src_length)
    )
    max_tgt_length = (
        min(DEFAULT_MAX_LENGTH, limit) - 1 if max_tgt_length is None else int(max_tgt_length)
    )
    for name, value in (("max_src_length", max_src_length), ("max_tgt_length", max_tgt_length)):
        if not 1 <= value <= limit:
            raise ValueError(
                f"{name}={value}: use 1 to {limit} (the model's max_position_embeddings)."
            )
    load_marian_tokenizers(
        checkpoint.path
    )  # refuse tokenizer files it cannot read before writing anything
    model = load_model(checkpoint)
    staging = staging_directory(target, "import")
    try:
        run = Workdir(staging)
        run.tokenizer_dir.mkdir()
        for name in (*TOKENIZER_FILES, *OPTIONAL_TOKENIZER_FILES):
            if (checkpoint.path / name).is_file():
                shutil.copyfile(checkpoint.path / name, run.tokenizer_dir / name)
        run.config_path.write_text(
            yaml.safe_dump(
                workdir_config(checkpoint.config, max_src_length, max_tgt_length), sort_keys=False
            ),
            encoding="utf-8",
        )
        run.model_config_path.write_text(checkpoint.config.to_json(), encoding="utf-8")
        write_through_temp(run.model_path, model.save)
        record = {
            "imported": {
                "kind": "marian",
                "from": str(checkpoint.path.resolve()),
                "name_or_path": checkpoint.hf_config.get("_name_or_path"),
                "weights": checkpoint.weights_file.name,
            }
        }
        run.metrics_path.write_text(json.dumps(record, indent=2), encoding="utf-8")
        replace_directory(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Workdir(target)
