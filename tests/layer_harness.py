"""One harness for every layer: shapes, config round trip, eager vs
tf.function, a fit step, and mixed precision."""

import keras
import numpy as np
import tensorflow as tf


def _first(outputs):
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs


class LayerWrapper(keras.Model):
    def __init__(self, layer, call_kwargs):
        super().__init__()
        self.layer = layer
        self.call_kwargs = call_kwargs

    def call(self, inputs, training=None):
        return _first(self.layer(*inputs, training=training, **self.call_kwargs))


def run_layer_test(
    layer_cls,
    init_kwargs,
    inputs,
    call_kwargs=None,
    expected_output_shape=None,
    run_mixed_precision=True,
    run_training=True,
):
    call_kwargs = call_kwargs or {}
    inputs = [tf.convert_to_tensor(x) for x in inputs]
    layer = layer_cls(**init_kwargs)
    output = _first(layer(*inputs, **call_kwargs))
    if expected_output_shape is not None:
        assert tuple(output.shape) == tuple(expected_output_shape)
    assert tuple(layer.compute_output_shape(*[tuple(x.shape) for x in inputs])) == tuple(
        output.shape
    )
    assert np.all(np.isfinite(output.numpy()))

    # Config round trip, through Keras' own (de)serialization.
    config = layer.get_config()
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(clone) is layer_cls
    assert clone.get_config() == config
    _first(clone(*inputs, **call_kwargs))
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(
        _first(clone(*inputs, training=False, **call_kwargs)).numpy(),
        _first(layer(*inputs, training=False, **call_kwargs)).numpy(),
        rtol=1e-6,
        atol=1e-6,
    )

    # Eager and graph agree.
    eager = _first(layer(*inputs, training=False, **call_kwargs))
    graph = tf.function(lambda *xs: _first(layer(*xs, training=False, **call_kwargs)))(*inputs)
    np.testing.assert_allclose(eager.numpy(), graph.numpy(), rtol=1e-5, atol=1e-5)

    if run_training and layer.trainable_weights:
        model = LayerWrapper(layer, call_kwargs)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        before = [w.numpy().copy() for w in layer.trainable_weights]
        target = np.random.default_rng(0).normal(size=output.shape).astype("float32")
        batch = int(inputs[0].shape[0])
        history = model.fit(tuple(inputs), target, batch_size=batch, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0])
        changed = [not np.allclose(b, w.numpy()) for b, w in zip(before, layer.trainable_weights)]
        assert any(changed), "one fit step changed no weight"

    if run_mixed_precision:
        mixed = layer_cls(**init_kwargs, dtype="mixed_bfloat16")
        mixed_output = _first(mixed(*inputs, **call_kwargs))
        assert mixed_output.dtype == tf.bfloat16
        assert all(w.dtype == "float32" for w in mixed.weights)
        assert np.all(np.isfinite(tf.cast(mixed_output, tf.float32).numpy()))
    return layer, output
