"""keras-hub running the benchmarks' workload, for side-by-side speed numbers with our model.

    python -m benchmarks.keras_hub_reference --part train --jit off [--precision fp32] [--steps 10]
    python -m benchmarks.keras_hub_reference --part decode --jit off [--batch 64 1] [--steps 64] \
        [--beam 4]

Same workload as ``benchmarks.train_speed`` and ``benchmarks.decode_speed``
(``benchmarks.workload``: shared vocabulary 8,192, d_model 256, 4+4 layers, 8 heads,
d_ff 1,024, dropout 0.1, post-LN, batch 64, length 64 with ~15% padding), built only from keras-hub
layers so the
comparison measures keras-hub, not a re-implementation of it:

* ``keras_hub.layers.ReversibleEmbedding`` (``tie_weights=True``): ONE matrix for source
  tokens, target tokens and the output projection (``reverse=True``, no bias), like our
  ``share_embeddings=True, tie_embeddings=True``; embeddings × √d_model as in the paper.
* ``keras_hub.layers.SinePositionEncoding`` for positions (sin/cos interleaved).
* ``keras_hub.layers.TransformerEncoder`` / ``TransformerDecoder`` with their defaults
  (``normalize_first=False`` = post-LN, ReLU, LayerNorm ε 1e-5); explicit padding masks;
  the causal mask comes from the decoder's ``use_causal_mask=True``.

Decoding uses keras-hub's ``GreedySampler`` / ``BeamSampler`` and the decoder's
self- and cross-attention caches; ``stop_token_ids=None`` makes every run decode
exactly ``steps`` tokens (random weights; the loop has no early exit). Each
invocation prints one JSON line per result (``"system": "keras-hub"``), so a runner
can call it in its own process next to ``train_speed`` / ``decode_speed``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable

import keras
import keras_hub
import numpy as np
import tensorflow as tf
from keras import ops

import keras_transformer as kt
from benchmarks.timing import mfu_figures, timed_calls, timed_steps_and_peaks
from benchmarks.workload import DEFAULT, SMOKE, Workload, decoder_runs

SYSTEM = "keras-hub"


class KerasHubSeq2Seq(keras.Model):
    """Encoder-decoder Transformer from keras-hub layers; ``(source_ids, target_in_ids) -> logits``.

    Padding id is ``kt.PAD_ID`` on both sides. Besides the teacher-forced ``call``,
    ``generate`` runs cached decoding with a keras-hub sampler.
    """

    def __init__(self, workload: Workload = DEFAULT, **kwargs):
        super().__init__(**kwargs)
        w = self.workload = workload
        self.embedding = keras_hub.layers.ReversibleEmbedding(
            w.vocab,
            w.d_model,
            tie_weights=True,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=w.d_model**-0.5),
            name="shared_embedding",
        )
        self.positions = keras_hub.layers.SinePositionEncoding(name="positions")
        self.source_dropout = keras.layers.Dropout(w.dropout, name="source_dropout")
        self.target_dropout = keras.layers.Dropout(w.dropout, name="target_dropout")
        self.encoder_layers = [
            keras_hub.layers.TransformerEncoder(
                w.d_ff, w.heads, dropout=w.dropout, name=f"encoder_{i}"
            )
            for i in range(w.layers)
        ]
        self.decoder_layers = [
            keras_hub.layers.TransformerDecoder(
                w.d_ff, w.heads, dropout=w.dropout, name=f"decoder_{i}"
            )
            for i in range(w.layers)
        ]

    def build_with_dummy(self) -> None:
        """Create every variable (the decoders build cross-attention only when given memory)."""
        dummy = np.ones((1, 2), np.int32)
        self((dummy, dummy), training=False)

    # --- teacher-forced pass ----------------------------------------------------------

    def _embed(self, ids, dropout: keras.layers.Dropout, start_index=0, training=None):
        x = self.embedding(ids) * ops.cast(math.sqrt(self.workload.d_model), self.compute_dtype)
        x = x + self.positions(x, start_index=start_index)
        return dropout(x, training=training)

    def encode(self, source_ids, training=None):
        """Encoder memory ``[batch, src_len, d_model]`` and the source padding mask (bool)."""
        source_mask = ops.not_equal(source_ids, kt.PAD_ID)
        x = self._embed(source_ids, self.source_dropout, training=training)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=source_mask, training=training)
        return x, source_mask

    def logits(self, hidden):
        """Tied output projection (transposed shared embedding); float32 under any policy."""
        return ops.cast(self.embedding(hidden, reverse=True), "float32")

    def forward(self, source_ids, target_ids, target_mask, training=None):
        """Logits ``[batch, tgt_len, vocab]``; ``target_mask`` is the target padding mask."""
        memory, source_mask = self.encode(source_ids, training=training)
        x = self._embed(target_ids, self.target_dropout, training=training)
        for layer in self.decoder_layers:
            x = layer(
                x,
                memory,
                decoder_padding_mask=target_mask,
                encoder_padding_mask=source_mask,
                use_causal_mask=True,
                training=training,
            )
        return self.logits(x)

    def call(self, inputs, training=None):
        source_ids, target_ids = inputs
        return self.forward(
            source_ids, target_ids, ops.not_equal(target_ids, kt.PAD_ID), training=training
        )

    # --- cached decoding --------------------------------------------------------------

    def decoder_step(
        self,
        token_ids,
        position,
        memory,
        source_mask,
        self_caches,
        cross_caches,
        cross_update_index=None,
    ):
        """Hidden states ``[n, 1, d_model]`` for ``token_ids`` ``[n, 1]`` at ``position``, and the
        per-layer caches: self-attention written at ``position``; cross-attention projected
        from ``memory`` when ``cross_update_index`` is 0, reused as is when it is None."""
        x = self._embed(token_ids, self.target_dropout, start_index=position, training=False)
        new_self, new_cross = [], []
        for layer, self_cache, cross_cache in zip(self.decoder_layers, self_caches, cross_caches):
            x, self_cache, cross_cache = layer(
                x,
                memory,
                encoder_padding_mask=source_mask,
                self_attention_cache=self_cache,
                self_attention_cache_update_index=position,
                cross_attention_cache=cross_cache,
                cross_attention_cache_update_index=cross_update_index,
                training=False,
            )
            new_self.append(self_cache)
            new_cross.append(cross_cache)
        return x, tuple(new_self), tuple(new_cross)

    def prefill(self, memory, source_mask, bos_ids, max_length: int):
        """Per-layer caches after one BOS pass at position 0: cross-attention keys/values
        projected from ``memory`` once (update index 0), self-attention ``max_length`` slots.

        This is the keras-hub idiom (BartSeq2SeqLM._build_cache prefills the same way); the
        sampler's first step recomputes slot 0, so it costs one extra 1-token decoder pass.
        """
        w = self.workload
        n, source_length = ops.shape(memory)[0], ops.shape(memory)[1]
        head_dim = w.d_model // w.heads
        self_caches = tuple(
            ops.zeros((n, 2, max_length, w.heads, head_dim), self.compute_dtype)
            for _ in self.decoder_layers
        )
        cross_caches = tuple(
            ops.zeros((n, 2, source_length, w.heads, head_dim), self.compute_dtype)
            for _ in self.decoder_layers
        )
        _, self_caches, cross_caches = self.decoder_step(
            bos_ids, 0, memory, source_mask, self_caches, cross_caches, cross_update_index=0
        )
        return self_caches, cross_caches

    def generate(self, source_ids, steps: int, sampler: keras_hub.samplers.Sampler):
        """``[batch, steps]`` ids: encoder once, then exactly ``steps`` cached decoder steps.

        Static tensors (memory, source mask, cross-attention caches) are closed over by the
        sampler's ``next`` callback instead of riding in its loop state, so BeamSampler does
        not gather them every step; for beams they are repeated up front in the sampler's
        own order (``ops.repeat(x, num_beams, axis=0)``). Only the self-attention caches
        are loop state.
        """
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        batch = ops.shape(source_ids)[0]
        memory, source_mask = self.encode(source_ids, training=False)
        bos = ops.full((batch, 1), kt.BOS_ID, "int32")
        self_caches, cross_caches = self.prefill(memory, source_mask, bos, steps + 1)
        beams = getattr(sampler, "num_beams", 1)
        if beams > 1:
            memory, source_mask = (
                ops.repeat(memory, beams, axis=0),
                ops.repeat(source_mask, beams, axis=0),
            )
            cross_caches = tuple(ops.repeat(c, beams, axis=0) for c in cross_caches)

        def next_logits(
            prompt, cache, index
        ):  # keras-hub's `next` contract: (logits, hidden, cache)
            position = index - 1
            token = ops.slice(prompt, [0, position], [ops.shape(prompt)[0], 1])
            hidden, cache, _ = self.decoder_step(
                token, position, memory, source_mask, cache, cross_caches
            )
            return ops.squeeze(self.logits(hidden), axis=1), ops.squeeze(hidden, axis=1), cache

        prompt = ops.concatenate([bos, ops.zeros((batch, steps), "int32")], axis=1)
        # index=1: position 0 holds BOS; max_iterations = steps; no stop ids = no early exit.
        out = sampler(next_logits, prompt, cache=self_caches, index=1, stop_token_ids=None)
        return out[:, 1:]


def make_sampler(decoder: str) -> keras_hub.samplers.Sampler:
    """``"greedy"`` or ``"beamK"`` (e.g. ``"beam4"``)."""
    if decoder == "greedy":
        return keras_hub.samplers.GreedySampler()
    if decoder.startswith("beam"):
        return keras_hub.samplers.BeamSampler(num_beams=int(decoder[4:]))
    raise ValueError(f"unknown decoder {decoder!r}: greedy or beamK")


def build_model(workload: Workload = DEFAULT, seed: int = 0) -> KerasHubSeq2Seq:
    keras.utils.set_random_seed(seed)
    model = KerasHubSeq2Seq(workload)
    model.build_with_dummy()
    return model


def train_step_time(
    jit: bool, steps: int, precision: str = "fp32", workload: Workload = DEFAULT
) -> dict:
    """``model.fit`` ms/step (forward + backward + Adam), measured as train_speed.run_one does:
    3 warm-up steps, then the median of 5 runs of ``steps`` steps with the matmul peak
    measured around each (``timed_steps_and_peaks``).

    Loss and optimizer are ours (``MaskedLabelSmoothedCrossEntropy``, ``paper_adam``) so
    that only the model differs. MFU uses the workload's analytic FLOPs and a matmul peak
    measured in this process.
    """
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    try:
        model = build_model(workload)
        model.compile(
            optimizer=kt.paper_adam(d_model=workload.d_model),
            loss=kt.MaskedLabelSmoothedCrossEntropy(),
            jit_compile=jit,
        )
        source, target_in, target = workload.training_batch()
        dataset = tf.data.Dataset.from_tensors(((source, target_in), target)).repeat()
        model.fit(dataset, steps_per_epoch=3, epochs=1, verbose=0)  # trace + warm up
        times, peaks = timed_steps_and_peaks(model, dataset, steps, precision)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    step = statistics.median(times)
    target_tokens = int((target != kt.PAD_ID).sum())
    row = {
        "system": SYSTEM,
        "precision": precision,
        "xla": jit,
        "ms_per_step": 1000 * step,
        "min_ms_per_step": 1000 * min(times),
        "target_tokens": target_tokens,
        "target_tokens_per_s": target_tokens / step,
    }
    row.update(mfu_figures(workload.matmul_flops_per_step(), times, peaks))
    return row


def decode_function(model: KerasHubSeq2Seq, decoder: str, steps: int, xla: bool) -> Callable:
    """A ``tf.function`` (XLA when ``xla``): the encoder, then the cached sampler for ``steps``."""
    sampler = make_sampler(decoder)
    return tf.function(
        lambda source_ids: model.generate(source_ids, steps, sampler), jit_compile=xla
    )


def decode_rows(
    jit: bool,
    batches=(64, 1),
    steps_list=(64,),
    beam: int = 4,
    repeats: int = 3,
    workload: Workload = DEFAULT,
) -> list[dict]:
    """Rows in decode_speed's convention: greedy for every ``steps_list`` entry, beam once
    per batch at 64 steps (else the first entry); warm-up, then median/min of ``repeats``
    calls with the ids fetched to host."""
    model = build_model(workload)
    rows = []
    for batch in batches:
        ids = tf.constant(workload.sources(batch))
        for decoder, _, steps in decoder_runs(steps_list, beam):
            function = decode_function(model, decoder, steps, jit)
            result = timed_calls(lambda s, f=function: f(s).numpy(), ids, repeats=repeats)
            rows.append(
                {
                    "system": SYSTEM,
                    "decoder": decoder,
                    "batch": batch,
                    "steps": steps,
                    "xla": jit,
                    **result,
                    "ms_per_step": 1000 * result["median_s"] / steps,
                }
            )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--part", required=True, choices=["train", "decode"])
    parser.add_argument("--jit", nargs="+", default=["off"], choices=["off", "on"])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="train only")
    parser.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=None,
        help="train: steps per timed run (one value, default 10); "
        "decode: generated tokens, greedy at each (default 64)",
    )
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 1], help="decode only")
    parser.add_argument("--beam", type=int, default=4, help="decode only; 1 = greedy only")
    parser.add_argument("--repeats", type=int, default=3, help="decode only")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny model and batch, to check the plumbing; timings are not results",
    )
    args = parser.parse_args(argv)
    workload = SMOKE if args.smoke else DEFAULT
    for jit in args.jit:
        if args.part == "train":
            steps = args.steps[0] if args.steps else 10
            rows = [train_step_time(jit == "on", steps, args.precision, workload)]
        else:
            batches = (
                tuple(min(b, workload.batch) for b in args.batch)
                if args.smoke
                else tuple(args.batch)
            )
            rows = decode_rows(
                jit == "on",
                batches,
                tuple(args.steps or [64]),
                args.beam,
                args.repeats,
                workload=workload,
            )
        for row in rows:
            if args.smoke:
                row["smoke"] = True
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
