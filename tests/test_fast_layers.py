"""Dense, LayerNormalization and Dropout: Keras' layers with faster kernels.

Each must give Keras' values and gradients (or, for dropout, its
distribution) with the same weights, so checkpoints and configs carry over.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from layer_harness import run_layer_test

from keras_transformer.kernels import project
from keras_transformer.layers import Dense, Dropout, LayerNormalization

pytestmark = pytest.mark.quick


def _values_and_gradients(layer, x, upstream):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(y * upstream)
    return [y.numpy()] + [g.numpy() for g in tape.gradient(loss, [x] + layer.trainable_weights)]


def _assert_same_as_keras(ours, theirs, x, atol):
    for layer in (ours, theirs):
        if not layer.built:
            layer.build(x.shape)
    theirs.set_weights([w.numpy() for w in ours.weights])
    upstream = np.random.default_rng(1).normal(size=ours.compute_output_shape(x.shape))
    upstream = upstream.astype("float32")
    for mine, reference in zip(
        _values_and_gradients(ours, x, upstream), _values_and_gradients(theirs, x, upstream)
    ):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=atol)


@pytest.mark.parametrize(
    "shape,units,options",
    [
        ((4, 6, 16), 8, {"activation": "relu"}),  # tall kernel: transposed gradient product
        ((4, 6, 8), 16, {"activation": "relu"}),  # wide kernel
        ((5, 8), 3, {}),
        ((4, 6, 8), 5, {"activation": "gelu", "use_bias": False}),
    ],
)
def test_dense_matches_keras_dense(shape, units, options):
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    _assert_same_as_keras(
        Dense(units, **options), keras.layers.Dense(units, **options), x, atol=1e-5
    )


def test_project_with_a_transposed_kernel_is_a_matmul():
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(size=(2, 3, 4)).astype("float32"))
    table = tf.constant(rng.normal(size=(9, 4)).astype("float32"))  # [vocab, d] tied embeddings
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, table])
        ours = project(x, table, transpose_kernel=True)
        reference = tf.einsum("bld,vd->blv", x, table)
        ours_loss, reference_loss = tf.reduce_sum(ours**2), tf.reduce_sum(reference**2)
    assert ours.shape == (2, 3, 9)
    np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-5, atol=1e-5)
    for mine, theirs in zip(
        tape.gradient(ours_loss, [x, table]), tape.gradient(reference_loss, [x, table])
    ):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-4)


def test_dense_harness():
    x = np.random.default_rng(3).normal(size=(2, 3, 8)).astype("float32")
    run_layer_test(Dense, {"units": 5, "activation": "relu"}, [x], expected_output_shape=(2, 3, 5))


def test_layer_norm_matches_keras_layer_norm():
    rng = np.random.default_rng(4)
    x = (rng.normal(size=(3, 5, 16)) * 4 + 2).astype("float32")
    ours, theirs = LayerNormalization(epsilon=1e-6), keras.layers.LayerNormalization(epsilon=1e-6)
    ours.build(x.shape)
    ours.set_weights([rng.normal(size=16).astype("float32"), rng.normal(size=16).astype("float32")])
    _assert_same_as_keras(ours, theirs, x, atol=1e-5)
    # Settings a Transformer does not use take Keras' path, with Keras' results.
    _assert_same_as_keras(
        LayerNormalization(center=False),
        keras.layers.LayerNormalization(center=False),
        x,
        atol=1e-5,
    )


def test_layer_norm_harness():
    x = np.random.default_rng(5).normal(size=(2, 3, 8)).astype("float32")
    run_layer_test(LayerNormalization, {"epsilon": 1e-6}, [x], expected_output_shape=(2, 3, 8))


def test_dropout_keeps_the_expectation_and_reuses_its_mask_backward():
    layer = Dropout(0.1, seed=7)
    x = tf.ones([256, 1023])  # odd size: the last uint32's second half is unused
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    dropped = float(tf.reduce_mean(tf.cast(y == 0.0, tf.float32)))
    assert abs(dropped - 0.1) < 0.003  # 261,888 draws: σ ≈ 0.0006
    assert abs(float(tf.reduce_mean(y)) - 1.0) < 0.004
    kept = y.numpy()[y.numpy() > 0]
    np.testing.assert_allclose(kept, 65536 / (65536 - round(0.1 * 65536)), rtol=1e-6)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), y.numpy())  # d(x·mask)/dx = mask
    # Fresh masks per call, identical sequences for identical seeds, identity at inference.
    assert not np.array_equal(layer(x, training=True).numpy(), y.numpy())
    np.testing.assert_array_equal(Dropout(0.1, seed=7)(x, training=True).numpy(), y.numpy())
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())


def test_dropout_harness():
    x = np.random.default_rng(6).normal(size=(2, 3, 8)).astype("float32")
    run_layer_test(Dropout, {"rate": 0.2}, [x], expected_output_shape=(2, 3, 8))
