import pytest

from keras_transformer import PRESETS, TransformerConfig

pytestmark = pytest.mark.quick


def test_presets_match_the_paper():
    base = TransformerConfig.from_preset("base")
    assert (
        base.num_encoder_layers,
        base.num_decoder_layers,
        base.d_model,
        base.num_heads,
        base.d_ff,
        base.dropout,
    ) == (6, 6, 512, 8, 2048, 0.1)
    big = TransformerConfig.from_preset("big")
    assert (big.num_encoder_layers, big.d_model, big.num_heads, big.d_ff, big.dropout) == (
        6,
        1024,
        16,
        4096,
        0.3,
    )
    assert base.head_dim == 64 and big.head_dim == 64
    assert not base.norm_first and base.activation == "relu"
    assert {"tiny", "small", "base", "big"} <= set(PRESETS)


def test_overrides_and_aliases():
    config = TransformerConfig.from_preset("tiny", vocab_size=500, num_layers=3, norm_first=True)
    assert config.src_vocab_size == config.tgt_vocab_size == 500
    assert config.num_encoder_layers == config.num_decoder_layers == 3
    assert config.norm_first
    assert TransformerConfig.from_dict(config.to_dict()) == config
    assert config.replace(d_model=128).d_model == 128


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": 100, "num_heads": 8}, "not divisible by num_heads"),
        (
            {"src_vocab_size": 10, "tgt_vocab_size": 20, "share_embeddings": True},
            "share_embeddings",
        ),
        ({"dropout": 1.0}, "dropout"),
        ({"activation": "tanh"}, "activation"),
        ({"num_heads": 0}, "positive integer"),
        ({"eos_id": 0}, "distinct"),
        ({"bos_id": 1}, "bos_id must differ from unk_id and eos_id"),
        ({"bos_id": 3}, "bos_id must differ from unk_id and eos_id"),
        (
            {"position_encoding": "sin_cos"},
            r"position_encoding must be one of \('interleaved', 'halves'\)",
        ),
        (
            {"learned_positions": True, "position_encoding": "halves"},
            "learned_positions=True learns the table",
        ),
        ({"embedding_scale": 0.0}, "embedding_scale must be a positive number"),
        ({"embedding_scale": True}, "embedding_scale must be a positive number"),
        ({"final_logits_bias": "yes"}, "final_logits_bias must be True or False"),
        ({"vocab_size": 3}, "outside the vocabulary"),
        ({"dmodel": 3}, "Unknown TransformerConfig keys"),
    ],
)
def test_invalid_configs_say_what_to_change(overrides, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig.from_preset("tiny", **overrides)


def test_unknown_preset():
    with pytest.raises(ValueError, match="choose one of"):
        TransformerConfig.from_preset("huge")
