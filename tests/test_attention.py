import numpy as np
import pytest
import reference
import tensorflow as tf
from layer_harness import run_layer_test

from keras_transformer.layers import (
    MultiHeadAttention,
    causal_mask,
    masked_score_value,
    scaled_dot_product_attention,
)

pytestmark = pytest.mark.quick


def _random_mask(rng, shape, p=0.6):
    mask = rng.random(shape) < p
    mask[..., 0, :] = False  # one query row with nothing to attend to
    return mask


def test_scaled_dot_product_attention_matches_numpy_with_random_masks():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 3, 5, 8)).astype("float32")
    k = rng.normal(size=(2, 3, 7, 8)).astype("float32")
    v = rng.normal(size=(2, 3, 7, 4)).astype("float32")
    mask = _random_mask(rng, (2, 3, 5, 7))
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_weights = reference.attention(q, k, v, mask)
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(weights.numpy(), ref_weights, rtol=1e-5, atol=1e-6)
    # Masked positions: exactly zero weight.
    assert np.all(weights.numpy()[~mask] == 0.0)
    # Fully masked row: zeros, not NaN.
    assert np.all(np.isfinite(out.numpy()))
    assert np.all(weights.numpy()[:, :, 0, :] == 0.0)
    # Other rows are distributions.
    np.testing.assert_allclose(
        weights.numpy()[:, :, 1:, :].sum(-1)[mask[:, :, 1:].any(-1)], 1.0, rtol=1e-5
    )


def test_attention_without_mask_and_with_broadcast_mask():
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(2, 4, 6)).astype("float32") for _ in range(3))
    out, _ = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(out.numpy(), reference.attention(q, k, v)[0], rtol=1e-5, atol=1e-5)
    look_ahead = causal_mask(4)[tf.newaxis]  # [1, 4, 4] broadcasts over the batch
    out, weights = scaled_dot_product_attention(q, k, v, look_ahead)
    ref_out, _ = reference.attention(q, k, v, np.tril(np.ones((4, 4), bool))[None])
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-5, atol=1e-5)
    assert np.all(np.triu(weights.numpy()[0], 1) == 0.0)


def test_explicit_scale_for_queries_that_carry_it():
    """``scale=1.0`` on queries already multiplied by 1/√d_k (how
    MultiHeadAttention calls it) equals the default; other scales apply."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.normal(size=(2, 5, 16)).astype("float32") for _ in range(3))
    default, _ = scaled_dot_product_attention(q, k, v)
    prescaled, _ = scaled_dot_product_attention(q / 4.0, k, v, scale=1.0)
    np.testing.assert_allclose(prescaled.numpy(), default.numpy(), rtol=1e-6, atol=1e-6)
    doubled, _ = scaled_dot_product_attention(q / 2.0, k, v, scale=0.5)
    np.testing.assert_allclose(doubled.numpy(), default.numpy(), rtol=1e-6, atol=1e-6)


def test_causal_mask_with_offset():
    np.testing.assert_array_equal(causal_mask(3).numpy(), np.tril(np.ones((3, 3), bool)))
    # Two new queries at positions 3 and 4 against 5 keys.
    np.testing.assert_array_equal(
        causal_mask(2, 5, 3).numpy(),
        [[True, True, True, True, False], [True] * 5],
    )


def test_masked_score_value_is_finite_per_dtype():
    for dtype in ("float16", "bfloat16", "float32"):
        value = tf.constant(masked_score_value(dtype), dtype)
        assert np.isfinite(float(value.numpy()))


def test_multi_head_attention_matches_numpy_self_and_cross():
    rng = np.random.default_rng(2)
    layer = MultiHeadAttention(d_model=16, num_heads=4)
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    memory = rng.normal(size=(2, 7, 16)).astype("float32")
    padding = np.ones((2, 7), bool)
    padding[1, 4:] = False
    out, weights = layer(
        x, memory, attention_mask=padding[:, None, :], return_attention_weights=True
    )
    ref_out, ref_weights = reference.mha(layer, x, memory, padding[:, None, :])
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(weights.numpy(), ref_weights, rtol=1e-4, atol=1e-6)
    assert weights.shape == (2, 4, 5, 7)

    causal = np.tril(np.ones((5, 5), bool))[None]
    out = layer(x, attention_mask=causal)
    np.testing.assert_allclose(
        out.numpy(), reference.mha(layer, x, x, causal)[0], rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("fixed", [False, True])
def test_multi_head_attention_cache_equals_full_pass(fixed):
    rng = np.random.default_rng(3)
    layer = MultiHeadAttention(d_model=16, num_heads=2)
    x = tf.constant(rng.normal(size=(3, 6, 16)).astype("float32"))
    full = layer(x, attention_mask=causal_mask(6)[tf.newaxis])
    cache = layer.initial_cache(3, max_length=8 if fixed else None)
    steps = []
    for t in range(6):
        key_length = 8 if fixed else t + 1
        mask = causal_mask(1, key_length, t)[tf.newaxis]
        out, cache = layer(
            x[:, t : t + 1], attention_mask=mask, cache=cache, cache_index=t if fixed else None
        )
        steps.append(out)
    np.testing.assert_allclose(tf.concat(steps, 1).numpy(), full.numpy(), rtol=1e-5, atol=1e-5)
    assert cache["key"].shape == (3, 2, 8 if fixed else 6, 8)


def test_precomputed_key_value_equals_projecting_memory():
    rng = np.random.default_rng(4)
    layer = MultiHeadAttention(d_model=8, num_heads=2)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    memory = rng.normal(size=(2, 5, 8)).astype("float32")
    direct = layer(x, memory)
    projected = layer.project_key_value(tf.constant(memory))
    np.testing.assert_allclose(layer(x, key_value=projected).numpy(), direct.numpy(), rtol=1e-6)


def test_multi_head_attention_errors_say_what_to_fix():
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        MultiHeadAttention(d_model=10, num_heads=4)
    layer = MultiHeadAttention(d_model=8, num_heads=2)
    with pytest.raises(ValueError, match="key_padding_mask"):
        layer(tf.zeros([2, 3, 8]), attention_mask=tf.ones([2, 3], bool))


def test_multi_head_attention_harness():
    rng = np.random.default_rng(5)
    run_layer_test(
        MultiHeadAttention,
        {"d_model": 16, "num_heads": 4, "dropout": 0.1},
        [rng.normal(size=(2, 5, 16)).astype("float32")],
        call_kwargs={"attention_mask": causal_mask(5)[tf.newaxis]},
        expected_output_shape=(2, 5, 16),
    )


def test_mixed_precision_attention_softmax_in_float32():
    layer = MultiHeadAttention(d_model=16, num_heads=4, dtype="mixed_bfloat16")
    x = tf.random.normal([2, 5, 16])
    out, weights = layer(x, return_attention_weights=True)
    assert out.dtype == tf.bfloat16
    assert weights.dtype == tf.float32


@pytest.mark.parametrize("queries", [1, 6])
def test_the_inference_attention_kernel_matches_numpy(queries):
    """``kernels.attention.attend`` (the decoding step's and encoder's attention): the
    reference formula, a padding bias, and a row with no key zeroed; float32 by
    ``BatchMatMulV3``, bf16 by ``tf.matmul``, softmax in float32 either way."""
    from keras_transformer.kernels.attention import attend, batched_product

    rng = np.random.default_rng(3)
    q = rng.normal(size=(3, 2, queries, 8)).astype("float32")
    k = rng.normal(size=(3, 2, 7, 8)).astype("float32")
    v = rng.normal(size=(3, 2, 7, 8)).astype("float32")
    real = rng.random((3, 7)) < 0.7
    real[:, 0] = True
    real[2] = False  # a row with no key at all
    bias = np.where(real, 0.0, masked_score_value("float32")).astype("float32")[:, None, None, :]
    has_key = real.any(-1)[:, None, None, None]
    out = attend(
        tf.constant(q), tf.constant(k), tf.constant(v), tf.constant(bias), tf.constant(has_key)
    )
    expected, _ = reference.attention(
        q * np.sqrt(8), k, v, real[:, None, None, :]
    )  # attend takes q scaled
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert np.all(out.numpy()[2] == 0.0)
    graph = (
        tf.function(batched_product)
        .get_concrete_function(
            tf.TensorSpec([None, 2, None, 8]), tf.TensorSpec([None, 2, 7, 8]), True
        )
        .graph
    )
    assert [op.type for op in graph.get_operations() if "BatchMatMul" in op.type] == [
        "BatchMatMulV3"
    ]
    bf16 = attend(
        *(tf.constant(x, tf.bfloat16) for x in (q, k, v)), tf.constant(bias), tf.constant(has_key)
    )
    assert bf16.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(bf16, tf.float32).numpy(), expected, rtol=0.05, atol=0.05)
