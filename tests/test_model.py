"""The Transformer model: masking semantics, caches, sizes, compilation,
mixed precision and its config (saving and export: test_keras_round_trips.py)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers import padding_mask

pytestmark = pytest.mark.quick


def tiny(**overrides):
    values = dict(vocab_size=40, dropout=0.0, max_length=32)
    values.update(overrides)
    return kt.TransformerConfig.from_preset("tiny", **values)


# The tests of a training step: tracing (or compiling) the step is what they cost, and what they
# check of it is the same for one layer as for two.
ONE_LAYER = dict(num_layers=1)


def batch(seed=0, vocab=40):
    rng = np.random.default_rng(seed)
    src = rng.integers(4, vocab, size=(3, 7)).astype("int32")
    tgt = rng.integers(4, vocab, size=(3, 6)).astype("int32")
    src[1, 4:] = 0
    src[2, 2:] = 0
    tgt[:, 0] = kt.BOS_ID
    tgt[1, 3:] = 0
    return src, tgt


def test_logits_shape_and_dtype():
    model = kt.Transformer(tiny())
    src, tgt = batch()
    logits = model((src, tgt))
    assert logits.shape == (3, 6, 40) and logits.dtype == tf.float32
    np.testing.assert_allclose(
        model({"source_ids": src, "target_ids": tgt}).numpy(), logits.numpy()
    )


def test_bad_inputs_say_what_is_expected():
    model = kt.Transformer(tiny())
    with pytest.raises(ValueError, match="source_ids"):
        model({"src": np.ones((1, 2), "int32"), "tgt": np.ones((1, 2), "int32")})


def test_look_ahead_mask_hides_the_future():
    model = kt.Transformer(tiny())
    src, tgt = batch(1)
    logits = model((src, tgt)).numpy()
    for t in range(tgt.shape[1] - 1):
        changed = tgt.copy()
        changed[:, t + 1 :] = np.random.default_rng(t).integers(
            4, 40, size=changed[:, t + 1 :].shape
        )
        new = model((src, changed)).numpy()
        np.testing.assert_allclose(new[:, : t + 1], logits[:, : t + 1], rtol=1e-5, atol=1e-5)
        assert not np.allclose(new[:, t + 1 :], logits[:, t + 1 :])


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_never_changes_real_positions(norm_first):
    model = kt.Transformer(tiny(norm_first=norm_first))
    src, tgt = batch(2)
    logits = model((src, tgt)).numpy()
    # More padding columns on both sides: the same logits at real positions.
    padded = model((np.pad(src, [(0, 0), (0, 5)]), np.pad(tgt, [(0, 0), (0, 4)]))).numpy()
    np.testing.assert_allclose(padded[:, :6], logits, rtol=1e-5, atol=1e-5)
    # A sentence translated alone equals the same sentence inside a padded batch.
    for i in range(3):
        length = int((src[i] != 0).sum())
        tgt_length = int((tgt[i] != 0).sum())
        alone = model((src[i : i + 1, :length], tgt[i : i + 1, :tgt_length])).numpy()
        np.testing.assert_allclose(alone[0], logits[i, :tgt_length], rtol=1e-5, atol=1e-5)


def test_changing_source_tokens_changes_logits():
    model = kt.Transformer(tiny())
    src, tgt = batch(3)
    changed = src.copy()
    changed[0, 0] = 5 if src[0, 0] != 5 else 6
    assert not np.allclose(model((changed, tgt)).numpy()[0], model((src, tgt)).numpy()[0])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("fixed", [False, True])
def test_cached_step_by_step_decoding_equals_full_pass(norm_first, share, fixed):
    model = kt.Transformer(
        tiny(norm_first=norm_first, share_embeddings=share, tie_embeddings=share)
    )
    src, tgt = batch(4)
    full = model((src, tgt)).numpy()
    memory = model.encode(src)
    cache = model.initial_cache(memory, max_length=8 if fixed else None)
    source_padding = padding_mask(src)
    steps = []
    for t in range(tgt.shape[1]):
        logits, cache = model.decode(
            tgt[:, t : t + 1], cache, source_padding, cache_index=t if fixed else None
        )
        steps.append(logits.numpy())
    incremental = np.concatenate(steps, 1)
    real = tgt != 0
    np.testing.assert_allclose(incremental[real], full[real], rtol=1e-4, atol=1e-5)


@pytest.mark.xla_cpu
def test_cached_decoding_inside_a_static_shape_while_loop():
    """The fixed-size cache keeps every loop variable's shape: XLA/TPU friendly."""
    model = kt.Transformer(tiny())
    src, tgt = batch(5)
    full = model((src, tgt)).numpy()
    length = tgt.shape[1]

    @tf.function(jit_compile=True)
    def run(src, tgt):
        memory = model.encode(src)
        cache = model.initial_cache(memory, max_length=length)
        padding = padding_mask(src)
        out = tf.zeros([src.shape[0], length, 40])

        def body(t, cache, out):
            logits, cache = model.decode(tf.gather(tgt, [t], axis=1), cache, padding, cache_index=t)
            hit = tf.one_hot(t, length)[tf.newaxis, :, tf.newaxis]
            return t + 1, cache, out + hit * logits

        _, _, out = tf.while_loop(lambda t, *_: t < length, body, (tf.constant(0), cache, out))
        return out

    out = run(tf.constant(src), tf.constant(tgt)).numpy()
    real = tgt != 0
    np.testing.assert_allclose(out[real], full[real], rtol=1e-4, atol=1e-4)


def test_base_model_has_the_papers_parameter_count():
    model = kt.Transformer(kt.TransformerConfig.from_preset("base", vocab_size=37000))
    model.build()
    count = model.count_params()
    assert 63e6 <= count <= 65e6, count


def test_shared_and_tied_embeddings_change_the_variables():
    shared = kt.Transformer(tiny(share_embeddings=True, tie_embeddings=True))
    separate = kt.Transformer(tiny(share_embeddings=False, tie_embeddings=False))
    shared.build()
    separate.build()
    assert shared.source_embedding is shared.target_embedding
    assert shared.output_projection is None
    assert separate.count_params() - shared.count_params() == 2 * 40 * 64 + 40


@pytest.mark.xla_cpu
def test_tf_function_and_xla_match_eager():
    model = kt.Transformer(tiny())
    src, tgt = batch(6)
    eager = model((src, tgt), training=False).numpy()
    graph = tf.function(lambda s, t: model((s, t), training=False))(src, tgt).numpy()
    xla = tf.function(lambda s, t: model((s, t), training=False), jit_compile=True)(
        src, tgt
    ).numpy()
    np.testing.assert_allclose(graph, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xla, eager, rtol=1e-4, atol=1e-4)


def _fit_once(model, jit_compile):
    src, tgt = batch(7)
    out = np.concatenate([tgt[:, 1:], np.zeros((3, 1), "int32")], 1)
    model.compile(
        optimizer=kt.paper_adam(d_model=64, warmup_steps=10),
        loss=kt.MaskedLabelSmoothedCrossEntropy(),
        metrics=[kt.MaskedAccuracy()],
        jit_compile=jit_compile,
    )
    history = model.fit((src, tgt), out, batch_size=3, epochs=2, verbose=0)
    return history.history["loss"]


@pytest.mark.xla_cpu
def test_fit_with_xla():
    losses = _fit_once(kt.Transformer(tiny(dropout=0.1, **ONE_LAYER)), jit_compile=True)
    assert all(np.isfinite(losses)) and losses[1] < losses[0]


def test_mixed_bfloat16_keeps_softmax_layernorm_and_logits_in_float32():
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = kt.Transformer(tiny(**ONE_LAYER))
    src, tgt = batch(8)
    logits = model((src, tgt))
    assert logits.dtype == tf.float32
    assert all(v.dtype == "float32" for v in model.weights)
    layer = model.decoder.layer_stack[0]
    assert layer.self_attention.compute_dtype == "bfloat16"
    assert layer.self_attention_norm.compute_dtype == "float32"
    hidden, weights = model.decoder(
        model.target_embedding(tgt),
        model.encode(src),
        memory_padding_mask=padding_mask(src),
        return_attention_weights=True,
    )
    assert hidden.dtype == tf.bfloat16
    assert weights[0]["cross"].dtype == tf.float32
    keras.config.set_dtype_policy("float32")
    reference = kt.Transformer(tiny(**ONE_LAYER))
    reference.build()
    reference.set_weights(model.get_weights())
    # bf16 rounds weights and activations (2^-8 relative) and sums in float32 on every CPU, with
    # bf16 units or emulated: max |Δ logit| 0.041-0.069 over five seeds on an AVX2-only CPU.
    np.testing.assert_allclose(logits.numpy(), reference((src, tgt)).numpy(), atol=0.15)
    keras.config.set_dtype_policy("mixed_bfloat16")
    losses = _fit_once(model, jit_compile=False)
    assert all(np.isfinite(losses))


def test_config_round_trip():
    model = kt.Transformer(tiny(norm_first=True))
    clone = kt.Transformer.from_config(model.get_config())
    assert clone.config == model.config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    assert restored.config == model.config


@pytest.mark.parametrize("tied", [True, pytest.param(False, marks=pytest.mark.slow)])  # a fit each
def test_fused_training_step_equals_keras_step(tied):
    """``Transformer.train_step`` fuses the output projection into the loss;
    loss, metrics and updated weights must be those of Keras' own step."""
    src, tgt = batch(9)
    out = np.concatenate([tgt[:, 1:], np.zeros((3, 1), "int32")], 1)
    sample_weight = np.array([1.0, 0.5, 2.0], "float32")
    config = tiny(tie_embeddings=tied, **ONE_LAYER)
    results = []
    for fused in (True, False):
        keras.utils.set_random_seed(0)
        model = kt.Transformer(config)
        # SGD: Adam would turn rounding noise in gradients that are zero in
        # exact arithmetic (attention key biases) into full-size steps.
        model.compile(
            optimizer=keras.optimizers.SGD(0.5),
            loss=kt.MaskedLabelSmoothedCrossEntropy(),
            metrics=[kt.MaskedAccuracy()],
            fuse_output_and_loss=fused,
        )
        assert model.fuse_output_and_loss is fused
        history = model.fit(
            (src, tgt),
            out,
            sample_weight=sample_weight,
            batch_size=3,
            epochs=3,
            verbose=0,
            shuffle=False,
        )
        results.append((history.history, model.get_weights()))
    (fused_history, fused_weights), (keras_history, keras_weights) = results
    for name in ("loss", "masked_accuracy"):
        np.testing.assert_allclose(fused_history[name], keras_history[name], rtol=1e-5)
    for got, expected in zip(fused_weights, keras_weights):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_loss_weights_take_keras_training_step():
    """``compile`` sees the loss weights among its own arguments and keeps Keras'
    step for them, which applies them: the weighted loss is half the fused step's
    unweighted one (dropout 0, learning rate 0: same forward)."""
    src, tgt = batch(10)
    labels = np.roll(tgt, -1, axis=1)
    model = kt.Transformer(tiny(**ONE_LAYER))
    losses = {}
    for weights in (None, 0.5):
        model.compile(
            optimizer=keras.optimizers.SGD(0.0),
            loss=kt.MaskedLabelSmoothedCrossEntropy(),
            loss_weights=weights,
        )
        assert model.fuse_output_and_loss == (weights is None)
        history = model.fit((src, tgt), labels, batch_size=3, epochs=1, verbose=0, shuffle=False)
        losses[weights] = history.history["loss"][0]
    assert losses[0.5] == pytest.approx(0.5 * losses[None], rel=1e-5)


def test_the_fusion_choice_is_saved_with_the_compile_config(tmp_path):
    """A ``.keras`` file compiles the reloaded model with its saved arguments, an
    explicit ``fuse_output_and_loss`` among them (the default is recomputed)."""
    for choice, expected in ((False, False), (None, True)):
        model = kt.Transformer(tiny())
        model.compile(
            optimizer=kt.paper_adam(d_model=model.config.d_model),
            loss=kt.MaskedLabelSmoothedCrossEntropy(),
            fuse_output_and_loss=choice,
        )
        model.build()
        path = tmp_path / f"{choice}.keras"
        model.save(path)
        reloaded = keras.models.load_model(path)
        assert reloaded.compiled and isinstance(reloaded.optimizer, kt.FusedAdam)
        assert reloaded.fuse_output_and_loss is expected and reloaded.token_mean_loss


def test_other_losses_take_keras_training_step():
    model = kt.Transformer(tiny(**ONE_LAYER))
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    assert not model.fuse_output_and_loss and not model.token_mean_loss
    with pytest.raises(
        ValueError, match="fuse_output_and_loss=True needs loss=MaskedLabelSmoothedCrossEntropy"
    ):
        model.compile(
            optimizer="adam", loss="sparse_categorical_crossentropy", fuse_output_and_loss=True
        )
    src, tgt = batch(10)
    history = model.fit((src, tgt), np.roll(tgt, -1, axis=1), batch_size=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
