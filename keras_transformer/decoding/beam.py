"""Beam search (paper §6.1: beam 4, length penalty α = 0.6, max length input + 50).

Batched and cached like greedy decoding, over a ``DecodingSteps``: the cache
is reordered along with the beams by the steps' ``reorder`` (for the
Transformer, the self-attention keys and values; the cross-attention ones,
the same for every beam of a sentence, never move). Scores use the GNMT
length penalty ``lp(n) = ((5 + n) / 6)^α`` of Wu et al. 2016.

A sentence is done as soon as no live beam can beat its finished hypotheses
(see ``stopping``): its best hypotheses are written to the output, and the
dynamic-shape search removes its rows (compaction), so the rest of the batch
decodes on fewer rows. A sentence therefore decodes the same alone and in any
batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.decoding.loop import search_loop
from keras_transformer.decoding.options import Beam
from keras_transformer.decoding.tokens import NEG, DecodeOutput


class BeamState(NamedTuple):
    """Beam search's state, a row a sentence still searching (``k`` = beam size).

    Empty finished slots score ``NEG``.
    """

    alive_log_probs: tf.Tensor  # [rows, k] float32: the live beams' log p, best first
    finished_scores: tf.Tensor  # [rows, k] float32: the ended ones' log p / penalty, best first
    finished_log_probs: tf.Tensor  # [rows, k] float32: their log p
    finished_flags: tf.Tensor  # [rows, k] bool: the slot holds a finished hypothesis
    done: tf.Tensor  # [rows] bool: the sentence is done (static shapes: frozen to the end)


class BeamSeqs(NamedTuple):
    """Beam search's sequences, ``[rows, k, len]`` int32 padded with ``pad_id`` (``Tokens``)."""

    alive: tf.Tensor  # [rows, k, len]: the live hypotheses, as alive_log_probs
    finished: tf.Tensor  # [rows, k, len]: the best ended ones (EOS or the limit)


def length_penalty(length, alpha: float) -> tf.Tensor:
    """GNMT's length penalty ``((5 + length) / 6)^alpha`` (Wu et al. 2016), float32.

    Args:
        length: a hypothesis' length in tokens (a number or a tensor).
        alpha: the exponent; 0 turns the penalty off.

    Returns:
        The float32 divisor of the hypothesis' log-probability.

    Example:
        >>> round(float(length_penalty(7, 0.6)), 4)
        1.5157
    """
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


@dataclass(frozen=True)
class BeamStrategy:
    """The strategy of beam search (``beam_search``) over ``loop.search_loop``.

    Args:
        beam: the ``Beam``.
        min_length: EOS is not taken before this many tokens.

    Example:
        >>> BeamStrategy(Beam(size=4)).beams
        4
    """

    beam: Beam
    min_length: int = 0

    @property
    def beams(self) -> int:
        """The decoding rows a sentence: the beam size."""
        return self.beam.size

    def start(self, batch, context):
        """A beam of BOS alone and no finished hypothesis, for ``batch`` sentences.

        Args:
            batch: the number of sentences.
            context: the loop's ``SearchContext``.

        Returns:
            ``(BeamState, BeamSeqs)``.
        """
        k = self.beam.size
        first = tf.concat([[0.0], tf.fill([k - 1], NEG)], axis=0)  # [k]: one live beam
        state = BeamState(
            alive_log_probs=tf.tile(first[tf.newaxis], [batch, 1]),  # [batch, k]
            finished_scores=tf.fill([batch, k], NEG),
            finished_log_probs=tf.fill([batch, k], NEG),
            finished_flags=tf.zeros([batch, k], tf.bool),
            done=tf.zeros([batch], tf.bool),
        )
        return state, BeamSeqs(context.tokens.start([batch, k]), context.tokens.start([batch, k]))

    def step(self, state, seqs, logits, t, row_limits, forced, context):
        """The next beams from ``logits [rows·k, vocab]``, and the hypotheses that ended.

        Args:
            state: the ``BeamState``.
            seqs: the ``BeamSeqs``.
            logits: ``[rows·k, vocab]`` float32, a row a live beam.
            t: the step.
            row_limits: ``[rows]`` int32.
            forced: ``(forced [rows] bool, token [rows] int32)`` or ``None``.
            context: the loop's ``SearchContext``.

        Returns:
            ``(state, seqs, last [rows·k] int32, parents [rows·k] int32)``.
        """
        k, alpha, eos = self.beam.size, self.beam.alpha, context.eos_id
        rows, vocab = tf.shape(state.done)[0], logits.shape[-1]
        log_probs = tf.reshape(context.log_softmax(logits), [rows, k, vocab])  # [rows, k, vocab]
        if forced is not None:  # a row in its prefix may take only the prefix's token
            in_prefix, token = forced  # [rows], [rows]
            other = tf.not_equal(tf.range(vocab)[tf.newaxis, :], token[:, tf.newaxis])  # [rows, V]
            struck = (in_prefix[:, tf.newaxis] & other)[:, tf.newaxis, :]  # [rows, 1, vocab]
            log_probs = tf.where(struck, NEG, log_probs)  # [rows, k, vocab]
        candidates = state.alive_log_probs[:, :, tf.newaxis] + log_probs  # [rows, k, vocab]
        candidates = tf.reshape(candidates, [rows, k * vocab])  # [rows, k·vocab]
        # The tokens never emitted (and EOS before min_length) are struck from the best `reach`
        # candidates, which leaves the best 2k possible ones: a beam holds each such token once.
        # top_k puts the lower index first among equal values, so the order is that of one top_k
        # over the candidates with those tokens struck, which would cost an op over every beam's
        # whole vocabulary a step.
        struck_per_beam = len(context.banned) + (1 if self.min_length else 0)
        reach = min(k * vocab, 2 * k + k * struck_per_beam)
        top_lp, top_index = kernels.top_k(candidates, k=reach)  # [rows, reach]
        top_lp = tf.where(self._impossible(top_index % vocab, t, context), NEG, top_lp)
        top_lp, pick = tf.math.top_k(top_lp, k=2 * k)  # [rows, 2k]: k of them do not end here
        top_index = tf.gather(top_index, pick, batch_dims=1)  # [rows, 2k]
        parents, tokens = top_index // vocab, top_index % vocab  # [rows, 2k] each
        candidate_seq = tf.gather(seqs.alive, parents, batch_dims=1)  # [rows, 2k, len]
        candidate_seq = context.tokens.append(candidate_seq, tokens, t)  # [rows, 2k, len + 1]
        # A hypothesis ends with EOS, or when its sentence reaches its length limit; only a
        # possible one may finish (not a filler a forced step or the first step's empty beams
        # leave among the candidates).
        ended = tf.equal(tokens, eos) | (t + 1 >= row_limits)[:, tf.newaxis]  # [rows, 2k]
        finishes = ended & (top_lp > NEG / 2)  # [rows, 2k]

        alive_lp, keep = tf.math.top_k(tf.where(ended, NEG, top_lp), k=k)  # [rows, k]
        alive_seq = tf.gather(candidate_seq, keep, batch_dims=1)  # [rows, k, len + 1]
        last = tf.reshape(tf.gather(tokens, keep, batch_dims=1), [-1])  # [rows·k]
        parents = tf.gather(parents, keep, batch_dims=1)  # [rows, k]
        parents = tf.reshape(tf.range(rows)[:, tf.newaxis] * k + parents, [-1])  # [rows·k]

        penalty = length_penalty(t + 1, alpha)  # []
        # A done sentence, waiting for compaction (or kept to the end with static shapes), takes
        # no new hypothesis.
        new_scores = tf.where(finishes & ~state.done[:, tf.newaxis], top_lp / penalty, NEG)
        pool_seq = tf.concat([context.tokens.widen(seqs.finished), candidate_seq], axis=1)
        pool_scores = tf.concat([state.finished_scores, new_scores], axis=1)  # [rows, 3k]
        pool_lp = tf.concat([state.finished_log_probs, top_lp], axis=1)  # [rows, 3k]
        pool_flags = tf.concat([state.finished_flags, finishes], axis=1)  # [rows, 3k]
        finished_scores, best = tf.math.top_k(pool_scores, k=k)  # [rows, k]
        flags = tf.gather(pool_flags, best, batch_dims=1)  # [rows, k]

        # The sentence is done when its worst finished hypothesis beats its best live beam,
        # judged at the longest output allowed ("exact") or at its current length.
        if self.beam.stopping == "exact":
            penalty = length_penalty(row_limits, alpha)  # [rows]
        best_alive = alive_lp[:, 0] / penalty  # [rows]
        worst_finished = tf.reduce_min(tf.where(flags, finished_scores, NEG), axis=1)  # [rows]
        state = BeamState(
            alive_log_probs=alive_lp,
            finished_scores=finished_scores,
            finished_log_probs=tf.gather(pool_lp, best, batch_dims=1),  # [rows, k]
            finished_flags=flags,
            done=state.done | (worst_finished >= best_alive),  # [rows]
        )
        seqs = BeamSeqs(alive_seq, tf.gather(pool_seq, best, batch_dims=1))  # [rows, k, len + 1]
        return state, seqs, last, parents

    def _impossible(self, tokens, t, context):
        """Which of ``tokens`` the search may not take at step ``t``."""
        banned = tf.constant(context.banned, tf.int32)  # [banned]
        struck = tf.reduce_any(tf.equal(tokens[..., tf.newaxis], banned), axis=-1)
        if self.min_length:
            struck |= tf.logical_and(tf.equal(tokens, context.eos_id), t < self.min_length)
        return struck

    def finished(self, state) -> tf.Tensor:
        """``[rows]`` bool: the sentence is done.

        Args:
            state: the ``BeamState``.

        Returns:
            ``state.done``.
        """
        return state.done

    def answer(self, state, seqs, t):
        """The rows' finished hypotheses, or their live beams where none finished.

        Args:
            state: the ``BeamState``.
            seqs: the ``BeamSeqs``.
            t: the step.

        Returns:
            ``(seq [rows, k, len], (scores [rows, k], log_probs [rows, k]))``.
        """
        any_finished = tf.reduce_any(state.finished_flags, axis=1)  # [rows]
        seq = tf.where(any_finished[:, tf.newaxis, tf.newaxis], seqs.finished, seqs.alive)
        alive_lp = state.alive_log_probs  # [rows, k]
        some = any_finished[:, tf.newaxis]  # [rows, 1]
        scores = tf.where(
            some, state.finished_scores, alive_lp / length_penalty(t, self.beam.alpha)
        )
        log_probs = tf.where(some, state.finished_log_probs, alive_lp)  # [rows, k]
        return seq, (scores, log_probs)

    def output(self, seq, values, steps) -> DecodeOutput:
        """The ``DecodeOutput`` of ``k`` hypotheses a sentence.

        Args:
            seq: ``[batch, k, len]`` int32.
            values: ``(scores, log_probs)``, ``[batch, k]`` float32 each.
            steps: the steps run.

        Returns:
            The ``DecodeOutput``.
        """
        return DecodeOutput(seq, *values, steps)


def beam_search(
    steps, source_ids, row_limits, limit, beam: Beam, min_length: int = 0, prefix_ids=None
) -> DecodeOutput:
    """Beam search over ``source_ids``, with GNMT's length penalty and a stopping rule.

    A sentence is done, and compaction removes it from the search, when its
    length limit is reached or when ``beam.size`` finished hypotheses outscore
    its best live beam, as ``beam.stopping`` judges it:

    * ``"exact"``: the live beam is judged by the best score it could still
      reach, its log-probability (which only falls as it grows) over the
      length penalty of the longest output allowed. No hypothesis that could
      win is dropped: the search returns what an unbounded wait would.
    * ``"heuristic"``: the live beam is judged by its score at its current
      length (the rule of Hugging Face's beam search). With ``alpha = 0`` it
      is the exact rule; with a large ``alpha`` it stops much earlier, at the
      price of missing the rare longer hypothesis that would have won.

    Hypotheses start from ``bos_id`` and never take a ``banned`` id. With a
    prefix, each sentence's hypotheses all begin with it.

    Args:
        steps: the ``DecodingSteps`` to run.
        source_ids: ``[batch, src_len]`` int ids, padded with ``steps.pad_id``.
        row_limits: ``[batch]`` int32, each row's longest output.
        limit: the longest of them (a Python int: the buffer of static shapes).
        beam: the ``Beam``: ``size``, ``alpha``, ``stopping``.
        min_length: EOS is not taken before this many tokens (``Limits.min_length``).
        prefix_ids: ``[batch, width]`` int ids padded with ``pad_id``: each
            row's first tokens, forced, or ``None``.

    Returns:
        A ``DecodeOutput`` of ``beam.size`` hypotheses a sentence, best
        first; a sentence with fewer has ``-inf`` log-probabilities in the
        rest (``decoding.decode`` clears their tokens).

    Example:
        >>> from keras_transformer.decoding import Beam, DecodingSteps
        >>> table = tf.math.log(tf.constant([[0.1, 0.1, 0.1, 0.3, 0.4], [0.1, 0.1, 0.1, 0.6, 0.1]]))
        >>> steps = DecodingSteps(  # step t's logits are row t of the table, whatever the tokens
        ...     encode=lambda ids: ids, initial_cache=lambda memory: tf.zeros_like(memory[:, 0]),
        ...     large_batch=lambda ids, t, cache, padding: (
        ...         tf.repeat(table[t][tf.newaxis], tf.size(ids), axis=0), cache),
        ...     bos_id=1, eos_id=3, pad_id=0, banned=(0, 1))
        >>> out = beam_search(steps, tf.constant([[7, 3]]), tf.constant([2]), 2,
        ...                   Beam(size=2, alpha=0.0))
        >>> out.tokens.numpy().tolist(), [round(float(x), 3) for x in out.log_probs[0]]
        ([[[3, 0], [4, 3]]], [-1.204, -1.427])
    """
    strategy = BeamStrategy(beam, min_length)
    return search_loop(steps, source_ids, row_limits, limit, strategy, prefix_ids)
