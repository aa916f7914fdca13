"""Label-smoothed cross-entropy and accuracy over non-pad target tokens."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer import kernels


def _token_mask(y_true, pad_id):
    return tf.not_equal(y_true, pad_id)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedLabelSmoothedCrossEntropy(keras.losses.Loss):
    """Cross-entropy against label-smoothed targets, averaged over the non-pad tokens.

    The target distribution is ``(1 - ε)·onehot(y) + ε/V`` (paper §5.4,
    ε = 0.1; the same convention as Keras and fairseq). Per-token losses are
    summed over the tokens whose label is not ``pad_id`` and divided by their
    count, so a batch's loss does not depend on how much padding it carries.
    Under ``tf.distribute`` Keras additionally divides by the replica count.

    Args:
        label_smoothing: ε in [0, 1).
        pad_id: the label id that is ignored.
        name: the loss's name.
        **kwargs: further ``keras.losses.Loss`` arguments.

    Call arguments:
        y_true: int ids ``[batch, tgt_len]``.
        y_pred: logits ``[batch, tgt_len, vocab]`` (not probabilities).
        sample_weight: optional ``[batch]`` or ``[batch, tgt_len]`` weights.

    Raises:
        ValueError: ``label_smoothing`` is outside [0, 1).

    Example:

    >>> loss = MaskedLabelSmoothedCrossEntropy(label_smoothing=0.0)
    >>> labels = tf.constant([[1, 0]])  # the second position is padding
    >>> logits = tf.constant([[[0.0, 0.0], [5.0, -5.0]]])
    >>> round(float(loss(labels, logits)), 4)  # ln 2, from the first position alone
    0.6931
    """

    def __init__(
        self,
        label_smoothing: float = 0.1,
        pad_id: int = 0,
        name: str = "masked_label_smoothed_cross_entropy",
        **kwargs,
    ):
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
        return _masked_token_losses(
            labels,
            kernels.smoothed_cross_entropy(labels, logits, self.label_smoothing),
            self.pad_id,
        )

    def reduce_token_losses(self, y_true, token_losses, sample_weight=None):
        """Reduces per-token losses computed elsewhere to this loss's value.

        The ``Transformer``'s fused training step computes the per-token losses
        itself; this applies the same pad mask, sample weights, Keras reduction
        and replica scaling as calling the loss.

        Args:
            y_true: int ids ``[batch, tgt_len]``.
            token_losses: the loss of each token ``[batch, tgt_len]``.
            sample_weight: optional ``[batch]`` or ``[batch, tgt_len]`` weights.

        Returns:
            The loss, a scalar.
        """
        return _PrecomputedTokenLosses(
            self.label_smoothing,
            self.pad_id,
            name=self.name,
            reduction=self.reduction,
            dtype=self.dtype,
        )(y_true, token_losses, sample_weight)

    def get_config(self):
        config = super().get_config()
        config.update({"label_smoothing": self.label_smoothing, "pad_id": self.pad_id})
        return config


def _masked_token_losses(labels: tf.Tensor, token_losses: tf.Tensor, pad_id: int) -> tf.Tensor:
    mask = _token_mask(labels, pad_id)
    loss = tf.where(mask, token_losses, tf.zeros_like(token_losses))
    # A Keras mask on the per-token values makes Keras' own reduction
    # compute sum(loss) / count(mask) (and keeps sample_weight working).
    loss._keras_mask = mask
    return loss


class _PrecomputedTokenLosses(MaskedLabelSmoothedCrossEntropy):
    """Takes per-token losses as ``y_pred`` (``reduce_token_losses``)."""

    def call(self, y_true, y_pred):
        return _masked_token_losses(
            tf.cast(y_true, tf.int32), tf.cast(y_pred, tf.float32), self.pad_id
        )


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_accuracy(y_true, y_pred, pad_id: int = 0) -> tf.Tensor:
    """Computes the fraction of non-pad target tokens whose arg-max prediction is right.

    As a compiled metric (``metrics=[masked_accuracy]``) Keras averages the
    per-batch fractions; ``MaskedAccuracy`` weights batches by their tokens.
    It is registered, so a model compiled with it reloads from a ``.keras`` file.

    Args:
        y_true: int ids ``[batch, tgt_len]``.
        y_pred: logits or probabilities ``[batch, tgt_len, vocab]``.
        pad_id: the label id that is ignored.

    Returns:
        The accuracy, a float32 scalar (0 when every label is padding).

    Example:

    >>> labels = tf.constant([[1, 1, 0]])
    >>> logits = tf.constant([[[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]])
    >>> float(masked_accuracy(labels, logits))
    0.5
    """
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
    """Token accuracy over the non-pad labels, accumulated token-weighted across batches.

    A plain mean of per-batch ratios (``masked_accuracy`` as a compiled
    metric) would over-weight short batches.

    Args:
        pad_id: the label id that is ignored.
        name: the metric's name.
        **kwargs: further ``keras.metrics.Metric`` arguments.

    Example:

    >>> metric = MaskedAccuracy()
    >>> metric.update_state(tf.constant([[1, 0]]), tf.constant([[[0.0, 1.0], [1.0, 0.0]]]))
    >>> float(metric.result())
    1.0
    """

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
