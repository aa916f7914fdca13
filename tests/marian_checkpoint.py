"""A real, tiny OPUS-MT-shaped Marian checkpoint, made offline with ``transformers``
and ``torch`` (no hub): SentencePiece models trained on the demo language pair,
a ``vocab.json`` made from them, a ``MarianTokenizer`` and a ``MarianMTModel``
trained briefly so that greedy decoding ends with EOS, both ``save_pretrained``.

Shaped as real OPUS-MT checkpoints are: ``</s>`` = 0, ``<unk>`` = 1, ``<pad>``
last, the decoder starting from the pad id, ``bad_words_ids = [[pad]]``,
swish, scaled embeddings, a non-zero ``final_logits_bias`` and one shared,
tied embedding matrix.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
from marian_fixtures import write_marian_tokenizer

from keras_transformer.data import generate_pairs


def _torch():
    """``torch``, on one thread where pytest-xdist's workers share the cores: its
    OpenMP threads wait by spinning, and beside another busy worker the module
    fixture that trains a checkpoint took 95 s on two threads, 17 s alone."""
    import torch

    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)
    return torch


SIZES = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=96,
)


def write_marian_checkpoint(
    directory: Path,
    *,
    pairs: int = 600,
    steps: int = 400,
    seed: int = 0,
    separate_vocabs: bool = False,
) -> dict:
    """A trained tiny ``MarianMTModel`` and its tokenizer in ``directory``; returns
    ``{"pairs": the training pairs, "vocab": target pieces by id, "pad": the pad id}``.
    ``separate_vocabs``: a source and a target vocabulary (``target_vocab.json``)
    and embedding matrix, as some OPUS-MT models have (pad = 2 in both)."""
    torch = _torch()
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    directory = Path(directory)
    data = generate_pairs(pairs, seed=seed)
    write_marian_tokenizer(
        directory,
        source_sentences=[s for s, _ in data],
        target_sentences=[t for _, t in data],
        vocab_size=160,
        seed=seed,
        separate_vocabs=separate_vocabs,
    )
    vocabs = [
        json.loads((directory / name).read_text(encoding="utf-8"))
        for name in ("vocab.json", "target_vocab.json" if separate_vocabs else "vocab.json")
    ]
    source_size, vocab = len(vocabs[0]), sorted(vocabs[1], key=vocabs[1].get)
    tokenizer = MarianTokenizer.from_pretrained(str(directory))
    pad = vocabs[1]["<pad>"]
    torch.manual_seed(seed)
    random.seed(seed)
    config = MarianConfig(
        vocab_size=source_size,
        decoder_vocab_size=len(vocab),
        **SIZES,
        activation_function="swish",
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=True,
        share_encoder_decoder_embeddings=not separate_vocabs,
        tie_word_embeddings=True,
        pad_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        decoder_start_token_id=pad,
        bos_token_id=None,
    )
    model = MarianMTModel(config)
    with torch.no_grad():  # a buffer, not trained: stays as set
        model.final_logits_bias.copy_(0.3 * torch.randn_like(model.final_logits_bias))
        model.final_logits_bias[0, pad] = 0.0
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        batch = random.sample(data, 32)
        inputs = tokenizer(
            [s for s, _ in batch],
            text_target=[t for _, t in batch],
            padding=True,
            return_tensors="pt",
        )
        labels = inputs["labels"].masked_fill(inputs["labels"] == pad, -100)
        loss = model(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], labels=labels
        ).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.generation_config.bad_words_ids = [[pad]]
    model.generation_config.num_beams = 1
    model.save_pretrained(str(directory))
    return {"pairs": data, "vocab": vocab, "pad": pad, "final_loss": float(loss.detach())}


def greedy_generate(
    directory: Path, sentences: list[str], max_new_tokens: int = 60
) -> list[list[int]]:
    """``MarianMTModel.generate`` greedy ids of ``sentences`` (the start token
    removed, pad after EOS removed)."""
    torch = _torch()
    from transformers import MarianMTModel, MarianTokenizer

    tokenizer = MarianTokenizer.from_pretrained(str(directory))
    model = MarianMTModel.from_pretrained(str(directory)).eval()
    inputs = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        # forced_eos_token_id would put EOS at the length limit, which plain greedy decoding does
        # not.
        out = model.generate(
            **inputs,
            num_beams=1,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            forced_eos_token_id=None,
        )
    ids = []
    for row in out.numpy()[:, 1:]:
        row = list(row)
        ids.append(row[: row.index(0) + 1] if 0 in row else row)
    return ids


def torch_logits(
    directory: Path, source_ids: np.ndarray, target_in: np.ndarray, pad: int
) -> np.ndarray:
    """Teacher-forced logits of the PyTorch model, with the source padding masked."""
    torch = _torch()
    from transformers import MarianMTModel

    model = MarianMTModel.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(source_ids),
            attention_mask=torch.tensor(source_ids != pad),
            decoder_input_ids=torch.tensor(target_in),
        )
    return out.logits.numpy()
