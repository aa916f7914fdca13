"""The weights the inference kernels read, and their precomputed weights.

The precomputed weights (``PrecomputedWeights``) are the products of the
weights the kernels make before use: each attention's query, key and value
kernels side by side, the query's ``1/√d_k`` folded in, every decoder layer's
cross-attention key and value kernels packed into one, and the small-batch
step's negated biases. ``encoding.encode`` and ``decoding_step`` make them once
a call, before the decoding loop; a model whose weights no longer change (an
exported SavedModel) keeps them as variables instead (``FrozenWeights``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.kernels.projection import unfused


class Norm(NamedTuple):
    gamma: tf.Tensor  # [d_model] float32
    beta: tf.Tensor  # [d_model] float32
    epsilon: float


def model_weight(variable, dtype):
    """A model's variable (Keras or ``tf.Variable``) as the inference kernels
    take it: the ``tf.Variable`` itself where it already has ``dtype``, read
    by the op that uses it (inside a decoding loop: at every step, without the
    loop carrying it), else cast to ``dtype`` now, a tensor."""
    raw = variable if isinstance(variable, tf.Variable) else getattr(variable, "value", variable)
    if isinstance(raw, tf.Variable) and raw.dtype == dtype:
        return raw
    return tf.cast(variable, dtype)


def read_weights(structure):
    """``structure`` with each ``tf.Variable`` leaf read and each NumPy array
    made a constant (tensors); other leaves (tensors, ``None``, numbers) as
    they are. Inside a loop's body it reads, and makes its constants, at
    every step: nothing the body uses comes from outside it."""

    def read(leaf):
        if isinstance(leaf, tf.Variable):
            return tf.convert_to_tensor(leaf)
        if isinstance(leaf, np.ndarray):
            return tf.constant(leaf)
        return leaf

    return tf.nest.map_structure(read, structure)


def as_constants(structure):
    """``structure`` with each variable and tensor leaf replaced by a NumPy array of its value now.

    Weights that ``read_weights`` makes graph constants of, where they are
    used (``decoding.ConstantSteps``). Reads eagerly, also when called inside
    a ``tf.function``'s tracing.

    Args:
        structure: a nest (``tf.nest``) of weights.

    Returns:
        The same nest, variables and tensors as NumPy arrays; other leaves as they are.

    Example:
        >>> as_constants((tf.Variable([1.0, 2.0]), None))
        (array([1., 2.], dtype=float32), None)
    """
    with tf.init_scope():
        return tf.nest.map_structure(
            lambda leaf: leaf.numpy() if isinstance(leaf, (tf.Variable, tf.Tensor)) else leaf,
            structure,
        )


def dense_weights(dense, dtype, scale: float = 1.0) -> tuple:
    """``(kernel, bias | None)`` of a ``Dense`` in ``dtype``, times ``scale``:
    its variables (``model_weight``) where nothing is to be done to them."""
    if scale == 1.0:
        return model_weight(dense.kernel, dtype), None if dense.bias is None else model_weight(
            dense.bias, dtype
        )
    factor = tf.constant(scale, dtype)
    kernel = tf.cast(dense.kernel, dtype) * factor
    return kernel, None if dense.bias is None else tf.cast(dense.bias, dtype) * factor


def norm_weights(layer) -> Norm:
    return Norm(
        model_weight(layer.gamma, tf.float32),
        model_weight(layer.beta, tf.float32),
        float(layer.epsilon),
    )


def fused_qkv(attention, dtype) -> tuple:
    """An attention layer's query, key and value kernels side by side ``[d_model,
    3·d_model]`` (and biases), the query's scaled by ``1/√d_k`` as the layer
    scales it."""
    q_kernel, q_bias = dense_weights(
        attention.query_dense, dtype, 1.0 / float(attention.depth) ** 0.5
    )
    k_kernel, k_bias = dense_weights(attention.key_dense, dtype)
    v_kernel, v_bias = dense_weights(attention.value_dense, dtype)
    bias = None if q_bias is None else tf.concat([q_bias, k_bias, v_bias], axis=0)
    return tf.concat([q_kernel, k_kernel, v_kernel], axis=1), bias


def scaled_query(attention, dtype) -> tuple:
    """A cross-attention's query kernel and bias, scaled by ``1/√d_k``."""
    return dense_weights(attention.query_dense, dtype, 1.0 / float(attention.depth) ** 0.5)


def packed_cross_key_value(decoder, dtype) -> tuple:
    """Every decoder layer's cross-attention key, then value, kernel side by
    side ``[d_model, 2·layers·d_model]`` and the biases (zeros where a layer
    has none): the memory's keys and values for all layers in one product."""
    kernels, biases = [], []
    for layer in decoder.layer_stack:
        for dense in (layer.cross_attention.key_dense, layer.cross_attention.value_dense):
            kernel, bias = dense_weights(dense, dtype)
            kernels.append(kernel)
            biases.append(tf.zeros([kernel.shape[1]], dtype) if bias is None else bias)
    return tf.concat(kernels, axis=1), tf.concat(biases, axis=0)


# A decoder layer's products in a decoding step, in the order ``unfused_biases`` gives their biases.
STEP_PRODUCTS = ("self_qkv", "self_output", "cross_query", "cross_output", "inner", "outer")


def unfused_biases(model, decoder_qkv, cross_query) -> tuple:
    """What the small-batch decoding step subtracts after its products.

    Args:
        model: a ``keras_transformer.Transformer``.
        decoder_qkv, cross_query: the decoder layers' ``fused_qkv`` and
            ``scaled_query``.

    Returns:
        ``(layers, output)``: per decoder layer, the biases of its
        ``STEP_PRODUCTS`` as ``projection.UnfusedBias`` (``None`` where a
        product has none), then the output projection's (``None``: tied, or
        no bias).
    """
    dtype = model.compute_dtype

    def negated(bias):
        return unfused(None if bias is None else tf.cast(bias, dtype))

    layers = []
    for layer, (_, qkv_bias), (_, query_bias) in zip(
        model.decoder.layer_stack, decoder_qkv, cross_query
    ):
        biases = (
            qkv_bias,
            layer.self_attention.output_dense.bias,
            query_bias,
            layer.cross_attention.output_dense.bias,
            layer.feed_forward.inner_dense.bias,
            layer.feed_forward.outer_dense.bias,
        )
        layers.append(tuple(negated(bias) for bias in biases))
    output = None if model.output_projection is None else negated(model.output_projection.bias)
    return tuple(layers), output


class PrecomputedWeights(NamedTuple):
    """The products of a model's weights that the inference kernels make before use.

    They are in the model's compute dtype."""

    encoder_qkv: tuple  # per encoder layer: fused_qkv of its self-attention
    decoder_qkv: tuple  # per decoder layer: fused_qkv of its self-attention
    cross_query: tuple  # per decoder layer: scaled_query of its cross-attention
    cross_key_value: tuple  # packed_cross_key_value
    unfused_biases: (
        tuple  # unfused_biases: a small-batch decoding step's biases, projection.UnfusedBias
    )


def precomputed_weights(model) -> PrecomputedWeights:
    """``model``'s ``PrecomputedWeights``, made now from its variables.

    Args:
        model: a built ``keras_transformer.Transformer``.

    Returns:
        A ``PrecomputedWeights`` of tensors.
    """
    dtype = model.compute_dtype
    encoder, decoder = model.encoder.layer_stack, model.decoder.layer_stack
    decoder_qkv = tuple(fused_qkv(layer.self_attention, dtype) for layer in decoder)
    cross_query = tuple(scaled_query(layer.cross_attention, dtype) for layer in decoder)
    return PrecomputedWeights(
        encoder_qkv=tuple(fused_qkv(layer.self_attention, dtype) for layer in encoder),
        decoder_qkv=decoder_qkv,
        cross_query=cross_query,
        cross_key_value=packed_cross_key_value(model.decoder, dtype),
        unfused_biases=unfused_biases(model, decoder_qkv, cross_query),
    )


class FrozenWeights(tf.Module):
    """A model's precomputed weights, made once and kept as variables: what an export holds.

    For a model whose weights no longer change: an exported SavedModel holds
    them and hands its decoders the variables themselves
    (``as_variables()``), which the decoding steps read where they use them,
    instead of copying, scaling and negating weights at every call.

    Args:
        model: a built ``keras_transformer.Transformer``.
        name: the module's name.

    Example:
        >>> import keras_transformer as kt
        >>> from keras_transformer.decoding import Greedy, KernelChoice, Limits, decode
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", num_layers=2))
        >>> model.build()
        >>> frozen = FrozenWeights(model)
        >>> # kernels and biases: 2 encoder qkv, 2 decoder qkv, 2 cross queries, 1 cross k/v,
        >>> # and the 6 negated biases of each decoder layer's products
        >>> len(frozen.frozen)
        26
        >>> source = tf.constant([[5, 6, 3]])
        >>> choice = KernelChoice(precomputed=frozen.as_variables())
        >>> decode(model, source, Greedy(), Limits(max_length=4), choice=choice).tokens.shape[0]
        1
    """

    def __init__(self, model, name: str = "frozen_weights"):
        super().__init__(name=name)
        precomputed = precomputed_weights(model)
        flat = tf.nest.flatten(precomputed)  # absent biases are None leaves
        self.frozen = [
            tf.Variable(value, trainable=False, name="frozen")
            for value in flat
            if value is not None
        ]
        template = tf.nest.map_structure(
            lambda value: value is not None, precomputed
        )  # no tensors kept

        def unflatten(values):  # the values back in the places of the present leaves
            values = iter(values)
            return tf.nest.map_structure(
                lambda present: next(values) if present else None, template
            )

        self._unflatten = unflatten  # a plain function: not tracked, not saved

    def read(self) -> PrecomputedWeights:
        """The precomputed weights as tensors, read now (inside a ``tf.function``: once a call)."""
        return self._unflatten([tf.convert_to_tensor(variable) for variable in self.frozen])

    def as_variables(self) -> PrecomputedWeights:
        """The precomputed weights as the variables themselves, each read by the op that uses it.

        A decoding step then reads its weights at every step rather than
        having its loop carry them as loop variables.
        """
        return self._unflatten(self.frozen)
