"""Text around the decoders: target ids as training makes them, blank sentences,
length checks, and n-best lists as texts, Python lists and the Moses format.

Both backends of ``keras_transformer.Translator`` and the SavedModel's
signatures use these, so each job is written once.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import tensorflow as tf

from keras_transformer.data.normalize import normalize_whitespace_tf
from keras_transformer.decoding import DecodeOutput, score_targets

_LINE_BREAKS = str.maketrans({"\r": " ", "\n": " "})  # one_line


def target_token_ids(tokenizer, texts, eos_id: int) -> tf.RaggedTensor:
    """Target-side ids of ``texts`` as training makes them: whitespace normalised, then EOS.

    Args:
        tokenizer: the target ``SubwordTokenizer`` (or ``MarianSubwordTokenizer``).
        texts: a 1-D batch of strings.
        eos_id: the EOS id appended.

    Returns:
        ``RaggedTensor[batch, None]`` int32 ids, each row ending with ``eos_id``.
    """
    tokens = tf.cast(tokenizer.tokenize(normalize_whitespace_tf(texts)), tf.int32)
    eos = tf.fill([tokens.nrows(), 1], tf.constant(eos_id, tf.int32))
    return tf.concat([tokens, tf.RaggedTensor.from_tensor(eos)], axis=1)


def n_best_texts(model, tgt_tokenizer, source_ids, out: DecodeOutput, n):
    """A search's hypotheses as an n-best list of distinct texts with their log-probabilities.

    Each hypothesis is detokenized. Its log-probability is the search's where
    the text tokenizes back to the same ids, else ``score_targets`` of the
    text's own ids, so that it equals the score of the text; a text whose ids
    are longer than the model's ``max_length`` keeps the search's. A text
    that an earlier hypothesis of its sentence already gave is dropped, and
    the rest keep the search's order.

    Args:
        model: the ``Transformer`` the search ran.
        tgt_tokenizer: its target tokenizer.
        source_ids: ``[batch, src_len]`` the search's source ids.
        out: the search's ``DecodeOutput``, ``k`` hypotheses a sentence.
        n: the most texts a sentence (at most ``k``; an int or a scalar tensor).

    Returns:
        ``(texts [batch, n] string, log_probs [batch, n] float32)``; a
        sentence with fewer than ``n`` distinct texts ends with ``""`` and
        ``-inf``.
    """
    config = model.config
    batch, k = tf.shape(out.tokens)[0], tf.shape(out.tokens)[1]
    flat = tf.reshape(out.tokens, [batch * k, -1])
    texts = tgt_tokenizer.detokenize(flat)  # [batch·k]
    canonical = target_token_ids(tgt_tokenizer, texts, config.eos_id)
    fits = canonical.row_lengths() <= config.max_length  # [batch·k]: the model can score it
    canonical = canonical.to_tensor(default_value=config.pad_id)
    # Both as wide as the wider (by tf.pad: in a graph the width is a tensor, not a shape).
    width = tf.maximum(tf.shape(flat)[1], tf.shape(canonical)[1])

    def widened(ids):
        return tf.pad(ids, [[0, 0], [0, width - tf.shape(ids)[1]]], constant_values=config.pad_id)

    canonical, hypothesis = widened(canonical), widened(flat)
    same = tf.reduce_all(tf.equal(canonical, hypothesis), axis=1)
    log_probs = tf.reshape(out.log_probs, [-1])
    missing = tf.math.is_inf(log_probs)
    searched = same | missing | ~fits  # [batch·k]: the search's log-probability stands
    log_probs = tf.cond(
        tf.reduce_all(searched),
        lambda: log_probs,
        lambda: tf.where(
            searched,
            log_probs,
            score_targets(
                model, tf.repeat(source_ids, k, axis=0), canonical[:, : config.max_length]
            ),
        ),
    )
    texts, log_probs = tf.reshape(texts, [batch, k]), tf.reshape(log_probs, [batch, k])
    missing = tf.reshape(missing, [batch, k])
    # A text equal to an earlier hypothesis' of the same sentence is a duplicate.
    earlier = tf.range(k)[tf.newaxis, :] < tf.range(k)[:, tf.newaxis]  # [k (this), k (other)]
    equal = tf.equal(texts[:, :, tf.newaxis], texts[:, tf.newaxis, :]) & ~missing[:, tf.newaxis, :]
    dropped = missing | tf.reduce_any(equal & earlier[tf.newaxis], axis=2)
    order = tf.argsort(tf.cast(dropped, tf.int32) * k + tf.range(k)[tf.newaxis, :], axis=1)
    order = order[:, :n]
    dropped = tf.gather(dropped, order, batch_dims=1)
    return (
        tf.where(dropped, "", tf.gather(texts, order, batch_dims=1)),
        tf.where(dropped, float("-inf"), tf.gather(log_probs, order, batch_dims=1)),
    )


def n_best_lists(texts, log_probs) -> list[list[tuple[str, float]]]:
    """``n_best_texts``' arrays as Python lists, one a sentence, without the missing entries.

    Args:
        texts: ``[batch, n]`` UTF-8 bytes.
        log_probs: ``[batch, n]`` floats, ``-inf`` where an entry is missing.

    Returns:
        One list a sentence of ``(text, log_prob)`` pairs, in order.

    Example:
        >>> n_best_lists(np.array([[b"a", b""]]), np.array([[-1.5, -np.inf]]))
        [[('a', -1.5)]]
    """
    return [
        [
            (text.decode("utf-8"), float(log_prob))
            for text, log_prob in zip(row_texts, row_log_probs)
            if np.isfinite(log_prob)
        ]
        for row_texts, row_log_probs in zip(texts, log_probs)
    ]


def one_line(text: str) -> str:
    """``text`` with each carriage return and line feed made a space: one line of output.

    A translation written a line a sentence must hold no line break, or every
    line after it would be misaligned with its input.

    Args:
        text: a translation.

    Returns:
        ``text`` with each ``"\\r"`` and ``"\\n"`` replaced by ``" "``.

    Example:
        >>> one_line("two\\nlines")
        'two lines'
    """
    return text.translate(_LINE_BREAKS)


def n_best_moses(index: int, hypotheses: Iterable[tuple[str, float]]) -> str:
    """A sentence's n-best list in the Moses format, ``INDEX ||| TEXT ||| LOG_PROB`` a line.

    The format ``kt translate --n-best`` and ``translate_corpus``
    write: the log-probability to four decimals, each text on one line
    (``one_line``).

    Args:
        index: the sentence's line number, from 0.
        hypotheses: its ``(text, log_prob)`` pairs, best first (an item of
            ``Translator.n_best``).

    Returns:
        One line a hypothesis, each ending with ``"\\n"``.

    Example:
        >>> n_best_moses(7, [("ein Hund", -1.25), ("", 0.0)])
        '7 ||| ein Hund ||| -1.2500\\n7 |||  ||| 0.0000\\n'
    """
    return "".join(
        f"{index} ||| {one_line(text)} ||| {log_prob:.4f}\n" for text, log_prob in hypotheses
    )


def blank_answers(text, translations, scores):
    """Answers with a blank sentence's made ``""`` and its score 0.

    A sentence with nothing left once its whitespace is normalised (blank)
    translates to ``""`` of score 0; in an n-best list (``translations`` of
    rank 2) it is one ``""`` of log-probability 0, the rest missing (``-inf``).

    Args:
        text: ``[batch]`` the normalised sentences (``normalize_whitespace_tf``).
        translations: ``[batch]`` or ``[batch, n]`` strings.
        scores: float32, the shape of ``translations``.

    Returns:
        ``(translations, scores)`` with each blank sentence's row replaced.

    Example:
        >>> texts, scores = blank_answers(tf.constant(["a", ""]), tf.constant(["x", "y"]),
        ...                               tf.constant([-1.0, -2.0]))
        >>> texts.numpy().tolist(), scores.numpy().tolist()
        ([b'x', b''], [-1.0, 0.0])
    """
    blank = tf.equal(tf.strings.length(text), 0)
    scores = tf.convert_to_tensor(scores)
    if scores.shape.rank == 2:
        blank = blank[:, tf.newaxis]
        first = tf.equal(tf.range(tf.shape(scores)[1]), 0)[tf.newaxis, :]
        filled = tf.where(first, 0.0, float("-inf"))
    else:
        filled = tf.zeros_like(scores)
    return tf.where(blank, tf.constant(""), translations), tf.where(blank, filled, scores)


def check_target_lengths(pieces: Iterable[int], limit: int, what: str, with_eos: bool) -> None:
    """Raise a ``ValueError`` unless each prefix or target fits the model's length limit.

    A target is ``pieces`` + EOS and may hold ``limit`` tokens; a prefix is
    continued by the search, so it may hold ``limit - 1``.

    Args:
        pieces: each text's subword count, EOS not included.
        limit: the model's ``max_length`` (EOS included).
        what: ``"prefix"`` or ``"target"``, for the message.
        with_eos: targets (EOS counted) rather than prefixes.

    Raises:
        ValueError: the first text over the limit, by index and length.

    Example:
        >>> check_target_lengths([3, 4], limit=8, what="target", with_eos=True)
    """
    for index, count in enumerate(pieces):
        length = count + 1 if with_eos else count
        if length > (limit if with_eos else limit - 1):
            raise ValueError(
                f"{what} {index} is {length} tokens, longer than the model's limit "
                f"({limit} with EOS): shorten it."
            )


def check_n(n: int, beam_size: int) -> None:
    """Raise a ``ValueError`` unless an n-best list of ``n`` fits the beam.

    Args:
        n: the hypotheses asked for a sentence.
        beam_size: the beam's size.

    Raises:
        ValueError: ``n`` is below 1 or above ``beam_size``.

    Example:
        >>> check_n(2, beam_size=4)
    """
    if not 1 <= n <= beam_size:
        raise ValueError(
            f"n={n}: an n-best list holds 1 to the beam size ({beam_size}) "
            "hypotheses; ask for fewer or decode with a larger beam."
        )
