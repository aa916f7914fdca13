"""Independent NumPy implementations of the paper's formulas, for the tests."""

import numpy as np


def softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def attention(q, k, v, mask=None):
    """softmax(QKᵀ/√d_k + M)V with M = -inf where mask is False."""
    d_k = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)
    if mask is not None:
        mask = np.broadcast_to(mask, scores.shape)
        scores = np.where(mask, scores, -np.inf)
        all_masked = ~mask.any(axis=-1, keepdims=True)
        scores = np.where(all_masked, 0.0, scores)
        weights = softmax(scores)
        weights = np.where(all_masked, 0.0, weights)
    else:
        weights = softmax(scores)
    return weights @ v, weights


def positional_table(length, d_model):
    table = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(0, d_model, 2):
            table[pos, i] = np.sin(pos / 10000 ** (i / d_model))
            if i + 1 < d_model:
                table[pos, i + 1] = np.cos(pos / 10000 ** (i / d_model))
    return table


def marian_positional_table(length, d_model):
    """Marian's table (Hugging Face's ``MarianSinusoidalPositionalEmbedding``):
    column j has the angle pos / 10000^(2·(j // 2) / d); the sines of the even
    columns fill the first ceil(d/2) columns, the cosines of the odd ones the rest."""
    angles = np.array(
        [
            [pos / np.power(10000, 2 * (j // 2) / d_model) for j in range(d_model)]
            for pos in range(length)
        ]
    )
    sentinel = d_model // 2 if d_model % 2 == 0 else d_model // 2 + 1
    table = np.zeros((length, d_model))
    table[:, :sentinel] = np.sin(angles[:, 0::2])
    table[:, sentinel:] = np.cos(angles[:, 1::2])
    return table


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def dense(x, layer):
    out = x @ layer.kernel.numpy()
    if layer.use_bias:
        out = out + layer.bias.numpy()
    return out


def mha(layer, query, value, mask=None):
    """Multi-head attention from a keras_transformer MultiHeadAttention's weights."""
    h, depth = layer.num_heads, layer.depth

    def split(x):
        b, t, _ = x.shape
        return x.reshape(b, t, h, depth).transpose(0, 2, 1, 3)

    q = split(dense(query, layer.query_dense))
    k = split(dense(value, layer.key_dense))
    v = split(dense(value, layer.value_dense))
    if mask is not None:
        mask = mask[:, None]  # head axis
    out, weights = attention(q, k, v, mask)
    b, _, t, _ = out.shape
    out = out.transpose(0, 2, 1, 3).reshape(b, t, h * depth)
    return dense(out, layer.output_dense), weights


def ffn(layer, x, activation="relu"):
    hidden = x @ layer.inner_dense.kernel.numpy() + layer.inner_dense.bias.numpy()
    if activation == "relu":
        hidden = np.maximum(hidden, 0.0)
    elif activation in ("swish", "silu"):  # x·sigmoid(x)
        hidden = hidden / (1.0 + np.exp(-hidden))
    elif activation == "gelu":
        from math import erf, sqrt

        hidden = 0.5 * hidden * (1 + np.vectorize(erf)(hidden / sqrt(2)))
    else:
        raise ValueError(f"no reference for activation {activation!r}")
    return hidden @ layer.outer_dense.kernel.numpy() + layer.outer_dense.bias.numpy()


def norm(layer, x):
    return layer_norm(x, layer.gamma.numpy(), layer.beta.numpy(), layer.epsilon)


def sublayer(x, f, norm_layer, norm_first):
    """The paper's LN(x + F(x)) or pre-LN x + F(LN(x)) (no dropout)."""
    if norm_first:
        return x + f(norm(norm_layer, x))
    return norm(norm_layer, x + f(x))


def encoder_layer(layer, x, padding):
    mask = padding[:, None, :]
    x = sublayer(
        x,
        lambda h: mha(layer.self_attention, h, h, mask)[0],
        layer.self_attention_norm,
        layer.norm_first,
    )
    return sublayer(
        x,
        lambda h: ffn(layer.feed_forward, h, layer.activation),
        layer.feed_forward_norm,
        layer.norm_first,
    )


def decoder_layer(layer, x, memory, memory_padding):
    t = x.shape[1]
    causal = np.tril(np.ones((t, t), bool))[None]
    x = sublayer(
        x,
        lambda h: mha(layer.self_attention, h, h, causal)[0],
        layer.self_attention_norm,
        layer.norm_first,
    )
    x = sublayer(
        x,
        lambda h: mha(layer.cross_attention, h, memory, memory_padding[:, None, :])[0],
        layer.cross_attention_norm,
        layer.norm_first,
    )
    return sublayer(
        x,
        lambda h: ffn(layer.feed_forward, h, layer.activation),
        layer.feed_forward_norm,
        layer.norm_first,
    )
