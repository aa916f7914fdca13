"""The model learns: a tiny Transformer fits a copy task with model.fit."""

import numpy as np

import keras_transformer as kt


def copy_task(num, rng, vocab=16, min_len=2, max_len=8):
    """Source: random tokens; target: the same tokens, then EOS."""
    src = np.zeros((num, max_len), "int32")
    tgt_in = np.zeros((num, max_len + 1), "int32")
    tgt_out = np.zeros((num, max_len + 1), "int32")
    for i in range(num):
        length = rng.integers(min_len, max_len + 1)
        tokens = rng.integers(4, vocab, size=length)
        src[i, :length] = tokens
        tgt_in[i, 0] = kt.BOS_ID
        tgt_in[i, 1 : length + 1] = tokens
        tgt_out[i, :length] = tokens
        tgt_out[i, length] = kt.EOS_ID
    return (src, tgt_in), tgt_out


def test_tiny_transformer_fits_copy_task():
    rng = np.random.default_rng(0)
    x, y = copy_task(8192, rng)
    x_valid, y_valid = copy_task(512, rng)
    config = kt.TransformerConfig.from_preset(
        "tiny", vocab_size=16, dropout=0.0, d_ff=128, max_length=16
    )
    model = kt.Transformer(config)
    model.compile(
        optimizer=kt.paper_adam(
            kt.TransformerSchedule(config.d_model, warmup_steps=100, scale=0.5)
        ),
        loss=kt.MaskedLabelSmoothedCrossEntropy(label_smoothing=0.0),
        metrics=[kt.MaskedAccuracy()],
        steps_per_execution=32,
    )
    model.fit(x, y, batch_size=64, epochs=6, verbose=0)
    result = model.evaluate(x_valid, y_valid, verbose=0, return_dict=True)
    assert result["masked_accuracy"] >= 0.99, result
