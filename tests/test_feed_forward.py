import numpy as np
import pytest
import reference
from layer_harness import run_layer_test

from keras_transformer.layers import FeedForward

pytestmark = pytest.mark.quick


@pytest.mark.parametrize("activation", ["relu", "gelu", "swish", "silu"])
def test_feed_forward_matches_formula(activation):
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    layer = FeedForward(d_model=8, d_ff=32, activation=activation)
    out = layer(x).numpy()
    np.testing.assert_allclose(out, reference.ffn(layer, x, activation), rtol=1e-4, atol=1e-5)


def test_unknown_activation_is_rejected():
    with pytest.raises(ValueError, match="relu"):
        FeedForward(d_model=8, d_ff=16, activation="tanh")


def test_feed_forward_harness():
    x = np.random.default_rng(1).normal(size=(2, 3, 8)).astype("float32")
    run_layer_test(
        FeedForward,
        {"d_model": 8, "d_ff": 16, "dropout": 0.1},
        [x],
        expected_output_shape=(2, 3, 8),
    )
