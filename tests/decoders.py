"""The decoders as the tests call them: ``decoding.decode`` for greedy decoding and beam
search, and ``decoding.beam_search`` itself for a beam of one (``decode`` runs greedy
decoding for it)."""

import tensorflow as tf

from keras_transformer.decoding import Beam, Greedy, KernelChoice, Limits, beam_search, decode

LIMITS = ("max_length", "extra_length", "min_length")


def split(options: dict) -> tuple[Limits, dict]:
    """``options`` as ``Limits`` and the rest (the ``Beam`` fields)."""
    limits = Limits(**{name: options.pop(name) for name in LIMITS if name in options})
    return limits, options


def greedy(model, source_ids, choice=None, **options):
    """Greedy decoding's ``(tokens [batch, len], scores [batch])``: log-probabilities.

    Args:
        model: the ``Transformer``.
        source_ids: ``[batch, src_len]`` int ids.
        choice: the ``KernelChoice`` (default: the inference kernels).
        **options: ``Limits`` fields (``max_length``, ``min_length``, ...).
    """
    out = decode(model, source_ids, Greedy(), Limits(**options), choice=choice)
    return out.tokens[:, 0], out.scores[:, 0]


def all_beams(model, source_ids, beam_size=4, choice=None, **options):
    """Beam search's ``DecodeOutput`` with every beam of a sentence (``n = beam_size``).

    Args:
        model, source_ids, choice: as for ``greedy``.
        beam_size: the beams a sentence, at least 2.
        **options: ``Limits`` and ``Beam`` fields (``max_length``, ``alpha``, ``stopping``, ...).
    """
    limits, beam = split(options)
    return decode(model, source_ids, Beam(beam_size, **beam), limits, n=beam_size, choice=choice)


def beam_of_one(model, source_ids, choice=None, **options):
    """``decoding.beam_search`` itself with one beam, its ``DecodeOutput``.

    Args:
        model, source_ids, choice, **options: as for ``all_beams``.
    """
    limits, beam = split(options)
    choice = choice or KernelChoice()
    source_ids = tf.convert_to_tensor(source_ids)
    row_limits, limit = choice.limits(model, source_ids, limits)
    steps = choice.steps(model, rows=tf.shape(source_ids)[0], limit=limit)
    beam = Beam(1, **beam)
    return beam_search(steps, source_ids, row_limits, limit, beam, limits.min_length)
