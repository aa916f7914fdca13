"""Compute precisions by name: ``fp32``, ``bf16``, ``fp16``.

The names are the ones configs and command lines use; each maps to a Keras
dtype policy. Weights stay float32 under every policy, so the same trained
weights can be run in any precision (``with_precision``).
"""

from __future__ import annotations

import keras

# training.mixed_precision / --precision names → Keras dtype policies.
PRECISIONS = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def dtype_policy(precision: str) -> str:
    """The Keras dtype policy name of ``precision`` (``"bf16"`` → ``"mixed_bfloat16"``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: use one of {sorted(PRECISIONS)}.")
    return PRECISIONS[precision]


def with_precision(model: keras.Model, precision: str) -> keras.Model:
    """``model`` computing in ``precision``: the same weights in a rebuilt model
    (``model`` itself when it already computes in it).

    Example:
        >>> import keras_transformer as kt
        >>> model = kt.Transformer(kt.TransformerConfig.from_preset("tiny", vocab_size=40))
        >>> model.build()
        >>> with_precision(model, "bf16").dtype_policy.name
        'mixed_bfloat16'
    """
    policy = dtype_policy(precision)
    if model.dtype_policy.name == policy:
        return model
    rebuilt = type(model)(model.config, dtype=policy, name=model.name)
    rebuilt.build()
    rebuilt.set_weights(model.get_weights())
    return rebuilt
