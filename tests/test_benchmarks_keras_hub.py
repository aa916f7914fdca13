"""The keras-hub reference model of benchmarks/keras_hub_reference.py decodes what it
should: its cached steps and sampler loop equal full recomputation, beams stay with
their source row, XLA agrees, and training reaches every weight. Tiny sizes only.

Random tied-embedding models tend to repeat one token under greedy decoding, so the
greedy check alone could miss a wrong position or cache slot; the logits check feeds
a varied target through the caches to cover that."""

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("keras_hub")

import keras_transformer as kt  # noqa: E402
from benchmarks import keras_hub_reference as khr  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.programs]

WORKLOAD = khr.Workload(
    vocab=40, d_model=16, layers=2, heads=2, d_ff=32, dropout=0.1, batch=2, length=6
)
SOURCE = np.array([[5, 6, 7, 8, 3, 0], [9, 10, 3, 0, 0, 0]], np.int32)
STEPS = 8


@pytest.fixture(scope="module")
def model():
    return khr.build_model(WORKLOAD, seed=3)


def full_recompute_greedy(model, source, steps):
    """Argmax of the full teacher-forced pass, re-run from scratch for every new token.
    The target mask is all ones: generated ids may equal PAD with random weights."""
    ids = np.full((source.shape[0], 1), kt.BOS_ID, np.int32)
    for _ in range(steps):
        logits = model.forward(source, ids, np.ones_like(ids, bool), training=False)
        ids = np.concatenate(
            [ids, np.argmax(logits[:, -1], axis=-1).astype(np.int32)[:, None]], axis=1
        )
    return ids[:, 1:]


def test_cached_greedy_equals_full_recompute(model):
    cached = model.generate(SOURCE, STEPS, khr.make_sampler("greedy")).numpy()
    assert cached.shape == (2, STEPS)
    np.testing.assert_array_equal(cached, full_recompute_greedy(model, SOURCE, STEPS))


def test_cached_step_logits_equal_full_pass(model):
    """Every position's logits through prefill + cached decoder steps equal the full pass."""
    rng = np.random.default_rng(0)
    target = rng.integers(4, WORKLOAD.vocab, size=(2, STEPS)).astype(np.int32)
    target[:, 0] = kt.BOS_ID
    memory, source_mask = model.encode(SOURCE, training=False)
    self_caches, cross_caches = model.prefill(memory, source_mask, target[:, :1], STEPS)
    steps = []
    for position in range(STEPS):
        hidden, self_caches, _ = model.decoder_step(
            target[:, position : position + 1],
            position,
            memory,
            source_mask,
            self_caches,
            cross_caches,
        )
        steps.append(model.logits(hidden)[:, 0])
    full = model.forward(SOURCE, target, np.ones_like(target, bool), training=False)
    np.testing.assert_allclose(np.stack(steps, axis=1), full, atol=1e-5, rtol=1e-5)


def test_greedy_same_under_xla_and_tf_function(model):
    eager = model.generate(SOURCE, STEPS, khr.make_sampler("greedy")).numpy()
    for xla in (False, True):
        compiled = khr.decode_function(model, "greedy", STEPS, xla=xla)(tf.constant(SOURCE)).numpy()
        np.testing.assert_array_equal(compiled, eager)


def test_beam_rows_follow_their_own_source(model):
    """Memory and cross-attention caches are repeated outside the sampler: a row decoded in a
    batch must equal the same row decoded alone, and beam1 must be greedy."""
    both = model.generate(SOURCE, STEPS, khr.make_sampler("beam4")).numpy()
    assert both.shape == (2, STEPS)
    for row in range(2):
        alone = model.generate(SOURCE[row : row + 1], STEPS, khr.make_sampler("beam4")).numpy()
        np.testing.assert_array_equal(both[row : row + 1], alone)
    greedy = model.generate(SOURCE, STEPS, khr.make_sampler("greedy")).numpy()
    np.testing.assert_array_equal(
        model.generate(SOURCE, STEPS, khr.make_sampler("beam1")).numpy(), greedy
    )


def test_training_step_reaches_every_weight():
    model = khr.build_model(WORKLOAD, seed=0)
    source, target_in, target = WORKLOAD.training_batch()
    assert source.shape == target_in.shape == (WORKLOAD.batch, WORKLOAD.length)
    assert source.max() < WORKLOAD.vocab and (target_in[:, 0] == kt.BOS_ID).all()
    loss_fn = kt.MaskedLabelSmoothedCrossEntropy()
    with tf.GradientTape() as tape:
        loss = loss_fn(target, model((source, target_in), training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    missing = [v.path for v, g in zip(model.trainable_variables, grads) if g is None]
    assert not missing
    # Shared source/target/output embedding, encoder and decoder (with cross-attention) stacks.
    assert sum("embedding" in v.path for v in model.trainable_variables) == 1
    assert any("cross_attention" in v.path for v in model.trainable_variables)


def test_train_step_time_smoke_keys():
    row = khr.train_step_time(jit=False, steps=1, workload=WORKLOAD)
    assert row["system"] == "keras-hub" and row["xla"] is False
    assert row["ms_per_step"] > 0 and row["min_ms_per_step"] <= row["ms_per_step"]
    assert row["target_tokens_per_s"] > 0
    # MFU from this workload's own FLOP count, whatever its sizes.
    assert row["matmul_gflop_per_step"] == pytest.approx(WORKLOAD.matmul_flops_per_step() / 1e9)
    assert row["mfu"] > 0


def test_decode_rows_smoke_keys():
    rows = khr.decode_rows(
        jit=False, batches=(2,), steps_list=(4,), beam=4, repeats=1, workload=WORKLOAD
    )
    assert [(r["decoder"], r["batch"], r["steps"]) for r in rows] == [
        ("greedy", 2, 4),
        ("beam4", 2, 4),
    ]
    for row in rows:
        assert row["system"] == "keras-hub" and row["xla"] is False
        assert 0 < row["min_s"] <= row["median_s"]
