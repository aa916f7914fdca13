"""Weighted mixing of several prepared corpora: each read on its own, then sampled by weight.

Each corpus is shuffled through its own buffer and, with ``repeat``,
repeated on its own (a small corpus never runs out);
``tf.data.Dataset.sample_from_datasets`` then draws each example from
corpus ``k`` with probability ``weights[k] / sum(weights)``.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from keras_transformer.data.batching import _BatchPlan
from keras_transformer.data.shards.manifest import PreparedShards


def _check_mix(corpora: list[PreparedShards], weights) -> list[float] | None:
    """The weights of several prepared corpora, checked; ``None`` for one corpus without."""
    if weights is None:
        if len(corpora) > 1:
            raise ValueError(
                f"{len(corpora)} prepared corpora need weights (one positive number each)."
            )
        return None
    weights = list(weights)
    if len(weights) != len(corpora) or not all(
        isinstance(weight, (int, float)) and not isinstance(weight, bool) and weight > 0
        for weight in weights
    ):
        raise ValueError(
            f"weights={weights!r}: give one positive number for each of the {len(corpora)} "
            "prepared corpora."
        )
    first = corpora[0]
    for other in corpora[1:]:
        for what in ("max_src_length", "max_tgt_length", "special_ids"):
            if getattr(other, what) != getattr(first, what):
                raise ValueError(
                    f"{other.directory} was prepared with {what}={getattr(other, what)!r} and "
                    f"{first.directory} with {getattr(first, what)!r}: prepare them alike."
                )
        for side in ("src_tokenizer", "tgt_tokenizer"):
            if other.fingerprint.get(side) != first.fingerprint.get(side):
                raise ValueError(
                    f"{other.directory} and {first.directory} were prepared with different "
                    f"{side.replace('_', ' ')}s: prepare them with the same ones."
                )
    return [float(weight) for weight in weights]


def _on_its_own(examples: tf.data.Dataset, plan: _BatchPlan, seed: int | None) -> tf.data.Dataset:
    """One corpus's examples, shuffled (``seed``, training only) and repeated as ``plan`` asks."""
    if plan.training and plan.shuffle_buffer > 0:
        examples = examples.shuffle(plan.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if plan.repeat:
        examples = examples.repeat()
    return examples


def _mixed(
    streams: list[tf.data.Dataset], weights: list[float], plan: _BatchPlan
) -> tf.data.Dataset:
    """Batches of examples drawn from ``streams`` (each ``_on_its_own``) by ``weights``."""
    mixed = tf.data.Dataset.sample_from_datasets(
        streams, weights=weights, seed=plan.seed, stop_on_empty_dataset=False
    )
    # Each corpus is shuffled and repeated on its own.
    return dataclasses.replace(plan, shuffle_buffer=0, repeat=False).apply(mixed)
