import math

import numpy as np
import pytest
import reference
import tensorflow as tf
from layer_harness import run_layer_test

from keras_transformer.layers import PositionalEmbedding, sinusoidal_positions

pytestmark = pytest.mark.quick


@pytest.mark.parametrize("d_model", [16, 7])
def test_sinusoidal_table_matches_paper_formula(d_model):
    table = sinusoidal_positions(50, d_model).numpy()
    assert table.shape == (50, d_model) and table.dtype == np.float32
    np.testing.assert_allclose(table, reference.positional_table(50, d_model), atol=1e-6)
    # Spot values: position 0 is [0, 1, 0, 1, ...]; PE(pos, 2i) = sin(pos / 10000^(2i/d)).
    np.testing.assert_allclose(table[0, 0::2], 0.0)
    np.testing.assert_allclose(table[0, 1::2], 1.0)
    np.testing.assert_allclose(table[3, 2], math.sin(3 / 10000 ** (2 / d_model)), rtol=1e-6)
    np.testing.assert_allclose(table[3, 3], math.cos(3 / 10000 ** (2 / d_model)), rtol=1e-6)


def test_embedding_is_scaled_and_adds_positions():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=10)
    ids = np.array([[4, 5, 6, 0], [7, 0, 0, 0]])
    out = layer(ids).numpy()
    table = layer.embeddings.numpy()
    expected = table[ids] * math.sqrt(8) + reference.positional_table(4, 8)[None]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    mask = layer.compute_mask(tf.constant(ids)).numpy()
    np.testing.assert_array_equal(mask, ids != 0)
    np.testing.assert_array_equal(layer(ids)._keras_mask.numpy(), ids != 0)


def test_start_index_continues_positions():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=10)
    ids = tf.constant([[4, 5, 6, 7]])
    full = layer(ids).numpy()
    step = layer(ids[:, 2:3], start_index=tf.constant(2)).numpy()
    np.testing.assert_allclose(step[:, 0], full[:, 2], rtol=1e-6)


def test_learned_positions_are_a_weight():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=10, learned_positions=True)
    layer(tf.constant([[1, 2]]))
    assert {w.path.split("/")[-1] for w in layer.trainable_weights} == {
        "embeddings",
        "position_embedding",
    }


def test_too_long_input_raises_with_the_fix():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=4)
    with pytest.raises(ValueError, match="max_length"):
        layer(tf.ones([1, 5], tf.int32))


@pytest.mark.parametrize("learned", [False, True])
def test_positional_embedding_harness(learned):
    ids = np.random.default_rng(0).integers(0, 30, size=(2, 6))
    run_layer_test(
        PositionalEmbedding,
        {
            "vocab_size": 30,
            "d_model": 8,
            "max_length": 16,
            "dropout": 0.1,
            "learned_positions": learned,
        },
        [ids],
        expected_output_shape=(2, 6, 8),
    )
