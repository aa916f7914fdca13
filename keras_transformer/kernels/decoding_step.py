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
between them (or, where TensorFlow's oneDNN rewrites are on, plain products:
``step_products``), adds their biases apart from them (a sublayer's last bias to
its residual, which is ready before the products) and takes
a tied output layer's logits from slices of the embedding, transposed inside
the products, or from a transposed copy made once (see ``decoding_step``);
with its weights as constants it may run each product as independent lanes,
a share of its columns or rows each, that the executor runs side by side
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
from keras_transformer.kernels.projection import (
    ApartBias,
    bias_and_activation,
    permute,
    project_few_rows,
    project_rows,
)
from keras_transformer.kernels.weights import (
    STEP_PRODUCTS,
    DerivedWeights,
    Norm,
    apart_biases,
    dense_weights,
    fused_qkv,
    model_weight,
    norm_weights,
    packed_cross_key_value,
    read_weights,
    scaled_query,
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
    apart_biases: tuple  # weights.apart_biases: the few-rows step's biases (projection.ApartBias)


def supported(model) -> bool:
    """Whether ``decoding_step`` reproduces ``model.decode``: no quantized
    projection, no LayerNorm that Keras' own path computes (``kernel_covers``:
    ``Transformer.decode`` runs them on ``[rows, 1, d_model]``), no learned
    positions."""
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
        qkv, cross_query, cross_key_value = (
            derived.decoder_qkv,
            derived.cross_query,
            derived.cross_key_value,
        )
        negated = derived.apart_biases
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
    layers = tuple(
        layer._replace(
            **{name: (getattr(layer, name)[0], bias) for name, bias in zip(STEP_PRODUCTS, biases)}
        )
        for layer, biases in zip(weights.layers, layer_biases)
    )
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


# A few-rows step whose weights are constants (``decoding.ConstantSteps``) runs each product as
# this many lanes, each with a share of its columns or rows (``decoding_step``'s ``lanes``).
STEP_LANES = 2


def _lanes_fit(config, lanes: int) -> bool:
    """Whether every product of the step has at least ``lanes`` columns or rows to share."""
    return lanes <= min(config.d_model, config.d_ff)


def step_lanes(config) -> int:
    """``STEP_LANES`` where each product has that many columns or rows to share, else 1."""
    return STEP_LANES if _lanes_fit(config, STEP_LANES) else 1


# A step in lanes takes its output layer's product, its largest by far (d_model × vocabulary),
# as this many shares of its columns. On a 2-core CPU the executor ran two such shares mostly
# one after the other and four side by side: with oneDNN's products a step of one row was
# faster so, with Eigen's convolutions no slower (benchmarks/README.md).
OUTPUT_LANES = 4


# A layer's products split by their columns (the lanes' outputs joined, or, for the inner units,
# each lane's fed to its share of the outer product's rows); the others, by their rows.
_COLUMN_PRODUCTS = ("self_qkv", "cross_query", "inner")


def _shares(pair: tuple, lanes: int, axis: int, split_bias: bool = False) -> list:
    """``pair`` (a NumPy kernel, its ``ApartBias`` or ``None``) as ``lanes``
    ``(kernel, bias)`` shares of the kernel's columns (``axis=1``) or rows
    (``axis=0``), as even as they go. The bias is the first share's alone,
    added once after the lanes, or with ``split_bias`` shared by its columns
    too (each lane adds its own)."""
    kernel, bias = pair
    kernels = [np.ascontiguousarray(part) for part in np.array_split(kernel, lanes, axis=axis)]
    if split_bias and bias is not None:
        return list(
            zip(kernels, [ApartBias(part) for part in np.array_split(bias.negated, lanes, axis=1)])
        )
    return list(zip(kernels, [bias] + [None] * (lanes - 1)))


def _lane_layer(layer: LayerWeights, lanes: int) -> tuple:
    """``layer``'s weights (NumPy arrays, biases ``ApartBias``) as ``lanes``
    ``LayerWeights``, each a share of every product, as even as they go:
    of the columns of the self-attention's query, key and value kernels
    side by side, of the cross-attention's query kernel and of the inner
    kernel (with its bias: each lane's inner units go through the
    activation), and of the rows of the attentions' output kernels and of
    the outer kernel. The lanes' outputs of a product are joined (columns)
    or added (rows): its bias goes in once, after them, and lane 0 keeps
    it. One lane: ``(layer,)``, whatever its weights are."""
    if lanes == 1:
        return (layer,)
    split = {
        name: _shares(
            getattr(layer, name),
            lanes,
            axis=1 if name in _COLUMN_PRODUCTS else 0,
            split_bias=name == "inner",
        )
        for name in STEP_PRODUCTS
    }
    return tuple(
        layer._replace(**{name: split[name][j] for name in STEP_PRODUCTS}) for j in range(lanes)
    )


def _output_parts(output: tuple, lanes: int) -> tuple:
    """The output layer's ``(kernel, bias)`` (NumPy, bias ``ApartBias``) as
    ``OUTPUT_LANES`` shares of its columns for a step of ``lanes`` > 1, as
    even as they go (any vocabulary size), the bias kept by the first: the
    step adds it to the joined logits. One part, ``(output,)``, for one
    lane or a tied layer (kernel ``None``)."""
    if output[0] is None or lanes == 1:
        return (output,)
    return tuple(_shares(output, min(OUTPUT_LANES, output[0].shape[1]), axis=1))


# The few-rows step's products: 1×1 convolutions or plain matrix products (``decoding_step``'s ``products``).
PRODUCT_OPS = ("conv", "matmul")


def onednn_rewrites() -> bool:
    """Whether TensorFlow's oneDNN graph rewrites are on in this process:
    by default on x86 CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX
    units, else off; ``TF_ENABLE_ONEDNN_OPTS=0`` or ``1`` decides instead."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # not TensorFlow's own build: no oneDNN rewrites known
        return False
    return bool(_pywrap_util_port.IsMklEnabled())


def step_products() -> str:
    """The few-rows step's products that suit this process's TensorFlow:
    ``"matmul"`` where oneDNN's rewrites are on (``onednn_rewrites``), whose
    ``MatMul`` at a row or a few runs on the calling thread while its
    convolution is several times slower; ``"conv"`` where they are off,
    where Eigen's ``MatMul`` of one row goes to the thread pool and its
    ``Conv2D`` does not (``benchmarks/README.md`` has both)."""
    return "matmul" if onednn_rewrites() else "conv"


def decoding_step(
    model,
    few_rows: bool = False,
    weights: StepWeights | None = None,
    output_kernel: tf.Tensor | None = None,
    lanes: int = 1,
    products: str | None = None,
) -> Callable:
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
    and picks one a round). ``products`` (``PRODUCT_OPS``; by default
    ``step_products()``, what suits this process's TensorFlow): ``"matmul"``,
    its products are ``MatMul`` on rows ``[rows, width]``, as the other
    step's; ``"conv"``, they are 1×1 convolutions
    (``projection.project_few_rows``: at one row TensorFlow's CPU ``MatMul``
    hands the product to its thread pool, which costs more than the
    product). Either kind adds its biases after the plain product rather than
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
    each product runs as that many independent products, the lanes, each
    with a share of its kernel: of the columns of the query/key/value,
    cross-attention query and inner products, whose lanes' outputs are
    joined (the inner units' each go on to their lane's rows of the outer
    kernel), and of the rows of the attentions' output and outer products,
    whose lanes' outputs are added with the residual; the output layer's
    logits come from ``OUTPUT_LANES`` shares of its columns. Attention runs
    over all heads at once, between the products. The same sums, grouped
    differently (equal up to the order of a float sum). At a row or a few, a step
    mostly reads its weights, more of them than a CPU's caches hold, and two
    threads read memory faster than one: TensorFlow's executor runs
    independent ops on its inter-op threads side by side. The lanes cost a
    few ops (the joins and splits around the products); with one inter-op
    thread they run one after the other (``benchmarks/README.md`` has
    both). The weights are split once, in NumPy: a step that reads
    variables would slice them at every step.
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
    if products is None:
        products = step_products()
    if products not in PRODUCT_OPS:
        raise ValueError(f"products must be one of {', '.join(PRODUCT_OPS)}, got {products!r}.")
    pixels = (
        few_rows and products == "conv"
    )  # rows as [rows, 1, 1, width], the convolutions' layout
    if lanes > 1:
        leaves = tf.nest.flatten((weights.layers, weights.output))
        if (
            not few_rows
            or not _lanes_fit(config, lanes)
            or any(isinstance(leaf, (tf.Tensor, tf.Variable)) for leaf in leaves)
        ):
            raise ValueError(
                f"lanes={lanes} needs the few-rows step (few_rows=True) of NumPy weights "
                f"(weights.as_constants) and d_model ({d_model}) and d_ff ({config.d_ff}) of at "
                "least as many units; pass lanes=1 otherwise."
            )

    def split(x):  # [rows, heads·depth] → [rows, heads, 1, depth]: one position, no transpose
        return tf.reshape(x, [-1, heads, 1, depth])

    # The few-rows step of convolutions keeps its rows as [rows, 1, 1, width], their layout: no
    # reshape around each product.
    def as_rows(
        x, width
    ):  # [rows, width] (convolutions: [rows, 1, 1, width]) from any [rows, ..., width]
        return tf.reshape(x, [-1, 1, 1, width] if pixels else [-1, width])

    def attend(q, key, value, bias=None, has_key=None):  # q: [rows, heads, 1, depth]
        return as_rows(attend_heads(q, key, value, bias, has_key), d_model)

    def column_product(h, shares, activation=None):
        """One product from its lanes' ``shares`` of its columns (``(kernel, bias)``, the bias in the
        first only): the lanes' outputs joined, then the bias; one share: the plain product."""
        if len(shares) == 1:
            return product(h, shares[0], activation)
        joined = tf.concat([product(h, (kernel, None)) for kernel, _ in shares], axis=-1)
        return bias_and_activation(joined, shares[0][1], activation)

    def output_product(
        h, weights
    ):  # a sublayer's last product: its bias goes to the residual (few rows)
        return product(h, (weights[0], None) if few_rows else weights)

    def row_products(h, shares):
        """A sublayer's last product from its lanes' ``shares`` of its rows, each by its share of
        ``h``'s columns: the lanes' outputs, which the residual adds."""
        parts = (
            [h]
            if len(shares) == 1
            else tf.split(h, [kernel.shape[0] for kernel, _ in shares], axis=-1)
        )
        return [output_product(part, share) for part, share in zip(parts, shares)]

    def norm(x, n: Norm):
        return inference_norm(x, n, dtype)

    def residual(x, sublayer, n: Norm, output):
        """The sublayer's residual block; ``sublayer(h)`` gives its lanes' outputs. The few-rows step
        adds the output product's bias (``output``: its ``(kernel, bias)``) to the residual instead,
        which is ready before the products, and adds the lanes and the residual by one node."""
        bias = output[1] if few_rows else None
        return inference_residual(
            x, sublayer, n, norm_first, dtype, None if bias is None else x - bias.negated
        )

    inner_activation = (
        tf.nn.relu if relu else activation
    )  # tf.nn.relu: grappler fuses it into the product
    if few_rows:
        weights = _unfused_biases(weights)
    # Each layer as its lanes, the output layer as its parts (one of each without lanes).
    layers = tuple(_lane_layer(layer, lanes) for layer in weights.layers)
    output = _output_parts(weights.output, lanes)
    # The step reads its weights, and makes its constants, itself: a tensor made out here and used in a
    # loop's body would be one of the loop's variables. It reads only what it uses.
    unread = weights._replace(layers=layers, output=output, cross_key_value=(), apart_biases=())

    product = project_few_rows if pixels else project_rows

    def step(token_ids, position, cache, source_padding):
        weights = read_weights(unread)
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
        for layer_lanes, layer_cache in zip(weights.layers, cache):
            layer = layer_lanes[0]  # its norms
            self_cache = {}

            def lanes(name):  # every lane's share of one of the layer's products
                return [getattr(lane, name) for lane in layer_lanes]

            # The sublayers run at once, in this iteration: no late binding to guard against.
            def self_attention(h):
                # [rows, 3·heads·depth] → [rows, 3·heads, 1, depth]: the query's heads, the key's, the value's.
                qkv = tf.reshape(column_product(h, lanes("self_qkv")), [-1, 3 * heads, 1, depth])
                q, k, v = tf.split(qkv, 3, axis=1)
                self_cache["key"] = tf.concat([layer_cache["self"]["key"], k], axis=2)
                self_cache["value"] = tf.concat([layer_cache["self"]["value"], v], axis=2)
                return row_products(
                    attend(q, self_cache["key"], self_cache["value"]), lanes("self_output")
                )

            def cross_attention(h):
                cross = layer_cache["cross"]
                q = split(column_product(h, lanes("cross_query")))
                return row_products(
                    attend(q, cross["key"], cross["value"], source_bias, has_key),
                    lanes("cross_output"),
                )

            def ffn(h):  # each lane's inner units to its rows of the outer kernel
                inner = [product(h, lane.inner, inner_activation) for lane in layer_lanes]
                return [output_product(part, lane.outer) for part, lane in zip(inner, layer_lanes)]

            x = residual(x, self_attention, layer.self_norm, layer.self_output)
            x = residual(x, cross_attention, layer.cross_norm, layer.cross_output)
            x = residual(x, ffn, layer.ffn_norm, layer.outer)
            new_cache.append({"self": self_cache, "cross": layer_cache["cross"]})
        if weights.final_norm is not None:
            x = norm(x, weights.final_norm)
        if weights.output[0][0] is not None:
            logits = column_product(x, weights.output)
            logits = tf.reshape(logits, [-1, vocab]) if pixels else logits
        elif few_rows:
            x = tf.reshape(x, [-1, d_model]) if pixels else x
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
