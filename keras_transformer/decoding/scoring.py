"""Forced decoding: the log-probability a model gives a given translation."""

from __future__ import annotations

import tensorflow as tf


def score_targets(model, source_ids, target_ids) -> tf.Tensor:
    """The sum of log p over each target's tokens and EOS, by one teacher-forced pass.

    It is the number the searches report as ``log_probs`` for the same tokens
    (``DecodeOutput``): float32, no length penalty.

    Args:
        model: a ``keras_transformer.Transformer``.
        source_ids: ``[batch, src_len]`` int ids, padded with ``pad_id``.
        target_ids: ``[batch, len]`` int ids without the start token, each
            row ending with EOS and padded with ``pad_id`` (an empty target
            is EOS alone).

    Returns:
        ``[batch]`` float32 log-probabilities.

    Example:
        >>> import keras_transformer as kt
        >>> from keras_transformer.decoding import Greedy, Limits, decode
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=1))
        >>> model.build()
        >>> source = tf.constant([[5, 6, 3]])
        >>> out = decode(model, source, Greedy(), Limits(max_length=5))
        >>> forced = score_targets(model, source, out.tokens[:, 0])
        >>> bool(abs(forced[0] - out.log_probs[0, 0]) < 1e-4)
        True
    """
    config = model.config
    source_ids = tf.cast(tf.convert_to_tensor(source_ids), tf.int32)
    target_ids = tf.cast(tf.convert_to_tensor(target_ids), tf.int32)
    batch = tf.shape(target_ids)[0]
    decoder_in = tf.concat(
        [tf.fill([batch, 1], tf.constant(config.bos_id, tf.int32)), target_ids[:, :-1]], axis=1
    )
    logits = model((source_ids, decoder_in), training=False)  # [batch, len, vocab] float32
    log_probs = tf.gather(tf.nn.log_softmax(logits), target_ids, batch_dims=2)
    real = tf.not_equal(target_ids, config.pad_id)
    return tf.reduce_sum(tf.where(real, log_probs, 0.0), axis=1)
