"""Greedy decoding with the model's incremental (cached) decoder, and what every decoder shares.

``greedy_decode`` runs as TensorFlow ops (a ``tf.while_loop``), so it can be
wrapped in ``tf.function``, exported in a SavedModel, and compiled with XLA in
its static-shape form. ``decoding_steps`` is the one seam between the
decoders and the encoder and step they run; ``decode_loop`` the loop they
share, with compaction in rounds; ``ConstantSteps`` the small-batch step with
the weights as constants, for an export.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.layers import masked_score_value, padding_mask


def loose_shape(x: tf.Tensor) -> tf.TensorShape:
    """Shape invariant for a growing loop variable (a cache tensor): only the last dim is fixed.

    Args:
        x: the loop variable.

    Returns:
        ``x``'s shape with every dimension but the last unknown.
    """
    return tf.TensorShape([None] * (x.shape.rank - 1) + x.shape[-1:].as_list())


def batch_free_shape(x: tf.Tensor) -> tf.TensorShape:
    """Shape invariant for a fixed-size loop variable: only the batch dim may vary.

    Args:
        x: the loop variable, batch first.

    Returns:
        ``x``'s shape with the first dimension unknown.
    """
    return tf.TensorShape([None]) + x.shape[1:]


def ban_early_eos(scores: tf.Tensor, step, min_length: int, eos_id: int) -> tf.Tensor:
    """``scores`` with EOS made impossible while ``step < min_length``.

    Args:
        scores: ``[..., vocab]`` logits or log-probabilities.
        step: the tokens decoded so far (a scalar).
        min_length: the shortest output allowed (0: no limit).
        eos_id: the EOS id.

    Returns:
        ``scores``, EOS's entries ``masked_score_value`` while too early.
    """
    if not min_length:
        return scores
    is_eos = tf.equal(tf.range(tf.shape(scores)[-1]), eos_id)
    too_early = tf.logical_and(is_eos, step < min_length)
    return tf.where(too_early, tf.constant(masked_score_value(scores.dtype), scores.dtype), scores)


def never_emitted(config) -> list[int]:
    """The ids a decoder never chooses: ``pad_id``, and ``bos_id`` where it differs.

    Neither is ever a training label; Hugging Face's Marian generation bans
    pad the same way.

    Args:
        config: the model's ``TransformerConfig``.

    Returns:
        The sorted ids.

    Example:
        >>> from keras_transformer import TransformerConfig
        >>> never_emitted(TransformerConfig.from_preset("tiny"))
        [0, 2]
    """
    return sorted({config.pad_id, config.bos_id})


def ban_tokens(scores: tf.Tensor, token_ids) -> tf.Tensor:
    """``scores`` with ``token_ids`` made impossible, the others left as they are.

    The others are not renormalised: greedy decoding chooses from the logits
    so, and scores the chosen tokens by their log-probabilities.

    Args:
        scores: ``[..., vocab]`` logits or log-probabilities, above
            ``masked_score_value``.
        token_ids: the ids to ban.

    Returns:
        ``scores``, the banned entries the finite -inf of ``masked_score_value``.

    Example:
        >>> ban_tokens(tf.constant([[1.0, 2.0, 3.0]]), [0, 2]).numpy().tolist()
        [[-1000000000.0, 2.0, -1000000000.0]]
    """
    size = scores.shape[-1]
    if size is not None:  # the usual case: one constant [vocab] cap, no ops a decoding step
        # masked where banned, +inf elsewhere: a score (never below masked) becomes masked
        # or stays as it is, a select's values by a minimum (docs/kernels.md).
        cap = np.where(
            np.isin(np.arange(size), list(token_ids)), masked_score_value(scores.dtype), np.inf
        )
        return tf.minimum(scores, tf.constant(cap.astype(scores.dtype.as_numpy_dtype)))
    vocab = tf.range(tf.shape(scores)[-1])
    banned = tf.reduce_any(
        tf.equal(vocab[:, tf.newaxis], tf.constant(list(token_ids), tf.int32)[tf.newaxis, :]),
        axis=1,
    )
    return tf.where(banned, tf.constant(masked_score_value(scores.dtype), scores.dtype), scores)


class DecodingSteps(NamedTuple):
    """What a decoder runs: the encoder, the cache it starts from, and the decoding steps.

    A step is ``step(token_ids [rows] int32, t [] int32, cache,
    source_padding [rows, src_len]) → (logits [rows, tgt_vocab] float32,
    cache)``, one new token a row at position ``t``.
    """

    encode: Callable  # source_ids → memory [rows, src_len, d_model]
    initial_cache: Callable  # memory [rows, src_len, d_model] → the cache the steps start from
    large_batch: Callable  # any number of rows
    small_batch: Callable | None  # rows ≤ kernels.SMALL_BATCH_ROWS (None: large_batch serves all)


def step_signature(model) -> list:
    """The input signature of ``model``'s decoding step, in the loops' own loose shapes.

    Args:
        model: the ``Transformer``.

    Returns:
        ``[token_ids, t, cache, source_padding]`` as ``tf.TensorSpec``s of a
        growing cache: any rows and cache length.
    """
    config = model.config
    keys = tf.TensorSpec(
        [None, None, None, config.d_model // config.num_heads], model.compute_dtype
    )
    cache = [
        {"self": {"key": keys, "value": keys}, "cross": {"key": keys, "value": keys}}
        for _ in range(config.num_decoder_layers)
    ]
    return [
        tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([], tf.int32),
        cache,
        tf.TensorSpec([None, None], tf.bool),
    ]


class ConstantSteps:
    """A model's small-batch decoding step with its weights as graph constants, made once.

    For a model whose weights no longer change: a decoder handed it
    (``constant_steps=``) runs it in place of the small-batch step it would
    build; the encoder and the large-batch step still read the model's
    variables. Every decoder of an export takes the same ``tf.function``, so
    its SavedModel holds the constants once. The constants are a second copy
    of the decoder's weights and the target embedding, and for a tied output
    layer a third (the embedding transposed, as the output kernel): in all
    ``nbytes``, in the SavedModel's graph and in a server's memory for each
    signature that runs the step. The weights are split for the step's
    splits once, here. ``docs/kernels.md`` says why.

    Args:
        model: a ``keras_transformer.Transformer`` whose settings the
            inference kernels cover (``kernels.decoding_step_supported``).
        precomputed: the model's precomputed weights
            (``kernels.FrozenWeights``); by default made here.
        splits: the step's splits (1: none); by default
            ``kernels.step_splits(model.config)``. Splits run side by side on
            the executor's inter-op threads; with one such thread, choose 1.
        products: the step's products, ``"conv"`` (pointwise products) or
            ``"matmul"``; by default ``kernels.step_products()``, what suits
            this process's TensorFlow. A SavedModel keeps the choice: export
            on a machine whose TensorFlow runs as the server's does, or choose.

    Attributes:
        small_batch: the step, a ``tf.function`` of ``step_signature(model)``.
        splits, products: the step's.
        nbytes: the constants' size.

    Raises:
        ValueError: the inference kernels do not cover ``model``, or
            ``decoding_step`` refuses ``splits`` or ``products``.

    Example:
        >>> import keras_transformer as kt
        >>> from keras_transformer.decoding import greedy_decode
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=2))
        >>> model.build()
        >>> steps = ConstantSteps(model)
        >>> source = tf.constant([[5, 6, 3]])
        >>> tokens, _ = greedy_decode(model, source, max_length=4, constant_steps=steps)
        >>> expected, _ = greedy_decode(model, tf.constant([[5, 6, 3]]), max_length=4)
        >>> bool(tf.reduce_all(tokens == expected))
        True
    """

    def __init__(
        self,
        model,
        precomputed: kernels.PrecomputedWeights | None = None,
        splits: int | None = None,
        products: str | None = None,
    ):
        if not kernels.decoding_step_supported(model):
            raise ValueError(
                "ConstantSteps needs a model that the inference kernels cover "
                "(kernels.decoding_step_supported); decode this model without constant_steps."
            )
        config = model.config
        # The cross-attention's packed kernel serves initial_cache, which reads the variables.
        step_weights = kernels.as_constants(
            kernels.step_weights(model, precomputed)._replace(cross_key_value=())
        )
        if (
            step_weights.output[0] is None
        ):  # tied: the embedding transposed, made once, as the output kernel
            step_weights = step_weights._replace(
                output=(np.ascontiguousarray(step_weights.embeddings.T), None)
            )
        self.splits = kernels.step_splits(config) if splits is None else int(splits)
        self.products = kernels.step_products() if products is None else products
        small_batch_step = kernels.decoding_step(
            model,
            small_batch=True,
            weights=step_weights,
            splits=self.splits,
            products=self.products,
        )

        def constant_small_batch_step(
            token_ids, position, cache, source_padding
        ):  # names the SavedModel's function
            return small_batch_step(token_ids, position, cache, source_padding)

        self.small_batch = tf.function(
            constant_small_batch_step, input_signature=step_signature(model)
        )
        self.nbytes = sum(
            leaf.nbytes for leaf in tf.nest.flatten(step_weights) if isinstance(leaf, np.ndarray)
        )


def decoding_steps(
    model,
    static_shapes: bool = False,
    limit=None,
    rows=None,
    precomputed: kernels.PrecomputedWeights | None = None,
    constant_steps: ConstantSteps | None = None,
) -> DecodingSteps:
    """The encoder and decoding steps for ``model``, set up where the loop is built.

    A growing cache takes ``kernels.decoding_step`` (a large-batch and a
    small-batch step) and ``kernels.encode``, which read the weights here,
    once. A fixed-size cache (static shapes) and models whose settings those
    kernels do not cover take ``model.encode`` and ``model.decode``, with the
    tied output kernel read here, and no small-batch step. All give the same
    memory and logits (``tests/test_encoding.py``,
    ``tests/test_decoding_step.py``).

    Args:
        model: a ``keras_transformer.Transformer``.
        static_shapes: a fixed-size cache, written in place.
        limit: the fixed cache length of static shapes.
        rows: the decoding rows the loop starts with (default: more than
            ``kernels.SMALL_BATCH_ROWS``).
        precomputed: the model's precomputed weights
            (``kernels.FrozenWeights(model).as_variables()``, as an export
            keeps them).
        constant_steps: a ``ConstantSteps`` of ``model``, whose small-batch
            step a growing cache takes.

    Returns:
        A ``DecodingSteps``.
    """
    if not static_shapes and kernels.encoding_supported(model):
        encoder_weights = kernels.encoder_weights(model, precomputed)

        def encode(source_ids):
            return kernels.encode(model, source_ids, encoder_weights)
    else:

        def encode(source_ids):
            return model.encode(source_ids, training=False)

    if not static_shapes and kernels.decoding_step_supported(model):
        weights = kernels.step_weights(model, precomputed)
        output_kernel = kernels.tied_output_kernel(
            weights, kernels.SMALL_BATCH_ROWS + 1 if rows is None else rows
        )
        small_batch = (
            kernels.decoding_step(model, small_batch=True, weights=weights)
            if constant_steps is None
            else constant_steps.small_batch
        )
        return DecodingSteps(
            encode,
            lambda memory: kernels.initial_cache(model, memory, weights),
            kernels.decoding_step(model, weights=weights, output_kernel=output_kernel),
            small_batch,
        )
    output_kernel = model.output_kernel()

    def step(token_ids, t, cache, source_padding):
        logits, cache = model.decode(
            token_ids[:, tf.newaxis],
            cache,
            source_padding,
            cache_index=t if static_shapes else None,
            training=False,
            output_kernel=output_kernel,
        )
        return logits[:, -1, :], cache

    def initial_cache(memory):
        return model.initial_cache(memory, max_length=limit if static_shapes else None)

    return DecodingSteps(encode, initial_cache, step, None)


def decode_lengths(model, source_ids, max_length=None, extra_length: int = 50) -> tf.Tensor:
    """The longest output of each sentence, per sentence so that it decodes the same in any batch.

    Args:
        model: a ``keras_transformer.Transformer``.
        source_ids: ``[batch, src_len]`` int ids, padded with ``pad_id``.
        max_length: one limit for every sentence, if given.
        extra_length: else each sentence's limit is its own length plus this
            (the paper's input + 50).

    Returns:
        ``[batch]`` int32, never beyond the model's position table.
    """
    batch = tf.shape(source_ids)[0]
    if max_length is not None:
        return tf.fill([batch], min(int(max_length), model.config.max_length))
    real = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, model.config.pad_id), tf.int32), axis=1)
    return tf.minimum(real + extra_length, model.config.max_length)


def decode_limits(
    model,
    source_ids,
    max_length=None,
    extra_length: int = 50,
    static_shapes: bool = False,
    buffer_length: int | None = None,
):
    """The longest output of each row and of the batch, for a decoder.

    Args:
        model, source_ids, max_length, extra_length: as for ``decode_lengths``.
        static_shapes: the limit is a Python int, the fixed buffer size:
            ``max_length`` (every row gets it), or ``buffer_length``.
        buffer_length: with ``static_shapes``, the buffer size; each row
            keeps its own source length + ``extra_length``, capped by the
            buffer: the same outputs as the dynamic decoder, at a fixed shape.

    Returns:
        ``(row_limits [batch] int32, limit)``.

    Raises:
        ValueError: ``buffer_length`` without ``static_shapes``, or with
            ``max_length``; ``static_shapes`` with neither an int
            ``max_length`` nor ``buffer_length``.
    """
    if not static_shapes:
        if buffer_length is not None:
            raise ValueError("buffer_length sets a fixed buffer: use it with static_shapes=True.")
        rows = decode_lengths(model, source_ids, max_length, extra_length)
        return rows, tf.reduce_max(rows)
    if buffer_length is not None:
        if max_length is not None:
            raise ValueError(
                "Pass max_length (one limit for every row) or buffer_length, not both."
            )
        limit = min(int(buffer_length), model.config.max_length)
        return tf.minimum(decode_lengths(model, source_ids, None, extra_length), limit), limit
    if not isinstance(max_length, int):
        raise ValueError(
            "static_shapes=True needs max_length as a Python int (a fixed buffer size) "
            "or buffer_length."
        )
    return decode_lengths(model, source_ids, max_length, extra_length), min(
        max_length, model.config.max_length
    )


class GreedyState(NamedTuple):
    """Greedy decoding's loop state, one row a sentence still decoding.

    ``rows`` starts as the batch size and, in the dynamic-shape decoder,
    falls as compaction removes finished rows (a batch at a time, see
    ``_COMPACT_FRACTION``).
    """

    step: tf.Tensor  # [] int32: tokens decoded so far
    last: tf.Tensor  # [rows] int32: the token each row decodes from
    cache: list  # per decoder layer: {"self": [rows, heads, len, depth] keys/values, "cross": ...}
    finished: tf.Tensor  # [rows] bool: the row emitted EOS or reached its length limit
    scores: tf.Tensor  # [rows] float32: summed log-probabilities of the chosen tokens
    tokens: tf.Tensor  # [rows, step] int32 (static shapes: [rows, limit]), pad after EOS
    sentence: tf.Tensor  # [rows] int32: the row's position in the input batch
    row_limits: tf.Tensor  # [rows] int32: the row's longest output
    source_padding: tf.Tensor  # [rows, src_len] bool: True for real source tokens
    results: tuple  # ([batch, limit] tokens, [batch] scores) of the rows compaction removed
    #                            (static shapes: (), every sentence keeps its row)


# Compaction removes the finished rows of a dynamic-shape batch once they are this share of it:
# each compaction gathers the caches of the rows that stay (docs/kernels.md).
_COMPACT_FRACTION = 0.25


def scatter_rows(buffer: tf.Tensor, rows: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """``buffer`` with ``values[i]`` written over row ``rows[i]``.

    Args:
        buffer: ``[rows, ...]`` the tensor to write into.
        rows: ``[n]`` row indices.
        values: ``[n, ...]`` the new rows.

    Returns:
        The updated copy of ``buffer``.
    """
    return tf.tensor_scatter_nd_update(buffer, rows[:, tf.newaxis], values)


def keep_rows(state, rows, results, beam_rows=None, beam_fields=()):
    """``state`` with only its ``rows``: a decoder's compaction.

    Args:
        state: a decoder's loop state (a ``NamedTuple`` with ``step`` and
            ``results`` fields); every other field holds a row a sentence,
            or, the ``beam_fields``, several.
        rows: ``[kept]`` the rows to keep.
        results: the new ``results`` (the removed rows' answers written in).
        beam_rows: the flat rows to keep of the ``beam_fields``.
        beam_fields: the fields with a row a beam.

    Returns:
        ``state`` of the kept rows, with ``results``.
    """

    def keep(name, value):
        if name in ("step", "results"):
            return value
        at = beam_rows if name in beam_fields else rows
        return tf.nest.map_structure(lambda x: tf.gather(x, at), value)

    kept = state._replace(**{name: keep(name, getattr(state, name)) for name in state._fields})
    return kept._replace(results=results)


def decode_loop(
    step,
    compact,
    start,
    invariants,
    done,
    limit,
    static_shapes: bool,
    small_batch_step=None,
    rows=None,
):
    """Every decoder's loop: run ``step`` until every row is done or ``state.step`` is ``limit``.

    With dynamic shapes the loop runs in rounds: each round decodes until
    ``_COMPACT_FRACTION`` of its rows are done, and then ``compact`` removes
    those rows, so later steps run on fewer rows. A done row must not change
    in the steps it waits, which keeps every sentence's output independent of
    its batch. A round of at most ``kernels.SMALL_BATCH_ROWS`` decoding rows
    runs ``small_batch_step`` where there is one, a choice made once a round;
    a batch that starts with at most that many rows decodes in one flat loop
    of ``small_batch_step`` instead, its finished rows waiting in it
    (``docs/kernels.md`` says why).

    Args:
        step: the loop's step, state → state.
        compact: state → the state without its done rows (dynamic shapes).
        start: the first state, a ``NamedTuple`` with a ``step`` field.
        invariants: the state's shape invariants.
        done: state → ``[rows]`` bool.
        limit: the most steps.
        static_shapes: one loop of ``step``, no compaction.
        small_batch_step: the loop's step by the small-batch decoding step, or ``None``.
        rows: state → its decoding rows (needed with ``small_batch_step``).

    Returns:
        The last state.
    """

    def running(state):
        return tf.logical_and(state.step < limit, tf.logical_not(tf.reduce_all(done(state))))

    def loop(condition, body, state):
        (state,) = tf.while_loop(
            lambda state: condition(state),
            lambda state: (body(state),),
            (state,),
            shape_invariants=(invariants,),
        )
        return state

    if static_shapes:
        return loop(running, step, start)

    def round_(state):
        count = tf.cast(tf.size(done(state)), tf.float32)
        due = tf.maximum(1, tf.cast(tf.math.ceil(_COMPACT_FRACTION * count), tf.int32))

        def until_due(s):
            return running(s) & (tf.reduce_sum(tf.cast(done(s), tf.int32)) < due)

        if small_batch_step is None:
            state = loop(until_due, step, state)
        else:
            state = tf.cond(
                rows(state) <= kernels.SMALL_BATCH_ROWS,
                lambda: loop(until_due, small_batch_step, state),
                lambda: loop(until_due, step, state),
            )
        return compact(state)

    if small_batch_step is None:
        return loop(running, round_, start)
    return tf.cond(
        rows(start) <= kernels.SMALL_BATCH_ROWS,
        lambda: loop(running, small_batch_step, start),
        lambda: loop(running, round_, start),
    )


def greedy_decode(
    model,
    source_ids,
    max_length=None,
    extra_length: int = 50,
    static_shapes: bool = False,
    min_length: int = 0,
    buffer_length: int | None = None,
    precomputed: kernels.PrecomputedWeights | None = None,
    constant_steps: ConstantSteps | None = None,
):
    """Arg-max decoding, a batch at a time, stopping when every row emitted EOS.

    Finished rows are removed from the batch in rounds (compaction, dynamic
    shapes), so the rest decodes on fewer rows; a sentence decodes the same
    alone and in any batch. Decoding starts from ``bos_id`` (the pad id for a
    model whose decoder starts from it) and never chooses ``pad_id`` or
    ``bos_id`` (``never_emitted``).

    Args:
        model: a ``keras_transformer.Transformer``.
        source_ids: ``[batch, src_len]`` int ids, padded with ``pad_id``.
        max_length: output length limit (defaults to ``src_len + extra_length``).
        extra_length: see ``max_length``.
        static_shapes: use a fixed-size KV cache and output buffer (every loop
            variable keeps its shape: XLA/TPU/TFLite). Needs an int
            ``max_length`` or ``buffer_length`` (see ``decode_limits``).
        min_length: EOS is not allowed before this many tokens.
        buffer_length: the fixed buffer of ``static_shapes``.
        precomputed: the model's precomputed weights
            (``kernels.FrozenWeights``), for a model whose weights do not change.
        constant_steps: a ``ConstantSteps`` of ``model`` (dynamic shapes
            only), for a model whose weights do not change.

    Returns:
        ``(tokens, scores)``: ``tokens`` ``[batch, out_len]`` int32 without the
        start token, ending with EOS (when emitted) and padded with
        ``pad_id``; ``scores`` ``[batch]`` float32, the sum of the chosen
        tokens' log-probabilities.

    Raises:
        ValueError: the limits do not fit ``static_shapes`` (``decode_limits``).

    Example:
        >>> import keras_transformer as kt
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=1))
        >>> model.build()
        >>> tokens, scores = greedy_decode(model, tf.constant([[5, 6, 3], [7, 3, 0]]), max_length=4)
        >>> tokens.shape[0], scores.shape
        (2, TensorShape([2]))
    """
    config = model.config
    source_ids = tf.convert_to_tensor(source_ids)
    row_limits, limit = decode_limits(
        model, source_ids, max_length, extra_length, static_shapes, buffer_length
    )
    batch = tf.shape(source_ids)[0]
    steps = decoding_steps(
        model,
        static_shapes,
        limit,
        rows=batch,
        precomputed=precomputed,  # weights read once
        constant_steps=constant_steps,
    )
    memory = steps.encode(source_ids)
    source_padding = padding_mask(source_ids, config.pad_id)
    cache = steps.initial_cache(memory)
    pad = tf.constant(config.pad_id, tf.int32)
    banned = never_emitted(config)

    if static_shapes:

        def write(tokens, chosen, t):
            return tf.where(
                tf.equal(tf.range(limit), t)[tf.newaxis, :], chosen[:, tf.newaxis], tokens
            )
    else:

        def write(tokens, chosen, t):
            return tf.concat([tokens, chosen[:, tf.newaxis]], axis=1)

    def write_results(results, state: GreedyState, rows):
        tokens = tf.gather(state.tokens, rows)
        tokens = tf.pad(tokens, [[0, 0], [0, limit - tf.shape(tokens)[1]]], constant_values=pad)
        at = tf.gather(state.sentence, rows)
        return (
            scatter_rows(results[0], at, tokens),
            scatter_rows(results[1], at, tf.gather(state.scores, rows)),
        )

    def compact(state: GreedyState) -> GreedyState:
        """The state without its finished rows, whose answers go to ``results``."""
        results = write_results(state.results, state, tf.where(state.finished)[:, 0])
        return keep_rows(state, tf.where(~state.finished)[:, 0], results)

    def step_with(decode_step):
        """The loop's step (state → state) with ``decode_step`` computing the logits."""

        def step(state: GreedyState) -> GreedyState:
            t, finished = state.step, state.finished
            logits, cache = decode_step(state.last, t, state.cache, state.source_padding)
            # The choice from the logits (log_softmax keeps each row's order); the chosen tokens'
            # log-probabilities beside it, off the path to the next step.
            chosen = tf.argmax(
                ban_early_eos(ban_tokens(logits, banned), t, min_length, config.eos_id),
                axis=-1,
                output_type=tf.int32,
            )
            chosen = tf.where(
                finished, config.pad_id, chosen
            )  # constants made here: see kernels.decoding_step
            log_probs = tf.gather(tf.nn.log_softmax(logits), chosen, batch_dims=1)
            scores = state.scores + tf.where(finished, 0.0, log_probs)
            finished = finished | tf.equal(chosen, config.eos_id) | (t + 1 >= state.row_limits)
            return state._replace(
                step=t + 1,
                last=chosen,
                cache=cache,
                finished=finished,
                scores=scores,
                tokens=write(state.tokens, chosen, t),
            )

        return step

    start = GreedyState(
        step=tf.constant(0),
        last=tf.fill([batch], tf.constant(config.bos_id, tf.int32)),
        cache=cache,
        finished=tf.zeros([batch], tf.bool),
        scores=tf.zeros([batch], tf.float32),
        tokens=tf.fill([batch, limit], pad) if static_shapes else tf.zeros([batch, 0], tf.int32),
        sentence=tf.range(batch),
        row_limits=row_limits,
        source_padding=source_padding,
        results=()
        if static_shapes
        else (tf.fill([batch, limit], pad), tf.zeros([batch], tf.float32)),
    )
    invariants = GreedyState(
        step=tf.TensorShape([]),
        last=tf.TensorShape([None]),
        cache=tf.nest.map_structure(batch_free_shape if static_shapes else loose_shape, cache),
        finished=tf.TensorShape([None]),
        scores=tf.TensorShape([None]),
        tokens=tf.TensorShape([None, limit if static_shapes else None]),
        sentence=tf.TensorShape([None]),
        row_limits=tf.TensorShape([None]),
        source_padding=tf.TensorShape([None, None]),
        results=() if static_shapes else (tf.TensorShape([None, None]), tf.TensorShape([None])),
    )
    state = decode_loop(
        step_with(steps.large_batch),
        compact,
        start,
        invariants,
        lambda state: state.finished,
        limit,
        static_shapes,
        small_batch_step=steps.small_batch and step_with(steps.small_batch),
        rows=lambda state: tf.size(state.finished),
    )
    if static_shapes:  # every sentence kept its row
        return state.tokens, state.scores
    tokens, scores = write_results(state.results, state, tf.range(tf.shape(state.finished)[0]))
    return tokens[:, : state.step], scores
