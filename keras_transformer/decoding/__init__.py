"""Decoding: greedy decoding, beam search and sampling over one loop, and forced scoring.

``decode(model, source_ids, Beam(size=4), Limits(...))`` is the one entry point: it
chooses the kernels (``KernelChoice``, the only place for speed settings),
builds the ``DecodingSteps`` and runs the search the options ask for.
The searches (``greedy_search``, ``beam_search``, ``sample_search``) run over
a ``DecodingSteps`` and never see the model, so any logits can drive them.
``score_targets`` gives the log-probability of given translations.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.decoding.beam import beam_search, length_penalty
from keras_transformer.decoding.greedy import greedy_search, sample_search
from keras_transformer.decoding.limits import decode_lengths, decode_limits
from keras_transformer.decoding.options import (
    STOPPING_RULES,
    Beam,
    Greedy,
    Limits,
    Sample,
    SampleParams,
    Search,
    check_beam_size,
    check_sampling,
    check_search,
    check_stopping,
)
from keras_transformer.decoding.parts import (
    DECODE_PARTS,
    PARTS_MIN_ROWS,
    check_decode_parts,
    decode_in_parts,
)
from keras_transformer.decoding.sampling import sentence_keys
from keras_transformer.decoding.scoring import score_targets
from keras_transformer.decoding.steps import (
    ConstantSteps,
    DecodingSteps,
    KernelChoice,
    never_emitted,
    step_signature,
)
from keras_transformer.decoding.tokens import NEG, DecodeOutput, ban_tokens
from keras_transformer.decoding.xla import pad_for_xla

__all__ = [
    "DECODE_PARTS",
    "NEG",
    "PARTS_MIN_ROWS",
    "STOPPING_RULES",
    "Beam",
    "ConstantSteps",
    "DecodeOutput",
    "DecodingSteps",
    "Greedy",
    "KernelChoice",
    "Limits",
    "Sample",
    "SampleParams",
    "Search",
    "ban_tokens",
    "beam_search",
    "check_beam_size",
    "check_decode_parts",
    "check_sampling",
    "check_search",
    "check_stopping",
    "decode",
    "decode_in_parts",
    "decode_lengths",
    "decode_limits",
    "greedy_search",
    "length_penalty",
    "never_emitted",
    "pad_for_xla",
    "sample_search",
    "score_targets",
    "sentence_keys",
    "step_signature",
]


def decode(
    model,
    source_ids,
    search: Search | None = None,
    limits: Limits | None = None,
    *,
    n: int = 1,
    prefix_ids=None,
    choice: KernelChoice | None = None,
    sample_params: SampleParams | None = None,
) -> DecodeOutput:
    """Decode ``source_ids`` with ``model``: greedy decoding, beam search or sampling.

    Runs as TensorFlow ops (a ``tf.while_loop``), so it can be wrapped in
    ``tf.function``, exported in a SavedModel, and compiled with XLA with
    ``KernelChoice(static_shapes=True)``. A sentence decodes the same alone
    and in any batch, sampling included (its noise is keyed by the seed and
    the sentence).

    Args:
        model: a ``keras_transformer.Transformer``.
        source_ids: ``[batch, src_len]`` int ids, padded with ``pad_id``.
        search: ``Greedy()`` (the default), ``Beam(...)`` or ``Sample(...)``.
        limits: the output ``Limits`` (default: ``Limits()``).
        n: the hypotheses returned a sentence, at most ``search.hypotheses``.
        prefix_ids: ``[batch, width]`` target ids without BOS or EOS, padded
            with ``pad_id``: each output begins with its row's prefix, and
            the search continues it. A row's length limit leaves room for
            its prefix and one more token.
        choice: the ``KernelChoice`` (default: the inference kernels, a
            growing cache).
        sample_params: ``SampleParams`` given at call time (tensors of a
            served request) in place of the ``Sample``'s own.

    Returns:
        A ``DecodeOutput`` of ``n`` hypotheses a sentence, best first. Missing
        ones (a sentence with fewer finished hypotheses) have only ``pad_id``
        tokens and ``-inf`` scores.

    Raises:
        TypeError: ``search`` is not a search.
        ValueError: ``n`` or the limits do not fit (``decode_limits``).

    Example:
        >>> import keras_transformer as kt
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=1))
        >>> model.build()
        >>> out = decode(model, tf.constant([[5, 6, 3], [7, 3, 0]]), Beam(size=2),
        ...              Limits(max_length=4), n=2)
        >>> out.tokens.shape[:2], out.log_probs.shape
        (TensorShape([2, 2]), TensorShape([2, 2]))
    """
    search, limits = search or Greedy(), limits or Limits()
    check_search(search, n)
    choice = choice or KernelChoice()
    config = model.config
    source_ids = tf.convert_to_tensor(source_ids)
    batch = tf.shape(source_ids)[0]
    prefix_lengths = None
    if prefix_ids is not None:
        prefix_ids = tf.cast(tf.convert_to_tensor(prefix_ids), tf.int32)
        prefix_lengths = tf.reduce_sum(
            tf.cast(tf.not_equal(prefix_ids, config.pad_id), tf.int32), axis=1
        )
    row_limits, limit = choice.limits(model, source_ids, limits, prefix_lengths)
    beams = search.size if isinstance(search, Beam) else 1
    steps = choice.steps(model, rows=batch * beams, limit=limit)
    inputs = (steps, source_ids, row_limits, limit)
    min_length = limits.min_length
    if isinstance(search, Sample):
        params = sample_params or search.params()
        keys = sentence_keys(source_ids, config.pad_id, params.seed)
        return sample_search(*inputs, params, keys, min_length, prefix_ids)
    if beams == 1:
        return greedy_search(*inputs, min_length, prefix_ids)
    out = beam_search(*inputs, search, min_length, prefix_ids)
    missing = out.log_probs[:, :n] <= NEG / 2
    return DecodeOutput(
        tf.where(missing[:, :, tf.newaxis], config.pad_id, out.tokens[:, :n]),
        tf.where(missing, float("-inf"), out.scores[:, :n]),
        tf.where(missing, float("-inf"), out.log_probs[:, :n]),
        out.steps,
    )
