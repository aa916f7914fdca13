"""The small-batch step's layout: its row limit, splits, products and output slices.

The small-batch step (``decoding_step(small_batch=True)``) serves at most
``SMALL_BATCH_ROWS`` decoding rows. It adds its biases unfused
(``with_unfused_biases``), takes a tied output layer's logits from
``OUTPUT_SLICES`` slices of the embedding, runs its products as 1×1
convolutions or ``MatMul`` (``PRODUCT_OPS``, ``step_products``) and, with
constant weights, each product as splits (``STEP_SPLITS``, ``split_layer``,
``output_parts``). The kernels package's glossary defines these terms;
``docs/kernels.md`` says why.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_transformer.kernels.decoder_weights import LayerWeights, StepWeights
from keras_transformer.kernels.projection import UnfusedBias
from keras_transformer.kernels.weights import STEP_PRODUCTS

# The small-batch step serves at most this many decoding rows (sentences × beams); a larger
# batch takes the large-batch step until compaction brings it to this many.
SMALL_BATCH_ROWS = 16
# The small-batch step takes a tied output layer's logits from this many products, each by a
# slice of the embedding's rows.
OUTPUT_SLICES = 16


def output_slice_sizes(vocab: int) -> list[int]:
    """The rows of each of the small-batch step's embedding slices, as even as they go.

    Args:
        vocab: the target vocabulary size.

    Returns:
        ``OUTPUT_SLICES`` row counts (fewer for a vocabulary that small) that sum to
        ``vocab``.

    Example:
        >>> output_slice_sizes(35)[:3], len(output_slice_sizes(35))
        ([3, 3, 3], 16)
    """
    slices = min(OUTPUT_SLICES, vocab)
    return [vocab // slices + (i < vocab % slices) for i in range(slices)]


def with_unfused_biases(weights: StepWeights) -> StepWeights:
    """The small-batch step's weights: ``weights`` with the products' biases unfused.

    Args:
        weights: the step's ``StepWeights``.

    Returns:
        ``weights`` with each product's bias the ``projection.UnfusedBias`` of
        ``weights.unfused_biases`` (a tied output layer, which has none, as it is).
    """
    layer_biases, output_bias = weights.unfused_biases
    layers = tuple(
        layer._replace(
            **{name: (getattr(layer, name)[0], bias) for name, bias in zip(STEP_PRODUCTS, biases)}
        )
        for layer, biases in zip(weights.layers, layer_biases)
    )
    output = weights.output if weights.output[0] is None else (weights.output[0], output_bias)
    return weights._replace(layers=layers, output=output)


# A small-batch step whose weights are constants (``decoding.ConstantSteps``) runs each product
# as this many splits (``decoding_step``'s ``splits``).
STEP_SPLITS = 2


def splits_fit(config, splits: int) -> bool:
    """Whether every product of the step has at least ``splits`` columns or rows to share.

    Args:
        config: a ``TransformerConfig``.
        splits: the splits a product would run as.

    Returns:
        ``True`` where ``d_model`` and ``d_ff`` have at least ``splits`` units.
    """
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
    return STEP_SPLITS if splits_fit(config, STEP_SPLITS) else 1


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


def split_layer(layer: LayerWeights, splits: int) -> tuple:
    """One decoder layer's weights as ``splits`` ``LayerWeights``, each a split of every product.

    The splits are as even as they go: of the columns of the
    self-attention's query, key and value kernels side by side, of the
    cross-attention's query kernel and of the inner kernel (with its bias:
    each split's inner units go through the activation), and of the rows of
    the attentions' output kernels and of the outer kernel. The splits'
    outputs of a product are joined (columns) or added (rows): its bias goes
    in once, after them, and split 0 keeps it.

    Args:
        layer: the layer's weights (NumPy arrays, biases ``UnfusedBias``).
        splits: how many splits; 1: ``(layer,)``, whatever its weights are.

    Returns:
        A tuple of ``splits`` ``LayerWeights``.
    """
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


def output_parts(output: tuple, splits: int) -> tuple:
    """The output layer's ``(kernel, bias)`` as the parts a step of ``splits`` runs.

    Args:
        output: the output layer's ``(kernel, bias)`` (NumPy, bias
            ``UnfusedBias``), kernel ``None`` for a tied layer.
        splits: the step's splits.

    Returns:
        For ``splits`` > 1, ``OUTPUT_SPLITS`` splits of the kernel's columns,
        as even as they go (any vocabulary size), the bias kept by the first:
        the step adds it to the joined logits. One part, ``(output,)``, for one
        split or a tied layer.
    """
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
