"""How subword ids become model inputs and labels (the contract decoders rely on).

For a pair with source tokens ``s1..sn`` and target tokens ``t1..tm``
(``SubwordTokenizer.tokenize`` output, no specials)::

    src_ids    = s1 .. sn EOS        encoder input
    tgt_in_ids = BOS t1 .. tm        decoder input (teacher forcing)
    tgt_out    = t1 .. tm EOS        labels: tgt_in shifted left by one

BOS, EOS and PAD are the tokenizer's ids (``SubwordTokenizer``: 2, 3 and 0).
Batches are padded with PAD on the right; the loss ignores the label
positions that hold PAD. A Marian model starts the decoder from its pad id
(BOS = PAD), so ``tgt_in`` opens with a pad id there: the labels never hold
the start id, so the loss still counts exactly the real tokens and EOS.

The source ends with EOS (as in tensor2tensor and fairseq) so the encoder sees
an explicit end of sentence; a decoder must build its encoder input the same
way, with ``encode_sources``, or it feeds the model inputs unlike training.
Truncation keeps the EOS: at most ``max_length - 1`` source tokens survive.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.config import BOS_ID, EOS_ID


def _column(rows: tf.Tensor, value: int) -> tf.Tensor:
    return tf.fill(tf.stack([rows, 1]), tf.constant(value, tf.int32))


def _ragged_batch(tokens) -> tf.RaggedTensor:
    if not isinstance(tokens, tf.RaggedTensor) or tokens.ragged_rank != 1:
        raise ValueError(
            "Expected token ids as a RaggedTensor [batch, None] (tokenize a 1-D batch of strings)."
        )
    return tf.cast(tokens, tf.int32)


def source_ids(
    tokens: tf.RaggedTensor, max_length: int | None = None, *, eos_id: int = EOS_ID
) -> tf.RaggedTensor:
    """Builds encoder input ids: each row's tokens followed by EOS.

    Args:
        tokens: token ids, a ``RaggedTensor[batch, None]`` (``tokenize`` output).
        max_length: cut each row to at most this many ids, EOS kept (at least 2).
        eos_id: the end-of-sentence id.

    Returns:
        ``tokens + [eos_id]`` per row, a ``RaggedTensor[batch, None]`` of int32.

    Raises:
        ValueError: ``tokens`` is not ragged ``[batch, None]``, or ``max_length`` is below 2.

    Example:

    >>> source_ids(tf.ragged.constant([[5, 6, 7], [8]]), max_length=3).to_list()
    [[5, 6, 3], [8, 3]]
    """
    tokens = _ragged_batch(tokens)
    if max_length is not None:
        if max_length < 2:
            raise ValueError(f"max_length must be >= 2 (one token and EOS), got {max_length}.")
        tokens = tokens[:, : max_length - 1]
    return tf.concat([tokens, _column(tokens.nrows(), eos_id)], axis=1)


def target_ids(
    tokens: tf.RaggedTensor,
    max_length: int | None = None,
    *,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """Builds decoder inputs and labels: ``BOS + tokens`` and ``tokens + EOS`` per row.

    Args:
        tokens: token ids, a ``RaggedTensor[batch, None]`` (``tokenize`` output).
        max_length: keep at most this many target tokens per row (at least 1).
        bos_id: the decoder's start id.
        eos_id: the end-of-sentence id.

    Returns:
        ``(tgt_in_ids, tgt_out_ids)``, each a ``RaggedTensor[batch, None]`` of int32.

    Raises:
        ValueError: ``tokens`` is not ragged ``[batch, None]``, or ``max_length`` is below 1.

    Example:

    >>> tgt_in, tgt_out = target_ids(tf.ragged.constant([[5, 6]]))
    >>> tgt_in.to_list(), tgt_out.to_list()
    ([[2, 5, 6]], [[5, 6, 3]])
    """
    tokens = _ragged_batch(tokens)
    if max_length is not None:
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}.")
        tokens = tokens[:, :max_length]
    rows = tokens.nrows()
    return (
        tf.concat([_column(rows, bos_id), tokens], axis=1),
        tf.concat([tokens, _column(rows, eos_id)], axis=1),
    )


def encode_sources(tokenizer, texts, max_length: int | None = None) -> tf.RaggedTensor:
    """Builds encoder input ids for a batch of texts, exactly as ``make_dataset`` builds them.

    Apply the same whitespace normalisation first if the texts are raw
    (``normalize_whitespace``); SentencePiece's own normalisation covers most of it.

    Args:
        tokenizer: a ``SubwordTokenizer`` or ``MarianSubwordTokenizer``.
        texts: a 1-D batch of strings.
        max_length: cut each row to at most this many ids, EOS kept.

    Returns:
        The ids, a ``RaggedTensor[batch, None]`` of int32 ending in the tokenizer's EOS.

    Raises:
        ValueError: ``texts`` is not a 1-D batch.
    """
    texts = tf.convert_to_tensor(texts, dtype=tf.string)
    if texts.shape.rank != 1:
        raise ValueError(
            f"encode_sources needs a 1-D batch of strings, got shape {texts.shape}; wrap one text "
            "in a list."
        )
    return source_ids(tokenizer.tokenize(texts), max_length, eos_id=tokenizer.eos_id)
