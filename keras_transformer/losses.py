"""Label-smoothed cross-entropy and accuracy over non-pad target tokens."""

from __future__ import annotations

import keras
import tensorflow as tf


def _token_mask(y_true, pad_id):
    return tf.not_equal(y_true, pad_id)


# Below this a float32 probability has lost digits (fp32 normals end at 1.2e-38).
_SMALLEST_ACCURATE_PROBABILITY = 1e-30


def smoothed_cross_entropy(labels: tf.Tensor, logits: tf.Tensor, label_smoothing: float) -> tf.Tensor:
    """Per-token ``-Σ_v q_v log p_v`` with ``q = (1 - ε)·onehot(label) + ε/V``.

    Equal to ``(1 - ε)·sparse_softmax_cross_entropy + ε·(logsumexp - mean)``,
    computed from one fused softmax (oneDNN's on CPU) and a hand-written
    gradient ``upstream · (softmax - q)``: with an 8k vocabulary the
    ``[tokens, V]`` logits are the largest tensor of a step, and every pass
    over them counts. Two separate cross-entropies took ~20% of a training
    step's op time; max/exp/sum passes written out in TF ops took 93 ms
    fwd+bwd on the benchmark's ``[4096, 8192]``, this takes ~50
    (``benchmarks/profile_train_step.py``).

    The log-normaliser is ``z_y - log p_y`` from the label's own logit and
    probability (two gathers). Where a label's probability is too small for
    that (below 1e-30, near fp32's underflow), the batch uses
    ``max(z) - log(max p)`` instead: the arg-max probability is at least
    ``1/V``, so its log never underflows; it costs two passes over the
    logits, which is why it is not the default.

    Args:
        labels: int32 ``[...]`` target ids.
        logits: float32 ``[..., V]``.
        label_smoothing: ε in [0, 1).
    """
    eps = float(label_smoothing)
    shape = tf.shape(labels)
    vocab = tf.shape(logits)[-1]
    flat_logits = tf.reshape(logits, [-1, vocab])
    flat_labels = tf.reshape(labels, [-1])
    rows = tf.range(tf.shape(flat_labels)[0])
    label_index = tf.stack([rows, flat_labels], axis=1)

    @tf.custom_gradient
    def xent(z):
        probabilities = tf.nn.softmax(z)
        label_logit = tf.gather_nd(z, label_index)
        label_probability = tf.gather_nd(probabilities, label_index)

        def from_labels():  # log Z = z_y - log p_y: no pass over [tokens, V]
            return label_logit - tf.math.log(label_probability)

        def from_peaks():  # p_max ≥ 1/V: exact even where p_y underflows
            return tf.reduce_max(z, axis=-1) - tf.math.log(tf.reduce_max(probabilities, axis=-1))

        log_normalizer = tf.cond(
            tf.reduce_all(label_probability > _SMALLEST_ACCURATE_PROBABILITY),
            from_labels,
            from_peaks,
        )
        loss = log_normalizer - (1.0 - eps) * label_logit
        if eps:
            loss -= eps * tf.reduce_mean(z, axis=-1)

        def grad(upstream):
            upstream = tf.cast(upstream, tf.float32)
            smoothed = probabilities - eps / tf.cast(vocab, tf.float32) if eps else probabilities
            dz = smoothed * upstream[:, tf.newaxis]
            return tf.tensor_scatter_nd_sub(dz, label_index, (1.0 - eps) * upstream)

        return loss, grad

    return tf.reshape(xent(flat_logits), shape)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLabelSmoothedCrossEntropy(keras.losses.Loss):
    """Cross-entropy against smoothed targets, averaged over non-pad tokens.

    The target distribution is ``(1 - ε)·onehot(y) + ε/V`` (paper §5.4,
    ε = 0.1; the same convention as Keras and fairseq). Per-token losses are
    summed over the tokens whose label is not ``pad_id`` and divided by their
    count, so a batch's loss does not depend on how much padding it carries.
    Under ``tf.distribute`` Keras additionally divides by the replica count.

    Args:
        label_smoothing: ε in [0, 1).
        pad_id: label id that is ignored.

    Call arguments:
        y_true: int ids ``[batch, tgt_len]``.
        y_pred: logits ``[batch, tgt_len, vocab]`` (not probabilities).
        sample_weight: optional ``[batch]`` or ``[batch, tgt_len]`` weights.
    """

    def __init__(self, label_smoothing: float = 0.1, pad_id: int = 0,
                 name: str = "masked_label_smoothed_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}.")
        self.label_smoothing = float(label_smoothing)
        self.pad_id = int(pad_id)

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            sample_weight = tf.convert_to_tensor(sample_weight)
            if sample_weight.shape.rank == 1:  # one weight per sentence
                sample_weight = sample_weight[:, tf.newaxis]
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def call(self, y_true, y_pred):
        labels = tf.cast(y_true, tf.int32)
        logits = tf.cast(y_pred, tf.float32)
        loss = smoothed_cross_entropy(labels, logits, self.label_smoothing)
        mask = _token_mask(labels, self.pad_id)
        loss = tf.where(mask, loss, tf.zeros_like(loss))
        # A Keras mask on the per-token values makes Keras' own reduction
        # compute sum(loss) / count(mask) (and keeps sample_weight working).
        loss._keras_mask = mask
        return loss

    def get_config(self):
        config = super().get_config()
        config.update({"label_smoothing": self.label_smoothing, "pad_id": self.pad_id})
        return config


def masked_accuracy(y_true, y_pred, pad_id: int = 0) -> tf.Tensor:
    """Fraction of non-pad target tokens whose arg-max prediction is right."""
    correct, count = _correct_and_count(y_true, y_pred, pad_id)
    return tf.math.divide_no_nan(tf.reduce_sum(correct), tf.reduce_sum(count))


def _correct_and_count(y_true, y_pred, pad_id, sample_weight=None):
    labels = tf.cast(y_true, tf.int32)
    predictions = tf.argmax(y_pred, axis=-1, output_type=tf.int32)
    count = tf.cast(_token_mask(labels, pad_id), tf.float32)
    if sample_weight is not None:
        weight = tf.cast(sample_weight, tf.float32)
        if weight.shape.rank == 1:
            weight = weight[:, tf.newaxis]
        count = count * weight
    correct = tf.cast(tf.equal(predictions, labels), tf.float32) * count
    return correct, count


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.Metric):
    """Token accuracy over non-pad labels, accumulated token-weighted across
    batches (a plain mean of per-batch ratios would over-weight short batches)."""

    def __init__(self, pad_id: int = 0, name: str = "masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = int(pad_id)
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        correct, count = _correct_and_count(y_true, y_pred, self.pad_id, sample_weight)
        self.correct.assign_add(tf.reduce_sum(correct))
        self.count.assign_add(tf.reduce_sum(count))

    def result(self):
        return tf.math.divide_no_nan(self.correct, self.count)

    def reset_state(self):
        self.correct.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}
