"""Schedule, label-smoothed loss, accuracy and optimizer against the formulas."""

import keras
import numpy as np
import pytest
import reference
import tensorflow as tf

from keras_transformer import (
    FusedAdam,
    MaskedAccuracy,
    MaskedLabelSmoothedCrossEntropy,
    TransformerSchedule,
    masked_accuracy,
    paper_adam,
)

pytestmark = pytest.mark.quick


def paper_lr(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_schedule_matches_formula_with_steps_from_one():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    for step in [1, 2, 100, 3999, 4000, 4001, 10000, 100000]:
        # Keras passes the 0-based update counter: the paper's step is counter + 1.
        np.testing.assert_allclose(float(schedule(step - 1)), paper_lr(step, 512, 4000), rtol=1e-6)
    values = [float(schedule(i)) for i in range(0, 8000, 10)]
    peak = int(np.argmax(values)) * 10
    assert abs((peak + 1) - 4000) <= 10
    np.testing.assert_allclose(max(values), (512 * 4000) ** -0.5, rtol=1e-3)
    assert float(schedule(0)) > 0.0


def test_schedule_serializes_and_validates():
    schedule = TransformerSchedule(d_model=256, warmup_steps=100, scale=2.0)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(clone(50)) == pytest.approx(float(schedule(50)))
    np.testing.assert_allclose(float(schedule(9)), 2.0 * paper_lr(10, 256, 100), rtol=1e-6)
    with pytest.raises(ValueError, match="positive"):
        TransformerSchedule(d_model=0)


def test_paper_adam():
    optimizer = paper_adam(d_model=512)
    assert isinstance(optimizer, FusedAdam)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(optimizer._learning_rate, TransformerSchedule)
    assert paper_adam(1e-3, clipnorm=1.0).clipnorm == 1.0
    with pytest.raises(ValueError, match="d_model"):
        paper_adam()


def test_fused_adam_updates_like_keras_adam():
    """Same weights and slots as Keras' Adam after several steps, dense and
    sparse (embedding-style) gradients alike, and a config round trip."""
    rng = np.random.default_rng(0)
    init = [rng.normal(size=(5, 3)).astype("float32"), rng.normal(size=(7, 2)).astype("float32")]
    grads = [
        [
            tf.constant(rng.normal(size=(5, 3)).astype("float32") * (i + 1)),
            tf.IndexedSlices(
                tf.constant(rng.normal(size=(2, 2)).astype("float32")),
                tf.constant([1, 4]),
                tf.constant([7, 2]),
            ),
        ]
        for i in range(4)
    ]
    results = []
    for optimizer in (
        keras.optimizers.Adam(1e-2, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        FusedAdam(1e-2, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
    ):
        variables = [keras.Variable(value) for value in init]
        step = tf.function(lambda step_grads: optimizer.apply(step_grads, variables))
        for step_grads in grads:
            step(step_grads)
        results.append([v.numpy() for v in variables + list(optimizer.variables)])
    for keras_value, fused_value in zip(*results):
        np.testing.assert_allclose(fused_value, keras_value, rtol=1e-5, atol=1e-7)
    clone = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(paper_adam(d_model=64))
    )
    assert isinstance(clone, FusedAdam) and clone.beta_2 == 0.98


def _numpy_smoothed_loss(labels, logits, eps, pad_id=0):
    shifted = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    vocab = logits.shape[-1]
    target = np.full(logits.shape, eps / vocab)
    np.put_along_axis(target, labels[..., None], 1 - eps + eps / vocab, axis=-1)
    per_token = -(target * log_probs).sum(-1)
    mask = labels != pad_id
    return (per_token * mask).sum() / mask.sum()


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_label_smoothed_loss_matches_numpy_and_ignores_padding(eps):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 6, 11)).astype("float32")
    labels = rng.integers(1, 11, size=(3, 6))
    labels[0, 4:] = 0
    labels[2, 1:] = 0
    loss = MaskedLabelSmoothedCrossEntropy(label_smoothing=eps)
    np.testing.assert_allclose(
        float(loss(labels, logits)), _numpy_smoothed_loss(labels, logits, eps), rtol=1e-5
    )
    # Average over tokens, not the padded batch: more padding changes nothing.
    padded_labels = np.pad(labels, [(0, 0), (0, 4)])
    padded_logits = np.pad(logits, [(0, 0), (0, 4), (0, 0)], constant_values=5.0)
    np.testing.assert_allclose(
        float(loss(padded_labels, padded_logits)), float(loss(labels, logits)), rtol=1e-6
    )


@pytest.mark.parametrize("spread", [1.0, 300.0])
def test_smoothed_loss_gradient_matches_numpy_even_for_extreme_logits(spread):
    """The custom gradient is ``(softmax - q)·mask/count``; with logits 300
    apart, fp32 probabilities of the labels underflow to 0, and the loss
    must still be finite and right (the log-normaliser comes from the
    arg-max entry, not the label's)."""
    rng = np.random.default_rng(2)
    logits = (rng.normal(size=(2, 5, 9)) * spread).astype("float32")
    labels = rng.integers(1, 9, size=(2, 5))
    labels[1, 3:] = 0
    eps = 0.1
    loss_fn = MaskedLabelSmoothedCrossEntropy(label_smoothing=eps)
    logits_tensor = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits_tensor)
        loss = loss_fn(labels, logits_tensor)
    grad = tape.gradient(loss, logits_tensor).numpy()
    np.testing.assert_allclose(float(loss), _numpy_smoothed_loss(labels, logits, eps), rtol=1e-5)
    target = np.full(logits.shape, eps / 9)
    np.put_along_axis(target, labels[..., None], 1 - eps + eps / 9, axis=-1)
    mask = (labels != 0)[..., None]
    expected = (reference.softmax(logits.astype(np.float64)) - target) * mask / mask.sum()
    np.testing.assert_allclose(grad, expected, atol=1e-6)


def test_loss_under_tf_function_with_sample_weight():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 4, 7)).astype("float32")
    labels = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])
    loss = MaskedLabelSmoothedCrossEntropy()
    eager = float(loss(labels, logits))
    graph = float(tf.function(lambda y, p: loss(y, p))(labels, logits))
    assert graph == pytest.approx(eager, rel=1e-6)
    weighted = float(loss(labels, logits, sample_weight=np.array([1.0, 0.0])))
    only_first = float(loss(labels[:1], logits[:1]))
    # sum(w·loss)/count(non-pad): the zero-weighted sentence still counts its tokens.
    assert weighted == pytest.approx(only_first * 3 / 5, rel=1e-5)


def test_loss_serializes_and_validates():
    loss = MaskedLabelSmoothedCrossEntropy(label_smoothing=0.2, pad_id=5)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert (clone.label_smoothing, clone.pad_id) == (0.2, 5)
    with pytest.raises(ValueError, match="label_smoothing"):
        MaskedLabelSmoothedCrossEntropy(label_smoothing=1.0)


def test_masked_accuracy_function_and_metric():
    logits = np.zeros((2, 3, 5), "float32")
    predictions = np.array([[1, 2, 3], [4, 4, 1]])
    np.put_along_axis(logits, predictions[..., None], 1.0, axis=-1)
    labels = np.array([[1, 2, 4], [4, 0, 0]])  # 3 of 4 real tokens right
    assert float(masked_accuracy(labels, logits)) == pytest.approx(0.75)
    metric = MaskedAccuracy()
    metric.update_state(labels, logits)
    metric.update_state(np.array([[3, 0, 0]]), np.eye(5, dtype="float32")[[[1, 0, 0]]])
    # Token-weighted over both batches: 3 right of 5 tokens.
    assert float(metric.result()) == pytest.approx(3 / 5)
    metric.reset_state()
    assert float(metric.result()) == 0.0
    clone = MaskedAccuracy.from_config(MaskedAccuracy(pad_id=7).get_config())
    assert clone.pad_id == 7


@pytest.mark.parametrize("vocab_major, with_bias", [(True, False), (False, True)])
@pytest.mark.parametrize("eps, spread", [(0.1, 1.0), (0.0, 1.0), (0.1, 60.0)])
def test_projected_loss_equals_projection_then_loss(vocab_major, with_bias, eps, spread):
    """The fused output projection + loss gives the values and gradients
    (hidden, kernel, bias) of ``project`` followed by the loss, also where
    label probabilities underflow (spread 60: logits hundreds apart)."""
    from keras_transformer.kernels import (
        project,
        projected_smoothed_cross_entropy,
        smoothed_cross_entropy,
    )

    rng = np.random.default_rng(3)
    hidden = tf.constant(rng.normal(size=(2, 5, 8)).astype("float32") * spread)
    shape = (13, 8) if vocab_major else (8, 13)
    kernel = tf.constant(rng.normal(size=shape).astype("float32"))
    bias = tf.constant(rng.normal(size=13).astype("float32")) if with_bias else None
    labels = rng.integers(1, 13, size=(2, 5)).astype("int32")
    labels[1, 3:] = 0
    weight = tf.constant((labels != 0) / (labels != 0).sum(), tf.float32)
    sources = [hidden, kernel] + ([bias] if with_bias else [])

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(sources)
        logits = tf.cast(project(hidden, kernel, bias, transpose_kernel=vocab_major), tf.float32)
        unfused = tf.reduce_sum(smoothed_cross_entropy(labels, logits, eps) * weight)
        token_losses, fused_logits = projected_smoothed_cross_entropy(
            hidden, kernel, labels, eps, bias=bias, vocab_major=vocab_major
        )
        fused = tf.reduce_sum(token_losses * weight)
    assert np.isfinite(float(fused))
    np.testing.assert_allclose(float(fused), float(unfused), rtol=1e-5)
    np.testing.assert_allclose(fused_logits.numpy(), logits.numpy(), rtol=1e-6)
    scale = 1e-5 * max(1.0, spread)
    for expected, got in zip(tape.gradient(unfused, sources), tape.gradient(fused, sources)):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=scale)


def _tiny_transformer(accumulate=None):
    from keras_transformer import Transformer, TransformerConfig

    keras.utils.set_random_seed(0)
    model = Transformer(
        TransformerConfig.from_preset(
            "tiny", vocab_size=40, d_model=16, d_ff=32, num_layers=1, dropout=0.0
        )
    )
    model.build()
    # epsilon 1: Adam's first updates are not sign(gradient), which float rounding could flip.
    model.compile(
        optimizer=paper_adam(
            TransformerSchedule(16, warmup_steps=5),
            epsilon=1.0,
            gradient_accumulation_steps=accumulate,
        ),
        loss=MaskedLabelSmoothedCrossEntropy(0.1),
        metrics=[MaskedAccuracy()],
    )
    return model


def test_accumulated_micro_batches_update_like_one_big_batch():
    """Two updates from batches of 8 sentences, or from 2 accumulated
    micro-batches of 4 (the Transformer's fused loss step, FusedAdam): the same
    weights, update count and learning rate. Every row has the same number of
    target tokens, so the mean of the micro-batch token means is the big
    batch's token mean (with unequal counts each micro-batch weighs the same,
    not each token)."""
    rng = np.random.default_rng(0)
    src, tgt_in, tgt_out = (rng.integers(3, 40, size=(16, n)).astype("int32") for n in (6, 5, 5))
    data = tf.data.Dataset.from_tensor_slices(((src, tgt_in), tgt_out))
    big, small = _tiny_transformer(), _tiny_transformer(accumulate=2)
    big.fit(data.batch(8), verbose=0, shuffle=False)
    small.fit(data.batch(4), verbose=0, shuffle=False)
    assert int(small.optimizer.iterations) == int(big.optimizer.iterations) == 2
    assert int(small.optimizer._iterations) == 4  # Keras' count of micro-batches
    # The schedule follows the updates: the rate of the third update, in both.
    expected_rate = float(TransformerSchedule(16, warmup_steps=5)(2))
    assert float(small.optimizer.learning_rate) == pytest.approx(expected_rate, rel=1e-6)
    assert float(big.optimizer.learning_rate) == pytest.approx(expected_rate, rel=1e-6)
    for accumulated, whole in zip(small.get_weights(), big.get_weights()):
        np.testing.assert_allclose(accumulated, whole, rtol=1e-5, atol=1e-6)


def test_validation_loss_is_the_mean_over_target_tokens_whatever_the_batching():
    """``Transformer.test_step`` weights each batch by its target tokens:
    ``evaluate`` gives the token mean of the whole set for any batch size
    (Keras' sentence weighting would not), all-pad rows changing nothing."""
    rng = np.random.default_rng(1)
    model = _tiny_transformer()
    src, tgt_in = (
        rng.integers(3, 40, size=(6, 7)).astype("int32"),
        rng.integers(3, 40, size=(6, 5)).astype("int32"),
    )
    tgt_out = rng.integers(3, 40, size=(6, 5)).astype("int32")
    for row, length in enumerate([5, 1, 3, 2, 5, 4]):
        tgt_out[row, length:] = 0
    logits = model((src, tgt_in)).numpy()
    expected = _numpy_smoothed_loss(tgt_out, logits, 0.1)
    data = tf.data.Dataset.from_tensor_slices(((src, tgt_in), tgt_out))
    for size in (6, 4, 1):
        scores = model.evaluate(data.batch(size), return_dict=True, verbose=0)
        assert scores["loss"] == pytest.approx(expected, rel=1e-5), size
    padded = np.zeros((2, 5), "int32")
    with_pad_rows = tf.data.Dataset.from_tensors(
        (
            (np.concatenate([src, np.zeros((2, 7), "int32")]), np.concatenate([tgt_in, padded])),
            np.concatenate([tgt_out, padded]),
        )
    )
    assert model.evaluate(with_pad_rows, return_dict=True, verbose=0)["loss"] == pytest.approx(
        expected, rel=1e-5
    )
