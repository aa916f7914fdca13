"""The decoders' fast step (``kernels.decoding_step``) against ``Transformer.decode``:
the same logits and cache, token after token, for every model option the step
covers, under float32 and mixed bfloat16; the fallback for what it does not
cover; and a loop body that reads no variable."""

import collections
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from decoders import all_beams, greedy

import keras_transformer as kt
from keras_transformer import kernels
from keras_transformer.decoding import KernelChoice, step_signature
from keras_transformer.kernels.small_batch import output_slice_sizes
from keras_transformer.layers import padding_mask
from keras_transformer.precision import with_precision

VOCAB = 40
SMALL = dict(
    vocab_size=VOCAB, num_layers=2, d_model=16, num_heads=2, d_ff=32, max_length=32, dropout=0.0
)
MARIAN = dict(
    share_embeddings=True,
    tie_embeddings=True,
    activation="swish",
    position_encoding="halves",
    embedding_scale=1.0,
    final_logits_bias=True,
    layer_norm_epsilon=1e-5,
    eos_id=0,
    unk_id=1,
    pad_id=VOCAB - 1,
    bos_id=VOCAB - 1,
)
VARIANTS = {
    "paper": {},
    "pre_ln": dict(norm_first=True),
    "gelu_untied": dict(activation="gelu", tie_embeddings=False, share_embeddings=False),
    "marian": MARIAN,
    "untied_with_final_bias": dict(tie_embeddings=False, final_logits_bias=True),
}


def randomized_model(seed=0, **overrides) -> kt.Transformer:
    """A tiny model with every weight (biases and LayerNorm parameters too)
    moved off its initial value, so that a weight the step misplaces shows."""
    keras.utils.set_random_seed(seed)
    model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", **{**SMALL, **overrides}))
    model.build()
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        value = variable.numpy()
        variable.assign(
            (value + rng.normal(0.0, 0.3 if value.ndim == 1 else 0.1, value.shape)).astype(
                value.dtype
            )
        )
    return model


def sources(config, seed=0):
    """Three sources ending with EOS, two of them padded."""
    rng = np.random.default_rng(seed)
    src = rng.integers(3, VOCAB - 2, size=(3, 6)).astype("int32")
    for row, length in zip(src, (6, 4, 2)):
        row[length - 1] = config.eos_id
        row[length:] = config.pad_id
    return tf.constant(src)


def step_by_step(model, step, src, tokens, initial_cache=None):
    """Logits ``[steps, rows, vocab]`` and the last cache of ``step`` fed ``tokens``.

    ``tokens`` is ``[rows, steps]``; the cache starts from ``initial_cache(memory)``
    (default: ``model.initial_cache``)."""
    memory = model.encode(src, training=False)
    cache = (initial_cache or model.initial_cache)(memory)
    source_padding = padding_mask(src, model.config.pad_id)
    outputs = []
    for t in range(tokens.shape[1]):
        logits, cache = step(tf.constant(tokens[:, t]), tf.constant(t), cache, source_padding)
        outputs.append(logits.numpy())
    return np.stack(outputs), cache


def assert_caches_close(got, expected, atol):
    """Every layer's self- and cross-attention keys and values of two caches, to rtol 1e-5."""
    for got_layer, layer in zip(got, expected):
        for part in ("self", "cross"):
            for name in ("key", "value"):
                np.testing.assert_allclose(
                    got_layer[part][name].numpy(), layer[part][name].numpy(), rtol=1e-5, atol=atol
                )


@pytest.mark.quick
@pytest.mark.parametrize("rows", ["large_batch", "small_batch_conv", "small_batch_matmul"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_fast_step_gives_the_logits_and_cache_of_decode(variant, rows):
    """The large-batch step, and the small-batch step with either kind of products."""
    model = randomized_model(1, **VARIANTS[variant])
    assert kernels.decoding_step_supported(model)
    src = sources(model.config)
    rng = np.random.default_rng(2)
    tokens = rng.integers(3, VOCAB - 2, size=(3, 5)).astype("int32")
    tokens[:, 0] = model.config.bos_id
    steps = KernelChoice().steps(model)
    step = (
        steps.large_batch
        if rows == "large_batch"
        else kernels.decoding_step(model, small_batch=True, products=rows.split("_")[-1])
    )
    fast, fast_cache = step_by_step(model, step, src, tokens, steps.initial_cache)
    reference, reference_cache = step_by_step(model, _decode_growing(model), src, tokens)
    np.testing.assert_allclose(fast, reference, rtol=1e-5, atol=2e-5)
    assert_caches_close(fast_cache, reference_cache, atol=2e-5)
    assert fast_cache[0]["self"]["key"].shape[2] == tokens.shape[1]


SPLIT_VARIANTS = {
    **VARIANTS,
    "untied_odd_vocabulary": dict(
        tie_embeddings=False, final_logits_bias=True, vocab_size=VOCAB + 1
    ),
    "three_heads_odd_sizes": dict(d_model=18, num_heads=3, d_ff=33),
}


@pytest.mark.parametrize("products", kernels.PRODUCT_OPS)
@pytest.mark.parametrize("variant", sorted(SPLIT_VARIANTS))
def test_splits_give_the_logits_and_cache_of_one_split(variant, products):
    """``decoding_step(splits=2)``: each product as two splits (shares of its
    columns, joined, or of its rows, added), attention over all heads
    between them, and the logits in ``OUTPUT_SPLITS`` parts give one split's
    logits and cache, up to the order of the sums: also where the heads, the
    units and the vocabulary do not divide in two or four."""
    model = randomized_model(9, **SPLIT_VARIANTS[variant])
    weights = kernels.step_weights(model)
    constants = kernels.as_constants(weights)
    src = sources(model.config, 9)
    rng = np.random.default_rng(9)
    tokens = rng.integers(3, VOCAB - 2, size=(3, 4)).astype("int32")
    tokens[:, 0] = model.config.bos_id

    def initial_cache(memory):
        return kernels.initial_cache(model, memory, weights)

    one, one_cache = step_by_step(
        model,
        kernels.decoding_step(model, small_batch=True, weights=constants, products=products),
        src,
        tokens,
        initial_cache,
    )
    two, two_cache = step_by_step(
        model,
        kernels.decoding_step(
            model, small_batch=True, weights=constants, splits=2, products=products
        ),
        src,
        tokens,
        initial_cache,
    )
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-5)
    assert_caches_close(two_cache, one_cache, atol=1e-5)
    # The layers' products (self qkv and output, cross query and output, inner, outer) in each
    # split; an
    # untied output layer's in OUTPUT_SPLITS shares, a tied one's by slices of the embedding
    # (MatMul).
    layer_products = 6 * model.config.num_decoder_layers
    op = "Conv2D" if products == "conv" else "MatMul"
    untied = constants.output[0] is not None
    tied_slices = 0 if untied or op == "Conv2D" else len(output_slice_sizes(VOCAB))
    expected = {
        1: layer_products + (1 if untied else tied_slices),
        2: 2 * layer_products + (kernels.OUTPUT_SPLITS if untied else tied_slices),
    }
    for splits, count in expected.items():
        step = kernels.decoding_step(
            model, small_batch=True, weights=constants, splits=splits, products=products
        )
        assert _op_counts(step, model)[op] == count, (splits, count)


def test_splits_need_numpy_weights_of_the_small_batch_step_and_units_to_share():
    model = randomized_model(10)
    assert kernels.step_splits(model.config) == 2
    with pytest.raises(ValueError, match="splits=2 needs"):
        kernels.decoding_step(model, small_batch=True, splits=2)  # the variables
    constants = kernels.as_constants(kernels.step_weights(model))
    with pytest.raises(ValueError, match="splits=2 needs"):
        kernels.decoding_step(model, weights=constants, splits=2)  # the large-batch step
    with pytest.raises(ValueError, match=r"splits=17 needs .* d_model \(16\)"):
        kernels.decoding_step(model, small_batch=True, weights=constants, splits=17)
    with pytest.raises(ValueError, match="splits must be >= 1"):
        kernels.decoding_step(model, small_batch=True, weights=constants, splits=0)
    with pytest.raises(ValueError, match="products must be one of conv, matmul, got 'einsum'"):
        kernels.decoding_step(model, small_batch=True, products="einsum")
    assert kernels.step_products() == ("matmul" if kernels.onednn_rewrites() else "conv")
    assert (
        kernels.step_splits(
            kt.TransformerConfig.from_preset("tiny", d_model=2, num_heads=1, d_ff=1)
        )
        == 1
    )


def _op_counts(step, model) -> collections.Counter:
    """The op types of ``step``'s graph, traced as the decoding loops call it."""
    graph = tf.function(step, input_signature=step_signature(model)).get_concrete_function().graph
    return collections.Counter(node.type for node in graph.get_operations())


def _decode_growing(model):
    """``model.decode`` against a growing cache, one token a row."""

    def step(token_ids, t, cache, source_padding):
        logits, cache = model.decode(
            token_ids[:, tf.newaxis], cache, source_padding, training=False
        )
        return logits[:, -1, :], cache

    return step


def test_fast_step_under_mixed_bfloat16_matches_decode():
    model = with_precision(randomized_model(3), "bf16")
    assert model.compute_dtype == "bfloat16"
    src = sources(model.config, 3)
    tokens = np.array([[model.config.bos_id, 5, 6, 7]] * 3, np.int32)
    fast, cache = step_by_step(model, kernels.decoding_step(model, small_batch=True), src, tokens)
    reference, _ = step_by_step(model, _decode_growing(model), src, tokens)
    assert fast.dtype == np.float32 and cache[0]["self"]["key"].dtype == tf.bfloat16
    # The same ops in the same dtypes: bf16 products may round differently when fused.
    np.testing.assert_allclose(fast, reference, rtol=0.05, atol=0.1)
    assert (fast.argmax(-1) == reference.argmax(-1)).mean() > 0.9


def test_a_quantized_model_decodes_through_decode():
    model = randomized_model(4)
    model.decoder.layer_stack[0].feed_forward.inner_dense.quantize("int8", type_check=False)
    assert not kernels.decoding_step_supported(model)
    src = sources(model.config, 4)
    tokens = np.array([[model.config.bos_id, 5, 6]] * 3, np.int32)
    steps = KernelChoice().steps(model)
    assert steps.small_batch is None
    fallback, _ = step_by_step(model, steps.large_batch, src, tokens)
    reference, _ = step_by_step(model, _decode_growing(model), src, tokens)
    np.testing.assert_allclose(fallback, reference, rtol=1e-6, atol=1e-6)
    assert greedy(model, src, max_length=6)[0].shape[0] == 3


def _graph(function, spec):
    return function.get_concrete_function(spec).graph.as_graph_def()


def _is_loop_body(name: str) -> bool:
    """Whether a function of the library is a ``tf.while_loop``'s body (``while_body_…``,
    ``while_1_body_…``; nested in loops and branches: ``cond_1_while_cond_while_body_…``)."""
    return re.search(r"(^|_)while(_\d+)?_body_\d+$", name) is not None


def _loop_bodies(graph) -> dict[str, collections.Counter]:
    """The op types of each decoding-step loop body (the while bodies that run the decoder)."""
    bodies = {
        f.signature.name: collections.Counter(node.op for node in f.node_def)
        for f in graph.library.function
        if _is_loop_body(f.signature.name)
    }
    return {name: ops for name, ops in bodies.items() if ops["MatMul"]}


def _carried(graph, body: str) -> collections.Counter:
    """The types of the loop variables of the ``While`` whose body is ``body``."""
    for node in [n for f in graph.library.function for n in f.node_def] + list(graph.node):
        if node.op in ("While", "StatelessWhile") and node.attr["body"].func.name == body:
            return collections.Counter(tf.dtypes.as_dtype(t).name for t in node.attr["T"].list.type)
    raise AssertionError(f"no While runs {body}")


@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_the_decoding_loop_carries_its_state_only_and_has_no_shape_arithmetic(decoder):
    """The weights enter a decoding loop as variables and are read in its
    body: a tensor made before the loop and used in it would be one more loop
    variable, passed from step to step by control-flow nodes."""
    model = randomized_model(5)
    spec = tf.TensorSpec([None, None], tf.int32)
    frozen = kernels.FrozenWeights(model)

    def decoder_of(choice):
        if decoder == "greedy":
            return lambda s: greedy(model, s, choice)[0]
        return lambda s: all_beams(model, s, beam_size=3, choice=choice).tokens

    decode_variables = decoder_of(KernelChoice())
    decode_frozen = decoder_of(KernelChoice(precomputed=frozen.as_variables()))
    layers = model.config.num_decoder_layers
    # The state: the cache's 4 tensors a layer, and 9 more (greedy) or 15 (beam: its sequences,
    # scores, flags and results); besides, the loop's limit and (in rounds) the round's count.
    state = 4 * layers + (9 if decoder == "greedy" else 15)
    for function, precomputed_carried in ((decode_variables, 5 * layers + 2), (decode_frozen, 0)):
        graph = _graph(tf.function(function), spec)
        bodies = _loop_bodies(graph)
        assert (
            len(bodies) == 3
        )  # the rounds' large- and small-batch steps; a small batch's flat loop
        for name, ops in bodies.items():
            carried = _carried(graph, name)
            # Made once a call without FrozenWeights: each layer's fused qkv, scaled query (kernel
            # and
            # bias each) and, for the small-batch step, its negated biases; the tied output kernel.
            assert (
                sum(carried.values()) - carried["resource"]
                <= state + 2 + precomputed_carried + 6 * layers
            ), carried
            # At least each layer's 4 kernels used as they are and its 3 norms, and the embedding.
            assert carried["resource"] >= 10 * layers + 1, carried
            assert ops["ReadVariableOp"] >= 10 * layers + 1, ops
            assert ops["Shape"] <= 2 and ops["Transpose"] == 0, ops
    bodies = _loop_bodies(_graph(tf.function(decode_frozen), spec))
    for ops in (
        bodies.values()
    ):  # float32 attention: BatchMatMulV3 (oneDNN rewrites BatchMatMulV2), softmax from exp
        assert (
            ops["BatchMatMulV3"] == 2 * 2 * 2 and ops["BatchMatMulV2"] == 0 and ops["Softmax"] == 0
        ), ops
        assert ops["Neg"] == 0, ops
    # 2 layers × 6 projections, then the tied logits: one product; for few rows, the projections as
    # the products that suit this process's TensorFlow (1×1 convolutions or MatMul) and the logits
    # as
    # products each of a slice of the embedding.
    conv = kernels.step_products() == "conv"
    many, *few = sorted(bodies.values(), key=lambda ops: ops["BiasAdd"], reverse=True)
    assert many["MatMul"] == 2 * 6 + 1 and many["Conv2D"] == 0, many
    # The large-batch step's biases go in by BiasAdd (fused with the product); the small-batch step
    # subtracts them, negated, after it (an AddV2 of a [1, n] bias would be fused too).
    assert many["BiasAdd"] == 2 * 6, many
    for ops in few:
        assert ops["Conv2D"] == (2 * 6 if conv else 0), ops
        assert ops["MatMul"] == kernels.OUTPUT_SLICES + (0 if conv else 2 * 6), ops
        assert ops["BiasAdd"] == 0 and ops["Sub"] >= 2 * 6, ops


def test_decoding_steps_without_a_row_count_build_inside_a_function():
    """``KernelChoice().steps(model)`` with the default row count (a Python int) chooses the
    tied output kernel in Python, not by a ``tf.cond`` on a Python bool."""
    model = randomized_model(6)
    src = sources(model.config, 6)

    @tf.function
    def first_logits(src):
        steps = KernelChoice().steps(model)
        memory = steps.encode(src)
        cache = steps.initial_cache(memory)
        tokens = tf.fill([tf.shape(src)[0]], model.config.bos_id)
        return steps.large_batch(
            tokens, tf.constant(0), cache, padding_mask(src, model.config.pad_id)
        )[0]

    reference, _ = step_by_step(
        model, _decode_growing(model), src, np.full([3, 1], model.config.bos_id, np.int32)
    )
    np.testing.assert_allclose(first_logits(src).numpy(), reference[0], rtol=1e-5, atol=2e-5)


def test_an_unfused_bias_gives_the_fused_products_values_exactly():
    """``project_rows`` with ``kernels.projection.unfused(bias)``: ``y - (-b)``, the same
    bits as ``BiasAdd``, by a ``Sub`` that grappler's remapper does not fuse."""
    from keras_transformer.kernels.projection import unfused

    rng = np.random.default_rng(7)
    x, kernel = (
        tf.constant(rng.standard_normal(shape).astype(np.float32)) for shape in ([3, 8], [8, 5])
    )
    bias = tf.constant(rng.standard_normal([5]).astype(np.float32))
    fused = kernels.project_rows(x, (kernel, bias), tf.nn.relu)
    graph = (
        tf.function(lambda x: kernels.project_rows(x, (kernel, unfused(bias)), tf.nn.relu))
        .get_concrete_function(tf.TensorSpec([None, 8]))
        .graph
    )
    types = {op.type for op in graph.get_operations()}
    assert "Sub" in types and not types & {"BiasAdd", "AddV2"}
    np.testing.assert_array_equal(
        kernels.project_rows(x, (kernel, unfused(bias)), tf.nn.relu).numpy(), fused.numpy()
    )
