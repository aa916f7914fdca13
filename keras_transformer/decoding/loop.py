"""The one loop every search runs: its state, its buffers, compaction and the results.

A search is a strategy (``greedy.OneBest``, ``beam.BeamStrategy``) that knows
its own state, how a step's logits change it, when a sentence is done and
what it answers (OpenNMT-tf's decoding strategies over one dynamic decode). ``search_loop`` owns the
rest: the encoder and the cache, the token buffers (``tokens.Tokens``), the
forced prefixes, the shape invariants, and ``decode_loop``'s rounds that
remove the done rows (compaction), their answers written to the results.
Nothing here knows the model or its kernels.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from keras_transformer.decoding.tokens import DecodeOutput, Tokens, forced_tokens, prefix_inputs


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
    small_batch_rows: int = 0,
):
    """Every decoder's loop: run ``step`` until every row is done or ``state.step`` is ``limit``.

    With dynamic shapes the loop runs in rounds: each round decodes until
    ``_COMPACT_FRACTION`` of its rows are done, and then ``compact`` removes
    those rows, so later steps run on fewer rows. A done row must not change
    in the steps it waits, which keeps every sentence's output independent of
    its batch. A round of at most ``small_batch_rows`` decoding rows
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
        small_batch_rows: the most decoding rows ``small_batch_step`` takes.

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
                rows(state) <= small_batch_rows,
                lambda: loop(until_due, small_batch_step, state),
                lambda: loop(until_due, step, state),
            )
        return compact(state)

    if small_batch_step is None:
        return loop(running, round_, start)
    return tf.cond(
        rows(start) <= small_batch_rows,
        lambda: loop(running, small_batch_step, start),
        lambda: loop(running, round_, start),
    )


class SearchContext(NamedTuple):
    """What a strategy's step reads besides its state: the ids and the token buffers.

    Fields:
        eos_id, pad_id: the end and padding ids.
        banned: the ids a search never chooses.
        tokens: the ``Tokens`` its sequences live in.
        log_softmax: ``logits → log-probabilities`` (``DecodingSteps.log_softmax``).
    """

    eos_id: int
    pad_id: int
    banned: tuple
    tokens: Tokens
    log_softmax: Any


class LoopState(NamedTuple):
    """The loop's state: what the loop keeps for a search, and the search's own.

    ``rows`` starts as the batch size and, with dynamic shapes, falls as
    compaction removes done sentences; ``beams`` is the strategy's.
    """

    step: tf.Tensor  # [] int32: tokens decoded so far
    last: tf.Tensor  # [rows·beams] int32: the token each decoding row decodes from
    cache: Any  # the steps' cache, [rows·beams, ...] leaves
    source_padding: tf.Tensor  # [rows·beams, src_len] bool: True for real source tokens
    sentence: tf.Tensor  # [rows] int32: the row's position in the input batch
    row_limits: tf.Tensor  # [rows] int32: the row's longest output
    prefix: Any  # ([rows, width] int32 forced first tokens, [rows] int32 lengths), () for none
    search: Any  # the strategy's state, [rows, ...] leaves
    seqs: Any  # the strategy's sequences, [rows, ..., len] int32 leaves (tokens.Tokens)
    results: Any  # the answers at [batch, ...] of the rows compaction removed (static shapes: ())


def search_loop(steps, source_ids, row_limits, limit, strategy, prefix_ids=None) -> DecodeOutput:
    """Run ``strategy`` over ``steps`` until every sentence is done or at its length limit.

    Args:
        steps: the ``DecodingSteps`` to run.
        source_ids: ``[batch, src_len]`` int ids, padded with ``steps.pad_id``.
        row_limits: ``[batch]`` int32, each row's longest output.
        limit: the longest of them (a Python int: the buffer of static shapes).
        strategy: the search, with ``beams`` (the decoding rows a sentence)
            and methods over nests of ``[rows, ...]`` tensors, a row a
            sentence still searching (compaction gathers them by row):
            ``start(batch, context) → (state, seqs)``;
            ``step(state, seqs, logits [rows·beams, vocab], t, row_limits,
            forced, context) → (state, seqs, last [rows·beams], parents)``,
            ``forced`` the rows' ``forced_tokens`` or ``None``, ``parents``
            the flat beam rows the cache is reordered by, or ``None``;
            ``finished(state) → [rows] bool`` (a done row changes no more);
            ``answer(state, seqs, t) → (seq [rows, ..., len], values)``;
            ``output(seq, values, steps) → DecodeOutput``.
        prefix_ids: ``[batch, width]`` int ids padded with ``pad_id``: each
            row's first tokens, forced, or ``None``.

    Returns:
        The strategy's ``DecodeOutput``.
    """
    source_ids = tf.convert_to_tensor(source_ids)
    static, beams, pad = steps.static_shapes, strategy.beams, steps.pad_id
    context = SearchContext(
        steps.eos_id, pad, tuple(steps.banned), Tokens(static, limit, pad), steps.log_softmax
    )
    batch = tf.shape(source_ids)[0]
    cache = steps.initial_cache(steps.encode(source_ids))
    if beams > 1:
        # Every beam of a sentence attends to the same source: encoded and projected once,
        # its cross-attention keys and values copied to its beam rows (batch → batch·beams).
        beam_sentences = tf.repeat(tf.range(batch), beams)  # [batch·beams]
        cache = tf.nest.map_structure(lambda x: tf.gather(x, beam_sentences), cache)
        source_ids = tf.gather(source_ids, beam_sentences)
    reorder = steps.reorder or (
        lambda cache, rows: tf.nest.map_structure(lambda x: tf.gather(x, rows), cache)
    )

    def step_with(decode_step):
        """The loop's step (state → state) with ``decode_step`` computing the logits."""

        def step(state: LoopState) -> LoopState:
            t = state.step
            logits, cache = decode_step(state.last, t, state.cache, state.source_padding)
            forced = forced_tokens(*state.prefix, t) if state.prefix else None
            search, seqs, last, parents = strategy.step(
                state.search, state.seqs, logits, t, state.row_limits, forced, context
            )
            if parents is not None:
                cache = reorder(cache, parents)
            return state._replace(step=t + 1, last=last, cache=cache, search=search, seqs=seqs)

        return step

    def write_results(results, at, answer):
        """``results`` with ``answer``'s rows written at the sentences ``at``."""
        seq, values = answer
        return tf.nest.map_structure(
            lambda buffer, x: scatter_rows(buffer, at, x),
            results,
            (context.tokens.padded(seq), values),
        )

    def compact(state: LoopState) -> LoopState:
        """The state without its done rows, whose answers go to ``results``."""
        done = strategy.finished(state.search)
        staying = tf.cast(tf.where(~done)[:, 0], tf.int32)
        gone = tf.cast(tf.where(done)[:, 0], tf.int32)
        taken = tf.nest.map_structure(lambda x: tf.gather(x, gone), (state.search, state.seqs))
        results = write_results(
            state.results, tf.gather(state.sentence, gone), strategy.answer(*taken, state.step)
        )
        decoding = staying
        if beams > 1:  # the flat rows of the staying sentences' beams
            decoding = tf.reshape(staying[:, tf.newaxis] * beams + tf.range(beams), [-1])
        rows, flat = (lambda x: tf.gather(x, staying)), (lambda x: tf.gather(x, decoding))
        return LoopState(
            step=state.step,
            last=flat(state.last),
            cache=tf.nest.map_structure(flat, state.cache),
            source_padding=flat(state.source_padding),
            sentence=rows(state.sentence),
            row_limits=rows(state.row_limits),
            prefix=tf.nest.map_structure(rows, state.prefix),
            search=tf.nest.map_structure(rows, state.search),
            seqs=tf.nest.map_structure(rows, state.seqs),
            results=results,
        )

    search, seqs = strategy.start(batch, context)
    start = LoopState(
        step=tf.constant(0),
        last=tf.fill([batch * beams], tf.constant(steps.bos_id, tf.int32)),
        cache=cache,
        source_padding=tf.not_equal(source_ids, pad),
        sentence=tf.range(batch),
        row_limits=row_limits,
        prefix=() if prefix_ids is None else prefix_inputs(prefix_ids, pad),
        search=search,
        seqs=seqs,
        results=(),
    )
    if not static:  # every row is written before the end: any start values do
        seq, values = strategy.answer(search, seqs, start.step)
        start = start._replace(results=(context.tokens.padded(seq), values))
    invariants = tf.nest.map_structure(batch_free_shape, start)._replace(
        step=tf.TensorShape([]),
        cache=tf.nest.map_structure(batch_free_shape if static else loose_shape, cache),
        seqs=tf.nest.map_structure(context.tokens.invariant, seqs),
    )
    state = decode_loop(
        step_with(steps.large_batch),
        compact,
        start,
        invariants,
        lambda state: strategy.finished(state.search),
        limit,
        static,
        small_batch_step=steps.small_batch and step_with(steps.small_batch),
        rows=lambda state: tf.size(state.last),
        small_batch_rows=steps.small_batch_rows,
    )
    answer = strategy.answer(state.search, state.seqs, state.step)
    if static:  # every sentence kept its row
        seq, values = answer
    else:  # rows still searching at the length limit answer with what they hold
        seq, values = write_results(state.results, state.sentence, answer)
        seq = seq[..., : state.step]
    return strategy.output(seq, values, state.step)
