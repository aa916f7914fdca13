"""The inference encoder (``kernels.encode``) against ``Transformer.encode``, for
every model option it covers, a short and a long batch, padded and empty rows, mixed bfloat16 and
the fallback;
and ``kernels.FrozenWeights`` and ``decoding.ConstantSteps``: the same decodes, the
variables and constants a SavedModel keeps."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf
from decoders import all_beams, greedy
from test_decoding_step import VARIANTS, VOCAB, _carried, _is_loop_body, randomized_model, sources

from keras_transformer import kernels
from keras_transformer.decoding import ConstantSteps, KernelChoice
from keras_transformer.precision import with_precision


def padded_sources(config, rows, length, seed=0):
    """``rows`` sources of up to ``length`` tokens ending with EOS; row 1 is padding only."""
    rng = np.random.default_rng(seed)
    src = rng.integers(3, VOCAB - 2, size=(rows, length)).astype("int32")
    for i, row in enumerate(src):
        real = length - i % length
        row[real - 1] = config.eos_id
        row[real:] = config.pad_id
    src[1 % rows] = config.pad_id
    return tf.constant(src)


def assert_same_memory(model, src, rtol=1e-5, atol=2e-5):
    reference = model.encode(src, training=False).numpy()
    fast = tf.function(lambda ids: kernels.encode(model, ids))(src).numpy()
    real = (src.numpy() != model.config.pad_id)[..., np.newaxis]
    # Padded positions hold values no later layer reads; compare the real tokens.
    np.testing.assert_allclose(
        np.where(real, fast, 0.0), np.where(real, reference, 0.0), rtol=rtol, atol=atol
    )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_encode_gives_the_memory_of_the_model(variant):
    model = randomized_model(1, **VARIANTS[variant])
    assert kernels.encoding_supported(model)
    assert_same_memory(model, padded_sources(model.config, rows=2, length=6))
    assert_same_memory(model, padded_sources(model.config, rows=3, length=20))


def test_an_empty_source_row_decodes_as_through_the_layers():
    """A row of padding only has no token for the packed encoder: its memory
    is finite values that no later layer reads (every key is masked, and the
    cross-attention zeroes what such a row attends to, as the layer does).
    Decoded, it gives what the paper's layers give (``static_shapes``:
    ``model.encode`` and ``model.decode``)."""
    model = randomized_model(2)
    src = padded_sources(model.config, rows=3, length=5)
    assert not src.numpy()[1].any()
    assert np.isfinite(kernels.encode(model, src).numpy()).all()
    tokens, scores = greedy(model, src, max_length=4)
    expected, expected_scores = greedy(model, src, KernelChoice(static_shapes=True), max_length=4)
    np.testing.assert_array_equal(tokens.numpy(), expected.numpy())
    np.testing.assert_allclose(scores.numpy(), expected_scores.numpy(), rtol=1e-5)


def test_a_batch_of_padding_only_encodes():
    """No real token at all, or no row: the packed encoder still runs."""
    model = randomized_model(2)
    encode = tf.function(lambda ids: kernels.encode(model, ids))
    assert np.isfinite(encode(tf.zeros([2, 3], tf.int32)).numpy()).all()
    assert encode(tf.zeros([0, 3], tf.int32)).shape == (0, 3, model.config.d_model)
    assert encode(tf.zeros([2, 0], tf.int32)).shape == (2, 0, model.config.d_model)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_encode_under_mixed_precision_matches_the_model(precision):
    model = with_precision(randomized_model(3), precision)
    src = sources(model.config, 3)
    fast = tf.function(lambda ids: kernels.encode(model, ids))(
        src
    )  # in a graph, as the decoders run it
    assert fast.dtype == model.compute_dtype
    assert tf.function(lambda ids: greedy(model, ids, max_length=4)[0])(src).shape[0] == 3
    reference = model.encode(src, training=False)
    real = (src.numpy() != model.config.pad_id)[..., np.newaxis]
    np.testing.assert_allclose(
        np.where(real, tf.cast(fast, tf.float32), 0.0),
        np.where(real, tf.cast(reference, tf.float32), 0.0),
        rtol=0.05,
        atol=0.1,
    )


def test_a_quantized_encoder_encodes_through_the_model():
    model = randomized_model(4)
    model.encoder.layer_stack[0].feed_forward.inner_dense.quantize("int8", type_check=False)
    assert not kernels.encoding_supported(model)
    src = sources(model.config, 4)
    np.testing.assert_array_equal(
        KernelChoice().steps(model).encode(src).numpy(),
        model.encode(src, training=False).numpy(),
    )


@pytest.mark.parametrize("variant", ["paper", "marian"])
def test_frozen_weights_decode_as_the_weights_made_at_each_call(variant):
    model = randomized_model(5, **VARIANTS[variant])
    frozen = kernels.FrozenWeights(model)
    precomputed = kernels.precomputed_weights(model)
    for kept, made in zip(tf.nest.flatten(frozen.read()), tf.nest.flatten(precomputed)):
        if made is None:
            assert kept is None
        else:
            np.testing.assert_array_equal(kept.numpy(), made.numpy())
    # The fused kernels only: three attention kernels for each self-attention, one query kernel
    # and a key and value kernel for each cross-attention, with their biases; and the biases of
    # each decoder layer's products (3 attention, 2 attention outputs, the two of the FFN), negated.
    d_model, d_ff = model.config.d_model, model.config.d_ff
    decoder_layers = model.config.num_decoder_layers
    layers = model.config.num_encoder_layers + decoder_layers
    assert model.output_projection is None  # tied: no output bias
    assert sum(int(np.prod(v.shape)) for v in frozen.frozen) == (
        3 * layers * (d_model + 1) * d_model
        + 3 * decoder_layers * (d_model + 1) * d_model
        + decoder_layers * (6 * d_model + d_ff + d_model)
    )
    src = sources(model.config, 5)
    greedy_precomputed = tf.function(
        lambda ids, precomputed: greedy(model, ids, KernelChoice(precomputed=precomputed))
    )
    plain, plain_scores = greedy(model, src)
    plain_beam = all_beams(model, src, beam_size=3).tokens.numpy()
    for precomputed in (
        frozen.read(),
        frozen.as_variables(),
    ):  # tensors, or the variables, read in the loop
        tokens, scores = greedy_precomputed(src, precomputed)
        np.testing.assert_array_equal(tokens.numpy(), plain.numpy())
        np.testing.assert_allclose(scores.numpy(), plain_scores.numpy(), rtol=1e-6)
        beam = all_beams(model, src, beam_size=3, choice=KernelChoice(precomputed=precomputed))
        np.testing.assert_array_equal(beam.tokens.numpy(), plain_beam)


def test_frozen_weights_are_saved_and_restored_with_a_module(tmp_path):
    model = randomized_model(6)
    module = tf.Module()
    module.frozen = kernels.FrozenWeights(model)
    module.f = tf.function(
        lambda: tf.nest.flatten(module.frozen.read().cross_key_value)[0], input_signature=[]
    )
    tf.saved_model.save(module, str(tmp_path))
    restored = tf.saved_model.load(str(tmp_path))
    np.testing.assert_array_equal(
        restored.f().numpy(), kernels.precomputed_weights(model).cross_key_value[0].numpy()
    )


def _encoder_ops(model) -> list[str]:
    graph = (
        tf.function(lambda ids: kernels.encode(model, ids))
        .get_concrete_function(tf.TensorSpec([None, None], tf.int32))
        .graph.as_graph_def()
    )
    return [node.op for node in graph.node] + [
        node.op for f in graph.library.function for node in f.node_def
    ]


def test_the_encoder_has_no_transpose_branch_or_onednn_batched_product():
    ops = _encoder_ops(randomized_model(7))
    assert ops.count("Transpose") == 0
    assert ops.count("If") + ops.count("StatelessIf") == 0
    assert ops.count("MatMul") == 2 * 4  # 2 layers × (qkv, output, inner, outer)
    # float32 attention: two BatchMatMulV3 a layer (oneDNN rewrites BatchMatMulV2), softmax from
    # exp.
    assert (
        ops.count("BatchMatMulV3") == 2 * 2
        and ops.count("BatchMatMulV2") == 0
        and ops.count("Softmax") == 0
    )
    mixed = _encoder_ops(with_precision(randomized_model(7), "bf16"))
    assert mixed.count("BatchMatMulV2") == 2 * 2 and mixed.count("BatchMatMulV3") == 0
    keras.backend.clear_session()


@pytest.mark.parametrize(
    "variant",
    [
        "paper",
        "marian",
        *(
            pytest.param(name, marks=pytest.mark.slow)  # a decode each
            for name in ("pre_ln", "untied_with_final_bias", "bf16")
        ),
    ],
)
def test_constant_steps_decode_as_the_variables(variant):
    """``ConstantSteps``: the same tokens and scores as the variables, for a
    few rows (the constant step from the start) and for more rows than
    ``kernels.SMALL_BATCH_ROWS`` (rounds of the large-batch step on the variables,
    then of the constant small-batch step), greedy and beam."""
    model = randomized_model(7, **VARIANTS.get(variant, {}))
    if variant == "bf16":
        model = with_precision(model, "bf16")
    frozen = kernels.FrozenWeights(model)
    steps = ConstantSteps(model, frozen.as_variables())
    assert steps.nbytes >= 4 * model.config.d_model * model.config.tgt_vocab_size // (
        2 if variant == "bf16" else 1
    )
    choices = {
        "variables": KernelChoice(precomputed=frozen.as_variables()),
        "constants": KernelChoice(precomputed=frozen.as_variables(), constant_steps=steps),
    }
    # Traced once for any number of rows, as a SavedModel's signatures are: the few rows and the
    # many below run the one graph, each through its own branch.
    any_ids = [tf.TensorSpec([None, None], tf.int32)]
    greedy_by = {
        name: tf.function(
            lambda ids, choice=choice: greedy(model, ids, choice), input_signature=any_ids
        )
        for name, choice in choices.items()
    }
    beam = {
        name: tf.function(
            lambda ids, choice=choice: all_beams(model, ids, 3, choice), input_signature=any_ids
        )
        for name, choice in choices.items()
    }
    assert 3 * 3 <= kernels.SMALL_BATCH_ROWS < 20
    for src in (sources(model.config, 7), padded_sources(model.config, 20, 7, seed=7)):
        tokens, scores = greedy_by["variables"](src)
        got_tokens, got_scores = greedy_by["constants"](src)
        np.testing.assert_array_equal(got_tokens.numpy(), tokens.numpy())
        # The graph optimiser may fold or fuse constants differently: the last bits of a sum may
        # move.
        # The constant step's tied logits come from the embedding transposed once, not in the
        # product: under bfloat16 a logit may round to the neighbouring bfloat16 value, which may
        # swap two lesser hypotheses of a beam whose scores are that close; the best one stays.
        rtol = 1e-2 if variant == "bf16" else 1e-6
        np.testing.assert_allclose(got_scores.numpy(), scores.numpy(), rtol=rtol)
        expected, got = beam["variables"](src), beam["constants"](src)
        compared = slice(0, 1) if variant == "bf16" else slice(None)
        np.testing.assert_array_equal(
            got.tokens.numpy()[:, compared], expected.tokens.numpy()[:, compared]
        )
        np.testing.assert_allclose(got.scores.numpy(), expected.scores.numpy(), rtol=rtol)


@pytest.mark.parametrize(
    "decoder, products", [("greedy", "conv"), ("beam", "conv"), ("greedy", "matmul")]
)
def test_constant_steps_hold_the_weights_and_the_loops_read_no_variable(decoder, products):
    """The constant step holds its weights as constants and reads no
    variable; the loops that call it (a small batch's flat loop, the rounds' for
    few rows) read none and carry only their state; a decoder's graph holds
    the step once, whatever it decodes; its products are the kind asked for."""
    model = randomized_model(8)
    frozen = kernels.FrozenWeights(model)
    steps = ConstantSteps(model, frozen.as_variables(), products=products)
    assert steps.products == products
    choice = KernelChoice(precomputed=frozen.as_variables(), constant_steps=steps)
    if decoder == "greedy":
        decode = tf.function(lambda ids: greedy(model, ids, choice)[0])
    else:
        decode = tf.function(lambda ids: all_beams(model, ids, 3, choice).tokens)
    graph = decode.get_concrete_function(tf.TensorSpec([None, None], tf.int32)).graph.as_graph_def()
    functions = {
        f.signature.name: collections.Counter(node.op for node in f.node_def)
        for f in graph.library.function
    }
    constant = {name: ops for name, ops in functions.items() if "constant_" in name}
    assert len(constant) == 1 and "constant_small_batch_step" in next(iter(constant)), sorted(
        constant
    )
    (step,) = constant.values()
    assert step["ReadVariableOp"] == 0 and step["VarHandleOp"] == 0 and step["Const"] > 0, step
    # The projections and the tied logits (from the embedding transposed, once): 1×1 convolutions
    # or plain products, each product as the splits' shares of its kernel (2 splits), and the logits
    # in OUTPUT_SPLITS parts.
    splits = kernels.step_splits(model.config)
    assert splits == kernels.STEP_SPLITS == 2
    used, unused = ("Conv2D", "MatMul") if products == "conv" else ("MatMul", "Conv2D")
    assert step[used] == 2 * 6 * splits + kernels.OUTPUT_SPLITS and step[unused] == 0, step
    calls = {
        name: ops
        for name, ops in functions.items()
        if _is_loop_body(name) and ops["PartitionedCall"] + ops["StatefulPartitionedCall"]
    }
    assert len(calls) == 2, sorted(calls)
    for body, ops in calls.items():
        assert ops["ReadVariableOp"] == 0 and ops["MatMul"] == 0, ops
        assert _carried(graph, body)["resource"] == 0
