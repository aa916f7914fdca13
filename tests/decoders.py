"""The decoders as the tests call them: ``decoding.decode`` for greedy decoding and beam
search, and ``decoding.beam_search`` itself for a beam of one (``decode`` runs greedy
decoding for it)."""

import tensorflow as tf

from keras_transformer.decoding import DecodeOptions, KernelChoice, beam_search, decode


def greedy(model, source_ids, choice=None, **options):
    """Greedy decoding's ``(tokens [batch, len], scores [batch])``: log-probabilities.

    Args:
        model: the ``Transformer``.
        source_ids: ``[batch, src_len]`` int ids.
        choice: the ``KernelChoice`` (default: the inference kernels).
        **options: ``DecodeOptions`` fields (``max_length``, ``min_length``, ...).
    """
    out = decode(model, source_ids, DecodeOptions(**options), choice=choice)
    return out.tokens[:, 0], out.scores[:, 0]


def all_beams(model, source_ids, beam_size=4, choice=None, **options):
    """Beam search's ``DecodeOutput`` with every beam of a sentence (``n_best = beam_size``).

    Args:
        model, source_ids, choice: as for ``greedy``.
        beam_size: the beams a sentence, at least 2.
        **options: more ``DecodeOptions`` fields (``alpha``, ``stopping``, ...).
    """
    options = DecodeOptions(beam_size=beam_size, n_best=beam_size, **options)
    return decode(model, source_ids, options, choice=choice)


def beam_of_one(model, source_ids, choice=None, **options):
    """``decoding.beam_search`` itself with one beam, its ``DecodeOutput``.

    Args:
        model, source_ids, choice, **options: as for ``greedy``.
    """
    options = DecodeOptions(beam_size=1, **options)
    choice = choice or KernelChoice()
    source_ids = tf.convert_to_tensor(source_ids)
    row_limits, limit = choice.limits(model, source_ids, options)
    steps = choice.steps(model, rows=tf.shape(source_ids)[0], limit=limit)
    return beam_search(steps, source_ids, row_limits, limit, options)
