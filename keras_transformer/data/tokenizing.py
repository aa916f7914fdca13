"""Tokenizing string pairs into id examples: steps 1-2 of ``make_dataset``.

``tokenize_pairs`` tokenizes in the graph, ``TOKENIZE_BATCH`` pairs per op
call, lays the ids out as ``keras_transformer.data.sequences`` describes
(source EOS, target BOS/EOS) and applies the length limits: a longer pair is
dropped or truncated (``length_filter``).
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from keras_transformer.data.batching import _check_lengths
from keras_transformer.data.sequences import source_ids, target_ids

LENGTH_FILTERS = ("drop", "truncate")
TOKENIZE_BATCH = 1024  # pairs tokenized per op call: far cheaper than one at a time


def _is_scalar_string(spec) -> bool:
    return (
        isinstance(spec, tf.TensorSpec)
        and spec.dtype == tf.string
        and spec.shape.is_compatible_with([])
    )


def _check_pairs(pairs: tf.data.Dataset) -> None:
    spec = getattr(pairs, "element_spec", None)
    if not (isinstance(spec, tuple) and len(spec) == 2 and all(_is_scalar_string(s) for s in spec)):
        raise ValueError(
            "make_dataset and tokenize_pairs need a tf.data.Dataset of (source, target) scalar "
            "strings, got "
            f"element_spec {spec}; build it with PairSource(...).dataset()."
        )


def _check_length_filter(length_filter) -> None:
    if length_filter not in LENGTH_FILTERS:
        raise ValueError(f"length_filter must be one of {LENGTH_FILTERS}, got {length_filter!r}.")


@dataclasses.dataclass(frozen=True)
class _LengthLimits:
    """The length limits of tokenized pairs, and what happens to a longer pair."""

    max_src_length: int
    max_tgt_length: int
    length_filter: str = "drop"

    def checked(self) -> _LengthLimits:
        """``self``, once the limits and the filter are checked."""
        _check_lengths(self.max_src_length, self.max_tgt_length)
        _check_length_filter(self.length_filter)
        return self


def pad_id_of(src_tokenizer, tgt_tokenizer) -> int:
    """Gives the pad id that batches of a tokenizer pair are padded with.

    Both tokenizers' ``pad_id`` must agree: the model masks one pad id.

    Args:
        src_tokenizer: the source-side tokenizer.
        tgt_tokenizer: the target-side tokenizer.

    Returns:
        The shared ``pad_id``.

    Raises:
        ValueError: the two tokenizers pad with different ids.
    """
    if src_tokenizer.pad_id != tgt_tokenizer.pad_id:
        raise ValueError(
            f"The source tokenizer pads with id {src_tokenizer.pad_id}, the target one with "
            f"{tgt_tokenizer.pad_id}; use tokenizers that share their pad id."
        )
    return int(src_tokenizer.pad_id)


def _tokenized_batches(
    pairs: tf.data.Dataset,
    src_tokenizer,
    tgt_tokenizer,
    limits: _LengthLimits,
) -> tf.data.Dataset:
    """Ragged ``(src_ids, tgt_in_ids, tgt_out_ids)`` batches of up to ``TOKENIZE_BATCH``
    pairs, in order, the length limits applied (pairs dropped or truncated)."""
    max_src_length, max_tgt_length = limits.max_src_length, limits.max_tgt_length
    truncate = limits.length_filter == "truncate"

    def tokenize(src_text, tgt_text):
        src = source_ids(
            src_tokenizer.tokenize(src_text),
            max_src_length if truncate else None,
            eos_id=src_tokenizer.eos_id,
        )
        tgt_in, tgt_out = target_ids(
            tgt_tokenizer.tokenize(tgt_text),
            max_tgt_length if truncate else None,
            bos_id=tgt_tokenizer.bos_id,
            eos_id=tgt_tokenizer.eos_id,
        )
        if not truncate:
            keep = tf.logical_and(
                src.row_lengths() <= max_src_length, tgt_out.row_lengths() <= max_tgt_length + 1
            )
            src, tgt_in, tgt_out = (
                tf.ragged.boolean_mask(ids, keep) for ids in (src, tgt_in, tgt_out)
            )
        return src, tgt_in, tgt_out

    return pairs.batch(TOKENIZE_BATCH).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)


def _examples(batches: tf.data.Dataset) -> tf.data.Dataset:
    """Ragged ``(src, tgt_in, tgt_out)`` batches to ``((src, tgt_in), tgt_out)`` examples."""
    # Unbatched ragged rows arrive as dense tensors; restructure for Keras.
    return batches.unbatch().map(
        lambda src, tgt_in, tgt_out: ((tf.identity(src), tf.identity(tgt_in)), tf.identity(tgt_out))
    )


def _tokenized_examples(
    pairs: tf.data.Dataset, src_tokenizer, tgt_tokenizer, limits: _LengthLimits
) -> tf.data.Dataset:
    """``tokenize_pairs`` of arguments checked already."""
    examples = _examples(_tokenized_batches(pairs, src_tokenizer, tgt_tokenizer, limits))
    # The tokenizers' ops read their SentencePiece model through a resource, which
    # TF Text 2.19 marks stateful: saving an iterator (a data position) would fail.
    # The model is loaded again from the same file, so the position does not need it.
    options = tf.data.Options()
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return examples.with_options(options)


def tokenize_pairs(
    pairs: tf.data.Dataset,
    src_tokenizer,
    tgt_tokenizer,
    *,
    max_src_length: int,
    max_tgt_length: int,
    length_filter: str = "drop",
) -> tf.data.Dataset:
    """Tokenizes string pairs into unbatched id examples (steps 1-2 of ``make_dataset``).

    Elements are ``((src_ids, tgt_in_ids), tgt_out_ids)``, int32 vectors laid
    out as ``keras_transformer.data.sequences`` describes, in the order of
    ``pairs``; pairs over the length limits are dropped or truncated.

    Args:
        pairs: a dataset of ``(source, target)`` scalar strings (``PairSource.dataset()``).
        src_tokenizer: the source-side ``SubwordTokenizer``.
        tgt_tokenizer: the target-side one (the same one for a shared vocabulary).
        max_src_length: longest ``src_ids`` row, EOS included.
        max_tgt_length: most target tokens, BOS/EOS excluded.
        length_filter: ``"drop"`` longer pairs or ``"truncate"`` them (EOS kept).

    Returns:
        A ``tf.data.Dataset`` of ``((src_ids, tgt_in_ids), tgt_out_ids)`` examples.

    Raises:
        ValueError: ``pairs`` is not a dataset of string pairs, or a length
            argument is out of range.
    """
    _check_pairs(pairs)
    limits = _LengthLimits(max_src_length, max_tgt_length, length_filter).checked()
    return _tokenized_examples(pairs, src_tokenizer, tgt_tokenizer, limits)
