"""The demo language's sentence structures, and how each is spelled in source and target.

A ``Sentence`` is one or two ``Clause``s; a clause's subject and objects are
``Pronoun``s or ``NounPhrase``s. Each structure renders both sides: the
source English-like (SVO), the target Kestan (SOV, inflected).
"""

from __future__ import annotations

import dataclasses

from keras_transformer.data.synthetic.lexicon import (
    ADJECTIVES,
    CASES,
    CONJUNCTIONS,
    MANNER_ADVERBS,
    NOUNS,
    PRONOUNS,
    TENSES,
    TIME_ADVERBS,
    VERBS,
    Verb,
)

_TENSE_INFIX = {"present": "", "past": "ra", "future": "sa"}
_PERSON_SUFFIX = {"1sg": "m", "2sg": "s", "3sg": "t", "1pl": "mos", "2pl": "tis", "3pl": "nt"}


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
