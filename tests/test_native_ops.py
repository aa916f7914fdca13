"""The native LayerNorm op: same values and gradients as TensorFlow's ops, used
only where it can run (training, CPU, outside XLA), and a clean fallback."""

import logging
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import native
from keras_transformer.layers import LayerNormalization
from keras_transformer.layers.layer_norm import layer_norm

from reference import layer_norm as reference_layer_norm

NATIVE_OPS = {"KerasTransformerLayerNorm", "KerasTransformerLayerNormGrad"}


@pytest.fixture
def fresh_loader():
    """Forget the loaded (or failed) ops before and after: the loader caches its answer."""
    native._load_once.cache_clear()
    yield
    native._load_once.cache_clear()


@pytest.fixture(scope="module")
def ops():
    if shutil.which(native._compiler()) is None:
        pytest.skip(f"no C++ compiler ({native._compiler()}): the native op cannot be built here")
    module = native.load()
    assert module is not None, "a C++ compiler is present, so the op must build (see the logged reason)"
    return module


def _values_and_gradients(x, gamma, beta, upstream, native_ops, function):
    def run(x, gamma, beta):
        with tf.GradientTape() as tape:
            tape.watch([x, gamma, beta])
            y = layer_norm(x, gamma, beta, 1e-6, native_ops)
            loss = tf.reduce_sum(y * upstream)
        return [y] + tape.gradient(loss, [x, gamma, beta])

    run = tf.function(run) if function else run
    return [t.numpy() for t in run(tf.constant(x), tf.constant(gamma), tf.constant(beta))]


@pytest.mark.parametrize("function", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("shape", [(37, 256), (2, 5, 24), (0, 8)], ids=["rows", "rank3", "empty"])
def test_values_and_gradients_equal_tensorflow_ops(ops, shape, function):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=shape) * 3 + 100).astype("float32")  # a large mean: two-pass variance
    gamma, beta = (rng.normal(size=shape[-1:]).astype("float32") for _ in range(2))
    upstream = rng.normal(size=shape).astype("float32")
    mine = _values_and_gradients(x, gamma, beta, upstream, ops, function)
    theirs = _values_and_gradients(x, gamma, beta, upstream, None, function)
    for name, a, b in zip(("y", "dx", "dgamma", "dbeta"), mine, theirs):
        assert a.shape == b.shape, name
        # Both are float32 with another summation order; inputs near 100 cost ~1e-5 in y
        # against a float64 reference for either path (2.5e-5 apart at most on AVX2).
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(mine[0], reference_layer_norm(x, gamma, beta, 1e-6), rtol=1e-4, atol=1e-4)
    # One fixed summation order per process: the same inputs give the same bits.
    again = _values_and_gradients(x, gamma, beta, upstream, ops, function)
    for a, b in zip(mine, again):
        np.testing.assert_array_equal(a, b)


def test_bad_shapes_name_the_problem(ops):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gamma must be \[8\]"):
        ops.keras_transformer_layer_norm(tf.ones([3, 8]), tf.ones([7]), tf.ones([7]), epsilon=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="beta must have gamma's shape"):
        ops.keras_transformer_layer_norm(tf.ones([3, 8]), tf.ones([8]), tf.ones([4]), epsilon=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"x must be \[rows, width\]"):
        ops.keras_transformer_layer_norm(tf.ones([8]), tf.ones([8]), tf.ones([8]), epsilon=1e-6)


def _op_types(layer, training, jit_compile=False):
    function = tf.function(lambda x: layer(x, training=training), jit_compile=jit_compile)
    x = tf.random.normal([2, 3, 8])
    function(x)  # runs, so XLA would have rejected an op it has no kernel for
    graph = function.get_concrete_function(x).graph
    types = {op.type for op in graph.get_operations()}
    for function_def in graph.as_graph_def().library.function:
        types |= {node.op for node in function_def.node_def}
    return types


def test_used_in_training_only_and_never_under_xla(ops):
    layer = LayerNormalization(epsilon=1e-6)
    assert NATIVE_OPS & _op_types(layer, training=True) == {"KerasTransformerLayerNorm"}
    # Inference graphs (exports, TFLite) and XLA-compiled ones hold TensorFlow's ops only.
    assert not NATIVE_OPS & _op_types(layer, training=False)
    assert not NATIVE_OPS & _op_types(layer, training=True, jit_compile=True)


def test_layer_trains_the_same_with_the_native_op(ops, monkeypatch):
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(4, 6, 16)) * 2 + 1).astype("float32")
    y = rng.normal(size=(4, 6, 16)).astype("float32")

    def one_step():
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((6, 16)), keras.layers.Dense(16), LayerNormalization()])
        model.compile(keras.optimizers.SGD(0.1), "mse")
        loss = model.fit(x, y, epochs=1, batch_size=4, verbose=0).history["loss"][0]
        return loss, [w.numpy() for w in model.weights]

    native_loss, native_weights = one_step()
    monkeypatch.setattr(native, "usable", lambda: None)
    loss, weights = one_step()
    assert native_loss == pytest.approx(loss, rel=1e-5)
    for a, b in zip(native_weights, weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_environment_variable_turns_it_off(monkeypatch, fresh_loader):
    monkeypatch.setenv("KERAS_TRANSFORMER_NATIVE_OPS", "0")
    assert native.load() is None and native.usable() is None
    assert not NATIVE_OPS & _op_types(LayerNormalization(), training=True)


def test_failed_build_falls_back_with_the_reason(monkeypatch, fresh_loader, tmp_path, caplog):
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", "false")  # a "compiler" that always fails
    with caplog.at_level(logging.WARNING, logger="keras_transformer.native"):
        assert native.load() is None
    assert "unavailable" in caplog.text and "false failed" in caplog.text
    assert not list((tmp_path / "cache").glob("*.so")), "no library may be left behind"
    assert not NATIVE_OPS & _op_types(LayerNormalization(), training=True)
    layer = LayerNormalization()
    np.testing.assert_allclose(layer(tf.ones([2, 4]) * tf.range(4.0), training=True).numpy()[0],
                               reference_layer_norm(np.arange(4.0, dtype="float32"), np.ones(4), np.zeros(4),
                                                    layer.epsilon), atol=1e-5)


def test_library_is_keyed_on_what_it_was_built_against(monkeypatch):
    path = native.library_path()
    assert path.parent == native.cache_dir() and path.suffix == ".so"
    monkeypatch.setattr(native, "_cpu_features", lambda: "flags : another cpu")
    assert native.library_path() != path
    monkeypatch.setattr(native.tf, "__version__", "0.0.0")
    assert native.library_path() != path


def test_hung_compiler_times_out_and_falls_back(monkeypatch, fresh_loader, tmp_path, caplog):
    compiler = tmp_path / "hung-c++"
    compiler.write_text("#!/bin/sh\nexec sleep 30\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(compiler))
    monkeypatch.setattr(native, "_BUILD_TIMEOUT_S", 0.3)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.native"):
        assert native.load() is None
    assert "timed out" in caplog.text
