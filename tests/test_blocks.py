"""Encoder/decoder layers and stacks: post-LN vs pre-LN placement against
NumPy, masking, caches, and the shared harness."""

import numpy as np
import pytest
import reference
import tensorflow as tf
from layer_harness import run_layer_test

from keras_transformer.layers import Decoder, DecoderLayer, Encoder, EncoderLayer

pytestmark = pytest.mark.quick

BLOCK = {"d_model": 16, "num_heads": 4, "d_ff": 32, "dropout": 0.0}


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    memory = rng.normal(size=(2, 6, 16)).astype("float32")
    padding = np.ones((2, 6), bool)
    padding[1, 3:] = False
    return x, memory, padding


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_numpy(norm_first):
    _, x, padding = _inputs()
    layer = EncoderLayer(**BLOCK, norm_first=norm_first)
    out = layer(x, padding_mask=padding).numpy()
    np.testing.assert_allclose(
        out, reference.encoder_layer(layer, x, padding), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_numpy(norm_first):
    x, memory, padding = _inputs(1)
    layer = DecoderLayer(**BLOCK, norm_first=norm_first)
    causal = np.tril(np.ones((5, 5), bool))[None]
    out = layer(x, memory, self_attention_mask=causal, memory_padding_mask=padding).numpy()
    np.testing.assert_allclose(
        out, reference.decoder_layer(layer, x, memory, padding), rtol=1e-4, atol=1e-4
    )


def test_post_ln_output_is_normalised_and_pre_ln_is_not():
    _, x, padding = _inputs(2)
    x = x * 10 + 3
    post = EncoderLayer(**BLOCK)(x, padding_mask=padding).numpy()
    pre = EncoderLayer(**BLOCK, norm_first=True)(x, padding_mask=padding).numpy()
    np.testing.assert_allclose(post.mean(-1), 0.0, atol=1e-4)
    np.testing.assert_allclose(post.std(-1), 1.0, atol=1e-2)
    assert np.abs(pre.mean(-1)).max() > 1.0  # the residual stream is left as is


def test_pre_ln_stacks_end_with_a_final_norm():
    _, x, padding = _inputs(3)
    encoder = Encoder(num_layers=2, **BLOCK, norm_first=True)
    out = encoder(x, padding_mask=padding).numpy()
    assert encoder.final_norm is not None
    np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-4)
    post_ln = Encoder(num_layers=2, **BLOCK)
    post_ln(x, padding_mask=padding)
    assert post_ln.final_norm is None


def test_encoder_stack_is_its_layers_in_sequence():
    _, x, padding = _inputs(4)
    encoder = Encoder(num_layers=3, **BLOCK)
    out = encoder(x, padding_mask=padding).numpy()
    expected = x
    for layer in encoder.layer_stack:
        expected = reference.encoder_layer(layer, expected, padding)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_encoder_ignores_padded_positions():
    _, x, padding = _inputs(5)
    encoder = Encoder(num_layers=2, **BLOCK)
    out = encoder(x, padding_mask=padding).numpy()
    changed = x.copy()
    changed[1, 3:] = 100.0  # garbage in padded positions
    out2 = encoder(changed, padding_mask=padding).numpy()
    np.testing.assert_allclose(out[1, :3], out2[1, :3], rtol=1e-5, atol=1e-5)


def test_encoder_uses_keras_mask_when_no_explicit_mask():
    _, x, padding = _inputs(6)
    encoder = Encoder(num_layers=1, **BLOCK)
    explicit = encoder(x, padding_mask=padding).numpy()
    tensor = tf.constant(x)
    tensor._keras_mask = tf.constant(padding)
    implicit = encoder(tensor).numpy()
    np.testing.assert_allclose(explicit, implicit, rtol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("fixed", [False, True])
def test_decoder_cache_equals_full_pass(norm_first, fixed):
    x, memory, padding = _inputs(7)
    decoder = Decoder(num_layers=2, **BLOCK, norm_first=norm_first)
    full = decoder(x, memory, memory_padding_mask=padding).numpy()
    cache = decoder.initial_cache(tf.constant(memory), max_length=7 if fixed else None)
    outputs = []
    for t in range(5):
        out, cache = decoder(
            x[:, t : t + 1],
            memory_padding_mask=padding,
            cache=cache,
            cache_index=t if fixed else None,
        )
        outputs.append(out.numpy())
    np.testing.assert_allclose(np.concatenate(outputs, 1), full, rtol=1e-4, atol=1e-5)


def test_decoder_returns_attention_weights_per_layer():
    x, memory, padding = _inputs(8)
    decoder = Decoder(num_layers=2, **BLOCK)
    _, weights = decoder(x, memory, memory_padding_mask=padding, return_attention_weights=True)
    assert len(weights) == 2
    assert weights[0]["self"].shape == (2, 4, 5, 5)
    assert weights[0]["cross"].shape == (2, 4, 5, 6)
    assert np.all(weights[1]["cross"].numpy()[1, :, :, 3:] == 0.0)
    assert np.all(np.triu(weights[0]["self"].numpy()[0, 0], 1) == 0.0)


def test_block_errors_say_what_to_fix():
    with pytest.raises(ValueError, match="divisible"):
        EncoderLayer(d_model=10, num_heads=3, d_ff=8)
    with pytest.raises(ValueError, match="num_layers"):
        Decoder(num_layers=0, **BLOCK)
    with pytest.raises(ValueError, match="dropout"):
        EncoderLayer(d_model=8, num_heads=2, d_ff=8, dropout=1.5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_and_stack_harness(norm_first):
    _, x, padding = _inputs(9)
    kwargs = {**BLOCK, "dropout": 0.1, "norm_first": norm_first}
    call = {"padding_mask": tf.constant(padding)}
    run_layer_test(EncoderLayer, kwargs, [x], call, expected_output_shape=(2, 6, 16))
    run_layer_test(
        Encoder, {**kwargs, "num_layers": 2}, [x], call, expected_output_shape=(2, 6, 16)
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_and_stack_harness(norm_first):
    x, memory, padding = _inputs(10)
    kwargs = {**BLOCK, "dropout": 0.1, "norm_first": norm_first, "activation": "gelu"}
    causal = tf.constant(np.tril(np.ones((5, 5), bool))[None])
    run_layer_test(
        DecoderLayer,
        kwargs,
        [x, memory],
        {"self_attention_mask": causal, "memory_padding_mask": tf.constant(padding)},
        expected_output_shape=(2, 5, 16),
    )
    run_layer_test(
        Decoder,
        {**kwargs, "num_layers": 2},
        [x, memory],
        {"memory_padding_mask": tf.constant(padding)},
        expected_output_shape=(2, 5, 16),
    )
