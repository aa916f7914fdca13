"""The speed kernels, kept apart from the paper's layers.

The layers (``keras_transformer.layers``), the loss and the model compute the paper's
formulas; how those formulas become fast TensorFlow graphs lives here, and they reach
it only through the names below. Each kernel gives the values and gradients of the
plain TensorFlow ops it replaces (the tests check them against those, and against
NumPy), and each runs unchanged on CPU, GPU and TPU and under XLA, except the native
ops, which are CPU-only, opt-in and never in an exported graph. ``docs/kernels.md``
says what each fast path does and why.

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
``permute``                            ``tf.transpose`` as an ``einsum``: the attention
                                       heads
``FusedAdam``                          Adam's update as one kernel a variable:
                                       ``paper_adam``
``attend``                             attention at inference, in float32, by the batched
                                       product (``BatchMatMulV3``) and softmax
                                       (``exp(log_softmax)``) that oneDNN leaves to Eigen:
                                       the two kernels below
``decoding_step``                      one token of ``Transformer.decode`` against a
                                       growing cache, weights read once, rank-2 products:
                                       ``decoding.KernelChoice``
``encode``                             ``Transformer.encode`` at inference: one product
                                       for each layer's query, key and value:
                                       ``decoding.KernelChoice``
``top_k``                              ``tf.math.top_k`` over a long row by the maxima of
                                       blocks, the same values and order:
                                       ``decoding.beam_search``'s candidates
``log_softmax_by_logsumexp``           log-probabilities as ``logits - logsumexp``, which
                                       LiteRT runs faster than its ``LOG_SOFTMAX``:
                                       ``decoding.KernelChoice(log_softmax=...)``
``FrozenWeights``                      the precomputed weights of those two, kept as
                                       variables: the exported SavedModel
``native``                             the opt-in C++ ops and their build cache
=====================================  =====================================================

The choice between a kernel and Keras' own path is made in the open: a layer uses its
kernel unless its settings are ones the kernel does not cover (a quantized ``Dense``,
several LayerNorm axes, a dropout ``noise_shape``), and ``Transformer.compile`` decides
once whether the training step fuses the output projection with the loss
(``fuse_output_and_loss``).

Glossary: the terms the inference kernels, the decoders and the exporters use, each for
one idea.

=========================  ==============================================================
term                       meaning
=========================  ==============================================================
decoding rows              the rows a decoding step runs on: sentences × beams
small-batch step           the decoding step for at most ``SMALL_BATCH_ROWS`` decoding
                           rows (``decoding_step(small_batch=True)``): unfused biases,
                           pointwise or ``MatMul`` products (``PRODUCT_OPS``), splits
large-batch step           the decoding step for any number of rows
pointwise product          a product as a 1×1 convolution on rows in the NHWC layout
                           ``[rows, 1, 1, width]`` (``projection.project_pointwise``)
splits                     a product run as independent partial products, each by a
                           split of its kernel's columns (outputs joined) or rows
                           (outputs added), which the executor runs side by side on
                           its inter-op threads: Megatron's column- and row-parallel
                           partitioning, on one device (``STEP_SPLITS``,
                           ``OUTPUT_SPLITS``, ``decoding_step(splits=N)``)
unfused bias               a bias added after the product rather than fused into it
                           by grappler: held negated and subtracted
                           (``projection.UnfusedBias``)
precomputed weights        the products of the weights the kernels make before use:
                           fused query/key/value kernels, scaled queries, the packed
                           cross-attention kernel, negated biases
                           (``PrecomputedWeights``)
frozen weights             the precomputed weights made once and kept as variables
                           (``FrozenWeights``), for a model whose weights no longer
                           change
compaction                 removing finished rows from a dynamic-shape decoder's
                           batch, in rounds (``decoding.loop.decode_loop``)
finished / done            a greedy row is finished once it emitted EOS or reached its
                           limit; a beam-search hypothesis is finished once it ends; a
                           beam-search sentence is done once no live beam can beat its
                           finished hypotheses (its stopping rule)
=========================  ==============================================================
"""

from keras_transformer.kernels import native
from keras_transformer.kernels.attention import attend, batched_product
from keras_transformer.kernels.cross_entropy import (
    projected_smoothed_cross_entropy,
    smoothed_cross_entropy,
)
from keras_transformer.kernels.decoder_weights import step_weights
from keras_transformer.kernels.decoder_weights import supported as decoding_step_supported
from keras_transformer.kernels.decoding_step import decoding_step, initial_cache
from keras_transformer.kernels.dropout import dropout
from keras_transformer.kernels.encoding import encode, encoder_weights
from keras_transformer.kernels.encoding import supported as encoding_supported
from keras_transformer.kernels.fused_adam import FusedAdam
from keras_transformer.kernels.layer_norm import layer_norm
from keras_transformer.kernels.log_softmax import (
    LOG_SOFTMAX_KINDS,
    log_softmax_by_logsumexp,
    log_softmax_of,
)
from keras_transformer.kernels.projection import (
    as_rows,
    from_rows,
    permute,
    project,
    project_rows,
    transposed_product,
)
from keras_transformer.kernels.small_batch import (
    OUTPUT_SLICES,
    OUTPUT_SPLITS,
    PRODUCT_OPS,
    SMALL_BATCH_ROWS,
    STEP_SPLITS,
    onednn_rewrites,
    step_products,
    step_splits,
    tied_output_kernel,
)
from keras_transformer.kernels.top_k import top_k
from keras_transformer.kernels.weights import (
    FrozenWeights,
    PrecomputedWeights,
    as_constants,
    precomputed_weights,
)

__all__ = [
    "LOG_SOFTMAX_KINDS",
    "OUTPUT_SLICES",
    "OUTPUT_SPLITS",
    "PRODUCT_OPS",
    "SMALL_BATCH_ROWS",
    "STEP_SPLITS",
    "FrozenWeights",
    "FusedAdam",
    "PrecomputedWeights",
    "as_constants",
    "as_rows",
    "attend",
    "batched_product",
    "decoding_step",
    "decoding_step_supported",
    "dropout",
    "encode",
    "encoder_weights",
    "encoding_supported",
    "from_rows",
    "initial_cache",
    "layer_norm",
    "log_softmax_by_logsumexp",
    "log_softmax_of",
    "native",
    "onednn_rewrites",
    "permute",
    "precomputed_weights",
    "project",
    "project_rows",
    "projected_smoothed_cross_entropy",
    "smoothed_cross_entropy",
    "step_products",
    "step_splits",
    "step_weights",
    "tied_output_kernel",
    "top_k",
    "transposed_product",
]
