"""Log-probabilities as ``logits - logsumexp(logits)``: the decoders' seam for LiteRT.

LiteRT's ``LOG_SOFTMAX`` kernel is several times slower than the ``REDUCE_MAX``,
``EXP``, ``SUM`` and ``LOG`` ops of the same formula, and slower still on the
widely spread logits of a trained model (``docs/kernels.md``). The TFLite
converter fuses ``tf.nn.log_softmax``, or its formula written out, into that
kernel; ``tf.math.reduce_logsumexp`` stays as those ops. TensorFlow's own
``LogSoftmax`` is one fused kernel, so graphs for TensorFlow keep it
(``decoding.KernelChoice(log_softmax=...)`` chooses).
"""

from __future__ import annotations

import tensorflow as tf

# The ways a decoder turns logits into log-probabilities (KernelChoice.log_softmax).
LOG_SOFTMAX_KINDS = ("fused", "logsumexp")


def log_softmax_by_logsumexp(logits: tf.Tensor) -> tf.Tensor:
    """``tf.nn.log_softmax(logits)`` over the last axis, as ``logits - logsumexp(logits)``.

    Args:
        logits: ``[..., vocab]`` float.

    Returns:
        The log-probabilities, shaped as ``logits``: equal to
        ``tf.nn.log_softmax`` within float rounding.

    Example:
        >>> x = tf.constant([[1.0, 2.0, 3.0]])
        >>> bool(tf.reduce_all(tf.abs(log_softmax_by_logsumexp(x) - tf.nn.log_softmax(x)) < 1e-6))
        True
    """
    return logits - tf.math.reduce_logsumexp(logits, axis=-1, keepdims=True)


def log_softmax_of(kind: str):
    """The log-softmax function of ``kind``, one of ``LOG_SOFTMAX_KINDS``.

    Args:
        kind: ``"fused"`` (``tf.nn.log_softmax``) or ``"logsumexp"``
            (``log_softmax_by_logsumexp``, for LiteRT).

    Returns:
        ``logits [..., vocab] → log-probabilities``.

    Raises:
        ValueError: ``kind`` is not one of ``LOG_SOFTMAX_KINDS``.

    Example:
        >>> log_softmax_of("fused") is tf.nn.log_softmax
        True
    """
    if kind not in LOG_SOFTMAX_KINDS:
        raise ValueError(f"log_softmax must be one of {LOG_SOFTMAX_KINDS}, got {kind!r}.")
    return tf.nn.log_softmax if kind == "fused" else log_softmax_by_logsumexp
