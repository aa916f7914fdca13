"""One decoding step of ``Transformer.decode`` in few graph nodes, for a growing cache.

``decoding_step(model)`` returns a step of plain TensorFlow ops that computes
what ``Transformer.decode`` computes for one new token a row against a growing
cache (the tests compare the two), with the model's weights read once, before
the decoding loop (``decoder_weights.step_weights``), and every product on its
rows as they are. ``initial_cache`` makes the cache it starts from, every
layer's cross-attention keys and values by one product. Two steps serve a
decoder: the large-batch step for any number of rows, and the small-batch step
(``small_batch=True``) for at most ``SMALL_BATCH_ROWS`` rows, laid out by
``small_batch``. The kernels package's glossary defines these terms;
``docs/kernels.md`` says how the step is built and why. The ops are portable
(CPU, GPU, TPU, XLA); static-shape decoding (a fixed-size cache written in
place) keeps ``Transformer.decode``.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from keras_transformer.kernels.attention import attend as attend_heads
from keras_transformer.kernels.decoder_weights import StepWeights, step_weights
from keras_transformer.kernels.layer_norm import inference_norm, inference_residual
from keras_transformer.kernels.projection import (
    bias_and_activation,
    permute,
    project_pointwise,
    project_rows,
)
from keras_transformer.kernels.small_batch import (
    PRODUCT_OPS,
    output_parts,
    output_slice_sizes,
    split_layer,
    splits_fit,
    step_products,
    with_unfused_biases,
)
from keras_transformer.kernels.weights import Norm, read_weights
from keras_transformer.numerics import masked_score_value


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
            or not splits_fit(config, splits)
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
        weights = with_unfused_biases(weights)
    # Each layer as its splits, the output layer as its parts (one of each without splits).
    layers = tuple(split_layer(layer, splits) for layer in weights.layers)
    output = output_parts(weights.output, splits)
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
