"""The toy language pair: deterministic, held-out splits, and a real translation task."""

from __future__ import annotations

import itertools
import re

import pytest

from keras_transformer.data import (
    Clause,
    NounPhrase,
    Pronoun,
    Sentence,
    demo_splits,
    generate_pairs,
    write_parallel_files,
)
from keras_transformer.data.synthetic import lexicon

pytestmark = pytest.mark.quick

PERSON_SUFFIXES = ("m", "s", "t", "mos", "tis", "nt")
TARGET_VERB_FORMS = {
    negation + verb.stem + infix + suffix
    for verb in lexicon.VERBS.values()
    for negation, infix, suffix in itertools.product(("", "ne"), ("", "ra", "sa"), PERSON_SUFFIXES)
}
SOURCE_VERB_FORMS = {
    form for verb in lexicon.VERBS.values() for form in (verb.base, verb.third, verb.past)
}


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, str]]:
    return generate_pairs(20_000, seed=0)


def single_clause(pairs):
    return [(s, t) for s, t in pairs if not {"and", "but", "because"} & set(s.split())]


def test_same_seed_same_pairs():
    assert generate_pairs(300, seed=7) == generate_pairs(300, seed=7)
    assert demo_splits(200, 20, 20, seed=3) == demo_splits(200, 20, 20, seed=3)


def test_different_seeds_differ():
    a, b = generate_pairs(300, seed=1), generate_pairs(300, seed=2)
    assert len(set(a) & set(b)) < 30  # only short, common sentences may coincide


def test_lengths_and_structures_vary(pairs):
    lengths = [len(source.split()) for source, _ in pairs]
    assert min(lengths) == 4 and max(lengths) == 20
    words = {word for source, _ in pairs for word in source.split()}
    assert {
        "to",
        "that",
        "and",
        "but",
        "because",
        "not",
        "will",
        "yesterday",
        "quickly",
        "you",
        "all",
    } <= words
    assert sum(any(w.isdigit() for w in s.split()) for s, _ in pairs) > len(pairs) // 10


def test_splits_are_disjoint_and_sized():
    splits = demo_splits(train=2_000, valid=300, test=300, seed=1)
    assert {name: len(split) for name, split in splits.items()} == {
        "train": 2_000,
        "valid": 300,
        "test": 300,
    }
    sources = {name: [source for source, _ in split] for name, split in splits.items()}
    for name, split in sources.items():
        assert len(set(split)) == len(split), f"duplicate sources in {name}"
    assert not set(sources["train"]) & set(sources["valid"])
    assert not set(sources["train"]) & set(sources["test"])
    assert not set(sources["valid"]) & set(sources["test"])


def test_target_is_a_function_of_the_source(pairs):
    seen: dict[str, str] = {}
    for source, target in pairs + generate_pairs(5_000, seed=99):
        assert seen.setdefault(source, target) == target, source


def test_reference_pair():
    clause = Clause(
        subject=NounPhrase(
            "cat", plural=True, adjectives=("big", "red"), number=3, relative=("sleep", "present")
        ),
        verb="give",
        tense="past",
        obj=NounPhrase("book", adjectives=("old",), article="a"),
        indirect=NounPhrase("teacher"),
        time="yesterday",
        manner="quickly",
    )
    assert (
        clause.source()
        == "yesterday the 3 big red cats that sleep gave an old book to the teacher quickly"
    )
    # SOV; dative before accusative; adjectives mirrored after the noun, then the number.
    assert clause.target() == "hieru dormik mirki ruso grando 3 lerkal libran vetren raspu donarant"


def test_object_moves_before_the_verb(pairs):
    simple = single_clause(pairs)
    assert all(target.split()[-1] in TARGET_VERB_FORMS for _, target in simple)
    moved = [s for s, _ in simple if s.split()[-1] not in SOURCE_VERB_FORMS]
    assert len(moved) > 0.6 * len(simple)  # in the source something follows the verb
    sentence = Sentence(
        (Clause(Pronoun("1sg"), "sleep"), Clause(NounPhrase("dog"), "see", obj=Pronoun("3pl"))),
        conjunction="because",
    )
    assert sentence.source() == "i sleep because the dog sees them"
    assert sentence.target() == "vasta sen videt kos mi dormim"


def test_numbers_are_copied(pairs):
    numbered = 0
    for source, target in pairs:
        digits = sorted(w for w in source.split() if re.fullmatch(r"\d+", w))
        assert digits == sorted(w for w in target.split() if re.fullmatch(r"\d+", w))
        numbered += bool(digits)
    assert numbered > 1_000


@pytest.mark.parametrize(
    "subject, tense, negated, source, target",
    [
        (Pronoun("1sg"), "present", False, "i sleep", "mi dormim"),
        (Pronoun("2sg"), "past", False, "you slept", "tu dormiras"),
        (Pronoun("3sg.f"), "present", True, "she does not sleep", "ra nedormit"),
        (Pronoun("1pl"), "future", False, "we will sleep", "nu dormisamos"),
        (Pronoun("2pl"), "past", True, "you all did not sleep", "vu nedormiratis"),
        (NounPhrase("cat", plural=True), "present", False, "the cats sleep", "mirki dormint"),
        (NounPhrase("child"), "present", False, "the child sleeps", "tolka dormit"),
    ],
)
def test_verb_agrees_with_subject(subject, tense, negated, source, target):
    clause = Clause(subject, "sleep", tense, negated)
    assert (clause.source(), clause.target()) == (source, target)


def test_case_and_number_agreement():
    phrase = NounPhrase("dog", plural=True, adjectives=("black",))
    clause = Clause(phrase, "give", obj=phrase, indirect=phrase)
    assert clause.source() == "the black dogs give the black dogs to the black dogs"
    assert clause.target() == "vasti nigro vastil nigrol vastin nigron donant"
    singular = Clause(NounPhrase("dog", adjectives=("black",)), "see", obj=Pronoun("3sg.m"))
    assert singular.target() == "vasta nigre ron videt"


def test_agreement_in_generated_pairs(pairs):
    suffix = {"i": "m", "we": "mos", "they": "nt"}
    checked = 0
    for source, target in single_clause(pairs):
        first = source.split()[0]
        if first in suffix:
            verb = target.split()[-1]
            assert verb.endswith(suffix[first]), (source, target)
            checked += 1
    assert checked > 500


def test_invalid_structures_name_the_fix():
    with pytest.raises(ValueError, match="intransitive: drop obj"):
        Clause(Pronoun("1sg"), "sleep", obj=Pronoun("3pl"))
    with pytest.raises(ValueError, match="does not fit tense"):
        Clause(Pronoun("1sg"), "sleep", "future", time="yesterday")
    with pytest.raises(ValueError, match="plural=True"):
        NounPhrase("cat", number=3)
    with pytest.raises(ValueError, match="non-negative"):
        demo_splits(train=-1)


def test_write_parallel_files(tmp_path):
    pairs = generate_pairs(50, seed=4)
    src, tgt = write_parallel_files(pairs, tmp_path / "data", "train")
    assert (src.name, tgt.name) == ("train.src", "train.tgt")
    assert src.read_text(encoding="utf-8").splitlines() == [s for s, _ in pairs]
    assert tgt.read_text(encoding="utf-8").splitlines() == [t for _, t in pairs]
    write_parallel_files(pairs[:3], tmp_path / "data", "train")  # overwrites in place
    assert len(src.read_text(encoding="utf-8").splitlines()) == 3
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["train.src", "train.tgt"]
    with pytest.raises(ValueError, match="line break"):
        write_parallel_files([("a\nb", "c")], tmp_path, "bad")
