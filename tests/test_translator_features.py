"""``kt.Translator``'s n-best lists, forced scores, samples and prefixes on the trained tiny
workdir: the relations between them (``n_best``'s log-probabilities are ``score``'s, its first
text is ``translate``'s, ``top_k=1`` is greedy, a seed gives the same sample in any batch),
and one clear error for each bad input."""

import math

import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.decoding import Beam, Greedy, Limits, Sample, check_search, score_targets
from keras_transformer.workdir import Workdir

pytestmark = pytest.mark.programs

SENTENCES = [
    "the hungry boy sees 3 red cats",
    "yesterday a sad teacher gave an old book to the farmer",
    "the children will not sleep because the dogs watch 12 birds",
    "a dog",
    "the old farmer gave 7 books to the sad children because they were hungry",
]


@pytest.fixture(scope="module")
def trained(tiny_workdir):
    return Workdir(tiny_workdir).load()


@pytest.fixture(scope="module")
def beam(trained):
    return kt.Translator.from_trained_model(trained, beam_size=4, alpha=0.6)


@pytest.fixture(scope="module")
def greedy(trained):
    return kt.Translator.from_trained_model(trained)


def test_n_best_heads_with_the_translation_and_its_numbers_are_the_scores(beam):
    """``n_best(s, n)[0]`` is ``translate(s)`` with the same beam; the texts are distinct;
    every log-probability equals ``score`` of its text; ``n`` bounds the list."""
    lists = beam.n_best(SENTENCES, 4)
    assert [hypotheses[0][0] for hypotheses in lists] == beam.translate(SENTENCES)
    for hypotheses in lists:
        texts = [text for text, _ in hypotheses]
        assert 1 <= len(texts) <= 4 and len(set(texts)) == len(texts)
    sources = [s for s, hypotheses in zip(SENTENCES, lists) for _ in hypotheses]
    texts = [text for hypotheses in lists for text, _ in hypotheses]
    numbers = [lp for hypotheses in lists for _, lp in hypotheses]
    assert beam.score(sources, texts) == pytest.approx(numbers, abs=1e-4)
    assert all(lp <= 0.0 for lp in numbers)
    assert beam.n_best(SENTENCES, 2) == [hypotheses[:2] for hypotheses in lists]


def test_greedy_translation_scores_its_own_log_probability(greedy, trained):
    """Greedy decoding's n-best list of one is its translation, with the log-probability
    that forced decoding of the same text gives."""
    (hypotheses,) = greedy.n_best([SENTENCES[0]], 1)
    assert hypotheses[0][0] == greedy.translate([SENTENCES[0]])[0]
    assert greedy.score([SENTENCES[0]], [hypotheses[0][0]])[0] == pytest.approx(
        hypotheses[0][1], abs=1e-4
    )


def test_an_empty_target_is_scored_as_eos_alone(greedy, trained):
    config = trained.model.config
    source = kt.data.encode_sources(trained.src_tokenizer, tf.constant([SENTENCES[3]]))
    expected = score_targets(
        trained.model, source.to_tensor(), tf.constant([[config.eos_id]])
    ).numpy()[0]
    assert greedy.score([SENTENCES[3]], [""])[0] == pytest.approx(float(expected), abs=1e-5)
    assert greedy.score([SENTENCES[3]], ["   "])[0] == pytest.approx(float(expected), abs=1e-5)


def test_score_is_the_same_in_any_batch(greedy):
    targets = ["a cat", "the farmer", "", "dogs sleep", "12 birds"]
    together = greedy.score(SENTENCES, targets)
    alone = [greedy.score([s], [t])[0] for s, t in zip(SENTENCES, targets)]
    assert together == pytest.approx(alone, abs=1e-5)


def test_top_k_one_is_greedy_and_a_seed_gives_the_same_sample_in_any_batch(greedy, beam):
    assert greedy.sample(SENTENCES, top_k=1, seed=3) == greedy.translate(SENTENCES)
    assert beam.sample(SENTENCES, top_k=1) == greedy.translate(SENTENCES)
    together = greedy.sample(SENTENCES, temperature=1.5, seed=11)
    alone = [greedy.sample([s], temperature=1.5, seed=11)[0] for s in SENTENCES]
    assert together == alone
    assert greedy.sample(SENTENCES * 2, temperature=1.5, seed=11) == together * 2
    draws = {tuple(greedy.sample(SENTENCES, temperature=2.0, seed=seed)) for seed in range(4)}
    assert len(draws) > 1  # seeds differ


def test_a_prefix_begins_the_translation_and_an_empty_one_leaves_it_free(greedy, beam):
    free = greedy.translate(SENTENCES)
    prefixes = ["the", "", "yesterday the children", "a", "12"]
    for translator in (greedy, beam):
        forced = translator.translate(SENTENCES, prefixes=prefixes)
        assert forced[1] == translator.translate([SENTENCES[1]])[0]
        for prefix, text in zip(prefixes, forced):
            assert text.startswith(prefix)
    alone = [greedy.translate([s], prefixes=[p])[0] for s, p in zip(SENTENCES, prefixes)]
    assert greedy.translate(SENTENCES, prefixes=prefixes) == alone
    assert greedy.translate(SENTENCES, prefixes=[""] * len(SENTENCES)) == free


def test_blank_sentences_answer_empty(beam):
    assert beam.n_best(["", "  "], 3) == [[("", 0.0)], [("", 0.0)]]
    assert beam.sample([""], seed=1) == [""]
    assert beam.translate([" "], prefixes=["the"]) == [""]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t: t.n_best(SENTENCES, 5), "n=5"),
        (lambda t: t.n_best(SENTENCES, 0), "n=0"),
        (lambda t: t.score(SENTENCES, ["a"]), "5 sources but 1 targets"),
        (lambda t: t.translate(SENTENCES, prefixes=["a"] * 4), "5 sentences but 4 prefixes"),
        (lambda t: t.score(["a"], ["the cat " * 200]), "target 0 is"),
        (lambda t: t.translate(["a"], prefixes=["the cat " * 200]), "prefix 0 is"),
        (lambda t: t.sample(SENTENCES, top_p=0.0), "top_p"),
        (lambda t: t.sample(SENTENCES, top_p=1.5), "top_p"),
        (lambda t: t.sample(SENTENCES, temperature=0.0), "temperature"),
        (lambda t: t.sample(SENTENCES, temperature=-1.0), "temperature"),
        (lambda t: t.sample(SENTENCES, temperature=math.inf), "temperature"),
        (lambda t: t.sample(SENTENCES, top_k=-1), "top_k"),
    ],
)
def test_bad_input_gets_one_clear_error(beam, call, message):
    with pytest.raises(ValueError, match=message) as error:
        call(beam)
    assert "\n" not in str(error.value)


def test_decode_options_refuse_bad_values():
    from keras_transformer.translation.graph import search_and_limits

    for make, message in [
        (lambda: Beam(size=0), "beam_size"),
        (lambda: check_search(Beam(size=2), n=3), "n must be between 1 and the beam size"),
        (lambda: search_and_limits(Sample(), beam_size=2), "Sample search draws one"),
        (lambda: Beam(stopping="never"), "stopping"),
        (lambda: Limits(max_length=0), "max_length"),
        (lambda: Sample(top_p=2.0), "top_p"),
        (lambda: search_and_limits(beam_size=1, stopping="never"), "stopping"),
    ]:
        with pytest.raises(ValueError, match=message):
            make()
    with pytest.raises(TypeError, match="unknown decoding option"):
        search_and_limits(sampling=True)


def test_an_export_searches_and_refuses_sampling_as_its_default():
    from keras_transformer.exporters.signatures import export_options

    assert export_options()[0] == Beam(size=4)
    search, limits = export_options(Beam(size=2, alpha=1.4), min_length=1)
    assert (search.size, search.alpha, limits.min_length) == (2, 1.4, 1)
    assert export_options(beam_size=1)[0] == Greedy()
    with pytest.raises(ValueError, match="sample signature"):
        export_options(Sample())
