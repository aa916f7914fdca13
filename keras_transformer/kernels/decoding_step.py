"""One decoding step of ``Transformer.decode`` in few graph nodes, for a growing cache.

``decoding_step(model)`` returns a step of plain TensorFlow ops that computes
what ``Transformer.decode`` computes for one new token a row against a growing
cache (the tests compare the two), with the model's weights read once, before
the decoding loop (``step_weights``), and every product on its rows as they
are. ``initial_cache`` makes the cache it starts from, every layer's
cross-attention keys and values by one product. Two steps serve a decoder:
the large-batch step for any number of rows, and the small-batch step
(``small_batch=True``) for at most ``SMALL_BATCH_ROWS`` rows, whose products
may run as 1×1 convolutions (``step_products``) and as splits
(``step_splits``). The kernels package's glossary defines these terms;
``docs/kernels.md`` says how the step is built and why. The ops are portable
(CPU, GPU, TPU, XLA); static-shape decoding (a fixed-size cache written in
place) keeps ``Transformer.decode``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.kernels.attention import attend as attend_heads
from keras_transformer.kernels.layer_norm import inference_norm, inference_residual
from keras_transformer.kernels.projection import (
    UnfusedBias,
    bias_and_activation,
    permute,
    project_pointwise,
    project_rows,
)
from keras_transformer.kernels.weights import (
    STEP_PRODUCTS,
    Norm,
    PrecomputedWeights,
    dense_weights,
    fused_qkv,
    model_weight,
    norm_weights,
    packed_cross_key_value,
    read_weights,
    scaled_query,
    unfused_biases,
)
from keras_transformer.numerics import masked_score_value


class LayerWeights(NamedTuple):
    """One decoder layer's weights in the compute dtype (norms in float32):
    variables or tensors (see ``StepWeights``)."""

    self_qkv: (
        tuple  # ([d_model, 3·d_model] kernel, [3·d_model] bias | None): query scaled by 1/√d_k
    )
    self_output: tuple  # ([d_model, d_model], [d_model] | None)
    self_norm: Norm
    cross_query: tuple  # ([d_model, d_model], [d_model] | None): scaled by 1/√d_k
    cross_output: tuple
    cross_norm: Norm
    inner: tuple  # ([d_model, d_ff], [d_ff] | None)
    outer: tuple  # ([d_ff, d_model], [d_model] | None)
    ffn_norm: Norm


class StepWeights(NamedTuple):
    """Everything a step reads. A leaf is a ``tf.Variable`` where the step
    can read it as it is (the step reads it at every step, inside the loop),
    else a tensor made once, before the loop; or, all of them, NumPy arrays
    (``weights.as_constants``) that the step makes constants of."""

    embeddings: tf.Tensor  # [tgt_vocab, d_model] compute dtype
    positions: np.ndarray  # [max_length, d_model] compute dtype: made a constant inside the step
    layers: tuple  # LayerWeights per decoder layer
    cross_key_value: (
        tuple  # ([d_model, 2·layers·d_model], bias | None): every layer's key, then value
    )
    final_norm: Norm | None  # pre-LN stacks only
    output: tuple  # ([d_model, tgt_vocab] kernel, [tgt_vocab] bias | None) compute dtype;
    #                              kernel None: tied to ``embeddings`` (see ``tied_output_kernel``)
    final_logits_bias: tf.Tensor | None  # [tgt_vocab] float32, added to the float32 logits
    unfused_biases: (
        tuple  # weights.unfused_biases: the small-batch step's biases (projection.UnfusedBias)
    )


def supported(model) -> bool:
    """Whether ``decoding_step`` reproduces ``model.decode`` for ``model``'s settings.

    Returns:
        ``False`` for a quantized projection, a LayerNorm that Keras' own path
        computes (``kernel_covers``) or learned positions, else ``True``.
    """
    decoder = model.decoder
    denses, norms = [], []
    for layer in decoder.layer_stack:
        for attention in (layer.self_attention, layer.cross_attention):
            denses += [
                attention.query_dense,
                attention.key_dense,
                attention.value_dense,
                attention.output_dense,
            ]
        denses += [layer.feed_forward.inner_dense, layer.feed_forward.outer_dense]
        norms += [layer.self_attention_norm, layer.cross_attention_norm, layer.feed_forward_norm]
    if model.output_projection is not None:
        denses.append(model.output_projection)
    if decoder.final_norm is not None:
        norms.append(decoder.final_norm)
    return (
        all(dense.quantization_mode is None for dense in denses)
        and all(norm.kernel_covers(3) for norm in norms)
        and not model.target_embedding.learned_positions
    )


def step_weights(model, precomputed: PrecomputedWeights | None = None) -> StepWeights:
    """Everything ``decoding_step`` reads: the decoder, output layer and target embedding weights.

    The model's variables where the step uses them as they are; their
    products (cast, scaled, concatenated, negated) made once here, or taken
    from ``precomputed``.

    Args:
        model: a ``keras_transformer.Transformer``.
        precomputed: the model's precomputed weights (``FrozenWeights``);
            by default made here, as tensors.

    Returns:
        A ``StepWeights``.
    """
    dtype = model.compute_dtype
    stack = model.decoder.layer_stack
    if precomputed is None:
        qkv = [fused_qkv(layer.self_attention, dtype) for layer in stack]
        cross_query = [scaled_query(layer.cross_attention, dtype) for layer in stack]
        cross_key_value = packed_cross_key_value(model.decoder, dtype)
        negated = unfused_biases(model, qkv, cross_query)
    else:
        qkv, cross_query, cross_key_value = (
            precomputed.decoder_qkv,
            precomputed.cross_query,
            precomputed.cross_key_value,
        )
        negated = precomputed.unfused_biases
    layers = tuple(
        LayerWeights(
            self_qkv=qkv[i],
            self_output=dense_weights(layer.self_attention.output_dense, dtype),
            self_norm=norm_weights(layer.self_attention_norm),
            cross_query=cross_query[i],
            cross_output=dense_weights(layer.cross_attention.output_dense, dtype),
            cross_norm=norm_weights(layer.cross_attention_norm),
            inner=dense_weights(layer.feed_forward.inner_dense, dtype),
            outer=dense_weights(layer.feed_forward.outer_dense, dtype),
            ffn_norm=norm_weights(layer.feed_forward_norm),
        )
        for i, layer in enumerate(stack)
    )
    embedding = model.target_embedding
    if model.output_projection is not None:
        output = dense_weights(model.output_projection, dtype)
    else:
        output = (None, None)  # the tied embedding
    return StepWeights(
        embeddings=model_weight(embedding.embeddings, dtype),
        positions=np.asarray(embedding.position_table, tf.as_dtype(dtype).as_numpy_dtype),
        layers=layers,
        cross_key_value=tuple(cross_key_value),
        final_norm=None
        if model.decoder.final_norm is None
        else norm_weights(model.decoder.final_norm),
        output=output,
        final_logits_bias=(
            None
            if model.final_logits_bias is None
            else model_weight(model.final_logits_bias, tf.float32)
        ),
        unfused_biases=negated,
    )


def initial_cache(model, memory, weights: StepWeights) -> list:
    """``Transformer.initial_cache(memory)``, a growing cache, for ``decoding_step``.

    Every layer's cross-attention keys and values come from one product and
    one permutation, instead of a product and a transpose for each.

    Args:
        model: the ``Transformer``.
        memory: the encoder's output ``[rows, src_len, d_model]``.
        weights: ``step_weights(model)``.

    Returns:
        Per decoder layer, ``{"self": {"key", "value"}, "cross": {"key",
        "value"}}``, each ``[rows, heads, len, depth]``: the self-attention's
        empty (``len`` 0), the cross-attention's projected from ``memory``.
    """
    config = model.config
    heads, depth, layers = config.num_heads, config.d_model // config.num_heads, len(weights.layers)
    rows, length = tf.shape(memory)[0], tf.shape(memory)[1]
    projected = project_rows(tf.reshape(memory, [-1, config.d_model]), weights.cross_key_value)
    projected = tf.reshape(projected, [rows, length, 2 * layers, heads, depth])
    keys_values = tf.unstack(
        permute(projected, [2, 0, 3, 1, 4])
    )  # 2·layers × [rows, heads, len, depth]
    empty = tf.zeros([rows, heads, 0, depth], memory.dtype)
    return [
        {
            "self": {"key": empty, "value": empty},
            "cross": {"key": keys_values[2 * i], "value": keys_values[2 * i + 1]},
        }
        for i in range(layers)
    ]


def tied_output_kernel(weights: StepWeights, rows) -> tf.Tensor | None:
    """The tied output kernel (the embedding, transposed) for the large-batch step.

    Made once, before the loop, and only when the batch has more than
    ``SMALL_BATCH_ROWS`` rows: the small-batch step multiplies by slices of
    the embedding instead, and since rows only ever leave a batch, no step
    reads the kernel of a batch that starts small.

    Args:
        weights: the step's ``StepWeights``.
        rows: the decoding rows the loop starts with (an int, or a scalar
            tensor: then the choice is a ``tf.cond``).

    Returns:
        ``[d_model, tgt_vocab]``, or an empty ``[d_model, 0]`` for a small
        batch; ``None`` for an untied output layer.
    """
    if weights.output[0] is not None:
        return None
    embeddings = tf.convert_to_tensor(weights.embeddings)

    def transposed():
        return tf.transpose(embeddings)

    def empty():
        return tf.zeros([embeddings.shape[1], 0], embeddings.dtype)

    if isinstance(rows, int):  # known now: no branch in the graph
        return transposed() if rows > SMALL_BATCH_ROWS else empty()
    return tf.cond(rows > SMALL_BATCH_ROWS, transposed, empty)


def _with_unfused_biases(weights: StepWeights) -> StepWeights:
    """``weights`` with the products' biases unfused (``projection.UnfusedBias``,
    from ``weights.unfused_biases``): the small-batch step's."""
    layer_biases, output_bias = weights.unfused_biases
    layers = tuple(
        layer._replace(
            **{name: (getattr(layer, name)[0], bias) for name, bias in zip(STEP_PRODUCTS, biases)}
        )
        for layer, biases in zip(weights.layers, layer_biases)
    )
    output = weights.output if weights.output[0] is None else (weights.output[0], output_bias)
    return weights._replace(layers=layers, output=output)


# The small-batch step serves at most this many decoding rows (sentences × beams); a larger
# batch takes the large-batch step until compaction brings it to this many.
SMALL_BATCH_ROWS = 16
# The small-batch step takes a tied output layer's logits from this many products, each by a
# slice of the embedding's rows.
OUTPUT_SLICES = 16


def output_slice_sizes(vocab: int) -> list[int]:
    """The rows of each of the small-batch step's ``OUTPUT_SLICES`` embedding
    slices (fewer for a vocabulary that small), as even as they go."""
    slices = min(OUTPUT_SLICES, vocab)
    return [vocab // slices + (i < vocab % slices) for i in range(slices)]


# A small-batch step whose weights are constants (``decoding.ConstantSteps``) runs each product
# as this many splits (``decoding_step``'s ``splits``).
STEP_SPLITS = 2


def _splits_fit(config, splits: int) -> bool:
    """Whether every product of the step has at least ``splits`` columns or rows to share."""
    return splits <= min(config.d_model, config.d_ff)


def step_splits(config) -> int:
    """The splits a small-batch step of a model of ``config`` runs by default.

    Args:
        config: a ``TransformerConfig``.

    Returns:
        ``STEP_SPLITS`` where ``d_model`` and ``d_ff`` have that many units
        to share, else 1.

    Example:
        >>> from keras_transformer import TransformerConfig
        >>> step_splits(TransformerConfig.from_preset("tiny"))
        2
    """
    return STEP_SPLITS if _splits_fit(config, STEP_SPLITS) else 1


# A step in splits takes its output layer's product, its largest by far (d_model × vocabulary),
# as this many splits of its columns.
OUTPUT_SPLITS = 4


# A layer's products split by their columns (the splits' outputs joined, or, for the inner units,
# each split's fed to its split of the outer product's rows); the others, by their rows.
_COLUMN_PRODUCTS = ("self_qkv", "cross_query", "inner")


def _split_pair(pair: tuple, splits: int, axis: int, split_bias: bool = False) -> list:
    """``pair`` (a NumPy kernel, its ``UnfusedBias`` or ``None``) as ``splits``
    ``(kernel, bias)`` splits of the kernel's columns (``axis=1``) or rows
    (``axis=0``), as even as they go. The bias is the first share's alone,
    added once after the splits, or with ``split_bias`` shared by its columns
    too (each split adds its own)."""
    kernel, bias = pair
    kernels = [np.ascontiguousarray(part) for part in np.array_split(kernel, splits, axis=axis)]
    if split_bias and bias is not None:
        return list(
            zip(
                kernels,
                [UnfusedBias(part) for part in np.array_split(bias.negated, splits, axis=1)],
            )
        )
    return list(zip(kernels, [bias] + [None] * (splits - 1)))


def _split_layer(layer: LayerWeights, splits: int) -> tuple:
    """``layer``'s weights (NumPy arrays, biases ``UnfusedBias``) as ``splits``
    ``LayerWeights``, each a split of every product, as even as they go:
    of the columns of the self-attention's query, key and value kernels
    side by side, of the cross-attention's query kernel and of the inner
    kernel (with its bias: each split's inner units go through the
    activation), and of the rows of the attentions' output kernels and of
    the outer kernel. The splits' outputs of a product are joined (columns)
    or added (rows): its bias goes in once, after them, and split 0 keeps
    it. One split: ``(layer,)``, whatever its weights are."""
    if splits == 1:
        return (layer,)
    split = {
        name: _split_pair(
            getattr(layer, name),
            splits,
            axis=1 if name in _COLUMN_PRODUCTS else 0,
            split_bias=name == "inner",
        )
        for name in STEP_PRODUCTS
    }
    return tuple(
        layer._replace(**{name: split[name][j] for name in STEP_PRODUCTS}) for j in range(splits)
    )


def _output_parts(output: tuple, splits: int) -> tuple:
    """The output layer's ``(kernel, bias)`` (NumPy, bias ``UnfusedBias``) as
    ``OUTPUT_SPLITS`` splits of its columns for a step of ``splits`` > 1, as
    even as they go (any vocabulary size), the bias kept by the first: the
    step adds it to the joined logits. One part, ``(output,)``, for one
    split or a tied layer (kernel ``None``)."""
    if output[0] is None or splits == 1:
        return (output,)
    return tuple(_split_pair(output, min(OUTPUT_SPLITS, output[0].shape[1]), axis=1))


# The small-batch step's products: 1×1 convolutions or plain matrix products (``decoding_step``'s
# ``products``).
PRODUCT_OPS = ("conv", "matmul")


def onednn_rewrites() -> bool:
    """Whether TensorFlow's oneDNN graph rewrites are on in this process.

    They are by default on x86 CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI
    or AMX units, else off; ``TF_ENABLE_ONEDNN_OPTS=0`` or ``1`` decides
    instead.

    Returns:
        ``True`` where they are on; ``False`` also for a TensorFlow build
        that does not say.
    """
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # not TensorFlow's own build: no oneDNN rewrites known
        return False
    return bool(_pywrap_util_port.IsMklEnabled())


def step_products() -> str:
    """The small-batch step's products that suit this process's TensorFlow.

    Returns:
        ``"matmul"`` where oneDNN's rewrites are on (``onednn_rewrites``),
        else ``"conv"`` (``docs/kernels.md`` says why).
    """
    return "matmul" if onednn_rewrites() else "conv"


def decoding_step(
    model,
    small_batch: bool = False,
    weights: StepWeights | None = None,
    output_kernel: tf.Tensor | None = None,
    splits: int = 1,
    products: str | None = None,
) -> Callable:
    """``model.decode`` for one new token a row against a growing cache, as one step function.

    Call it where the decoder sets up its loop (inside the same
    ``tf.function``): the weights are read then, once. The step computes
    ``Transformer.decode``'s logits and cache, up to the order of float sums.

    Args:
        model: a ``keras_transformer.Transformer`` that ``supported(model)``
            accepts.
        small_batch: build the small-batch step, for at most
            ``SMALL_BATCH_ROWS`` rows (it never reads ``output_kernel``);
            ``decoding.KernelChoice.steps`` builds both steps and picks one a round.
        weights: ``step_weights(model)``, to share them between steps; NumPy
            leaves (``weights.as_constants``) become graph constants. By
            default read here.
        output_kernel: for a tied output layer, ``tied_output_kernel``'s;
            without it the logits come from the embedding transposed in the
            product.
        splits: the small-batch step of NumPy weights only: each product
            runs as this many splits, and the untied output layer's as
            ``OUTPUT_SPLITS`` (1: none; ``step_splits`` gives the default).
        products: the small-batch step's products, one of ``PRODUCT_OPS``:
            ``"matmul"`` (``MatMul`` on ``[rows, width]``) or ``"conv"`` (1×1
            convolutions on ``[rows, 1, 1, width]``); by default
            ``step_products()``.

    Returns:
        ``step(token_ids [rows] int32, position [] int32, cache,
        source_padding [rows, src_len] bool) → (logits [rows, tgt_vocab]
        float32, cache)``, one new token a row at ``position`` (the cache's
        length); the cache as ``initial_cache`` makes it.

    Raises:
        ValueError: ``splits`` is below 1, or above 1 for a large-batch step,
            for weights that are not NumPy arrays or for more splits than
            ``d_model`` or ``d_ff`` has units; ``products`` is not one of
            ``PRODUCT_OPS``.

    Example:
        >>> import keras_transformer as kt
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=1))
        >>> model.build()
        >>> weights = step_weights(model)
        >>> memory = model.encode(tf.constant([[5, 6, 3]]))
        >>> cache = initial_cache(model, memory, weights)
        >>> step = decoding_step(model, small_batch=True, weights=weights)
        >>> logits, cache = step(tf.constant([2]), tf.constant(0), cache, tf.constant([[True] * 3]))
        >>> logits.shape[0], cache[0]["self"]["key"].shape[2]
        (1, 1)
    """
    weights = step_weights(model) if weights is None else weights
    config = model.config
    dtype = model.compute_dtype
    heads = config.num_heads
    d_model = config.d_model
    depth = d_model // heads
    scale = model.target_embedding.scale
    norm_first = model.decoder.norm_first
    activation = model.decoder.layer_stack[0].feed_forward.inner_dense.activation
    relu = activation is keras.activations.relu
    masked = masked_score_value(tf.float32)
    vocab = weights.embeddings.shape[0]

    if splits < 1:
        raise ValueError(f"splits must be >= 1 (1: no splits), got {splits}.")
    if products is None:
        products = step_products()
    if products not in PRODUCT_OPS:
        raise ValueError(f"products must be one of {', '.join(PRODUCT_OPS)}, got {products!r}.")
    nhwc = (
        small_batch and products == "conv"
    )  # rows as [rows, 1, 1, width], the convolutions' layout
    if splits > 1:
        leaves = tf.nest.flatten((weights.layers, weights.output))
        if (
            not small_batch
            or not _splits_fit(config, splits)
            or any(isinstance(leaf, (tf.Tensor, tf.Variable)) for leaf in leaves)
        ):
            raise ValueError(
                f"splits={splits} needs the small-batch step (small_batch=True) of NumPy weights "
                f"(weights.as_constants) and d_model ({d_model}) and d_ff ({config.d_ff}) of at "
                "least as many units; pass splits=1 otherwise."
            )

    def split(x):  # [rows, heads·depth] → [rows, heads, 1, depth]: one position, no transpose
        return tf.reshape(x, [-1, heads, 1, depth])

    # The small-batch step of convolutions keeps its rows as [rows, 1, 1, width], their layout: no
    # reshape around each product.
    def as_rows(
        x, width
    ):  # [rows, width] (convolutions: [rows, 1, 1, width]) from any [rows, ..., width]
        return tf.reshape(x, [-1, 1, 1, width] if nhwc else [-1, width])

    def attend(q, key, value, bias=None, has_key=None):  # q: [rows, heads, 1, depth]
        return as_rows(attend_heads(q, key, value, bias, has_key), d_model)

    def column_product(h, shares, activation=None):
        """One product from its splits' ``shares`` of its columns.

        Each share is a ``(kernel, bias)``, the bias in the first only: the splits' outputs
        joined, then the bias; one share: the plain product."""
        if len(shares) == 1:
            return product(h, shares[0], activation)
        joined = tf.concat([product(h, (kernel, None)) for kernel, _ in shares], axis=-1)
        return bias_and_activation(joined, shares[0][1], activation)

    def output_product(
        h, weights
    ):  # a sublayer's last product: its bias goes to the residual (small-batch step)
        return product(h, (weights[0], None) if small_batch else weights)

    def row_products(h, shares):
        """A sublayer's last product from its splits' ``shares`` of its rows, each by its share of
        ``h``'s columns: the splits' outputs, which the residual adds."""
        parts = (
            [h]
            if len(shares) == 1
            else tf.split(h, [kernel.shape[0] for kernel, _ in shares], axis=-1)
        )
        return [output_product(part, share) for part, share in zip(parts, shares)]

    def norm(x, n: Norm):
        return inference_norm(x, n, dtype)

    def residual(x, sublayer, n: Norm, output):
        """The sublayer's residual block; ``sublayer(h)`` gives its splits' outputs.

        The small-batch step adds the output product's bias (``output``: its ``(kernel, bias)``)
        to the residual instead, which is ready before the products, and adds the splits and the
        residual by one node."""
        bias = output[1] if small_batch else None
        return inference_residual(
            x, sublayer, n, norm_first, dtype, None if bias is None else x - bias.negated
        )

    inner_activation = (
        tf.nn.relu if relu else activation
    )  # tf.nn.relu: grappler fuses it into the product
    if small_batch:
        weights = _with_unfused_biases(weights)
    # Each layer as its splits, the output layer as its parts (one of each without splits).
    layers = tuple(_split_layer(layer, splits) for layer in weights.layers)
    output = _output_parts(weights.output, splits)
    # The step reads its weights, and makes its constants, itself: a tensor made out here and used
    # in a
    # loop's body would be one of the loop's variables. It reads only what it uses.
    to_read = weights._replace(layers=layers, output=output, cross_key_value=(), unfused_biases=())

    product = project_pointwise if nhwc else project_rows

    def step(token_ids, position, cache, source_padding):
        weights = read_weights(to_read)
        x = as_rows(
            tf.gather(weights.embeddings, token_ids) * tf.constant(scale, dtype)
            + tf.gather(weights.positions, position),
            d_model,
        )
        real = tf.cast(source_padding, tf.bool)[
            :, tf.newaxis, tf.newaxis, :
        ]  # [rows, 1, 1, src_len]
        source_bias = (
            1.0 - tf.cast(real, tf.float32)
        ) * masked  # 0 (-0.0) or masked: a select's values
        has_key = tf.reduce_any(real, axis=-1, keepdims=True)
        new_cache = []
        for layer_splits, layer_cache in zip(weights.layers, cache):
            layer = layer_splits[0]  # its norms
            self_cache = {}

            def splits_of(name):  # every split's share of one of the layer's products
                return [getattr(split, name) for split in layer_splits]

            # The sublayers run at once, in this iteration: no late binding to guard against.
            def self_attention(h):
                # [rows, 3·heads·depth] → [rows, 3·heads, 1, depth]: the query's heads, the key's,
                # the value's.
                qkv = tf.reshape(
                    column_product(h, splits_of("self_qkv")), [-1, 3 * heads, 1, depth]
                )
                q, k, v = tf.split(qkv, 3, axis=1)
                self_cache["key"] = tf.concat([layer_cache["self"]["key"], k], axis=2)
                self_cache["value"] = tf.concat([layer_cache["self"]["value"], v], axis=2)
                return row_products(
                    attend(q, self_cache["key"], self_cache["value"]), splits_of("self_output")
                )

            def cross_attention(h):
                cross = layer_cache["cross"]
                q = split(column_product(h, splits_of("cross_query")))
                return row_products(
                    attend(q, cross["key"], cross["value"], source_bias, has_key),
                    splits_of("cross_output"),
                )

            def ffn(h):  # each split's inner units to its rows of the outer kernel
                inner = [product(h, split.inner, inner_activation) for split in layer_splits]
                return [
                    output_product(part, split.outer) for part, split in zip(inner, layer_splits)
                ]

            x = residual(x, self_attention, layer.self_norm, layer.self_output)
            x = residual(x, cross_attention, layer.cross_norm, layer.cross_output)
            x = residual(x, ffn, layer.ffn_norm, layer.outer)
            new_cache.append({"self": self_cache, "cross": layer_cache["cross"]})
        if weights.final_norm is not None:
            x = norm(x, weights.final_norm)
        if weights.output[0][0] is not None:
            logits = column_product(x, weights.output)
            logits = tf.reshape(logits, [-1, vocab]) if nhwc else logits
        elif small_batch:
            x = tf.reshape(x, [-1, d_model]) if nhwc else x
            output_slices = tf.split(
                weights.embeddings, output_slice_sizes(vocab)
            )  # views of its rows
            logits = tf.concat(
                [tf.matmul(x, part, transpose_b=True) for part in output_slices], axis=1
            )
        elif output_kernel is not None:
            logits = tf.matmul(x, output_kernel)
            logits.set_shape([None, vocab])
        else:
            logits = tf.matmul(x, weights.embeddings, transpose_b=True)
        logits = tf.cast(logits, tf.float32)
        if weights.final_logits_bias is not None:
            logits = logits + weights.final_logits_bias
        return logits, new_cache

    return step
