"""What every search does to tokens: the output buffers, the forced prefixes, the bans.

``Tokens`` is how a search's sequences are stored, grown a column a step or
written in place in a fixed buffer (static shapes); ``forced_tokens`` and
``prefix_inputs`` force each row's prefix; ``ban_tokens`` and
``ban_early_eos`` make tokens impossible. Nothing here knows the model.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.layers import masked_score_value

NEG = masked_score_value(tf.float32)  # an impossible log-probability or score, finite


class DecodeOutput(NamedTuple):
    """What every search returns: each sentence's hypotheses, best first.

    Fields:
        tokens: ``[batch, n, len]`` int32, without the start token, ending
            with EOS (where emitted) and padded with ``pad_id``.
        scores: ``[batch, n]`` float32, the ranking: beam search's
            log-probability over its length penalty, else the log-probability.
        log_probs: ``[batch, n]`` float32, the sum of log p over the tokens
            and EOS, under the model's own distribution (no length penalty,
            no sampling filter); ``-inf`` where a sentence has fewer than
            ``n`` hypotheses (its tokens are then all ``pad_id``).
        steps: ``[]`` int32, the decoder steps the search ran.
    """

    tokens: tf.Tensor
    scores: tf.Tensor
    log_probs: tf.Tensor
    steps: tf.Tensor


class Tokens(NamedTuple):
    """How a search stores its sequences ``[rows, ..., len]``: grown, or a fixed buffer.

    With ``static``, a sequence is a ``[rows, ..., width]`` buffer filled with
    ``pad_id``, its column ``t`` written at step ``t``: every loop variable
    keeps its shape (XLA). Otherwise it starts empty and grows a column a
    step. The start token is not stored.

    Args:
        static: a fixed buffer of ``width`` columns.
        width: the longest output (a Python int with ``static``, else a
            scalar tensor: the width of the results).
        pad_id: the padding id.

    Example:
        >>> buffer = Tokens(static=True, width=3, pad_id=0)
        >>> seq = buffer.append(buffer.start([1]), tf.constant([7]), 1)
        >>> seq.numpy().tolist()
        [[0, 7, 0]]
    """

    static: bool
    width: object
    pad_id: int

    def start(self, shape) -> tf.Tensor:
        """The sequences before the first step: ``[*shape, width]`` pads, or ``[*shape, 0]``.

        Args:
            shape: the leading dimensions, rows first.

        Returns:
            int32 sequences.
        """
        return tf.fill([*shape, self.width if self.static else 0], self.pad_id)

    def append(self, seq, tokens, t) -> tf.Tensor:
        """``seq [..., len]`` with ``tokens [...]`` as its column ``t`` (the last, when grown).

        Args:
            seq: the sequences.
            tokens: one token each.
            t: the step (a scalar).

        Returns:
            The sequences.
        """
        if self.static:
            return tf.where(tf.equal(tf.range(self.width), t), tokens[..., tf.newaxis], seq)
        return tf.concat([seq, tokens[..., tf.newaxis]], axis=-1)

    def widen(self, seq) -> tf.Tensor:
        """``seq`` as wide as sequences appended to this step: a pad column more, when grown.

        Args:
            seq: sequences written before this step.

        Returns:
            The sequences.
        """
        if self.static:
            return seq
        return tf.pad(seq, [[0, 0]] * (seq.shape.rank - 1) + [[0, 1]], constant_values=self.pad_id)

    def padded(self, seq) -> tf.Tensor:
        """``seq`` padded to the full ``width``, as the results hold it.

        Args:
            seq: ``[rows, ..., len]`` sequences, ``len <= width``.

        Returns:
            ``[rows, ..., width]`` sequences.
        """
        if self.static:
            return seq
        grow = self.width - tf.shape(seq)[-1]
        return tf.pad(
            seq, [[0, 0]] * (seq.shape.rank - 1) + [[0, grow]], constant_values=self.pad_id
        )

    def invariant(self, seq) -> tf.TensorShape:
        """The shape invariant of a sequence in the loop: any rows, a growing or fixed length.

        Args:
            seq: the sequences.

        Returns:
            ``seq``'s shape, rows unknown, and its length too unless ``static``.
        """
        length = seq.shape[-1] if self.static else None
        return tf.TensorShape([None, *seq.shape[1:-1], length])


def forced_tokens(prefix, prefix_lengths, step):
    """Which rows are still in their prefix at ``step``, and the prefix token each would take.

    Args:
        prefix: ``[rows, width]`` int32, at least one column.
        prefix_lengths: ``[rows]`` int32.
        step: the decoding step.

    Returns:
        ``(forced [rows] bool, token [rows] int32)``.
    """
    width = tf.shape(prefix)[1]
    return step < prefix_lengths, tf.gather(prefix, tf.minimum(step, width - 1), axis=1)


def prefix_inputs(prefix_ids, pad_id: int):
    """``(prefix [batch, width + 1], lengths [batch])`` of a padded prefix batch.

    Args:
        prefix_ids: ``[batch, width]`` int ids padded with ``pad_id``.
        pad_id: the padding id.

    Returns:
        The prefix with a pad column more (never empty), and each row's prefix length.
    """
    prefix_ids = tf.cast(tf.convert_to_tensor(prefix_ids), tf.int32)
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefix_ids, pad_id), tf.int32), axis=1)
    return tf.pad(prefix_ids, [[0, 0], [0, 1]], constant_values=pad_id), lengths


def ban_early_eos(scores: tf.Tensor, step, min_length: int, eos_id: int) -> tf.Tensor:
    """``scores`` with EOS made impossible while ``step < min_length``.

    Args:
        scores: ``[..., vocab]`` logits or log-probabilities.
        step: the tokens decoded so far (a scalar).
        min_length: the shortest output allowed (0: no limit).
        eos_id: the EOS id.

    Returns:
        ``scores``, EOS's entries ``masked_score_value`` while too early.
    """
    if not min_length:
        return scores
    is_eos = tf.equal(tf.range(tf.shape(scores)[-1]), eos_id)
    too_early = tf.logical_and(is_eos, step < min_length)
    return tf.where(too_early, tf.constant(masked_score_value(scores.dtype), scores.dtype), scores)


def ban_tokens(scores: tf.Tensor, token_ids) -> tf.Tensor:
    """``scores`` with ``token_ids`` made impossible, the others left as they are.

    The others are not renormalised: greedy decoding chooses from the logits
    so, and scores the chosen tokens by their log-probabilities.

    Args:
        scores: ``[..., vocab]`` logits or log-probabilities, above
            ``masked_score_value``.
        token_ids: the ids to ban.

    Returns:
        ``scores``, the banned entries the finite -inf of ``masked_score_value``.

    Example:
        >>> ban_tokens(tf.constant([[1.0, 2.0, 3.0]]), [0, 2]).numpy().tolist()
        [[-1000000000.0, 2.0, -1000000000.0]]
    """
    size = scores.shape[-1]
    if size is not None:  # the usual case: one constant [vocab] cap, no ops a decoding step
        # masked where banned, +inf elsewhere: a score (never below masked) becomes masked
        # or stays as it is, a select's values by a minimum (docs/kernels.md).
        cap = np.where(
            np.isin(np.arange(size), list(token_ids)), masked_score_value(scores.dtype), np.inf
        )
        return tf.minimum(scores, tf.constant(cap.astype(scores.dtype.as_numpy_dtype)))
    vocab = tf.range(tf.shape(scores)[-1])
    banned = tf.reduce_any(
        tf.equal(vocab[:, tf.newaxis], tf.constant(list(token_ids), tf.int32)[tf.newaxis, :]),
        axis=1,
    )
    return tf.where(banned, tf.constant(masked_score_value(scores.dtype), scores.dtype), scores)
