"""Counting the sentences, ids and padding in batches, e.g. to report tokens/s.

``count_tokens`` reads ``make_dataset`` (or ``sharded_dataset``) batches and
totals them in a ``TokenCounts``.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from keras_transformer.config import PAD_ID
from keras_transformer.data.batching import _check_positive


@dataclasses.dataclass(frozen=True)
class TokenCounts:
    """Totals over batches: real (non-pad) ids and ids including padding, per side.

    ``tgt_tokens`` counts ``tgt_out`` ids (EOS included): the positions the
    model is trained to predict, the usual numerator for tokens/s.

    Args:
        batches: the batches counted.
        sentences: the sentences (rows) in them.
        src_tokens: the non-pad source ids.
        tgt_tokens: the non-pad ``tgt_out`` ids.
        src_padded: the source ids including padding.
        tgt_padded: the ``tgt_out`` ids including padding.
    """

    batches: int
    sentences: int
    src_tokens: int
    tgt_tokens: int
    src_padded: int
    tgt_padded: int

    @property
    def padding_fraction(self) -> float:
        """The share of all ids, both sides together, that are padding."""
        padded = self.src_padded + self.tgt_padded
        return 1.0 - (self.src_tokens + self.tgt_tokens) / padded if padded else 0.0


def count_tokens(
    dataset: tf.data.Dataset, max_batches: int | None = None, *, pad_id: int = PAD_ID
) -> TokenCounts:
    """Counts the sentences and ids in ``make_dataset`` batches, e.g. to report tokens/s.

    Args:
        dataset: batches ``((src_ids, tgt_in_ids), tgt_out_ids)``.
        max_batches: count only this many batches (needed for a repeating dataset).
        pad_id: the tokenizers' pad id; ids equal to it are padding.

    Returns:
        The ``TokenCounts``.

    Raises:
        ValueError: ``dataset`` has another structure, or repeats forever
            without ``max_batches``.
    """
    spec = dataset.element_spec
    if not (
        isinstance(spec, tuple)
        and len(spec) == 2
        and isinstance(spec[0], tuple)
        and len(spec[0]) == 2
    ):
        raise ValueError(
            f"count_tokens needs ((src_ids, tgt_in_ids), tgt_out_ids) batches, got {spec}."
        )
    if max_batches is not None:
        _check_positive("max_batches", max_batches)
        dataset = dataset.take(max_batches)
    elif dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ValueError("The dataset repeats forever; pass max_batches to count_tokens.")

    def batch_counts(inputs, tgt_out):
        src = inputs[0]
        return tf.cast(
            tf.stack(
                [
                    1,
                    tf.shape(src)[0],
                    tf.math.count_nonzero(src != pad_id, dtype=tf.int32),
                    tf.math.count_nonzero(tgt_out != pad_id, dtype=tf.int32),
                    tf.size(src),
                    tf.size(tgt_out),
                ]
            ),
            tf.int64,
        )

    totals = dataset.map(batch_counts).reduce(
        tf.zeros([6], tf.int64), lambda total, counts: total + counts
    )
    return TokenCounts(*(int(value) for value in totals.numpy()))
