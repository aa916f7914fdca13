"""The speed kernels, kept apart from the paper's layers.

The layers (``keras_transformer.layers``), the loss and the model compute the paper's
formulas; how those formulas become fast TensorFlow graphs lives here, and they reach
it only through the names below. Each kernel gives the values and gradients of the
plain TensorFlow ops it replaces (the tests check them against those, and against
NumPy), and each runs unchanged on CPU, GPU and TPU and under XLA, except the native
ops, which are CPU-only, opt-in and never in an exported graph.

=====================================  =====================================================
kernel                                 what it does, and who calls it
=====================================  =====================================================
``project``                            ``x @ W + b`` (ReLU fused) with the weight gradient
                                       in the faster orientation: ``layers.Dense``, the
                                       attention projections, the output projection
``layer_norm``                         LayerNorm with a closed-form gradient, or the native
                                       C++ kernels: ``layers.LayerNormalization``
``dropout``                            inverted dropout from 16 random bits an element:
                                       ``layers.Dropout``
``smoothed_cross_entropy``             label-smoothed cross-entropy from one softmax:
                                       ``MaskedLabelSmoothedCrossEntropy``
``projected_smoothed_cross_entropy``   the same with the output projection inside its
                                       gradient: ``Transformer.train_step``
``permute``                            ``tf.transpose`` as an ``einsum``, which oneDNN does
                                       not slow down at small sizes: the attention
                                       heads
``FusedAdam``                          Adam's update as one kernel a variable:
                                       ``paper_adam``
``attend``                             attention at inference, in float32 by the
                                       batched product (``BatchMatMulV3``) and softmax
                                       (``exp(log_softmax)``) that oneDNN leaves to
                                       Eigen: the two kernels below
``decoding_step``                      one token of ``Transformer.decode`` against a
                                       growing cache, weights made once and read in
                                       the step as variables, rank-2 products:
                                       ``decoding.decoding_steps``
``encode``                             ``Transformer.encode`` at inference: one product
                                       for each layer's query, key and value:
                                       ``decoding.decoding_steps``
``top_k``                              ``tf.math.top_k`` over a long row by the maxima of
                                       blocks, the same values and order:
                                       ``beam_search``'s candidates
``FrozenWeights``                      the products of the weights those two make
                                       (fused and scaled kernels, negated biases),
                                       kept as variables: the exported SavedModel
``native``                             the opt-in C++ ops and their build cache
=====================================  =====================================================

The choice between a kernel and Keras' own path is made in the open: a layer uses its
kernel unless its settings are ones the kernel does not cover (a quantized ``Dense``,
several LayerNorm axes, a dropout ``noise_shape``), and ``Transformer.compile`` decides
once whether the training step fuses the output projection with the loss
(``fuse_output_and_loss``).
"""

from keras_transformer.kernels import native
from keras_transformer.kernels.attention import attend, batched_product
from keras_transformer.kernels.cross_entropy import (
    projected_smoothed_cross_entropy,
    smoothed_cross_entropy,
)
from keras_transformer.kernels.decoding_step import (
    FEW_ROWS,
    OUTPUT_LANES,
    OUTPUT_SLICES,
    PRODUCT_OPS,
    STEP_LANES,
    decoding_step,
    initial_cache,
    onednn_rewrites,
    step_lanes,
    step_products,
    step_weights,
    tied_output_kernel,
)
from keras_transformer.kernels.decoding_step import supported as decoding_step_supported
from keras_transformer.kernels.dropout import dropout
from keras_transformer.kernels.encoding import encode, encoder_weights
from keras_transformer.kernels.encoding import supported as encoding_supported
from keras_transformer.kernels.fused_adam import FusedAdam
from keras_transformer.kernels.layer_norm import layer_norm
from keras_transformer.kernels.projection import (
    as_rows,
    from_rows,
    permute,
    project,
    project_rows,
    transposed_product,
)
from keras_transformer.kernels.top_k import top_k
from keras_transformer.kernels.weights import (
    DerivedWeights,
    FrozenWeights,
    as_constants,
    derived_weights,
)

__all__ = [
    "FEW_ROWS",
    "OUTPUT_LANES",
    "OUTPUT_SLICES",
    "PRODUCT_OPS",
    "STEP_LANES",
    "DerivedWeights",
    "FrozenWeights",
    "FusedAdam",
    "as_constants",
    "as_rows",
    "attend",
    "batched_product",
    "decoding_step",
    "decoding_step_supported",
    "derived_weights",
    "dropout",
    "encode",
    "encoder_weights",
    "encoding_supported",
    "from_rows",
    "initial_cache",
    "layer_norm",
    "native",
    "onednn_rewrites",
    "permute",
    "project",
    "project_rows",
    "projected_smoothed_cross_entropy",
    "smoothed_cross_entropy",
    "step_lanes",
    "step_products",
    "step_weights",
    "tied_output_kernel",
    "top_k",
    "transposed_product",
]
