"""The demo corpus: random sentences, duplicate-free splits, and the files they are written to.

Sampling draws a ``Sentence`` structure with fixed probabilities; the same
seed gives the same pairs.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from pathlib import Path

from keras_transformer.data.synthetic import lexicon
from keras_transformer.data.synthetic.grammar import Clause, NounPhrase, Phrase, Pronoun, Sentence
from keras_transformer.files import write_atomically

_ANIMATE = tuple(name for name, noun in lexicon.NOUNS.items() if noun.animate)
_ALL_NOUNS = tuple(lexicon.NOUNS)
_BY_KIND = {
    kind: tuple(v for v, verb in lexicon.VERBS.items() if verb.kind == kind)
    for kind in ("intransitive", "transitive", "ditransitive")
}


def _sample_noun_phrase(rng: random.Random, animate: bool) -> NounPhrase:
    noun = rng.choice(_ANIMATE if animate else _ALL_NOUNS)
    plural = rng.random() < 0.5
    number = None
    if not plural and rng.random() < 0.1:
        number = 1
    elif plural and rng.random() < 0.35:
        roll = rng.random()
        low, high = (2, 12) if roll < 0.7 else (13, 99) if roll < 0.9 else (100, 999)
        number = rng.randint(low, high)
    if number is not None:
        article = "the" if rng.random() < 0.3 else ""
    elif plural:
        article = "the" if rng.random() < 0.8 else ""
    else:
        article = "the" if rng.random() < 0.6 else "a"
    roll = rng.random()
    count = 0 if roll < 0.5 else 1 if roll < 0.85 else 2
    adjectives = tuple(rng.sample(list(lexicon.ADJECTIVES), count))
    relative = None
    if rng.random() < 0.07:
        relative = (rng.choice(_BY_KIND["intransitive"]), rng.choice(lexicon.TENSES))
    return NounPhrase(noun, plural, adjectives, number, article, relative)


def _sample_phrase(rng: random.Random, pronoun_probability: float, animate: bool) -> Phrase:
    if rng.random() < pronoun_probability:
        return Pronoun(rng.choice(list(lexicon.PRONOUNS)))
    return _sample_noun_phrase(rng, animate)


def _sample_clause(rng: random.Random) -> Clause:
    roll = rng.random()
    kind = "intransitive" if roll < 0.3 else "transitive" if roll < 0.75 else "ditransitive"
    verb = rng.choice(_BY_KIND[kind])
    tense = rng.choice(lexicon.TENSES)
    subject = _sample_phrase(rng, 0.3, animate=True)
    obj = _sample_phrase(rng, 0.15, animate=False) if kind != "intransitive" else None
    indirect = None
    if kind == "ditransitive" and rng.random() < 0.7:
        indirect = _sample_phrase(rng, 0.3, animate=True)
    negated = rng.random() < 0.15
    time = None
    if rng.random() < 0.2:
        time = rng.choice([word for word, (t, _) in lexicon.TIME_ADVERBS.items() if t == tense])
    manner = rng.choice(list(lexicon.MANNER_ADVERBS)) if rng.random() < 0.25 else None
    return Clause(subject, verb, tense, negated, obj, indirect, time, manner)


def sample_sentence(rng: random.Random) -> Sentence:
    """Draws one random sentence structure (any length; ``generate_pairs`` filters).

    Args:
        rng: the random generator to draw from.

    Returns:
        The ``Sentence``.
    """
    if rng.random() < 0.15:
        conjunction = rng.choice(list(lexicon.CONJUNCTIONS))
        return Sentence((_sample_clause(rng), _sample_clause(rng)), conjunction)
    return Sentence((_sample_clause(rng),))


MIN_WORDS, MAX_WORDS = 4, 20


def generate_pairs(num_pairs: int, seed: int) -> list[tuple[str, str]]:
    """Generates ``num_pairs`` pairs of 4-20 source words, a pure function of ``seed``.

    Short sentences repeat across a large sample; use ``demo_splits`` for
    duplicate-free, non-overlapping splits.

    Args:
        num_pairs: how many pairs to generate.
        seed: the random seed.

    Returns:
        The pairs, as a list of ``(source, target)`` strings.

    Raises:
        ValueError: ``num_pairs`` is not a non-negative integer.

    Example:

    >>> [len(pair) for pair in generate_pairs(3, seed=0)]
    [2, 2, 2]
    >>> generate_pairs(3, seed=0) == generate_pairs(3, seed=0)
    True
    """
    if not isinstance(num_pairs, int) or num_pairs < 0:
        raise ValueError(f"num_pairs must be a non-negative integer, got {num_pairs!r}.")
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    while len(pairs) < num_pairs:
        sentence = sample_sentence(rng)
        source = sentence.source()
        if MIN_WORDS <= len(source.split()) <= MAX_WORDS:
            pairs.append((source, sentence.target()))
    return pairs


def demo_splits(
    train: int = 20_000, valid: int = 1_000, test: int = 1_000, seed: int = 0
) -> dict[str, list[tuple[str, str]]]:
    """Generates train/valid/test splits with distinct source sentences, so held-out means unseen.

    Args:
        train: pairs in the training split.
        valid: pairs in the validation split.
        test: pairs in the test split.
        seed: the random seed.

    Returns:
        ``{"train": pairs, "valid": pairs, "test": pairs}``, each a list of
        ``(source, target)`` strings.

    Raises:
        ValueError: a size is negative, or the grammar cannot give that many
            distinct sentences.

    Example:

    >>> splits = demo_splits(train=20, valid=5, test=5, seed=0)
    >>> {name: len(pairs) for name, pairs in splits.items()}
    {'train': 20, 'valid': 5, 'test': 5}
    """
    sizes = {"train": train, "valid": valid, "test": test}
    for name, size in sizes.items():
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {size!r}.")
    total = train + valid + test
    rng = random.Random(seed)
    unique: dict[str, str] = {}
    attempts = 0
    while len(unique) < total:
        attempts += 1
        if attempts > 20 * total + 1000:
            raise ValueError(f"Could not find {total} distinct sentences; ask for smaller splits.")
        sentence = sample_sentence(rng)
        source = sentence.source()
        if MIN_WORDS <= len(source.split()) <= MAX_WORDS:
            unique.setdefault(source, sentence.target())
    pairs = list(unique.items())
    # Shuffle so frequent short sentences (found first) are not all in train.
    rng.shuffle(pairs)
    return {
        "train": pairs[:train],
        "valid": pairs[train : train + valid],
        "test": pairs[train + valid :],
    }


def write_parallel_files(
    pairs: Iterable[tuple[str, str]], directory: str | os.PathLike, prefix: str
) -> tuple[Path, Path]:
    """Writes pairs as ``{prefix}.src`` and ``{prefix}.tgt``, UTF-8, one sentence a line.

    Each file is written atomically; ``PairSource.from_text_files`` reads them back.

    Args:
        pairs: ``(source, target)`` strings.
        directory: the folder to write into (created if missing).
        prefix: the files' name without extension, e.g. ``"train"``.

    Returns:
        The paths ``(source_file, target_file)``.

    Raises:
        ValueError: a sentence contains a line break.
    """
    pairs = list(pairs)
    for index, (source, target) in enumerate(pairs):
        if any(ch in text for text in (source, target) for ch in "\r\n"):
            raise ValueError(f"Pair {index} contains a line break; sentences must be single lines.")
    directory = Path(directory)
    src_path, tgt_path = directory / f"{prefix}.src", directory / f"{prefix}.tgt"
    write_atomically(
        {
            src_path: "".join(source + "\n" for source, _ in pairs).encode("utf-8"),
            tgt_path: "".join(target + "\n" for _, target in pairs).encode("utf-8"),
        }
    )
    return src_path, tgt_path
