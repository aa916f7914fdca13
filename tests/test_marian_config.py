"""Which Marian checkpoints import, and the one-line refusals of those that do not
(no PyTorch or transformers needed: config.json files written by hand)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from keras_transformer.marian import (
    CheckpointError,
    MarianCheckpoint,
    transformer_config,
    weight_names,
)

# The config.json of Helsinki-NLP/opus-mt-de-en as published (the keys that matter here).
OPUS_MT_DE_EN = {
    "model_type": "marian",
    "activation_function": "swish",
    "d_model": 512,
    "vocab_size": 58101,
    "decoder_vocab_size": 58101,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 8,
    "decoder_attention_heads": 8,
    "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048,
    "max_position_embeddings": 512,
    "scale_embedding": True,
    "normalize_before": False,
    "normalize_embedding": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "decoder_start_token_id": 58100,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "share_encoder_decoder_embeddings": True,
}


def test_opus_mt_de_en_maps_to_the_paper_base_model_with_marians_options():
    config = transformer_config(OPUS_MT_DE_EN, unk_id=1)
    assert (
        config.num_encoder_layers,
        config.num_decoder_layers,
        config.d_model,
        config.num_heads,
        config.d_ff,
        config.max_length,
    ) == (6, 6, 512, 8, 2048, 512)
    assert (config.src_vocab_size, config.tgt_vocab_size) == (58101, 58101)
    assert (config.pad_id, config.bos_id, config.eos_id, config.unk_id) == (58100, 58100, 0, 1)
    assert (config.activation, config.position_encoding, config.embedding_scale) == (
        "swish",
        "halves",
        None,
    )
    assert config.final_logits_bias and config.share_embeddings and config.tie_embeddings
    assert not config.norm_first and config.layer_norm_epsilon == 1e-5


def test_no_embedding_scale_and_silu():
    config = transformer_config(
        {**OPUS_MT_DE_EN, "scale_embedding": False, "activation_function": "silu"}, 1
    )
    assert config.embedding_scale == 1.0 and config.activation == "swish"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "bart"}, "only Marian"),
        ({"normalize_before": True}, "normalize_before"),
        ({"normalize_embedding": True}, "normalize_embedding"),
        ({"static_position_embeddings": False}, "static_position_embeddings"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings"),
        ({"decoder_ffn_dim": 1024}, "decoder_ffn_dim"),
        ({"decoder_attention_heads": 4}, "decoder_attention_heads"),
        ({"activation_function": "tanh"}, "activation_function"),
        ({"d_model": 500}, "num_heads"),
    ],
)
def test_variants_this_model_cannot_compute_are_refused(change, message):
    with pytest.raises(CheckpointError, match=message):
        transformer_config({**OPUS_MT_DE_EN, **change}, unk_id=1)


def test_a_missing_key_is_named():
    config = dict(OPUS_MT_DE_EN)
    del config["encoder_layers"]
    with pytest.raises(CheckpointError, match="encoder_layers"):
        transformer_config(config, unk_id=1)


def _directory(tmp_path, weights: str | None = "model.safetensors"):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(OPUS_MT_DE_EN))
    (directory / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1, "<pad>": 58100}))
    (directory / "tokenizer_config.json").write_text(json.dumps({"unk_token": "<unk>"}))
    for name in ("source.spm", "target.spm"):
        (directory / name).write_bytes(b"")
    if weights:
        (directory / weights).write_bytes(b"")
    return directory


def test_a_pickle_needs_allow_pickle(tmp_path):
    directory = _directory(tmp_path, "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="--allow-pickle"):
        MarianCheckpoint.read(directory)
    assert (
        MarianCheckpoint.read(directory, allow_pickle=True).weights_file.name == "pytorch_model.bin"
    )


def test_missing_files_are_named(tmp_path):
    directory = _directory(tmp_path, weights=None)
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        MarianCheckpoint.read(directory)
    (directory / "vocab.json").unlink()
    with pytest.raises(CheckpointError, match="vocab.json"):
        MarianCheckpoint.read(directory)
    with pytest.raises(CheckpointError, match="not a directory"):
        MarianCheckpoint.read(tmp_path / "nothing")


def test_every_weight_of_the_model_has_a_checkpoint_tensor():
    """The name map covers exactly the model's weights (built without data)."""
    import keras_transformer as kt

    config = transformer_config(
        {
            **OPUS_MT_DE_EN,
            "encoder_layers": 2,
            "decoder_layers": 1,
            "d_model": 16,
            "encoder_attention_heads": 2,
            "decoder_attention_heads": 2,
            "encoder_ffn_dim": 32,
            "decoder_ffn_dim": 32,
            "vocab_size": 40,
            "decoder_vocab_size": 40,
            "pad_token_id": 39,
            "decoder_start_token_id": 39,
            "max_position_embeddings": 32,
        },
        unk_id=1,
    )
    model = kt.Transformer(config)
    model.build()
    names = weight_names(config, {"model.shared.weight": np.zeros((40, 16))})
    assert sorted(names) == sorted(variable.path.split("/", 1)[1] for variable in model.weights)
    assert len({name for name, _ in names.values()}) == len(names)
