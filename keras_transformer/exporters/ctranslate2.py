"""The model as a CTranslate2 model directory (needs the ``[ct2]`` extra):
``export_ctranslate2(source, "demo-ct2", quantization="int8")``, or
``kt export ctranslate2 --workdir runs/demo --out demo-ct2`` from a checkout.

The result runs with ``ctranslate2.Translator`` on CPU or GPU (greedy or beam
search, batching, int8/float16 weights) without TensorFlow. Feed it the
SentencePiece pieces of each source sentence *without* ``</s>``: the model's
``config.json`` sets ``add_source_eos`` so CTranslate2 appends it, giving the
encoder the same ``s1 .. sn EOS`` input as training
(``keras_transformer.data.encode_sources``); decoding starts from ``<s>``. The
SentencePiece model(s) are copied into the directory::

    import ctranslate2, sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file="demo-ct2/spm_shared.model")
    translator = ctranslate2.Translator("demo-ct2", device="cpu")
    pieces = sp.encode(["the bird watches 1 new tree"], out_type=str)
    result = translator.translate_batch(pieces, beam_size=1, max_input_length=128,
                                        max_decoding_length=128, min_decoding_length=0,
                                        suppress_sequences=[["<pad>"], ["<s>"]])
    print(sp.decode(result[0].hypotheses[0]))

int8 (``--quantization int8``) stores each weight row as int8 with one
scale; CTranslate2 quantizes each input row of a product the same way at run
time. How exactly the products are summed depends on the CPU: Intel MKL
(CTranslate2's choice on Intel CPUs) and oneDNN on CPUs with VNNI sum them
exactly, and the int8 model is then within ~0.01 nats per token of float32.
On other CPUs without VNNI (e.g. AVX2-only AMD EPYC) CTranslate2 uses oneDNN,
whose AVX2 kernels add pairs of products in saturating 16-bit integers: the
same int8 model moves each token's log-probability ~15× more (0.13-0.19 nats
on average on the test models) and changes more greedy outputs. There, prefer
float32: int8 is only slightly faster on such a CPU, and ``CT2_USE_MKL=1``
(MKL runs on AMD CPUs too, and sums exactly) makes int8 several times slower
than oneDNN's. ``CT2_VERBOSE=1`` prints the backend CTranslate2 picked.

Lengths: the position table has ``model.max_length`` rows (128 in the demo)
and CTranslate2 raises an error for a position beyond it, so pass
``max_input_length <= max_length`` (it counts the added ``</s>``: like
``encode_sources(..., max_length)`` it keeps ``max_input_length - 1`` pieces)
and ``max_decoding_length <= max_length``. ``min_decoding_length=0``
and ``suppress_sequences`` with the pad and BOS pieces reproduce
greedy decoding's tokens (``keras_transformer.decoding.decode``) exactly with
``beam_size=1``: CTranslate2's default of 1 forbids an empty translation
(it masks ``</s>`` at the first step), and without suppression it may emit
pad or BOS, which our decoders never do. (CTranslate2 renormalises a step's
log-probabilities over the tokens it leaves: its score of a sequence adds
``-log(1 - p(pad) - p(BOS))`` per token to our decoders' score, the model's
own log-probability; ``score_batch`` gives that one.)

How the Keras weights map onto CTranslate2's ``TransformerSpec``:

* ``pre_norm = config.norm_first``: ``False`` is the paper's post-LN
  (``LN(x + F(x))``, no final LayerNorm); ``True`` adds the stacks' final norm.
* LayerNorm epsilon: ``config.layer_norm_epsilon`` goes into ``config.json``
  (CTranslate2's own default differs).
* Positions: CTranslate2's built-in sinusoid is the tensor2tensor table (all
  sines then all cosines, positions counted from 1); ours interleaves sin/cos
  from position 0 (or, with ``position_encoding="halves"``, puts Marian's
  sines before its cosines, from position 0), so our table is stored
  explicitly. CTranslate2 adds row ``t`` to the token at position ``t``
  (row 0 to the first source token and to the decoder start token), like
  ``PositionalEmbedding``: no offset.
* Embeddings are multiplied by ``scale_embeddings``: ``sqrt(d_model)``, or
  the config's ``embedding_scale`` (CTranslate2 stores the factor itself).
* Activation: ReLU, GELU (erf) or Swish (``"swish"``/``"silu"``).
* ``final_logits_bias``: the projection's bias (summed with the untied
  projection's own bias).
* Decoder start: ``decoder_start_token`` is the piece of ``bos_id`` (the pad
  piece for a model that starts from the pad id).
* Dense kernels are ``[in, out]`` in Keras and ``[out, in]`` in CTranslate2.
  Self-attention Q, K, V are fused into one ``[3 d, d]`` linear;
  cross-attention has the query linear, then fused K, V.
* Tied output projection: the target embedding matrix without bias;
  untied: ``output_projection``'s kernel (transposed) and bias. Shared
  weights are stored once (CTranslate2 aliases equal variables).
* Vocabularies: the SentencePiece pieces in id order (``<pad>``, ``<unk>``,
  ``<s>``, ``</s>`` first); a model wider than its tokenizer gets filler
  pieces ``<unused_N>`` for the extra ids.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

try:
    import ctranslate2
    from ctranslate2.converters import Converter
    from ctranslate2.converters.utils import fuse_linear
    from ctranslate2.specs import common_spec, transformer_spec
except ImportError as error:  # pragma: no cover - depends on the extras installed
    raise ImportError(
        "The CTranslate2 export needs the ctranslate2 package: "
        "pip install 'keras-transformer-nmt[ct2]'."
    ) from error
import numpy as np

from keras_transformer.exporters.serving_files import write_tokenizer_files
from keras_transformer.files import replace_directory, staging_directory
from keras_transformer.progress import progress_bar
from keras_transformer.tokenization import SubwordTokenizer
from keras_transformer.workdir import as_trained_model

log = logging.getLogger(__name__)

QUANTIZATIONS = ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES

_ACTIVATIONS = {
    "relu": common_spec.Activation.RELU,
    # keras.activations.gelu defaults to the exact (erf) form.
    "gelu": common_spec.Activation.GELU,
    "swish": common_spec.Activation.SWISH,
    "silu": common_spec.Activation.SWISH,
}


def _array(value) -> np.ndarray:
    """A Keras variable (or NumPy table) as a float32 NumPy array."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    return np.ascontiguousarray(np.asarray(value, dtype=np.float32))


def _set_linear(spec: common_spec.LinearSpec, dense) -> None:
    spec.weight = np.ascontiguousarray(_array(dense.kernel).T)  # [in, out] → [out, in]
    if dense.bias is not None:
        spec.bias = _array(dense.bias)


def _linear(dense) -> common_spec.LinearSpec:
    spec = common_spec.LinearSpec()
    _set_linear(spec, dense)
    return spec


def _set_layer_norm(spec: common_spec.LayerNormSpec, norm) -> None:
    if norm.gamma is None or norm.beta is None:
        raise ValueError(f"LayerNorm {norm.name} needs both scale and center to be converted.")
    spec.gamma = _array(norm.gamma)
    spec.beta = _array(norm.beta)


def _set_self_attention(spec, attention, norm) -> None:
    fuse_linear(
        spec.linear[0],
        [
            _linear(attention.query_dense),
            _linear(attention.key_dense),
            _linear(attention.value_dense),
        ],
    )
    _set_linear(spec.linear[1], attention.output_dense)
    _set_layer_norm(spec.layer_norm, norm)


def _set_cross_attention(spec, attention, norm) -> None:
    _set_linear(spec.linear[0], attention.query_dense)
    fuse_linear(spec.linear[1], [_linear(attention.key_dense), _linear(attention.value_dense)])
    _set_linear(spec.linear[2], attention.output_dense)
    _set_layer_norm(spec.layer_norm, norm)


def _set_feed_forward(spec, layer) -> None:
    _set_linear(spec.linear_0, layer.feed_forward.inner_dense)
    _set_linear(spec.linear_1, layer.feed_forward.outer_dense)
    _set_layer_norm(spec.layer_norm, layer.feed_forward_norm)


def _set_embedding_input(spec, embedding, max_length: int) -> None:
    """The embedding scale (√d_model, or the config's ``embedding_scale``)
    and our position table as it is (interleaved or halves, from 0)."""
    spec.scale_embeddings = float(embedding.scale)
    spec.position_encodings.encodings = _array(embedding.position_table)[:max_length]


def vocabulary(tokenizer, size: int) -> list[str]:
    """The tokenizer's pieces in id order, padded to the model's ``size`` ids."""
    pieces = [tokenizer.piece(i) for i in range(tokenizer.vocab_size)]
    if size < len(pieces):
        raise ValueError(
            f"The model has {size} token ids but its tokenizer {len(pieces)} pieces: "
            "they do not belong together."
        )
    if isinstance(tokenizer, SubwordTokenizer):
        expected = {
            tokenizer.pad_id: "<pad>",
            tokenizer.unk_id: "<unk>",
            tokenizer.bos_id: "<s>",
            tokenizer.eos_id: "</s>",
        }
        actual = {i: pieces[i] for i in expected}
        if actual != expected:
            raise ValueError(f"Reserved pieces are {actual}, expected {expected}.")
    taken = set(pieces)
    extra = (f"<unused_{i}>" for i in range(len(pieces), size))
    pieces += [piece for piece in extra if piece not in taken]
    if len(pieces) != size:  # only if a piece was literally named <unused_N>
        raise ValueError("Could not name the model's extra token ids uniquely.")
    return pieces


class KerasTransformerConverter(Converter):
    """CTranslate2's converter for a ``keras_transformer.Transformer``: its ``TransformerSpec``.

    Args:
        model: the trained (built) ``Transformer``.
        src_tokenizer, tgt_tokenizer: its ``SubwordTokenizer``s (vocabularies).
        files: files to copy into the model directory, ``{name: path}``
            (the SentencePiece models).

    Example:
        >>> from keras_transformer import Workdir
        >>> trained = Workdir("runs/demo").load()
        >>> converter = KerasTransformerConverter(trained.model, trained.src_tokenizer,
        ...                                       trained.tgt_tokenizer)
        >>> converter.convert("demo-ct2", quantization="int8")
        'demo-ct2'
    """

    def __init__(self, model, src_tokenizer, tgt_tokenizer, files: dict[str, Path] | None = None):
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.files = dict(files or {})

    def _load(self) -> transformer_spec.TransformerSpec:
        model, c = self.model, self.model.config
        if not model.built:
            model.build()
        if c.activation not in _ACTIVATIONS:
            raise ValueError(f"activation {c.activation!r} has no CTranslate2 equivalent.")
        spec = transformer_spec.TransformerSpec.from_config(
            (c.num_encoder_layers, c.num_decoder_layers),
            c.num_heads,
            pre_norm=c.norm_first,
            activation=_ACTIVATIONS[c.activation],
        )

        encoder, decoder = spec.encoder, spec.decoder
        _set_embedding_input(encoder, model.source_embedding, c.max_length)
        encoder.embeddings[0].weight = _array(model.source_embedding.embeddings)
        for layer_spec, layer in zip(encoder.layer, model.encoder.layer_stack, strict=True):
            _set_self_attention(
                layer_spec.self_attention, layer.self_attention, layer.self_attention_norm
            )
            _set_feed_forward(layer_spec.ffn, layer)
        if c.norm_first:
            _set_layer_norm(encoder.layer_norm, model.encoder.final_norm)

        _set_embedding_input(decoder, model.target_embedding, c.max_length)
        decoder.embeddings.weight = _array(model.target_embedding.embeddings)
        for layer_spec, layer in zip(decoder.layer, model.decoder.layer_stack, strict=True):
            _set_self_attention(
                layer_spec.self_attention, layer.self_attention, layer.self_attention_norm
            )
            _set_cross_attention(
                layer_spec.attention, layer.cross_attention, layer.cross_attention_norm
            )
            _set_feed_forward(layer_spec.ffn, layer)
        if c.norm_first:
            _set_layer_norm(decoder.layer_norm, model.decoder.final_norm)
        if model.output_projection is None:  # tied: logits = h · Eᵀ (+ final_logits_bias)
            decoder.projection.weight = _array(model.target_embedding.embeddings)
        else:
            _set_linear(decoder.projection, model.output_projection)
        if model.final_logits_bias is not None:  # added to the projection's own bias, if any
            bias = _array(model.final_logits_bias)
            if model.output_projection is not None and model.output_projection.bias is not None:
                bias = bias + _array(model.output_projection.bias)
            decoder.projection.bias = bias

        spec.register_source_vocabulary(vocabulary(self.src_tokenizer, c.src_vocab_size))
        spec.register_target_vocabulary(vocabulary(self.tgt_tokenizer, c.tgt_vocab_size))
        config = spec.config
        config.layer_norm_epsilon = float(c.layer_norm_epsilon)
        config.unk_token = self.src_tokenizer.piece(c.unk_id)
        config.bos_token = self.tgt_tokenizer.piece(c.bos_id)
        config.eos_token = self.tgt_tokenizer.piece(c.eos_id)
        # The pad piece where the decoder starts from the pad id (bos_id == pad_id).
        config.decoder_start_token = self.tgt_tokenizer.piece(c.bos_id)
        config.add_source_bos = False
        config.add_source_eos = True  # the encoder was trained on  s1 .. sn </s>
        for name, path in sorted(self.files.items()):
            spec.register_file(str(path), name)
        return spec


def export_ctranslate2(
    source,
    out: str | os.PathLike,
    *,
    quantization: str | None = None,
    force: bool = False,
    progress: bool = False,
) -> Path:
    """Convert ``source`` into the CTranslate2 model directory ``out``, written atomically.

    The model is written to a staging directory beside ``out`` and renamed
    into place, so ``out`` never holds a half-written model. An existing
    ``out`` is refused (``FileExistsError``) unless ``force``; then the old
    directory is moved aside, the new one renamed in, and the old one
    deleted. The SentencePiece model(s) are copied in.

    Args:
        source: a ``TrainedModel``, ``Workdir`` or workdir path.
        out: the directory to write.
        quantization: CTranslate2's weight type (``int8``, ``float16``, ...;
            default: float32 as trained).
        force: replace an existing ``out``.
        progress: show a progress bar (needs ``tqdm``).

    Returns:
        ``out``, as a ``Path``.

    Raises:
        ValueError: ``quantization`` is not one of ``QUANTIZATIONS``.
        FileExistsError: ``out`` exists and ``force`` is off.

    Example::

        from keras_transformer.exporters import export_ctranslate2
        export_ctranslate2("runs/demo", "demo-ct2", quantization="int8")
    """
    out = Path(out)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}.")
    if out.exists() and not force:
        raise FileExistsError(f"{out} already exists; pass force (--force) to replace it.")
    with progress_bar(progress, total=2, desc="CTranslate2", unit="step") as bar:
        bar.set_postfix_str("loading")
        trained = as_trained_model(source, "fp32")
        bar.update()
        bar.set_postfix_str("converting")
        staging = staging_directory(out)
        try:
            with tempfile.TemporaryDirectory(prefix="keras_transformer_spm_") as spm_dir:
                src_path, tgt_path = write_tokenizer_files(trained, Path(spm_dir))
                files = {src_path.name: src_path, tgt_path.name: tgt_path}
                converter = KerasTransformerConverter(
                    trained.model, trained.src_tokenizer, trained.tgt_tokenizer, files
                )
                # `force` here only lets the converter write into the empty staging dir.
                converter.convert(str(staging), quantization=quantization, force=True)
            if out.exists() and not force:
                raise FileExistsError(f"{out} appeared during the conversion; not replacing it.")
            replace_directory(staging, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        bar.update()
    log.info(
        "wrote %s (ctranslate2 %s, quantization %s)",
        out,
        ctranslate2.__version__,
        quantization or "none",
    )
    return out
