"""Small models the decoding tests share: random weights spread so that they predict
varied tokens."""

import keras
import numpy as np

import keras_transformer as kt

VOCAB = 30


def peaked_tiny_model(seed: int, kernel_scale: float, eos_bias: float = 0.0) -> kt.Transformer:
    """The ``tiny`` preset (vocabulary 30, no dropout, an untied output projection) with
    its output kernel scaled by ``kernel_scale`` (fairly peaked predictions) and
    ``eos_bias`` added to EOS's logit (EOS now and then)."""
    keras.utils.set_random_seed(seed)
    config = kt.TransformerConfig.from_preset(
        "tiny", vocab_size=VOCAB, dropout=0.0, max_length=64, tie_embeddings=False
    )
    model = kt.Transformer(config)
    model.build()
    kernel = model.output_projection.kernel
    kernel.assign(kernel * kernel_scale)
    if eos_bias:
        bias = model.output_projection.bias
        bias.assign(bias + eos_bias * np.eye(VOCAB, dtype=np.float32)[kt.EOS_ID])
    return model
