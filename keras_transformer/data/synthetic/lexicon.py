"""The demo language's words: nouns, adjectives, verbs, adverbs, pronouns and their target stems.

Each row pairs the source words with the target stem the grammar
(``keras_transformer.data.synthetic.grammar``) inflects.
"""

from __future__ import annotations

import dataclasses

TENSES = ("present", "past", "future")
CASES = {"nominative": "", "accusative": "n", "dative": "l"}


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
