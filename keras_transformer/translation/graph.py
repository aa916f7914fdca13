"""One translation graph: the decoders over a model, each a ``tf.function`` built once.

``TranslationGraph`` owns the search (all of a search's hypotheses), prefix,
sample, n-best and score functions of a model under one ``KernelChoice``.
``Translator`` calls them in this process; the SavedModel export calls the
same functions inside its signatures, which add the text around them
(tokenization, detokenization, blank sentences). ``search_and_limits`` reads
the keyword shortcuts (``beam_size=4, alpha=0.6``) that the translators and
the export take.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from keras_transformer.decoding import (
    Beam,
    DecodeOutput,
    Greedy,
    KernelChoice,
    Limits,
    Sample,
    SampleParams,
    Search,
    check_beam_size,
    check_decode_parts,
    check_search,
    check_stopping,
    decode,
    decode_in_parts,
    score_targets,
)
from keras_transformer.layers.masks import padding_mask, target_padding_mask
from keras_transformer.translation.text import n_best_texts

IDS = tf.TensorSpec([None, None], tf.int32)
# A request's sampling parameters, scalars: top_k, top_p, temperature, seed (SampleParams).
SAMPLE_SPECS = (
    tf.TensorSpec([], tf.int32),
    tf.TensorSpec([], tf.float32),
    tf.TensorSpec([], tf.float32),
    tf.TensorSpec([], tf.int64),
)
SEARCH_FIELDS = ("beam_size", "alpha", "stopping")
LIMIT_FIELDS = ("max_length", "extra_length", "min_length")
# A search's fields as the translators' progress files name them (``search_identity``).
_IDENTITY_DEFAULTS = dict(
    beam_size=1, alpha=0.6, n_best=1, sampling=False, top_k=0, top_p=1.0, temperature=1.0, seed=0
)


def search_and_limits(
    search: Search | None = None,
    limits: Limits | None = None,
    default: Search | None = None,
    **fields,
) -> tuple[Search, Limits]:
    """``search`` and ``limits`` with keyword shortcuts applied: ``beam_size=4, alpha=0.6``.

    ``beam_size``, ``alpha`` and ``stopping`` replace the search's (a beam of
    1 is ``Greedy()``); ``max_length``, ``extra_length`` and ``min_length``
    replace the limits'.

    Args:
        search: ``Greedy()``, ``Beam(...)`` or ``Sample(...)`` (``None``: ``default``).
        limits: the ``Limits`` (``None``: ``Limits()``).
        default: the search when none is given (``None``: ``Greedy()``).
        **fields: the shortcuts.

    Returns:
        ``(search, limits)``, checked.

    Raises:
        TypeError: a field that is not a shortcut, or ``search`` is not a search.
        ValueError: a value out of range, or a beam's field given to a ``Sample``.

    Example:
        >>> search_and_limits(beam_size=4, min_length=1)
        (Beam(size=4, alpha=0.6, stopping='heuristic'), Limits(max_length=None, extra_length=50, min_length=1))
    """  # noqa: E501
    unknown = sorted(set(fields) - set(SEARCH_FIELDS) - set(LIMIT_FIELDS))
    if unknown:
        raise TypeError(
            f"unknown decoding option(s) {', '.join(unknown)}: use "
            f"{', '.join(SEARCH_FIELDS + LIMIT_FIELDS)}, or pass Greedy(), Beam(...), "
            "Sample(...) and Limits(...)."
        )
    search = search or default or Greedy()
    check_search(search)
    limits = limits or Limits()
    changes = {name: fields[name] for name in LIMIT_FIELDS if name in fields}
    if changes:
        limits = dataclasses.replace(limits, **changes)
    beam = {name: fields[name] for name in SEARCH_FIELDS if name in fields}
    if not beam:
        return search, limits
    if isinstance(search, Sample):
        raise ValueError(
            f"{', '.join(beam)}: a Sample search draws one hypothesis; give Greedy() or Beam()."
        )
    size = beam.get("beam_size", search.hypotheses)
    alpha = beam.get("alpha", getattr(search, "alpha", 0.6))
    stopping = check_stopping(beam.get("stopping", getattr(search, "stopping", "heuristic")))
    if check_beam_size(size) == 1:
        Beam(2, alpha, stopping)  # checks alpha for a greedy translator as for a beam
        return Greedy(), limits
    return Beam(size, alpha, stopping), limits


def search_identity(search: Search, limits: Limits) -> dict:
    """The search and limits as JSON values, in the fields a translator's progress file holds.

    Args:
        search: the translator's search.
        limits: its limits.

    Returns:
        ``{"beam_size": ..., "alpha": ..., ...}``: the same for the same search.

    Example:
        >>> search_identity(Beam(size=2), Limits())["beam_size"]
        2
    """
    fields = dict(_IDENTITY_DEFAULTS)
    if isinstance(search, Beam):
        fields.update(beam_size=search.size, alpha=search.alpha)
    if isinstance(search, Sample):
        fields.update(sampling=True, **dataclasses.asdict(search))
    stopping = getattr(search, "stopping", "heuristic")
    return {**fields, **dataclasses.asdict(limits), "stopping": stopping}


def _name(search: Search) -> str:
    """The name a search's decoder function has in a graph: ``greedy``, ``beam_4``, ``sample``."""
    if isinstance(search, Beam):
        return f"beam_{search.size}"
    return "sample" if isinstance(search, Sample) else "greedy"


class TranslationGraph(tf.Module):
    """The decoders of a model as ``tf.function``s of fixed input signatures, each built once.

    ``decoder(kind)`` is the decoder a batch's parts call
    (``decoding.decode_in_parts``), ``decode(kind, ...)`` runs a batch in
    ``decode_parts`` parts, and ``function(kind)`` is that as one
    ``tf.function`` to call from Python. The kinds: ``"search"`` (every
    hypothesis of the search), ``"prefix"`` (the best hypothesis continuing
    each row's prefix), ``"sample"`` (one sample, its parameters given at
    call time), ``"n_best"`` (distinct texts, ``n_best_texts``) and
    ``"score"`` (``score_targets``). A call may name another search than the
    graph's (an export's greedy signatures); each search's decoder is made
    once.

    Args:
        model: a ``keras_transformer.Transformer``.
        tgt_tokenizer: its target tokenizer (n-best lists are texts).
        search: ``Greedy()`` (default), ``Beam(...)`` or ``Sample(...)``.
        limits: the output ``Limits``.
        choice: the ``KernelChoice`` of every decoder (default: the inference kernels).
        decode_parts: a batch decodes as this many parts (``None``:
            ``decoding.DECODE_PARTS``; 1: whole).

    Raises:
        ValueError: ``decode_parts`` is below 1.
    """

    def __init__(
        self,
        model,
        tgt_tokenizer,
        search: Search | None = None,
        limits: Limits | None = None,
        *,
        choice: KernelChoice | None = None,
        decode_parts: int | None = None,
    ):
        super().__init__(name="translation_graph")
        # Python state, not saved: the export saves the model's variables itself.
        self.__dict__.update(
            model=model,
            tgt_tokenizer=tgt_tokenizer,
            search=search or Greedy(),
            limits=limits or Limits(),
            choice=choice or KernelChoice(),
            decode_parts=check_decode_parts(decode_parts),
            functions={},
        )
        check_search(self.search)

    def decoder(self, kind: str, search: Search | None = None):
        """The decoder of ``kind`` (``"search"``, ``"prefix"`` or ``"sample"``), made once.

        Args:
            kind: ``"search"``: source ids → every hypothesis of the search;
                ``"prefix"``: source ids, prefix ids → the best; ``"sample"``:
                source ids and the four ``SAMPLE_SPECS`` scalars → one sample.
            search: the search (``None``: the graph's).

        Returns:
            A ``tf.function`` of one input signature returning a ``DecodeOutput``.

        Raises:
            ValueError: an unknown kind.
        """
        search = search or self.search
        key = ("decoder", kind, search)
        if key in self.functions:
            return self.functions[key]
        model, limits, choice = self.model, self.limits, self.choice
        if kind == "search":

            def run(source_ids):
                return decode(model, source_ids, search, limits, n=search.hypotheses, choice=choice)

            signature, name = [IDS], _name(search)
        elif kind == "prefix":

            def run(source_ids, prefix_ids):
                return decode(
                    model, source_ids, search, limits, prefix_ids=prefix_ids, choice=choice
                )

            signature, name = [IDS, IDS], f"prefix_{_name(search)}"
        elif kind == "sample":
            sample = search if isinstance(search, Sample) else Sample()

            def run(source_ids, *params):
                return decode(
                    model,
                    source_ids,
                    sample,
                    limits,
                    choice=choice,
                    sample_params=SampleParams(*params),
                )

            signature, name = [IDS, *SAMPLE_SPECS], "sample"
        else:
            raise ValueError(f"no decoder of kind {kind!r}: use search, prefix or sample.")
        run.__name__ = name  # names the function in a SavedModel
        self.functions[key] = tf.function(run, input_signature=signature, autograph=False)
        return self.functions[key]

    def decode(self, kind: str, source_ids, *inputs, search: Search | None = None) -> DecodeOutput:
        """``decoder(kind)`` over a batch decoded as ``decode_parts`` parts.

        Args:
            kind: ``"search"``, ``"prefix"`` or ``"sample"``.
            source_ids: ``[batch, len]`` int32 ids, padded with ``pad_id``.
            *inputs: the kind's other inputs (prefix ids; the sampling scalars).
            search: the search (``None``: the graph's).

        Returns:
            The batch's ``DecodeOutput``.
        """
        search = search or self.search
        rows = 1 if kind == "prefix" else 0
        return decode_in_parts(
            self.decoder(kind, search),
            source_ids,
            self.model.config.pad_id,
            self.decode_parts,
            1 if kind == "sample" else search.hypotheses,
            row_inputs=inputs[:rows],
            shared_inputs=inputs[rows:],
        )

    def n_best(self, source_ids, n, search: Search | None = None):
        """The search's hypotheses as ``n`` distinct texts a sentence (``n_best_texts``).

        Args:
            source_ids: ``[batch, len]`` int32 ids.
            n: the most texts a sentence, at most the beam size.
            search: the search (``None``: the graph's).

        Returns:
            ``(texts [batch, n] string, log_probs [batch, n] float32)``.
        """
        out = self.decode("search", source_ids, search=search)
        return n_best_texts(self.model, self.tgt_tokenizer, source_ids, out, n)

    def score(self, source_ids, target_ids):
        """Each target's log-probability given its source (``decoding.score_targets``).

        Args:
            source_ids: ``[batch, len]`` int32 ids.
            target_ids: ``[batch, len]`` int32 ids, each row ending with EOS.

        Returns:
            ``[batch]`` float32.
        """
        return score_targets(self.model, source_ids, target_ids)

    def function(self, kind: str):
        """The graph's ``kind`` as one ``tf.function`` to call from Python, made once.

        Args:
            kind: ``"search"``, ``"prefix"``, ``"sample"`` (``DecodeOutput``s,
                in parts), ``"n_best"`` (source ids, ``n`` int32 scalar) or
                ``"score"`` (source ids, target ids).

        Returns:
            The ``tf.function``.

        Raises:
            ValueError: an unknown kind.
        """
        key = ("function", kind)
        if key in self.functions:
            return self.functions[key]
        specs = {
            "search": [IDS],
            "prefix": [IDS, IDS],
            "sample": [IDS, *SAMPLE_SPECS],
            "n_best": [IDS, tf.TensorSpec([], tf.int32)],
            "score": [IDS, IDS],
        }
        if kind not in specs:
            raise ValueError(f"no function of kind {kind!r}: use one of {', '.join(specs)}.")
        run = getattr(self, kind) if kind in ("n_best", "score") else None
        if run is None:

            def run(*inputs):
                return self.decode(kind, *inputs)

        self.functions[key] = tf.function(run, input_signature=specs[kind], autograph=False)
        return self.functions[key]

    def xla_decoder(self, buffer_length: int, search: Search | None = None):
        """The search's best hypothesis by the static-shape decoders, compiled by XLA, made once.

        Args:
            buffer_length: the fixed output buffer (``KernelChoice.buffer_length``).
            search: the search (``None``: the graph's).

        Returns:
            A ``tf.function(jit_compile=True)``: source ids → a ``DecodeOutput``
            of one hypothesis a sentence.
        """
        search = search or self.search
        key = ("xla", buffer_length, search)
        if key not in self.functions:
            choice = KernelChoice(static_shapes=True, buffer_length=buffer_length)
            model, limits = self.model, self.limits
            self.functions[key] = tf.function(
                lambda ids: decode(model, ids, search, limits, choice=choice),
                jit_compile=True,
                autograph=False,
            )
        return self.functions[key]

    def cross_attention(self, source_ids):
        """One sentence's best translation and the last decoder layer's cross-attention.

        Args:
            source_ids: ``[1, len]`` int32 ids.

        Returns:
            ``(target [1, len] ids up to EOS, weights [target, source])``,
            the weights averaged over heads.
        """
        out = self.decode("search", source_ids)
        target_ids = out.tokens[:, 0]
        model, config = self.model, self.model.config
        # Keep the target up to and including EOS; feed BOS + all but the last token.
        length = tf.reduce_sum(tf.cast(tf.not_equal(target_ids[0], config.pad_id), tf.int32))
        target = target_ids[:, :length]
        target_in = tf.concat([tf.fill([1, 1], config.bos_id), target[:, :-1]], axis=1)
        memory = model.encode(source_ids, training=False)
        _, weights = model.decoder(
            model.target_embedding(target_in, training=False),
            memory,
            memory_padding_mask=padding_mask(source_ids, config.pad_id),
            target_padding_mask=target_padding_mask(target_in, config),
            return_attention_weights=True,
            training=False,
        )
        return target, tf.reduce_mean(weights[-1]["cross"][0], axis=0)
