"""Label-smoothed cross-entropy from one softmax with a hand-written gradient, and the
same fused with the output projection (the training step's fast path)."""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.kernels.projection import project, transposed_product

# Below this a float32 probability has lost digits (fp32 normals end at 1.2e-38).
_SMALLEST_ACCURATE_PROBABILITY = 1e-30


def _label_index(labels: tf.Tensor) -> tf.Tensor:
    """``[tokens, 2]`` (row, label) pairs addressing each label's logit."""
    return tf.stack([tf.range(tf.shape(labels)[0]), labels], axis=1)


def _smoothed_loss(
    z: tf.Tensor,
    probabilities: tf.Tensor,
    label_index: tf.Tensor,
    mean_logit: tf.Tensor,
    eps: float,
) -> tf.Tensor:
    """``log Z - (1 - ε)·z_y - ε·mean(z)`` per row of float32 logits ``z [tokens, V]``.

    The log-normaliser is ``z_y - log p_y`` from the label's own logit and
    probability (two gathers). Where a label's probability is too small for
    that (below 1e-30, near fp32's underflow), the batch uses
    ``max(z) - log(max p)`` instead: the arg-max probability is at least
    ``1/V``, so its log never underflows; it costs two passes over the
    logits, which is why it is not the default.
    """
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
        loss -= eps * mean_logit
    return loss


def smoothed_cross_entropy(
    labels: tf.Tensor, logits: tf.Tensor, label_smoothing: float
) -> tf.Tensor:
    """Per-token label-smoothed cross-entropy ``-Σ_v q_v log p_v`` from one softmax.

    ``q = (1 - ε)·onehot(label) + ε/V``: equal to ``(1 - ε)·sparse softmax
    cross-entropy + ε·(logsumexp - mean)``, with the hand-written gradient
    ``upstream · (softmax - q)``. ``projected_smoothed_cross_entropy`` goes
    further for a ``Transformer``'s training step.

    Args:
        labels: int32 ``[...]`` target ids.
        logits: float32 ``[..., V]``.
        label_smoothing: ε in [0, 1).

    Returns:
        float32 ``[...]``: each token's loss.

    Example:
        >>> loss = smoothed_cross_entropy(tf.constant([1]), tf.constant([[0.0, 0.0]]), 0.1)
        >>> round(float(loss[0]), 4)  # log 2
        0.6931
    """
    eps = float(label_smoothing)
    shape = tf.shape(labels)
    vocab = tf.shape(logits)[-1]
    flat_logits = tf.reshape(logits, [-1, vocab])
    label_index = _label_index(tf.reshape(labels, [-1]))

    @tf.custom_gradient
    def xent(z):
        probabilities = tf.nn.softmax(z)
        mean_logit = tf.reduce_mean(z, axis=-1) if eps else None
        loss = _smoothed_loss(z, probabilities, label_index, mean_logit, eps)

        def grad(upstream):
            upstream = tf.cast(upstream, tf.float32)
            smoothed = probabilities - eps / tf.cast(vocab, tf.float32) if eps else probabilities
            dz = smoothed * upstream[:, tf.newaxis]
            return tf.tensor_scatter_nd_sub(dz, label_index, (1.0 - eps) * upstream)

        return loss, grad

    return tf.reshape(xent(flat_logits), shape)


def projected_smoothed_cross_entropy(
    hidden: tf.Tensor,
    kernel: tf.Tensor,
    labels: tf.Tensor,
    label_smoothing: float,
    bias: tf.Tensor | None = None,
    vocab_major: bool = False,
) -> tuple[tf.Tensor, tf.Tensor]:
    """``smoothed_cross_entropy(labels, hidden @ kernel + bias)``, the projection in the gradient.

    The training step's fast path: the gradient of the logits is pushed
    through the projection's two products, so no pass over the ``[tokens,
    V]`` gradient is written out (``docs/kernels.md``). Values and gradients
    are those of the unfused path (``tests/test_training_math.py``).

    Args:
        hidden: ``[..., d_model]`` decoder states, in the compute dtype.
        kernel: ``[d_model, V]``, or ``[V, d_model]`` with ``vocab_major``
            (tied embeddings), in the compute dtype.
        labels: int32 ``[...]`` target ids.
        label_smoothing: ε in [0, 1).
        bias: optional ``[V]``.
        vocab_major: whether ``kernel`` is ``[V, d_model]``.

    Returns:
        ``(token_losses, logits)``: float32 ``[...]`` losses (differentiable
        with respect to ``hidden``, ``kernel`` and ``bias``) and the float32
        ``[..., V]`` logits for metrics (constants: no gradient flows back
        through them).
    """
    eps = float(label_smoothing)
    depth = tf.shape(hidden)[-1]
    flat_labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    label_index = _label_index(flat_labels)
    constant = tf.stop_gradient
    flat_hidden = tf.reshape(constant(hidden), [-1, depth])
    # Logits, softmax and loss values need no tape: the gradient is written below.
    logits = project(
        flat_hidden,
        constant(kernel),
        None if bias is None else constant(bias),
        transpose_kernel=vocab_major,
    )
    z = tf.cast(logits, tf.float32)
    probabilities = tf.nn.softmax(z)
    mean_logit = None
    if eps:
        mean_row = tf.reduce_mean(
            tf.cast(constant(kernel), tf.float32), axis=0 if vocab_major else 1
        )
        mean_logit = tf.linalg.matvec(tf.cast(flat_hidden, tf.float32), mean_row)
        if bias is not None:
            mean_logit += tf.reduce_mean(tf.cast(constant(bias), tf.float32))
    token_losses = _smoothed_loss(z, probabilities, label_index, mean_logit, eps)

    @tf.custom_gradient
    def losses_of(hidden, kernel, *maybe_bias):
        def grad(upstream):
            upstream = tf.cast(upstream, tf.float32)  # one weight per token
            vocab_size = tf.cast(tf.shape(z)[-1], tf.float32)
            kernel32 = tf.cast(kernel, tf.float32)
            rows = kernel32 if vocab_major else tf.transpose(kernel32)  # [V, d]
            softmax = tf.cast(probabilities, kernel.dtype)  # P in the kernel's dtype
            # Hidden: diag(u)·P·W − (ε/V)·u·colsum(W) − (1−ε)·u·W[y], u = upstream
            d_hidden = upstream[:, tf.newaxis] * (
                tf.cast(tf.matmul(softmax, kernel, transpose_b=not vocab_major), tf.float32)
                - (eps / vocab_size) * tf.reduce_sum(rows, axis=0)
                - (1.0 - eps) * tf.gather(rows, flat_labels)
            )
            # Kernel: Pᵀ·diag(u)·H − (ε/V)·1·(uᵀH) − (1−ε)·segment_sum(u·H by y)
            scaled = upstream[:, tf.newaxis] * tf.cast(flat_hidden, tf.float32)
            label_sums = tf.math.unsorted_segment_sum(
                scaled, flat_labels, tf.shape(rows)[0]
            )  # [V, d]
            correction = (eps / vocab_size) * tf.reduce_sum(scaled, axis=0) + (
                1.0 - eps
            ) * label_sums
            scaled = tf.cast(scaled, kernel.dtype)
            if vocab_major:
                d_kernel = transposed_product(softmax, scaled) - tf.cast(correction, kernel.dtype)
            else:
                d_kernel = transposed_product(scaled, softmax) - tf.cast(
                    tf.transpose(correction), kernel.dtype
                )
            grads = [tf.reshape(tf.cast(d_hidden, hidden.dtype), tf.shape(hidden)), d_kernel]
            if maybe_bias:
                d_bias = (
                    tf.linalg.matvec(probabilities, upstream, transpose_a=True)
                    - (eps / vocab_size) * tf.reduce_sum(upstream)
                    - (1.0 - eps)
                    * tf.math.unsorted_segment_sum(upstream, flat_labels, tf.shape(rows)[0])
                )
                grads.append(tf.cast(d_bias, maybe_bias[0].dtype))
            return grads

        return tf.identity(token_losses), grad

    token_losses = losses_of(hidden, kernel) if bias is None else losses_of(hidden, kernel, bias)
    shape = tf.shape(labels)
    logits_shape = tf.concat([shape, [tf.shape(z)[-1]]], axis=0)
    return tf.reshape(token_losses, shape), tf.reshape(z, logits_shape)
