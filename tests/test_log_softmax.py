"""``kernels.log_softmax_by_logsumexp``: ``tf.nn.log_softmax`` within rounding, and the
choice between them that ``KernelChoice(log_softmax=...)`` takes."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.decoding import KernelChoice
from keras_transformer.numerics import masked_score_value


def test_equals_tf_log_softmax_on_logits_with_struck_tokens():
    """Random logits over a vocabulary, with tokens struck by the finite "-inf" the
    decoders use: every value within float32 rounding of ``tf.nn.log_softmax``."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal([6, 8000]).astype(np.float32) * 8
    logits[:, [0, 2]] = masked_score_value(tf.float32)
    logits[3] += 1000.0  # far from 0: the max is taken out before the exponentials
    got = kernels.log_softmax_by_logsumexp(tf.constant(logits)).numpy()
    expected = tf.nn.log_softmax(logits).numpy()
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-4)
    assert np.array_equal(
        np.argsort(-got[:, :50], kind="stable"), np.argsort(-expected[:, :50], kind="stable")
    )


def test_kinds():
    assert kernels.log_softmax_of("fused") is tf.nn.log_softmax
    assert kernels.log_softmax_of("logsumexp") is kernels.log_softmax_by_logsumexp
    with pytest.raises(ValueError, match="log_softmax must be one of"):
        kernels.log_softmax_of("exact")


def test_kernel_choice_refuses_an_unknown_kind_and_hands_its_own_to_the_steps():
    import keras_transformer as kt

    with pytest.raises(ValueError, match="log_softmax must be one of"):
        KernelChoice(log_softmax="exp")
    model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=1))
    model.build()
    steps = KernelChoice(static_shapes=True, log_softmax="logsumexp").steps(model, limit=4)
    assert steps.log_softmax is kernels.log_softmax_by_logsumexp
    assert KernelChoice().steps(model).log_softmax is tf.nn.log_softmax
