"""Decoding in parts: a batch of many rows decoded as independent parts side by side.

TensorFlow's executor runs the parts on its inter-op threads, which one
decode of many rows leaves idle (``docs/kernels.md``).
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.decoding.tokens import DecodeOutput

# A batch of at least PARTS_MIN_ROWS decoding rows (sentences × beams) decodes as DECODE_PARTS
# parts side by side (``decode_in_parts``).
DECODE_PARTS = 2
PARTS_MIN_ROWS = 8


def check_decode_parts(parts: int | None) -> int:
    """Check the number of parts a batch decodes as (``decode_in_parts``).

    Args:
        parts: the parts, or ``None`` for ``DECODE_PARTS``.

    Returns:
        The parts, an int.

    Raises:
        ValueError: ``parts`` is below 1.

    Example:
        >>> check_decode_parts(None), check_decode_parts(1)
        (2, 1)
    """
    if parts is None:
        return DECODE_PARTS
    if parts < 1:
        raise ValueError(f"decode_parts must be >= 1 (1: a batch decodes whole), got {parts}.")
    return int(parts)


def decode_in_parts(
    decode,
    source_ids,
    pad_id: int,
    parts: int | None = None,
    beam_size: int = 1,
    row_inputs: tuple = (),
    shared_inputs: tuple = (),
) -> DecodeOutput:
    """``decode`` run as ``parts`` independent decodes of a share of the batch each.

    TensorFlow's executor runs the parts side by side on its inter-op
    threads; the output is ``decode``'s on the whole batch, in the batch's
    order (a sentence decodes the same in any batch). The sentences are
    sorted by source length and dealt in turn, so that the parts end at
    about the same step, and each part's sources are cut to its longest. A
    batch of fewer than ``PARTS_MIN_ROWS`` decoding rows (``beam_size`` rows
    a sentence), or of fewer sentences than parts, decodes whole. Dynamic
    shapes only: an XLA decoder pads its batch to fixed sizes instead
    (``pad_for_xla``). ``docs/kernels.md`` says why.

    Args:
        decode: ``(source_ids, *row_inputs, *shared_inputs) → DecodeOutput``,
            best a ``tf.function`` of one input signature: a graph then
            holds the decoder once, called for each part.
        source_ids: ``[batch, src_len]`` int32 ids, padded with ``pad_id``.
        pad_id: the padding id (of the sources, and of the joined tokens).
        parts: the number of parts (``None``: ``DECODE_PARTS``); 1: one
            decode, for a server that runs one inter-op thread.
        beam_size: the decoding rows a sentence takes.
        row_inputs: more ``[batch, ...]`` inputs, split with the sentences
            (a target prefix).
        shared_inputs: inputs every part gets whole (a sampling seed).

    Returns:
        The ``DecodeOutput`` of the whole batch.

    Raises:
        ValueError: ``parts`` is below 1.

    Example:
        >>> import keras_transformer as kt
        >>> from keras_transformer.decoding import decode as decode_model
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=2))
        >>> model.build()
        >>> decode = tf.function(lambda ids: decode_model(model, ids),
        ...                      input_signature=[tf.TensorSpec([None, None], tf.int32)])
        >>> ids = tf.constant([[5, 6, 3], [7, 3, 0]] * 4)
        >>> out = decode_in_parts(decode, ids, model.config.pad_id)
        >>> bool(tf.reduce_all(out.tokens == decode(ids).tokens))
        True
    """
    parts = check_decode_parts(parts)
    if parts == 1:
        return decode(source_ids, *row_inputs, *shared_inputs)
    source_ids = tf.convert_to_tensor(source_ids)
    row_inputs = tuple(tf.convert_to_tensor(x) for x in row_inputs)
    rows = tf.shape(source_ids)[0]

    def in_parts():
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, pad_id), tf.int32), axis=1)
        order = tf.argsort(lengths, stable=True)
        shares = [order[i::parts] for i in range(parts)]  # [rows / parts] each, shortest first
        outputs = [
            decode(
                tf.gather(source_ids, share)[:, : tf.reduce_max(tf.gather(lengths, share))],
                *[tf.gather(x, share) for x in row_inputs],
                *shared_inputs,
            )
            for share in shares
        ]
        width = tf.reduce_max(tf.stack([tf.shape(out.tokens)[-1] for out in outputs]))
        tokens = tf.concat(
            [
                tf.pad(
                    out.tokens,
                    [[0, 0], [0, 0], [0, width - tf.shape(out.tokens)[-1]]],
                    constant_values=pad_id,
                )
                for out in outputs
            ],
            axis=0,
        )
        back = tf.math.invert_permutation(tf.concat(shares, axis=0))  # each sentence's row

        def joined(field):
            return tf.gather(tf.concat([getattr(out, field) for out in outputs], axis=0), back)

        return DecodeOutput(
            tf.gather(tokens, back),
            joined("scores"),
            joined("log_probs"),
            tf.reduce_max(tf.stack([out.steps for out in outputs])),
        )

    def whole():
        return decode(source_ids, *row_inputs, *shared_inputs)

    in_parts = tf.function(in_parts, experimental_attributes={"_noinline": True}, autograph=False)
    return tf.cond(
        tf.logical_and(rows >= parts, rows * beam_size >= PARTS_MIN_ROWS), in_parts, whole
    )
