"""``token_batches``: sorted by length, a token budget a batch, every sentence once."""

import random

import pytest

from keras_transformer.translate import (
    INPUT_ORDER_BATCH,
    batch_capacity,
    check_batching,
    token_batches,
)


@pytest.mark.parametrize("budget", [1, 7, 40, 300])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_batches_keep_the_budget_and_cover_every_sentence_once(budget, batch_size):
    lengths = [random.Random(seed).randint(1, 60) for seed in range(500)]
    batches = token_batches(lengths, budget, batch_size)
    assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[index] for index in batch)
        assert len(batch) * longest <= budget or len(batch) == 1  # too long: alone
        assert batch_size is None or len(batch) <= batch_size
        assert len(batch) <= batch_capacity(longest, budget, batch_size)  # an XLA batch's rows
    # Shortest first, and full: the next batch's first sentence would have broken the budget.
    order = [lengths[index] for batch in batches for index in batch]
    assert order == sorted(order)
    for batch, following in zip(batches, batches[1:]):
        rows, longest = len(batch) + 1, lengths[following[0]]
        assert rows * longest > budget or (batch_size is not None and rows > batch_size)


def test_equal_lengths_keep_their_input_order_and_long_sentences_go_alone():
    assert token_batches([3, 3, 3, 3], batch_tokens=6) == [[0, 1], [2, 3]]
    assert token_batches([50, 2, 60], batch_tokens=10) == [[1], [0], [2]]
    assert token_batches([], batch_tokens=10) == []


def test_no_budget_is_input_order_in_fixed_batches():
    lengths = list(range(200, 0, -1))
    assert token_batches(lengths, None, 64) == [
        list(range(start, min(start + 64, 200))) for start in range(0, 200, 64)
    ]
    assert token_batches(lengths, None) == token_batches(lengths, None, INPUT_ORDER_BATCH)
    assert batch_capacity(500, None, 5) == 5 and batch_capacity(500, None) == INPUT_ORDER_BATCH


@pytest.mark.parametrize(
    "options, name",
    [
        (dict(batch_tokens=0), "batch_tokens"),
        (dict(batch_tokens=None, batch_size=-1), "batch_size"),
        (dict(batch_tokens=8, window=0), "window"),
    ],
)
def test_options_below_one_are_refused_by_name(options, name):
    with pytest.raises(ValueError, match=f"{name} must be >= 1"):
        check_batching(**options)
