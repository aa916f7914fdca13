"""``TransformerConfig``: every architecture choice in one validated value."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

# Reserved token ids, shared by tokenizers, data pipelines and decoders.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
# The feed-forward activations and the sinusoidal tables' layouts the layers implement
# (keras_transformer.layers.feed_forward, .positional). This module imports no TensorFlow:
# a run config is checked against it before TensorFlow loads.
ACTIVATIONS = ("relu", "gelu", "swish", "silu")
POSITION_ENCODINGS = ("interleaved", "halves")


def check_embedding_scale(embedding_scale) -> float | None:
    """``embedding_scale`` as a float (``None`` stays ``None``: √d_model), or a
    ``ValueError`` if it is not a positive finite number."""
    if embedding_scale is None:
        return None
    if (
        isinstance(embedding_scale, bool)
        or not isinstance(embedding_scale, (int, float))
        or not math.isfinite(embedding_scale)
        or embedding_scale <= 0
    ):
        raise ValueError(
            "embedding_scale must be a positive number, or None for √d_model, got "
            f"{embedding_scale!r}."
        )
    return float(embedding_scale)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of the encoder–decoder Transformer, checked when it is made.

    Defaults are the paper's base model (Table 3) with separate 8,192-token
    vocabularies; ``from_preset`` gives named sizes.

    Args:
        src_vocab_size: the source vocabulary size (its ids include the
            reserved pad/unk/bos/eos ids).
        tgt_vocab_size: the target vocabulary size.
        num_encoder_layers: N for the encoder stack.
        num_decoder_layers: N for the decoder stack.
        d_model: model width; ``d_k = d_v = d_model / num_heads``.
        num_heads: attention heads h.
        d_ff: feed-forward inner width.
        dropout: residual and embedding dropout P_drop.
        attention_dropout: dropout on attention weights.
        activation_dropout: dropout inside the feed-forward network.
        activation: ``"relu"`` (paper), ``"gelu"`` or ``"swish"``
            (x·sigmoid(x), Marian's; ``"silu"`` is the same).
        norm_first: pre-LN instead of the paper's post-LN.
        layer_norm_epsilon: LayerNorm epsilon.
        max_length: longest source or target sequence (size of the position table).
        learned_positions: learned instead of sinusoidal positions.
        position_encoding: layout of the sinusoidal table: ``"interleaved"``
            (the paper: sin and cos alternate column by column) or
            ``"halves"`` (Marian: the same angles, all sines then all
            cosines). Must stay ``"interleaved"`` with ``learned_positions``.
        embedding_scale: factor on the token embeddings before the positions
            are added; ``None`` is the paper's √d_model, ``1.0`` none
            (Marian's ``scale_embedding=False``).
        share_embeddings: one embedding matrix for source and target (needs a
            shared vocabulary: equal sizes).
        tie_embeddings: the target embedding matrix doubles as the
            pre-softmax projection (paper §3.4).
        final_logits_bias: a trainable ``[tgt_vocab_size]`` bias (zeros at
            first) added to the logits, after the output projection (Marian's
            ``final_logits_bias``); the paper's tied projection has none.
        pad_id: the padding id, masked everywhere.
        unk_id: the unknown-piece id.
        bos_id: the decoder's start id. It differs from unk and eos and may
            equal ``pad_id``: the decoder then starts from the pad id, as
            Marian does (no BOS token), and the first target position still
            counts as a real token. Decoders never emit pad or BOS.
        eos_id: the end-of-sentence id. pad, unk and eos are distinct; all
            four lie anywhere in the vocabulary.

    Raises:
        ValueError: the values do not make a valid model; the message lists
            each problem and what to change.

    Example:

    >>> config = TransformerConfig.from_preset("tiny", vocab_size=100)
    >>> (config.d_model, config.num_heads, config.head_dim, config.src_vocab_size)
    (64, 4, 16, 100)
    """

    src_vocab_size: int = 8192
    tgt_vocab_size: int = 8192
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    layer_norm_epsilon: float = 1e-6
    max_length: int = 512
    learned_positions: bool = False
    position_encoding: str = "interleaved"
    embedding_scale: float | None = None
    share_embeddings: bool = False
    tie_embeddings: bool = True
    final_logits_bias: bool = False
    pad_id: int = PAD_ID
    unk_id: int = UNK_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def __post_init__(self):
        errors = []
        for name in (
            "src_vocab_size",
            "tgt_vocab_size",
            "num_encoder_layers",
            "num_decoder_layers",
            "d_model",
            "num_heads",
            "d_ff",
            "max_length",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                errors.append(f"{name} must be a positive integer, got {value!r}.")
        if not errors and self.d_model % self.num_heads:
            divisors = [h for h in range(1, min(self.d_model, 64) + 1) if self.d_model % h == 0]
            errors.append(
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
                f"set num_heads to a divisor of d_model (e.g. one of {divisors}) or change d_model."
            )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                errors.append(f"{name} must be in [0, 1), got {getattr(self, name)}.")
        if self.activation not in ACTIVATIONS:
            errors.append(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}.")
        if self.position_encoding not in POSITION_ENCODINGS:
            errors.append(
                f"position_encoding must be one of {POSITION_ENCODINGS}, got "
                f"{self.position_encoding!r}."
            )
        elif self.learned_positions and self.position_encoding != "interleaved":
            errors.append(
                f"position_encoding={self.position_encoding!r} lays out the fixed sinusoid, but "
                "learned_positions=True learns the table: drop one of them."
            )
        try:
            check_embedding_scale(self.embedding_scale)
        except ValueError as error:
            errors.append(str(error))
        if not isinstance(self.final_logits_bias, bool):
            errors.append(
                f"final_logits_bias must be True or False, got {self.final_logits_bias!r}."
            )
        if self.layer_norm_epsilon <= 0:
            errors.append(f"layer_norm_epsilon must be > 0, got {self.layer_norm_epsilon}.")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            errors.append(
                "share_embeddings=True needs one shared vocabulary, but "
                f"src_vocab_size={self.src_vocab_size} != tgt_vocab_size={self.tgt_vocab_size}; "
                "set vocab_size=N (both sides) or share_embeddings=False."
            )
        special = {
            "pad_id": self.pad_id,
            "unk_id": self.unk_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
        }
        # bos_id == pad_id is allowed: the decoder starts from the pad id, as Marian does.
        distinct = {name: value for name, value in special.items() if name != "bos_id"}
        if len(set(distinct.values())) != len(distinct):
            errors.append(f"pad/unk/eos ids must be distinct, got {special}.")
        if self.bos_id in (self.unk_id, self.eos_id):
            errors.append(
                "bos_id must differ from unk_id and eos_id (it may equal pad_id, for a decoder "
                "that "
                f"starts from the pad id), got {special}."
            )
        smallest_vocab = min(self.src_vocab_size, self.tgt_vocab_size) if not errors else None
        if smallest_vocab is not None:
            for name, value in special.items():
                if not 0 <= value < smallest_vocab:
                    errors.append(
                        f"{name}={value} is outside the vocabulary [0, {smallest_vocab})."
                    )
        if errors:
            raise ValueError("Invalid TransformerConfig:\n  " + "\n  ".join(errors))

    @property
    def head_dim(self) -> int:
        """The width of one attention head, ``d_model // num_heads`` (d_k = d_v)."""
        return self.d_model // self.num_heads

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """Makes the config of a named size (``PRESETS``), with optional overrides.

        Args:
            name: ``"tiny"``, ``"small"``, ``"base"`` or ``"big"``.
            **overrides: field values; besides the field names, ``vocab_size=N``
                sets both vocabularies and ``num_layers=N`` both stacks.

        Returns:
            The ``TransformerConfig``.

        Raises:
            ValueError: the preset is unknown, a key is unknown, or the values do
                not make a valid model.

        Example:

        >>> TransformerConfig.from_preset("base", vocab_size=32000).num_encoder_layers
        6
        """
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
        return cls.from_dict({**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Makes a config from a dict of field values, as ``to_dict`` writes it.

        Args:
            values: field values; ``vocab_size`` and ``num_layers`` set both sides,
                explicit per-side values win.

        Returns:
            The ``TransformerConfig``.

        Raises:
            ValueError: a key is unknown, or the values do not make a valid model.
        """
        values = dict(values)
        if "vocab_size" in values:
            size = values.pop("vocab_size")  # explicit per-side sizes win
            values.setdefault("src_vocab_size", size)
            values.setdefault("tgt_vocab_size", size)
        if "num_layers" in values:
            layers = values.pop("num_layers")
            values.setdefault("num_encoder_layers", layers)
            values.setdefault("num_decoder_layers", layers)
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"Unknown TransformerConfig keys {unknown}; valid keys are "
                f"{sorted(known | {'vocab_size', 'num_layers'})}."
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Gives the fields as a dict, which ``from_dict`` reads back.

        Returns:
            ``{field name: value}``.
        """
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """Gives the fields as JSON text (sorted keys), as ``model_config.json`` holds them.

        Returns:
            The JSON text.
        """
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def replace(self, **overrides: Any) -> TransformerConfig:
        """Makes a copy with some fields changed, checked again.

        Args:
            **overrides: field values (``vocab_size`` and ``num_layers`` as in ``from_dict``).

        Returns:
            The new ``TransformerConfig``.

        Raises:
            ValueError: a key is unknown, or the values do not make a valid model.

        Example:

        >>> TransformerConfig.from_preset("tiny").replace(dropout=0.0).dropout
        0.0
        """
        return self.from_dict({**self.to_dict(), **overrides})


PRESETS: dict[str, dict[str, Any]] = {
    # For tests and the offline demo: seconds on a CPU.
    "tiny": dict(
        num_layers=2,
        d_model=64,
        num_heads=4,
        d_ff=256,
        dropout=0.1,
        max_length=256,
        vocab_size=1024,
    ),
    # The benchmark workload (4+4 layers, d_model 256).
    "small": dict(
        num_layers=4,
        d_model=256,
        num_heads=8,
        d_ff=1024,
        dropout=0.1,
        max_length=512,
        vocab_size=8192,
    ),
    # The paper's base and big models (Table 3), shared 37k BPE vocabulary as for EN-DE.
    "base": dict(
        num_layers=6,
        d_model=512,
        num_heads=8,
        d_ff=2048,
        dropout=0.1,
        max_length=1024,
        vocab_size=37000,
        share_embeddings=True,
        tie_embeddings=True,
    ),
    "big": dict(
        num_layers=6,
        d_model=1024,
        num_heads=16,
        d_ff=4096,
        dropout=0.3,
        max_length=1024,
        vocab_size=37000,
        share_embeddings=True,
        tie_embeddings=True,
    ),
}
