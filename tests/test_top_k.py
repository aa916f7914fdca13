"""``kernels.top_k``: the values and indices of ``tf.math.top_k``, ties included."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import kernels
from keras_transformer.kernels.top_k import BLOCK


def _same_as_tf(values, k, block=BLOCK):
    expected_values, expected_indices = tf.math.top_k(values, k=k)
    got_values, got_indices = kernels.top_k(tf.constant(values), k, block=block)
    assert got_indices.dtype == tf.int32
    np.testing.assert_array_equal(got_values.numpy(), expected_values.numpy())
    np.testing.assert_array_equal(got_indices.numpy(), expected_indices.numpy())


@pytest.mark.parametrize(
    "rows, n, k",
    [(1, 32000, 16), (5, 32000, 8), (3, 4 * 6 * 64, 6), (2, 24001, 16), (4, 8000 * 4 + 37, 3)],
)
def test_equals_tf_top_k_on_random_scores(rows, n, k):
    rng = np.random.default_rng(n + k)
    _same_as_tf(rng.standard_normal([rows, n]).astype(np.float32), k)


def test_ties_keep_the_lower_index_first():
    """Few distinct values: most candidates tie, across and inside blocks, and
    the blocks' maxima tie too."""
    rng = np.random.default_rng(0)
    values = rng.integers(0, 4, size=[6, 20000]).astype(np.float32)
    values[1] = 7.0  # a whole row of equal values
    values[2, -5:] = 9.0  # the best in the last block, not a multiple of the block
    for k in (1, 5, 16, 40):
        _same_as_tf(values, k)
        _same_as_tf(values[:, :19990], k)  # padded with -inf


def test_infinities_and_masked_scores():
    """Beam search's struck candidates score a finite "-inf"; padding adds the
    real -inf, which must come after a row's own -inf."""
    rng = np.random.default_rng(1)
    values = rng.standard_normal([4, 10001]).astype(np.float32)
    values[0, :] = -np.inf
    values[0, [3, 9000]] = 1.0
    values[1, :] = np.finfo(np.float32).min
    values[2, ::2] = -np.inf
    _same_as_tf(values, 16)


def test_short_rows_take_tf_top_k_and_empty_batches_work():
    _same_as_tf(np.random.default_rng(2).standard_normal([3, 100]).astype(np.float32), 4)
    got_values, got_indices = kernels.top_k(tf.zeros([0, 32000]), 16)
    assert got_values.shape == (0, 16) and got_indices.shape == (0, 16)


def _best16(x):
    return kernels.top_k(x, 16)


def test_graph_runs_top_k_over_blocks_only():
    best = tf.function(_best16, input_signature=[tf.TensorSpec([None, 32000], tf.float32)])
    graph = best.get_concrete_function().graph
    top_k_inputs = [op.inputs[0].shape[-1] for op in graph.get_operations() if op.type == "TopKV2"]
    assert top_k_inputs and max(top_k_inputs) < 32000 // 4


@pytest.mark.xla_cpu
def test_compiles_with_xla():
    values = tf.random.stateless_normal([3, 32000], seed=[4, 5])
    expected = tf.math.top_k(values, k=16)
    got = tf.function(_best16, jit_compile=True)(values)
    np.testing.assert_array_equal(got[0].numpy(), expected.values.numpy())
    np.testing.assert_array_equal(got[1].numpy(), expected.indices.numpy())


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="static n"):
        kernels.top_k(tf.zeros([2, 3, 4]), 2)
    with pytest.raises(ValueError, match="between 1 and the row length"):
        kernels.top_k(tf.zeros([2, 4]), 5)
