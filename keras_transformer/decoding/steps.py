"""The kernel choice: how a model's encoder and decoding steps run, for every search.

The searches (``greedy_search``, ``sample_search``, ``beam_search``) never see
the model: they run a ``DecodingSteps``, which ``KernelChoice.steps`` makes
from it. The speed settings live here and only here: the inference kernels
(``kernels.decoding_step``, ``kernels.encode``) or the model's own layers, a
growing or a fixed-size cache (static shapes, for XLA), precomputed weights,
and the small-batch step with its weights as constants (``ConstantSteps``);
a batch decoded as parts side by side is ``parts.decode_in_parts``. Every
choice gives the same outputs; ``docs/kernels.md`` says why each exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.decoding.limits import decode_limits, longest
from keras_transformer.decoding.options import Limits


class DecodingSteps(NamedTuple):
    """What a search runs: the encoder, the cache it starts from, the decoding steps, the ids.

    A step is ``step(token_ids [rows] int32, t [] int32, cache,
    source_padding [rows, src_len] bool) → (logits [rows, vocab] float32,
    cache)``: one new token a row, at position ``t``. A search may hand it
    any structure as ``cache`` that ``initial_cache`` made; it gathers the
    cache's rows (``tf.gather`` on every leaf) when it removes finished rows,
    and reorders the beams by ``reorder``.

    Fields:
        encode: ``source_ids [batch, src_len] → memory``.
        initial_cache: ``memory → cache``.
        large_batch: the step, for any number of rows.
        bos_id, eos_id, pad_id: the start, end and padding ids.
        banned: the ids a search never chooses (``never_emitted``).
        small_batch: a step for at most ``small_batch_rows`` rows, or ``None``.
        small_batch_rows: see ``small_batch``.
        reorder: ``(cache, rows [n]) → cache`` with the given rows, beam
            search's reordering (``None``: every leaf gathered).
        static_shapes: the cache has a fixed size, written at ``t``.
        log_softmax: ``logits [..., vocab] → log-probabilities``, as the
            searches compute them (``KernelChoice.log_softmax``).
    """

    encode: Callable
    initial_cache: Callable
    large_batch: Callable
    bos_id: int
    eos_id: int
    pad_id: int
    banned: tuple = ()
    small_batch: Callable | None = None
    small_batch_rows: int = 0
    reorder: Callable | None = None
    static_shapes: bool = False
    log_softmax: Callable = tf.nn.log_softmax


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
    (``KernelChoice(constant_steps=...)``) runs it in place of the small-batch step it would
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
        >>> from keras_transformer.decoding import Greedy, KernelChoice, Limits, decode
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=2))
        >>> model.build()
        >>> steps = ConstantSteps(model)
        >>> source, limits = tf.constant([[5, 6, 3]]), Limits(max_length=4)
        >>> choice = KernelChoice(constant_steps=steps)
        >>> fast = decode(model, source, Greedy(), limits, choice=choice)
        >>> bool(tf.reduce_all(fast.tokens == decode(model, source, Greedy(), limits).tokens))
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
            constant_small_batch_step,
            input_signature=step_signature(model),
            autograph=False,
        )
        self.nbytes = sum(
            leaf.nbytes for leaf in tf.nest.flatten(step_weights) if isinstance(leaf, np.ndarray)
        )


def _reorder_self_attention(cache, rows):
    """``cache`` with the self-attention keys and values of ``rows``: every beam of a sentence
    shares its cross-attention keys and values, which never move."""
    return [
        {
            "self": {name: tf.gather(value, rows) for name, value in layer["self"].items()},
            "cross": layer["cross"],
        }
        for layer in cache
    ]


@dataclass(frozen=True, eq=False)
class KernelChoice:
    """How a model decodes: the one place for the decoders' speed settings.

    The default decodes by the inference kernels with a growing cache, each
    call reading the weights it needs once. Every choice gives the same
    outputs.

    Args:
        static_shapes: a fixed-size cache and output buffers, written in
            place: every loop variable keeps its shape, for XLA (TPU,
            ``tf.function(jit_compile=True)``) and TFLite. Needs an int
            ``Limits.max_length`` or ``buffer_length``
            (``decode_limits``).
        buffer_length: the fixed buffer of ``static_shapes``.
        precomputed: the model's precomputed weights
            (``kernels.FrozenWeights(model).as_variables()``), for a model
            whose weights no longer change.
        constant_steps: a ``ConstantSteps`` of the model, whose small-batch
            step a growing cache takes.
        log_softmax: how the searches turn logits into log-probabilities:
            ``"fused"`` (``tf.nn.log_softmax``, one TensorFlow kernel) or
            ``"logsumexp"`` (``kernels.log_softmax_by_logsumexp``, which
            LiteRT runs faster than its ``LOG_SOFTMAX``).

    Raises:
        ValueError: ``log_softmax`` is not one of ``kernels.LOG_SOFTMAX_KINDS``.

    Example:
        >>> import keras_transformer as kt
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=1))
        >>> model.build()
        >>> steps = KernelChoice().steps(model, rows=2, limit=4)
        >>> memory = steps.encode(tf.constant([[5, 6, 3], [7, 3, 0]]))
        >>> memory.shape
        TensorShape([2, 3, 64])
    """

    static_shapes: bool = False
    buffer_length: int | None = None
    precomputed: Any = None
    constant_steps: ConstantSteps | None = None
    log_softmax: str = "fused"

    def __post_init__(self):
        kernels.log_softmax_of(self.log_softmax)  # refused here, before any graph is built

    def limits(self, model, source_ids, limits: Limits, prefix_lengths=None):
        """The longest output of each row and of the batch.

        Args:
            model: a ``keras_transformer.Transformer``.
            source_ids: ``[batch, src_len]`` int ids, padded with ``pad_id``.
            limits: the ``Limits`` (``max_length``, ``extra_length``).
            prefix_lengths: ``[batch]`` int32, the forced prefix of each row:
                its limit leaves room for the prefix and one more token.

        Returns:
            ``(row_limits [batch] int32, limit)``: ``limit`` the batch's
            longest (a Python int with static shapes).

        Raises:
            ValueError: the limits do not fit ``static_shapes`` (``decode_limits``).
        """
        row_limits, limit = decode_limits(
            model,
            source_ids,
            limits.max_length,
            limits.extra_length,
            self.static_shapes,
            self.buffer_length,
        )
        if prefix_lengths is None:
            return row_limits, limit
        cap = limit if self.static_shapes else model.config.max_length
        row_limits = tf.minimum(tf.maximum(row_limits, prefix_lengths + 1), cap)
        return row_limits, limit if self.static_shapes else longest(row_limits)

    def steps(self, model, rows=None, limit=None) -> DecodingSteps:
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
            rows: the decoding rows the loop starts with (default: more than
                ``kernels.SMALL_BATCH_ROWS``).
            limit: the fixed cache length of static shapes.

        Returns:
            A ``DecodingSteps``.
        """
        config = model.config
        ids = dict(
            bos_id=config.bos_id,
            eos_id=config.eos_id,
            pad_id=config.pad_id,
            banned=tuple(never_emitted(config)),
            reorder=_reorder_self_attention,
            static_shapes=self.static_shapes,
            log_softmax=kernels.log_softmax_of(self.log_softmax),
        )
        if not self.static_shapes and kernels.encoding_supported(model):
            encoder_weights = kernels.encoder_weights(model, self.precomputed)

            def encode(source_ids):
                return kernels.encode(model, source_ids, encoder_weights)
        else:

            def encode(source_ids):
                return model.encode(source_ids, training=False)

        if not self.static_shapes and kernels.decoding_step_supported(model):
            weights = kernels.step_weights(model, self.precomputed)
            output_kernel = kernels.tied_output_kernel(
                weights, kernels.SMALL_BATCH_ROWS + 1 if rows is None else rows
            )
            small_batch = (
                kernels.decoding_step(model, small_batch=True, weights=weights)
                if self.constant_steps is None
                else self.constant_steps.small_batch
            )
            return DecodingSteps(
                encode,
                lambda memory: kernels.initial_cache(model, memory, weights),
                kernels.decoding_step(model, weights=weights, output_kernel=output_kernel),
                small_batch=small_batch,
                small_batch_rows=kernels.SMALL_BATCH_ROWS,
                **ids,
            )
        output_kernel = model.output_kernel()
        static_shapes = self.static_shapes

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

        return DecodingSteps(encode, initial_cache, step, **ids)
