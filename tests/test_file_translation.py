"""Files at engine speed: a long input sorted by length and batched by a token budget,
streamed a window at a time, its translations in input order and as the sentences alone."""

import os

import pytest

pytestmark = pytest.mark.programs

SENTENCES = [
    "the hungry boy sees 3 red cats",
    "",
    "a dog sleeps",
    "yesterday a sad teacher gave an old book to the farmer because the farmer was happy",
    "the farmer was happy",
    "",
    "a boy sees a dog and the dog sees a boy",
    "cats",
    "the old teacher sleeps",
    "yesterday the hungry teacher gave an old book to the farmer quickly",
]


@pytest.fixture(scope="module")
def translator(tiny_workdir):
    from keras_transformer.translate import Translator

    return Translator.from_workdir(tiny_workdir, beam_size=2)


def test_token_batches_translate_as_input_order_batches_and_each_sentence_alone(translator):
    """A small budget makes batches of several sizes and puts the long sentences alone;
    the translations are those of the batching before token budgets, empty lines included."""
    from keras_transformer.translate import token_batches

    lengths, _ = translator._prepare(SENTENCES)
    batches = token_batches(lengths, batch_tokens=24)
    assert len({len(batch) for batch in batches}) > 1 and max(lengths) > 12
    sorted_ = translator.translate(SENTENCES, batch_tokens=24)
    assert sorted_ == translator.translate(SENTENCES, batch_size=64, batch_tokens=None)


@pytest.mark.slow
def test_each_batching_translates_as_each_sentence_alone(translator):
    alone = translator.translate(SENTENCES, batch_size=1, batch_tokens=None)
    assert translator.translate(SENTENCES) == alone  # the default budget
    assert translator.translate(SENTENCES, batch_tokens=24, batch_size=2, window=3) == alone


def test_a_stream_holds_one_window_and_writes_it_before_reading_on(translator):
    """``translate_iterable`` reads ``window`` lines, translates them and hands them out in
    input order before it reads more: a generator of lines is consumed one window ahead."""
    read = []

    def lines():
        for sentence in SENTENCES * 3:
            read.append(sentence)
            yield sentence

    stream = translator.translate_iterable(lines(), batch_tokens=24, window=4)
    assert read == []  # nothing read before the first translation is asked for
    first = next(stream)
    assert len(read) == 4  # one window
    rest = [next(stream) for _ in range(3)]
    assert len(read) == 4  # the window's translations come out before more is read
    fifth = next(stream)
    assert len(read) == 8
    translations = [first, *rest, fifth, *stream]
    assert translations == translator.translate(SENTENCES * 3, batch_tokens=None)
    assert len(read) == len(SENTENCES) * 3


def test_bad_options_are_refused_when_called(translator):
    with pytest.raises(ValueError, match="batch_tokens must be >= 1"):
        translator.translate_iterable(iter(SENTENCES), batch_tokens=0)
    with pytest.raises(ValueError, match="window must be >= 1"):
        translator.translate(SENTENCES, window=-5)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        translator.translate(SENTENCES, batch_size=0)


def test_the_program_counts_a_files_lines(tmp_path):
    from keras_transformer.file_translation import lines_in

    path = tmp_path / "input.txt"
    for text, lines in [("a\n\nb\n", 3), ("a\nb", 2), ("", 0), ("\n", 1)]:
        path.write_text(text)
        with open(path) as stream:
            assert lines_in(stream) == lines
            assert stream.read() == text  # counted without moving the offset
    read, write = os.pipe()
    with os.fdopen(read) as pipe:
        os.close(write)
        assert lines_in(pipe) is None
