"""One decoding step as few graph nodes as possible: the model's weights read once,
before the decoding loop, and every product on its rows as they are (``[rows,
d_model]``; ``[rows, 1, 1, d_model]`` in the few-rows step), with no reshape around it.

``Transformer.decode`` runs the paper's layers, which read their variables,
scale the query kernel, reshape to rank 2 and back and build masks at every
call. In a ``tf.while_loop`` that runs once a token, and at a few rows a step
is mostly executor overhead: the nodes, not the arithmetic, set the time.
``decoding_step(model)`` does that work once, outside the loop, and returns a
step of plain TensorFlow ops that computes what ``Transformer.decode`` computes
for one new token against a growing cache (the tests compare the two):

* the weights reach the step as variables where they can
  (``weights.model_weight``, ``FrozenWeights.unread``) and are read inside
  it, or as NumPy arrays that it makes constants of (``weights.as_constants``,
  ``decoding.ConstantSteps``), and its other constants are made inside it:
  whatever tensor a loop's body captures from outside becomes a loop
  variable, passed from step to step by three control-flow nodes;

* the self-attention query, key and value come from one product with the
  three kernels side by side (the query's ``1/√d_k`` folded in, as the layer
  folds it);
* heads split and merge by a reshape of a single position: no transposes;
* attention by ``kernels.attention.attend``: in float32, batched products
  and a ``log_softmax`` that TensorFlow's oneDNN build leaves to Eigen;
* no self-attention mask (a new token may attend to every cached one), and the
  source's padding becomes one additive bias a step, shared by all layers;
* LayerNorm, softmax and the logits in float32 as in the layers, so mixed
  precision gives the same values too.

The cache has ``Transformer.initial_cache``'s layout (self-attention keys and
values ``[rows, heads, len, depth]``, growing by one position a step), so
decoders reorder and shrink it as before; ``initial_cache`` projects every
layer's cross-attention keys and values with one product. A second step, for
at most ``FEW_ROWS`` rows, runs its products as 1×1 convolutions
(``projection.project_few_rows``) on rows kept as ``[rows, 1, 1, width]``
between them, adds their biases apart from them (a sublayer's last bias to
its residual, which is ready before the products) and takes
a tied output layer's logits from slices of the embedding, transposed inside
the products, or from a transposed copy made once (see ``decoding_step``);
with its weights as constants it may run each sublayer as independent lanes,
a share of the heads or inner units each, that the executor runs side by side
(``lanes``). The ops are portable (CPU, GPU, TPU, XLA); static-shape decoding
(a fixed-size cache written in place) keeps ``Transformer.decode``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.kernels.attention import attend as attend_heads
from keras_transformer.kernels.layer_norm import inference_norm, inference_residual
from keras_transformer.kernels.projection import ApartBias, permute, project_few_rows, project_rows
from keras_transformer.kernels.weights import (STEP_PRODUCTS, DerivedWeights, Norm, apart_biases, dense_weights,
                                               fused_qkv, model_weight, norm_weights, packed_cross_key_value,
                                               read_weights, scaled_query)
from keras_transformer.numerics import masked_score_value


class LayerWeights(NamedTuple):
    """One decoder layer's weights in the compute dtype (norms in float32):
    variables or tensors (see ``StepWeights``)."""

    self_qkv: tuple        # ([d_model, 3·d_model] kernel, [3·d_model] bias | None): query scaled by 1/√d_k
    self_output: tuple     # ([d_model, d_model], [d_model] | None)
    self_norm: Norm
    cross_query: tuple     # ([d_model, d_model], [d_model] | None): scaled by 1/√d_k
    cross_output: tuple
    cross_norm: Norm
    inner: tuple           # ([d_model, d_ff], [d_ff] | None)
    outer: tuple           # ([d_ff, d_model], [d_model] | None)
    ffn_norm: Norm


class StepWeights(NamedTuple):
    """Everything a step reads. A leaf is a ``tf.Variable`` where the step
    can read it as it is (the step reads it at every step, inside the loop),
    else a tensor made once, before the loop; or, all of them, NumPy arrays
    (``weights.as_constants``) that the step makes constants of."""

    embeddings: tf.Tensor        # [tgt_vocab, d_model] compute dtype
    positions: np.ndarray        # [max_length, d_model] compute dtype: made a constant inside the step
    layers: tuple                # LayerWeights per decoder layer
    cross_key_value: tuple       # ([d_model, 2·layers·d_model], bias | None): every layer's key, then value
    final_norm: Norm | None      # pre-LN stacks only
    output: tuple                # ([d_model, tgt_vocab] kernel, [tgt_vocab] bias | None) compute dtype;
    #                              kernel None: tied to ``embeddings`` (see ``tied_output_kernel``)
    final_logits_bias: tf.Tensor | None  # [tgt_vocab] float32, added to the float32 logits
    apart_biases: tuple          # weights.apart_biases: the few-rows step's biases (projection.ApartBias)


def supported(model) -> bool:
    """Whether ``decoding_step`` reproduces ``model.decode``: no quantized
    projection, no LayerNorm that Keras' own path computes (``kernel_covers``:
    ``Transformer.decode`` runs them on ``[rows, 1, d_model]``), no learned
    positions."""
    decoder = model.decoder
    denses, norms = [], []
    for layer in decoder.layer_stack:
        for attention in (layer.self_attention, layer.cross_attention):
            denses += [attention.query_dense, attention.key_dense, attention.value_dense, attention.output_dense]
        denses += [layer.feed_forward.inner_dense, layer.feed_forward.outer_dense]
        norms += [layer.self_attention_norm, layer.cross_attention_norm, layer.feed_forward_norm]
    if model.output_projection is not None:
        denses.append(model.output_projection)
    if decoder.final_norm is not None:
        norms.append(decoder.final_norm)
    return (all(dense.quantization_mode is None for dense in denses)
            and all(norm.kernel_covers(3) for norm in norms) and not model.target_embedding.learned_positions)


def step_weights(model, derived: DerivedWeights | None = None) -> StepWeights:
    """The weights of ``model``'s decoder, output projection and target
    embedding: the model's variables where the step uses them as they are,
    and their products (cast, scaled, concatenated, negated) made once here.
    ``derived``: those products made before (``weights.FrozenWeights``:
    variables too); by default made here, as tensors."""
    dtype = model.compute_dtype
    stack = model.decoder.layer_stack
    if derived is None:
        qkv = [fused_qkv(layer.self_attention, dtype) for layer in stack]
        cross_query = [scaled_query(layer.cross_attention, dtype) for layer in stack]
        cross_key_value = packed_cross_key_value(model.decoder, dtype)
        negated = apart_biases(model, qkv, cross_query)
    else:
        qkv, cross_query, cross_key_value = derived.decoder_qkv, derived.cross_query, derived.cross_key_value
        negated = derived.apart_biases
    layers = tuple(LayerWeights(
        self_qkv=qkv[i],
        self_output=dense_weights(layer.self_attention.output_dense, dtype),
        self_norm=norm_weights(layer.self_attention_norm),
        cross_query=cross_query[i],
        cross_output=dense_weights(layer.cross_attention.output_dense, dtype),
        cross_norm=norm_weights(layer.cross_attention_norm),
        inner=dense_weights(layer.feed_forward.inner_dense, dtype),
        outer=dense_weights(layer.feed_forward.outer_dense, dtype),
        ffn_norm=norm_weights(layer.feed_forward_norm),
    ) for i, layer in enumerate(stack))
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
        final_norm=None if model.decoder.final_norm is None else norm_weights(model.decoder.final_norm),
        output=output,
        final_logits_bias=(None if model.final_logits_bias is None
                           else model_weight(model.final_logits_bias, tf.float32)),
        apart_biases=negated,
    )


def initial_cache(model, memory, weights: StepWeights) -> list:
    """``Transformer.initial_cache(memory)`` (a growing cache) with every
    layer's cross-attention keys and values from one product and one
    permutation, instead of a product and a transpose for each."""
    config = model.config
    heads, depth, layers = config.num_heads, config.d_model // config.num_heads, len(weights.layers)
    rows, length = tf.shape(memory)[0], tf.shape(memory)[1]
    projected = project_rows(tf.reshape(memory, [-1, config.d_model]), weights.cross_key_value)
    projected = tf.reshape(projected, [rows, length, 2 * layers, heads, depth])
    keys_values = tf.unstack(permute(projected, [2, 0, 3, 1, 4]))  # 2·layers × [rows, heads, len, depth]
    empty = tf.zeros([rows, heads, 0, depth], memory.dtype)
    return [{"self": {"key": empty, "value": empty},
             "cross": {"key": keys_values[2 * i], "value": keys_values[2 * i + 1]}} for i in range(layers)]


def tied_output_kernel(weights: StepWeights, rows) -> tf.Tensor | None:
    """The tied output kernel ``[d_model, tgt_vocab]`` (the embedding,
    transposed) for the steps over more than ``FEW_ROWS`` rows, made once,
    before the loop, and only when the batch has that many ``rows`` (an empty
    ``[d_model, 0]`` otherwise: no step reads it then, since rows only
    leave). Steps of few rows multiply by slices of the embedding, transposed
    in the products, instead: faster at a few rows, while the copy costs
    about a millisecond a call for an 8,000-piece vocabulary
    (``benchmarks/README.md``); ``None`` for an untied output layer."""
    if weights.output[0] is not None:
        return None
    embeddings = tf.convert_to_tensor(weights.embeddings)

    def transposed():
        return tf.transpose(embeddings)

    def empty():
        return tf.zeros([embeddings.shape[1], 0], embeddings.dtype)

    if isinstance(rows, int):  # known now: no branch in the graph
        return transposed() if rows > FEW_ROWS else empty()
    return tf.cond(rows > FEW_ROWS, transposed, empty)


def _unfused_biases(weights: StepWeights) -> StepWeights:
    """``weights`` with the products' biases apart (``projection.ApartBias``,
    from ``weights.apart_biases``): a few-rows step's products by oneDNN's
    plain kernel, faster at a row or a few than its product with the bias
    (and ReLU) fused in."""
    layer_biases, output_bias = weights.apart_biases
    layers = tuple(layer._replace(**{name: (getattr(layer, name)[0], bias)
                                     for name, bias in zip(STEP_PRODUCTS, biases)})
                   for layer, biases in zip(weights.layers, layer_biases))
    output = weights.output if weights.output[0] is None else (weights.output[0], output_bias)
    return weights._replace(layers=layers, output=output)


# At most this many cache rows, a step with a tied output layer takes the logits from the
# embedding transposed in the product (``few_rows``); above it, from ``tied_output_kernel``.
FEW_ROWS = 16
# ... as this many products, each with a slice of the embedding's rows (see ``decoding_step``).
OUTPUT_SLICES = 16


def output_slice_sizes(vocab: int) -> list[int]:
    """The rows of each of the few-rows step's ``OUTPUT_SLICES`` embedding
    slices (fewer for a vocabulary that small), as even as they go."""
    slices = min(OUTPUT_SLICES, vocab)
    return [vocab // slices + (i < vocab % slices) for i in range(slices)]


# A few-rows step whose weights are constants (``decoding.ConstantSteps``) runs every sublayer and
# the output layer as this many lanes, each with its share of the heads or of the inner units
# (``decoding_step``'s ``lanes``).
STEP_LANES = 2


def _lanes_divide(config, lanes: int) -> bool:
    """Whether the model's heads and inner units divide into ``lanes`` lanes."""
    return config.num_heads % lanes == 0 and config.d_ff % lanes == 0


def step_lanes(config) -> int:
    """``STEP_LANES`` where the model's heads and inner units divide into that many lanes, else 1."""
    return STEP_LANES if _lanes_divide(config, STEP_LANES) else 1


def _lane_layer(layer: LayerWeights, lanes: int) -> tuple:
    """``layer``'s weights (NumPy arrays, biases ``ApartBias``) as ``lanes``
    ``LayerWeights``: lane ``j`` takes the ``j``-th share of the heads of the
    query, key and value kernels' columns and of the output kernels' rows,
    and of the inner units (the first kernel's columns, the second's rows).
    A product that sums a lane's share of the rows keeps its bias in lane 0
    only: the lanes' outputs are added, and the bias once (the step adds
    it to the residual). One lane: ``(layer,)``, whatever its weights are."""
    if lanes == 1:
        return (layer,)

    def columns(pair, blocks, j):  # lane j's share of each of `blocks` side-by-side column blocks
        def take(a):
            return np.ascontiguousarray(a.reshape(a.shape[0], blocks, lanes, -1)[:, :, j].reshape(a.shape[0], -1))

        kernel, bias = pair
        return take(kernel), (None if bias is None else ApartBias(take(bias.negated)))

    def rows(pair, j):  # lane j's share of the rows; the bias once
        kernel, bias = pair
        size = kernel.shape[0] // lanes
        return np.ascontiguousarray(kernel[j * size:(j + 1) * size]), (bias if j == 0 else None)

    return tuple(layer._replace(
        self_qkv=columns(layer.self_qkv, 3, j), self_output=rows(layer.self_output, j),
        cross_query=columns(layer.cross_query, 1, j), cross_output=rows(layer.cross_output, j),
        inner=columns(layer.inner, 1, j), outer=rows(layer.outer, j)) for j in range(lanes))


def _output_parts(output: tuple, lanes: int) -> tuple:
    """The output layer's ``(kernel, bias)`` (NumPy, bias ``ApartBias``) as
    ``lanes`` parts of its columns, as even as they go (any vocabulary
    size); one part, ``(output,)``, for one lane or a tied layer (kernel
    ``None``)."""
    kernel, bias = output
    if kernel is None or lanes == 1:
        return (output,)
    biases = ([None] * lanes if bias is None
              else [ApartBias(part) for part in np.array_split(bias.negated, lanes, axis=1)])
    return tuple((np.ascontiguousarray(part), part_bias)
                 for part, part_bias in zip(np.array_split(kernel, lanes, axis=1), biases))


def decoding_step(model, few_rows: bool = False, weights: StepWeights | None = None,
                  output_kernel: tf.Tensor | None = None, lanes: int = 1) -> Callable:
    """``step(token_ids [rows], position [], cache, source_padding [rows, src_len])
    → (logits [rows, tgt_vocab] float32, cache)``: ``model.decode`` for one new
    token per row at ``position`` (the cache's length), against a growing cache.

    Call it where the decoder sets up its loop (inside the same
    ``tf.function``): the weights are read then, once (or pass ``weights``,
    ``step_weights(model)``, to share them between steps). ``supported(model)``
    says whether the model's settings allow it. ``output_kernel``: for a
    tied output layer, ``tied_output_kernel``'s; without it the logits come
    from the embedding transposed in the product.

    ``few_rows=True``: the step for at most ``FEW_ROWS`` rows, which never
    reads ``output_kernel`` (``decoding.decoding_steps`` builds both steps
    and picks one a round). Its products are 1×1 convolutions
    (``projection.project_few_rows``: at one row TensorFlow's CPU ``MatMul``
    hands the product to its thread pool, which costs more than the
    product) and add their biases after the plain product rather than
    fused into it (``projection.ApartBias``: with ``MatMul``, faster at a few
    rows and no slower at ``FEW_ROWS``; with the convolutions, an export
    whose biases were fused decoded single sentences no faster). A tied
    output layer's logits come from ``OUTPUT_SLICES`` products, one for each
    slice of the embedding's rows (slices of the first axis share the
    embedding's memory), concatenated: the same values. At a few rows the output product does little more than
    read the embedding; TensorFlow's oneDNN build runs a product of a
    slice's size on one thread, and the executor runs the slices side by
    side, where it splits the whole product less well: a little faster at
    one row, much faster at a few (``python -m benchmarks.inference_kernels``).
    A product by the embedding transposed once, in memory, beats both: a
    step whose weights are constants (``decoding.ConstantSteps``) takes its
    tied logits so, handed the transposed embedding as an untied output
    kernel (``weights.output``).

    ``lanes`` (the few-rows step of NumPy weights only, see ``STEP_LANES``):
    each sublayer runs as that many independent lanes, one for each share
    of the heads (self- and cross-attention: the lane's query, key and value
    columns, its heads of the cache, its rows of the output kernel) or of the
    inner units, and their outputs are added; the output layer's logits come
    from as many shares of its columns. The same sums, grouped differently
    (equal up to the order of a float sum). At a row or a few, a step
    mostly reads its weights, more of them than a CPU's caches hold, and two
    threads read memory faster than one: TensorFlow's executor runs
    independent ops on its inter-op threads side by side. The lanes cost
    ops (the caches split into the lanes' heads and joined again, the
    outputs added); with one inter-op thread they run one after the other
    (``benchmarks/README.md`` has both). The weights are split once, in
    NumPy: a step that reads variables would slice them at every step.
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

    if lanes < 1:
        raise ValueError(f"lanes must be >= 1 (1: no lanes), got {lanes}.")
    if lanes > 1:
        leaves = tf.nest.flatten((weights.layers, weights.output))
        if not few_rows or not _lanes_divide(config, lanes) or any(
                isinstance(leaf, (tf.Tensor, tf.Variable)) for leaf in leaves):
            raise ValueError(f"lanes={lanes} needs the few-rows step (few_rows=True) of NumPy weights "
                             f"(weights.as_constants) and heads ({heads}) and d_ff ({config.d_ff}) that it "
                             "divides; pass lanes=1 otherwise.")
    lane_heads = heads // lanes

    def split(x):  # [rows, lane_heads·depth] → [rows, lane_heads, 1, depth]: one position, no transpose
        return tf.reshape(x, [-1, lane_heads, 1, depth])

    # The few-rows step keeps its rows as [rows, 1, 1, width], the 1×1 convolutions' layout: no
    # reshape around each product.
    def as_rows(x, width):  # [rows, width] (few rows: [rows, 1, 1, width]) from any [rows, ..., width]
        return tf.reshape(x, [-1, 1, 1, width] if few_rows else [-1, width])

    def attend(q, key, value, bias=None, has_key=None):  # q: [rows, lane_heads, 1, depth]
        return as_rows(attend_heads(q, key, value, bias, has_key), lane_heads * depth)

    def heads_of_lanes(x):  # [rows, heads, len, depth] → the lanes' [rows, lane_heads, len, depth]
        return [x] if lanes == 1 else tf.split(x, lanes, axis=1)

    def joined(parts, axis):
        return parts[0] if len(parts) == 1 else tf.concat(parts, axis=axis)

    def added(parts):
        return parts[0] if len(parts) == 1 else tf.add_n(parts)

    def norm(x, n: Norm):
        return inference_norm(x, n, dtype)

    def residual(x, sublayer, n: Norm, output):
        """The sublayer's residual block; ``sublayer(h)`` gives its lanes' outputs. The few-rows step
        adds the output product's bias (``output``: its ``(kernel, bias)``) to the residual instead, which
        is ready before the products, and adds the lanes and the residual by one node."""
        if not few_rows:
            return inference_residual(x, lambda h: added(sublayer(h)), n, norm_first, dtype)
        bias = output[1]
        skip = x if bias is None else x - bias.negated
        if norm_first:
            return added(sublayer(norm(x, n)) + [skip])
        return norm(added(sublayer(x) + [skip]), n)

    def output_product(h, weights):  # a sublayer's last product: its bias goes to the residual (few rows)
        return product(h, (weights[0], None) if few_rows else weights)

    inner_activation = tf.nn.relu if relu else activation  # tf.nn.relu: grappler fuses it into the product
    if few_rows:
        weights = _unfused_biases(weights)
    # Each layer as its lanes, the output layer as its parts (one of each without lanes).
    layers = tuple(_lane_layer(layer, lanes) for layer in weights.layers)
    output = _output_parts(weights.output, lanes)
    # The step reads its weights, and makes its constants, itself: a tensor made out here and used in a
    # loop's body would be one of the loop's variables. It reads only what it uses.
    unread = weights._replace(layers=layers, output=output, cross_key_value=(), apart_biases=())

    product = project_few_rows if few_rows else project_rows

    def step(token_ids, position, cache, source_padding):
        weights = read_weights(unread)
        x = as_rows(tf.gather(weights.embeddings, token_ids) * tf.constant(scale, dtype)
                    + tf.gather(weights.positions, position), d_model)
        real = tf.cast(source_padding, tf.bool)[:, tf.newaxis, tf.newaxis, :]  # [rows, 1, 1, src_len]
        source_bias = (1.0 - tf.cast(real, tf.float32)) * masked  # 0 (-0.0) or masked: a select's values
        has_key = tf.reduce_any(real, axis=-1, keepdims=True)
        new_cache = []
        for layer_lanes, layer_cache in zip(weights.layers, cache):
            layer = layer_lanes[0]  # its norms
            self_cache = {}

            # The sublayers run at once, in this iteration: no late binding to guard against.
            def self_attention(h):
                outputs, keys, values = [], [], []
                for lane, key, value in zip(layer_lanes, heads_of_lanes(layer_cache["self"]["key"]),
                                            heads_of_lanes(layer_cache["self"]["value"])):
                    # [rows, 3·lane_heads·depth] → [rows, 3·lane_heads, 1, depth]: the query's heads, the key's, ...
                    qkv = tf.reshape(product(h, lane.self_qkv), [-1, 3 * lane_heads, 1, depth])
                    q, k, v = tf.split(qkv, 3, axis=1)
                    keys.append(tf.concat([key, k], axis=2))
                    values.append(tf.concat([value, v], axis=2))
                    outputs.append(output_product(attend(q, keys[-1], values[-1]), lane.self_output))
                self_cache["key"], self_cache["value"] = joined(keys, 1), joined(values, 1)
                return outputs

            def cross_attention(h):
                cross = layer_cache["cross"]
                return [output_product(attend(split(product(h, lane.cross_query)), key, value, source_bias, has_key),
                                       lane.cross_output)
                        for lane, key, value in zip(layer_lanes, heads_of_lanes(cross["key"]),
                                                    heads_of_lanes(cross["value"]))]

            def ffn(h):
                return [output_product(product(h, lane.inner, inner_activation), lane.outer) for lane in layer_lanes]

            x = residual(x, self_attention, layer.self_norm, layer.self_output)
            x = residual(x, cross_attention, layer.cross_norm, layer.cross_output)
            x = residual(x, ffn, layer.ffn_norm, layer.outer)
            new_cache.append({"self": self_cache, "cross": layer_cache["cross"]})
        if weights.final_norm is not None:
            x = norm(x, weights.final_norm)
        if weights.output[0][0] is not None:
            logits = joined([product(x, part) for part in weights.output], -1)
            logits = tf.reshape(logits, [-1, vocab]) if few_rows else logits
        elif few_rows:
            x = tf.reshape(x, [-1, d_model])
            output_slices = tf.split(weights.embeddings, output_slice_sizes(vocab))  # views of its rows
            logits = tf.concat([tf.matmul(x, part, transpose_b=True) for part in output_slices], axis=1)
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
