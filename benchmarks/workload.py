"""The speed benchmarks' one workload: its sizes, its inputs and its matmul FLOP count.

``train_speed``, ``decode_speed`` and ``keras_hub_reference`` measure the same model:
the ``small`` preset with one shared vocabulary of 8,192 pieces (d_model 256, 4+4 layers,
8 heads, d_ff 1,024, dropout 0.1, post-LN), on batches of 64 pairs of length 64 with
~15% padding at the ends. Every system is built from one ``Workload``, ours through
``Workload.config()``, and the FLOP count behind the MFU figures is computed from that
same config, so it cannot drift from the model that is timed.

This module imports neither TensorFlow nor the other benchmarks, so that every runner
can import it without starting a runtime and without an import circle.
"""

from __future__ import annotations

import dataclasses

import numpy as np

PAD_ID, BOS_ID, EOS_ID = 0, 2, 3  # keras_transformer's reserved ids (checked in tests)


@dataclasses.dataclass(frozen=True)
class Workload:
    """Model and batch sizes; the defaults are the benchmarks' workload."""

    vocab: int = 8192
    d_model: int = 256
    layers: int = 4
    heads: int = 8
    d_ff: int = 1024
    dropout: float = 0.1
    batch: int = 64
    length: int = 64

    def config(self, **overrides):
        """Our ``TransformerConfig`` of this workload (shared source/target vocabulary)."""
        import keras_transformer as kt

        return kt.TransformerConfig.from_preset(
            "small",
            vocab_size=self.vocab,
            num_layers=self.layers,
            d_model=self.d_model,
            num_heads=self.heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            share_embeddings=True,
            **overrides,
        )

    def matmul_flops_per_step(self) -> float:
        """Matmul FLOPs of one training step on a full ``[batch, length]`` batch."""
        tokens = self.batch * self.length
        return matmul_flops(self.config(), tokens, tokens, self.length)

    def sources(self, batch: int | None = None, seed: int = 0) -> np.ndarray:
        """Random source ids ``[batch, length]`` with ~15% padding at the ends, EOS last."""
        rng = np.random.default_rng(seed)
        ids = rng.integers(4, self.vocab, size=(batch or self.batch, self.length)).astype(np.int32)
        for row in ids:
            real = int(self.length * rng.uniform(0.7, 1.0))
            row[real - 1] = EOS_ID
            row[real:] = PAD_ID
        return ids

    def training_batch(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One fixed training batch ``(src, tgt_in, tgt)``, int32 ``[batch, length]``:
        the same tokens for every system, so their tokens/s compare directly."""
        rng = np.random.default_rng(0)

        def ids():
            x = rng.integers(4, self.vocab, size=(self.batch, self.length)).astype(np.int32)
            for row in x:
                row[int(self.length * rng.uniform(0.7, 1.0)) :] = PAD_ID
            return x

        src, tgt = ids(), ids()
        tgt_in = np.concatenate([np.full((self.batch, 1), BOS_ID, np.int32), tgt[:, :-1]], axis=1)
        return src, tgt_in, tgt


DEFAULT = Workload()
# Plumbing checks only (seconds of CPU): never report these timings as results.
SMOKE = Workload(vocab=64, d_model=16, layers=2, heads=2, d_ff=32, batch=2, length=8)


def decoder_product_shapes(d_model: int, d_ff: int) -> list[tuple[int, int]]:
    """The kernel shapes of one decoder layer's products, in the order a decoding step runs them.

    Args:
        d_model: the model width.
        d_ff: the feed-forward network's inner width.

    Returns:
        ``[d_in, d_out]`` a product: the self-attention's fused query, key and value, its
        output, the cross-attention's query, its output, the feed-forward inner and outer.

    Example:
        >>> decoder_product_shapes(4, 16)[0], decoder_product_shapes(4, 16)[-1]
        ((4, 12), (16, 4))
    """
    return [
        (d_model, 3 * d_model),
        (d_model, d_model),
        (d_model, d_model),
        (d_model, d_model),
        (d_model, d_ff),
        (d_ff, d_model),
    ]


def decoder_runs(steps_list, beam: int) -> list[tuple[str, int, int]]:
    """The decode benchmarks' runs on a batch: greedy at each step count, then one beam search.

    Args:
        steps_list: the step counts (tokens decoded) greedy decoding runs at.
        beam: the beam size (1: no beam search); beam search runs at 64 steps, else at the
            first of ``steps_list``.

    Returns:
        ``(decoder, beam_size, steps)`` a run, greedy decoding's first.

    Example:
        >>> decoder_runs([16, 64], beam=4)
        [('greedy', 1, 16), ('greedy', 1, 64), ('beam4', 4, 64)]
    """
    runs = [("greedy", 1, steps) for steps in steps_list]
    if beam > 1:
        runs.append((f"beam{beam}", beam, 64 if 64 in steps_list else steps_list[0]))
    return runs


def matmul_flops(config, src_tokens: float, tgt_tokens: float, length: float) -> float:
    """2·m·n·k for every matmul of one update of ``config`` (forward, and backward as
    2 × forward), for ``src_tokens``/``tgt_tokens`` tokens whose sequences are ``length``
    long (the attention scores)."""
    d, ff = config.d_model, config.d_ff
    projections = 4 * d * d  # q, k, v, o
    ffn = 2 * d * ff
    attention = 2 * length * d  # QKᵀ and weights·V per query token
    encoder = config.num_encoder_layers * (projections + ffn + attention)
    decoder = config.num_decoder_layers * (2 * projections + ffn + 2 * attention)
    output = d * config.tgt_vocab_size
    return 3 * 2 * (src_tokens * encoder + tgt_tokens * (decoder + output))
