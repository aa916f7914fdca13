"""Greedy decoding and sampling: one hypothesis a sentence, one token a step.

Both are the ``OneBest`` strategy of ``loop.search_loop``, which chooses a
token a row from each step's logits: the arg-max, or a draw
(``sampling.sample_tokens``). Decoding starts from ``bos_id`` and never
chooses a ``banned`` id, nor EOS before ``min_length``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import tensorflow as tf

from keras_transformer.decoding.loop import search_loop
from keras_transformer.decoding.options import Sample, SampleParams
from keras_transformer.decoding.sampling import sample_tokens
from keras_transformer.decoding.tokens import DecodeOutput, ban_early_eos, ban_tokens


class OneBestState(NamedTuple):
    """Greedy decoding's and sampling's state, a row a sentence."""

    finished: tf.Tensor  # [rows] bool: the row emitted EOS or reached its length limit
    scores: tf.Tensor  # [rows] float32: summed log-probabilities of the chosen tokens
    keys: tf.Tensor | tuple  # [rows] uint32: sampling's noise keys (greedy: ())


@dataclass(frozen=True, eq=False)
class OneBest:
    """The strategy of greedy decoding (``sample=None``) and of sampling.

    Args:
        min_length: EOS is not chosen before this many tokens.
        sample: sampling's ``top_k``, ``top_p`` and ``temperature``
            (``SampleParams``: numbers or tensors), or ``None`` for the arg-max.
        keys: ``[batch]`` uint32, sampling's noise key a sentence.

    Example:
        >>> OneBest().beams
        1
    """

    min_length: int = 0
    sample: SampleParams | None = None
    keys: tf.Tensor | None = None
    beams = 1

    def start(self, batch, context):
        """The state and the (empty) tokens of ``batch`` sentences.

        Args:
            batch: the number of sentences.
            context: the loop's ``SearchContext``.

        Returns:
            ``(OneBestState, tokens [batch, 0 or width])``.
        """
        keys = () if self.sample is None else self.keys
        state = OneBestState(tf.zeros([batch], tf.bool), tf.zeros([batch], tf.float32), keys)
        return state, context.tokens.start([batch])

    def step(self, state, tokens, logits, t, row_limits, forced, context):
        """A token a row chosen from ``logits [rows, vocab]``, and the state that follows.

        Args:
            state: the ``OneBestState``.
            tokens: ``[rows, len]`` int32, the tokens so far.
            logits: ``[rows, vocab]`` float32.
            t: the step.
            row_limits: ``[rows]`` int32.
            forced: ``(forced [rows] bool, token [rows] int32)`` or ``None``.
            context: the loop's ``SearchContext``.

        Returns:
            ``(state, tokens, chosen [rows] int32, None)``.
        """
        finished = state.finished
        allowed = ban_early_eos(
            ban_tokens(logits, context.banned), t, self.min_length, context.eos_id
        )
        if self.sample is None:
            chosen = tf.argmax(allowed, axis=-1, output_type=tf.int32)  # [rows]
        else:
            top_k, top_p, temperature = self.sample[:3]
            chosen = sample_tokens(allowed, state.keys, t, top_k, top_p, temperature)
        if forced is not None:
            chosen = tf.where(forced[0], forced[1], chosen)
        chosen = tf.where(finished, context.pad_id, chosen)  # constants made here: see kernels
        # The chosen tokens' log-probabilities, off the path to the next step.
        log_probs = tf.gather(context.log_softmax(logits), chosen, batch_dims=1)  # [rows]
        scores = state.scores + tf.where(finished, 0.0, log_probs)
        finished = finished | tf.equal(chosen, context.eos_id) | (t + 1 >= row_limits)
        state = state._replace(finished=finished, scores=scores)
        return state, context.tokens.append(tokens, chosen, t), chosen, None

    def finished(self, state) -> tf.Tensor:
        """``[rows]`` bool: the row emitted EOS or reached its length limit.

        Args:
            state: the ``OneBestState``.

        Returns:
            ``state.finished``.
        """
        return state.finished

    def answer(self, state, tokens, t):
        """The rows' answers: their tokens and scores.

        Args:
            state: the ``OneBestState``.
            tokens: ``[rows, len]`` int32.
            t: the step.

        Returns:
            ``(tokens [rows, len], scores [rows])``.
        """
        return tokens, state.scores

    def output(self, tokens, scores, steps) -> DecodeOutput:
        """The ``DecodeOutput`` of one hypothesis a sentence, scored by its log-probability.

        Args:
            tokens: ``[batch, len]`` int32.
            scores: ``[batch]`` float32.
            steps: the steps run.

        Returns:
            The ``DecodeOutput``.
        """
        scores = scores[:, tf.newaxis]
        return DecodeOutput(tokens[:, tf.newaxis, :], scores, scores, steps)


def greedy_search(
    steps, source_ids, row_limits, limit, min_length: int = 0, prefix_ids=None
) -> DecodeOutput:
    """Arg-max decoding, a batch at a time, until every row emitted EOS or reached its limit.

    Args:
        steps: the ``DecodingSteps`` to run.
        source_ids: ``[batch, src_len]`` int ids, padded with ``steps.pad_id``.
        row_limits: ``[batch]`` int32, each row's longest output.
        limit: the longest of them (a Python int: the buffer of static shapes).
        min_length: EOS is not chosen before this many tokens (``Limits.min_length``).
        prefix_ids: ``[batch, width]`` int ids padded with ``pad_id``: each
            row's first tokens, forced, or ``None``.

    Returns:
        A ``DecodeOutput`` with one hypothesis a sentence, its score its log-probability.

    Example:
        >>> from keras_transformer.decoding import DecodingSteps
        >>> table = tf.math.log(tf.constant([[0.1, 0.1, 0.1, 0.2, 0.5], [0.1, 0.1, 0.1, 0.6, 0.1]]))
        >>> steps = DecodingSteps(  # step t's logits are row t of the table, whatever the tokens
        ...     encode=lambda ids: ids, initial_cache=lambda memory: tf.zeros_like(memory[:, 0]),
        ...     large_batch=lambda ids, t, cache, padding: (
        ...         tf.repeat(table[t][tf.newaxis], tf.size(ids), axis=0), cache),
        ...     bos_id=1, eos_id=3, pad_id=0, banned=(0, 1))
        >>> out = greedy_search(steps, tf.constant([[7, 3]]), tf.constant([5]), 5)
        >>> out.tokens.numpy().tolist(), round(float(out.log_probs[0, 0]), 4)
        ([[[4, 3]]], -1.204)
    """
    strategy = OneBest(min_length)
    return search_loop(steps, source_ids, row_limits, limit, strategy, prefix_ids)


def sample_search(
    steps, source_ids, row_limits, limit, sample, keys, min_length: int = 0, prefix_ids=None
) -> DecodeOutput:
    """Sampling, a token a step, from the filtered softmax (``sampling.sample_tokens``).

    Args:
        steps, source_ids, row_limits, limit, min_length, prefix_ids: as for
            ``greedy_search``.
        sample: a ``Sample``, or ``SampleParams`` (Python numbers or tensors,
            which the graph clamps): ``top_k``, ``top_p``, ``temperature``;
            the seed is in ``keys``.
        keys: ``[batch]`` uint32, each row's noise key (``sampling.sentence_keys``).

    Returns:
        A ``DecodeOutput`` with one sample a sentence, its score its
        log-probability under the model (unfiltered, temperature 1).

    Example:
        >>> from keras_transformer.decoding import DecodingSteps, Sample
        >>> table = tf.math.log(tf.constant([[0.1, 0.1, 0.1, 0.2, 0.5], [0.1, 0.1, 0.1, 0.6, 0.1]]))
        >>> steps = DecodingSteps(
        ...     encode=lambda ids: ids, initial_cache=lambda memory: tf.zeros_like(memory[:, 0]),
        ...     large_batch=lambda ids, t, cache, padding: (
        ...         tf.repeat(table[t][tf.newaxis], tf.size(ids), axis=0), cache),
        ...     bos_id=1, eos_id=3, pad_id=0, banned=(0, 1))
        >>> out = sample_search(steps, tf.constant([[7, 3]]), tf.constant([5]), 5,
        ...                     Sample(top_k=1), tf.constant([9], tf.uint32))
        >>> out.tokens.numpy().tolist()
        [[[4, 3]]]
    """
    if isinstance(sample, Sample):
        sample = sample.params()
    strategy = OneBest(min_length, SampleParams(*sample), keys)
    return search_loop(steps, source_ids, row_limits, limit, strategy, prefix_ids)
