"""A deterministic toy language pair for the offline demo: English-like → "Kestan".

Real corpora cannot ship with the package and take hours to learn, so the demo
trains on this invented pair instead. It is small (a few hundred stems) but
needs the skills that make translation hard, so a model that scores well on it
has learned more than copying:

* **Reordering.** The source is SVO, the target SOV::

      [time] subject verb [object] [to indirect-object] [manner]       (source)
      [time] subject [indirect-object] [object] [manner] verb          (target)

  Inside a noun phrase the target puts adjectives *after* the noun in mirror
  order, the number after the adjectives, and a relative clause *before* the
  noun as a participle ("the 3 big red cats that sleep" → "dormik mirki ruso
  grando 3"). "S1 because S2" becomes "S2 kos S1".
* **Agreement.** The target verb is ``[ne]stem + tense + person``: tense infix
  ``""``/``ra``/``sa`` (present/past/future) and suffix ``m s t mos tis nt``
  (1sg 2sg 3sg 1pl 2pl 3pl). English marks person only in the present 3sg and
  by "do/does/did not", so the model has to read it off the subject.
* **Case and number.** Nouns are ``stem + a|i`` (singular|plural), adjectives
  ``stem + e|o`` agreeing in number, and both take a case suffix: nominative
  ``""``, accusative ``n``, dative ``l`` (the source's "to the X").
  Pronouns have their own case forms; articles are dropped.
* **Copying.** Digits are copied verbatim (and moved).

The generator samples one structure (:class:`Sentence`) and renders both
sides from it, so the target is a function of the source and exact-match
accuracy is meaningful. Example::

    source: yesterday 3 red cats gave an old book to the teacher quickly
    target: hieru mirki ruso 3 lerkal libran vetren raspu donarant
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Iterable
from pathlib import Path

from keras_transformer.files import write_atomically

TENSES = ("present", "past", "future")
CASES = {"nominative": "", "accusative": "n", "dative": "l"}
_TENSE_INFIX = {"present": "", "past": "ra", "future": "sa"}
_PERSON_SUFFIX = {"1sg": "m", "2sg": "s", "3sg": "t", "1pl": "mos", "2pl": "tis", "3pl": "nt"}


@dataclasses.dataclass(frozen=True)
class Noun:
    singular: str
    plural: str
    stem: str
    animate: bool


@dataclasses.dataclass(frozen=True)
class Verb:
    base: str
    third: str  # present 3rd person singular
    past: str
    stem: str  # ends in a vowel so the suffixes attach
    kind: str  # "intransitive" | "transitive" | "ditransitive"


def _nouns(animate: bool, rows: str) -> list[Noun]:
    return [Noun(*row.split(), animate=animate) for row in rows.strip().splitlines()]


def _verbs(kind: str, rows: str) -> list[Verb]:
    return [Verb(*row.split(), kind=kind) for row in rows.strip().splitlines()]


NOUNS: dict[str, Noun] = {
    noun.singular: noun
    for noun in _nouns(
        True,
        """
cat cats mirk
dog dogs vast
bird birds pilv
horse horses drom
mouse mice snur
child children tolk
woman women sev
man men gorv
girl girls nid
boy boys pask
teacher teachers lerk
farmer farmers palt
doctor doctors medr
king kings runt
queen queens zand
friend friends kamb
student students skol
baker bakers brod
sailor sailors marv
soldier soldiers krid
neighbor neighbors vorn
fox foxes volp
wolf wolves lupr
bear bears ursk
""",
    )
    + _nouns(
        False,
        """
book books libr
apple apples pomb
letter letters skrib
ball balls bolt
cup cups kalp
house houses dom
box boxes kist
key keys klav
flower flowers flor
stone stones petr
gift gifts donv
song songs kant
story stories fabl
cake cakes tort
hat hats pilk
ship ships nav
car cars rotv
tree trees arb
map maps kart
coin coins mun
lamp lamps lux
chair chairs sedl
bottle bottles flask
picture pictures bild
shoe shoes kalk
window windows fenst
basket baskets korv
""",
    )
}

ADJECTIVES: dict[str, str] = dict(
    row.split()
    for row in """
red rus
blue kel
green verd
yellow galb
black nigr
white alb
big grand
small parv
old vetr
young jun
happy fel
sad trist
tall alt
clever sapt
lazy pigr
brave kord
hungry fam
beautiful bel
strong rob
tiny pik
heavy grav
new nov
""".strip().splitlines()
)

VERBS: dict[str, Verb] = {
    verb.base: verb
    for verb in _verbs(
        "intransitive",
        """
sleep sleeps slept dormi
run runs ran kura
laugh laughs laughed ride
sing sings sang lalo
dance dances danced salta
smile smiles smiled surri
wait waits waited mane
swim swims swam nata
cry cries cried plora
jump jumps jumped hopa
fall falls fell kade
arrive arrives arrived veni
""",
    )
    + _verbs(
        "transitive",
        """
see sees saw vide
chase chases chased kasa
eat eats ate mande
like likes liked ame
find finds found trova
hold holds held tene
watch watches watched spekta
carry carries carried porte
draw draws drew skize
wash washes washed lave
catch catches caught kapi
follow follows followed segi
hear hears heard audi
love loves loved kari
build builds built struo
open opens opened apere
paint paints painted pinge
visit visits visited bisi
""",
    )
    + _verbs(
        "ditransitive",
        """
give gives gave dona
send sends sent mitte
show shows showed mostra
bring brings brought fere
throw throws threw jaka
sell sells sold venda
offer offers offered ofre
lend lends lent preste
teach teaches taught doke
tell tells told nara
""",
    )
}

# Time adverbs open a clause and must fit its tense; manner adverbs close it.
TIME_ADVERBS: dict[str, tuple[str, str]] = {
    "yesterday": ("past", "hieru"),
    "earlier": ("past", "antu"),
    "today": ("present", "hodu"),
    "now": ("present", "nunu"),
    "tomorrow": ("future", "kralu"),
    "soon": ("future", "presu"),
}
MANNER_ADVERBS: dict[str, str] = {
    "quickly": "raspu",
    "slowly": "lentu",
    "happily": "gaudu",
    "quietly": "tassu",
    "carefully": "kuru",
    "often": "saepu",
    "loudly": "fortu",
    "again": "iteru",
}
CONJUNCTIONS: dict[str, str] = {"and": "e", "but": "ma", "because": "kos"}

# person -> (English subject, English object, target nominative/accusative/dative)
PRONOUNS: dict[str, tuple[str, str, tuple[str, str, str]]] = {
    "1sg": ("i", "me", ("mi", "min", "mil")),
    "2sg": ("you", "you", ("tu", "tun", "tul")),
    "3sg.m": ("he", "him", ("ro", "ron", "rol")),
    "3sg.f": ("she", "her", ("ra", "ran", "ral")),
    "1pl": ("we", "us", ("nu", "nun", "nul")),
    "2pl": ("you all", "you all", ("vu", "vun", "vul")),
    "3pl": ("they", "them", ("se", "sen", "sel")),
}

_ANIMATE = tuple(name for name, noun in NOUNS.items() if noun.animate)
_ALL_NOUNS = tuple(NOUNS)
_BY_KIND = {
    kind: tuple(v for v, verb in VERBS.items() if verb.kind == kind)
    for kind in ("intransitive", "transitive", "ditransitive")
}


@dataclasses.dataclass(frozen=True)
class Pronoun:
    """A personal pronoun of the demo grammar ("i", "she"; "mi", "sa").

    Args:
        person: a key of ``PRONOUNS``, e.g. ``"1sg"`` or ``"3sg.f"``.

    Raises:
        ValueError: ``person`` is not a key of ``PRONOUNS``.
    """

    person: str  # a key of PRONOUNS

    def __post_init__(self):
        if self.person not in PRONOUNS:
            raise ValueError(f"Unknown person {self.person!r}; use one of {sorted(PRONOUNS)}.")

    @property
    def agreement(self) -> str:
        """The person and number the verb agrees with, e.g. ``"3sg"``."""
        return self.person.split(".")[0]

    def source(self, subject: bool) -> str:
        """Spells the pronoun in the source language.

        Args:
            subject: the subject form ("i") rather than the object form ("me").

        Returns:
            The word.
        """
        return PRONOUNS[self.person][0 if subject else 1]

    def target(self, case: str) -> str:
        """Spells the pronoun in the target language.

        Args:
            case: a key of ``CASES`` (``"nominative"``, ``"accusative"``, ``"dative"``).

        Returns:
            The word.
        """
        return PRONOUNS[self.person][2][list(CASES).index(case)]


@dataclasses.dataclass(frozen=True)
class NounPhrase:
    """A noun phrase of the demo grammar: ``[article] [number] adjective* noun [that verb]``.

    Args:
        noun: a key of ``NOUNS``.
        plural: the plural form; must match ``number`` (1 is singular).
        adjectives: keys of ``ADJECTIVES``, in order.
        number: a numeral before the adjectives (copied digit by digit).
        article: ``"the"``, ``"a"`` (singular, without a number) or ``""``.
        relative: ``(intransitive verb, tense)`` of a "that ..." clause.

    Raises:
        ValueError: a word is unknown, or the parts do not agree.
    """

    noun: str
    plural: bool = False
    adjectives: tuple[str, ...] = ()
    number: int | None = None
    article: str = "the"  # "the", "a" or "" (bare)
    relative: tuple[str, str] | None = None  # (intransitive verb, tense)

    def __post_init__(self):
        if self.noun not in NOUNS:
            raise ValueError(f"Unknown noun {self.noun!r}; use a key of NOUNS.")
        unknown = [a for a in self.adjectives if a not in ADJECTIVES]
        if unknown:
            raise ValueError(f"Unknown adjectives {unknown}; use keys of ADJECTIVES.")
        if self.number is not None and (self.number < 1 or self.plural != (self.number != 1)):
            raise ValueError(
                f"number={self.number} needs plural={self.number != 1} and a value >= 1."
            )
        if self.article not in ("the", "a", "") or (
            self.article == "a" and (self.plural or self.number)
        ):
            raise ValueError("article must be 'the', '' or (singular, no number) 'a'.")
        if self.relative and (
            VERBS.get(self.relative[0], None) is None
            or VERBS[self.relative[0]].kind != "intransitive"
            or self.relative[1] not in TENSES
        ):
            raise ValueError(f"relative must be (intransitive verb, tense), got {self.relative}.")

    @property
    def agreement(self) -> str:
        """The person and number the verb agrees with: ``"3sg"`` or ``"3pl"``."""
        return "3pl" if self.plural else "3sg"

    def source(self, subject: bool = True) -> str:
        """Spells the phrase in the source language.

        Args:
            subject: whether the phrase is the clause's subject (kept for the
                ``Pronoun`` interface; nouns do not change).

        Returns:
            The words, joined by spaces.
        """
        noun = NOUNS[self.noun]
        words = [str(self.number)] if self.number is not None else []
        words += [*self.adjectives, noun.plural if self.plural else noun.singular]
        if self.article == "a":
            words.insert(0, "an" if words[0][0] in "aeiou" else "a")
        elif self.article:
            words.insert(0, self.article)
        if self.relative:
            words += [
                "that",
                _source_verb(VERBS[self.relative[0]], self.relative[1], self.agreement),
            ]
        return " ".join(words)

    def target(self, case: str) -> str:
        """Spells the phrase in the target language, in a case.

        Args:
            case: a key of ``CASES``.

        Returns:
            The words, joined by spaces.
        """
        suffix = CASES[case]
        words = [NOUNS[self.noun].stem + ("i" if self.plural else "a") + suffix]
        words += [
            ADJECTIVES[a] + ("o" if self.plural else "e") + suffix
            for a in reversed(self.adjectives)
        ]
        if self.number is not None:
            words.append(str(self.number))
        if self.relative:
            verb, tense = self.relative
            words.insert(0, VERBS[verb].stem + _TENSE_INFIX[tense] + "k")
        return " ".join(words)


Phrase = NounPhrase | Pronoun


def _source_verb(verb: Verb, tense: str, agreement: str, negated: bool = False) -> str:
    third = agreement == "3sg"
    if tense == "future":
        return f"will not {verb.base}" if negated else f"will {verb.base}"
    if tense == "past":
        return f"did not {verb.base}" if negated else verb.past
    if negated:
        return f"{'does' if third else 'do'} not {verb.base}"
    return verb.third if third else verb.base


@dataclasses.dataclass(frozen=True)
class Clause:
    """One clause of the demo grammar: subject, verb and its objects.

    The source is SVO; the target is SOV, with case suffixes on the objects
    and the verb agreeing with the subject.

    Args:
        subject: a ``Pronoun`` or ``NounPhrase``.
        verb: a key of ``VERBS``; its kind decides which objects it takes.
        tense: a key of ``TENSES``.
        negated: whether the verb is negated.
        obj: the direct object (transitive and ditransitive verbs).
        indirect: the indirect object (ditransitive verbs).
        time: a key of ``TIME_ADVERBS``, or ``None``.

    Raises:
        ValueError: a word is unknown, or the objects do not fit the verb.
    """

    subject: Phrase
    verb: str
    tense: str = "present"
    negated: bool = False
    obj: Phrase | None = None
    indirect: Phrase | None = None
    time: str | None = None
    manner: str | None = None

    def __post_init__(self):
        kind = VERBS[self.verb].kind if self.verb in VERBS else None
        problems = []
        if kind is None:
            problems.append(f"unknown verb {self.verb!r} (use a key of VERBS)")
        if self.tense not in TENSES:
            problems.append(f"tense must be one of {TENSES}")
        if kind == "intransitive" and self.obj is not None:
            problems.append(f"{self.verb!r} is intransitive: drop obj")
        if kind in ("transitive", "ditransitive") and self.obj is None:
            problems.append(f"{self.verb!r} needs an obj")
        if self.indirect is not None and kind != "ditransitive":
            problems.append(f"only ditransitive verbs take an indirect object, not {self.verb!r}")
        if self.time is not None and TIME_ADVERBS.get(self.time, ("",))[0] != self.tense:
            problems.append(f"time adverb {self.time!r} does not fit tense {self.tense!r}")
        if self.manner is not None and self.manner not in MANNER_ADVERBS:
            problems.append(f"unknown manner adverb {self.manner!r}")
        if problems:
            raise ValueError("Invalid Clause: " + "; ".join(problems) + ".")

    def source(self) -> str:
        """Spells the clause in the source language.

        Returns:
            The sentence text.
        """
        words = [self.time] if self.time else []
        words += [
            self.subject.source(subject=True),
            _source_verb(VERBS[self.verb], self.tense, self.subject.agreement, self.negated),
        ]
        if self.obj is not None:
            words.append(self.obj.source(subject=False))
        if self.indirect is not None:
            words += ["to", self.indirect.source(subject=False)]
        if self.manner:
            words.append(self.manner)
        return " ".join(words)

    def target(self) -> str:
        """Spells the clause in the target language.

        Returns:
            The sentence text.
        """
        words = [TIME_ADVERBS[self.time][1]] if self.time else []
        words.append(self.subject.target("nominative"))
        if self.indirect is not None:
            words.append(self.indirect.target("dative"))
        if self.obj is not None:
            words.append(self.obj.target("accusative"))
        if self.manner:
            words.append(MANNER_ADVERBS[self.manner])
        verb = (
            VERBS[self.verb].stem
            + _TENSE_INFIX[self.tense]
            + _PERSON_SUFFIX[self.subject.agreement]
        )
        words.append("ne" + verb if self.negated else verb)
        return " ".join(words)


@dataclasses.dataclass(frozen=True)
class Sentence:
    """A demo sentence: one clause, or two joined by a conjunction.

    "because" swaps the two clauses in the target.

    Args:
        clauses: one or two ``Clause`` objects.
        conjunction: a key of ``CONJUNCTIONS`` when there are two clauses.

    Raises:
        ValueError: the clause count and the conjunction do not fit.
    """

    clauses: tuple[Clause, ...]
    conjunction: str | None = None

    def __post_init__(self):
        if len(self.clauses) not in (1, 2) or (len(self.clauses) == 2) != (
            self.conjunction is not None
        ):
            raise ValueError("A Sentence is one clause, or two clauses with a conjunction.")
        if self.conjunction is not None and self.conjunction not in CONJUNCTIONS:
            raise ValueError(f"conjunction must be one of {sorted(CONJUNCTIONS)}.")

    def source(self) -> str:
        """Spells the sentence in the source language.

        Returns:
            The sentence text.
        """
        if self.conjunction is None:
            return self.clauses[0].source()
        return f"{self.clauses[0].source()} {self.conjunction} {self.clauses[1].source()}"

    def target(self) -> str:
        """Spells the sentence in the target language.

        Returns:
            The sentence text.
        """
        if self.conjunction is None:
            return self.clauses[0].target()
        first, second = self.clauses
        if self.conjunction == "because":
            first, second = second, first
        return f"{first.target()} {CONJUNCTIONS[self.conjunction]} {second.target()}"


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
    adjectives = tuple(rng.sample(list(ADJECTIVES), count))
    relative = None
    if rng.random() < 0.07:
        relative = (rng.choice(_BY_KIND["intransitive"]), rng.choice(TENSES))
    return NounPhrase(noun, plural, adjectives, number, article, relative)


def _sample_phrase(rng: random.Random, pronoun_probability: float, animate: bool) -> Phrase:
    if rng.random() < pronoun_probability:
        return Pronoun(rng.choice(list(PRONOUNS)))
    return _sample_noun_phrase(rng, animate)


def _sample_clause(rng: random.Random) -> Clause:
    roll = rng.random()
    kind = "intransitive" if roll < 0.3 else "transitive" if roll < 0.75 else "ditransitive"
    verb = rng.choice(_BY_KIND[kind])
    tense = rng.choice(TENSES)
    subject = _sample_phrase(rng, 0.3, animate=True)
    obj = _sample_phrase(rng, 0.15, animate=False) if kind != "intransitive" else None
    indirect = None
    if kind == "ditransitive" and rng.random() < 0.7:
        indirect = _sample_phrase(rng, 0.3, animate=True)
    negated = rng.random() < 0.15
    time = None
    if rng.random() < 0.2:
        time = rng.choice([word for word, (t, _) in TIME_ADVERBS.items() if t == tense])
    manner = rng.choice(list(MANNER_ADVERBS)) if rng.random() < 0.25 else None
    return Clause(subject, verb, tense, negated, obj, indirect, time, manner)


def sample_sentence(rng: random.Random) -> Sentence:
    """Draws one random sentence structure (any length; ``generate_pairs`` filters).

    Args:
        rng: the random generator to draw from.

    Returns:
        The ``Sentence``.
    """
    if rng.random() < 0.15:
        conjunction = rng.choice(list(CONJUNCTIONS))
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
