"""Translator: strings in, strings out; the XLA path translates the same."""

import pytest

pytestmark = pytest.mark.programs


@pytest.fixture(scope="module")
def trained(tiny_workdir):
    """The trained tiny workdir's model and tokenizers, loaded once for the module."""
    from keras_transformer import Workdir

    return Workdir(tiny_workdir).load()


@pytest.mark.parametrize(
    "beam_size", [1, pytest.param(3, marks=pytest.mark.slow)]
)  # XLA compiles are slow
def test_xla_translator_gives_the_same_translations(trained, beam_size):
    from keras_transformer.translate import Translator

    model, src_tok, tgt_tok = trained.model, trained.src_tokenizer, trained.tgt_tokenizer
    sentences = [
        "the hungry boy sees 3 red cats",
        "a dog sleeps",
        "yesterday a sad teacher gave an old book to the farmer because the farmer was happy",
        "",
    ]
    options = dict(max_src_length=64, beam_size=beam_size, alpha=0.6)
    plain = Translator(model, src_tok, tgt_tok, **options).translate(sentences, batch_size=3)
    xla = Translator(model, src_tok, tgt_tok, jit_compile=True, length_bucket=16, **options)
    assert xla.translate(sentences, batch_size=3) == plain
    compiled = dict(xla._backend.compiled)
    assert compiled and all(
        length % 16 == 0 for length in compiled
    )  # one function per length bucket
    assert xla.translate(sentences[2:3], batch_size=3) == plain[2:3]
    assert (
        xla._backend.compiled == compiled
    )  # a one-sentence batch is padded to the same shape: no new compilation
    with pytest.raises(ValueError, match="length_bucket"):
        Translator(model, src_tok, tgt_tok, jit_compile=True, length_bucket=0)


def test_beam_stopping_rules_and_a_bad_rule(trained):
    from keras_transformer.exporters.signatures import ExportedTranslator
    from keras_transformer.translate import Translator

    sentences = ["the hungry boy sees 3 red cats", "a dog sleeps", ""]
    exact = Translator.from_trained_model(trained, beam_size=3, alpha=0.0, stopping="exact")
    heuristic = Translator.from_trained_model(trained, beam_size=3, alpha=0.0)
    # Without a length penalty the heuristic rule is exact.
    assert heuristic.translate(sentences) == exact.translate(sentences)
    with pytest.raises(ValueError, match="stopping rule"):
        Translator.from_trained_model(trained, beam_size=3, stopping="patience")
    with pytest.raises(ValueError, match="stopping rule"):
        ExportedTranslator(
            trained.model,
            trained.src_tokenizer,
            trained.tgt_tokenizer,
            max_src_length=64,
            stopping="patience",
        )


def test_a_batch_in_parts_translates_as_the_batch_whole(trained):
    """``decode_parts``: a batch of many sentences decodes in two parts by
    default, in one with ``decode_parts=1``; the same translations, and each
    as the sentence alone. Fewer than one part is refused."""
    from keras_transformer.decoding import PARTS_MIN_ROWS
    from keras_transformer.translate import Translator

    sentences = [
        "the hungry boy sees 3 red cats",
        "a dog sleeps",
        "",
        "the farmer was happy",
        "yesterday a sad teacher gave an old book to the farmer because the farmer was happy",
    ] * 2
    assert len(sentences) >= PARTS_MIN_ROWS
    in_parts = Translator.from_trained_model(trained)  # one translator, batches of any size
    parts = in_parts.translate(sentences)
    assert parts == Translator.from_trained_model(trained, decode_parts=1).translate(sentences)
    assert parts == in_parts.translate(sentences, batch_size=1)
    with pytest.raises(ValueError, match="decode_parts must be >= 1"):
        Translator.from_trained_model(trained, decode_parts=0)
