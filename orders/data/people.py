"""Demo customers named as a shop's customers are: first names and surnames drawn from a few
thousand each with a Zipf-like frequency (the name of rank r about 1/r as often as the first),
accents included, so that a surname finds tens to thousands of orders, two words narrow it, and
a typo finds nothing (docs/operations.md, the seed).

The lists are made here, not shipped: the most common Portuguese first names and surnames head
them (real names, ranked by hand), and names built from syllables fill the long tail, with
the accents Portuguese writes (á, â, ã, é, ê, í, ó, ô, õ, ú, ç). Everything is drawn from
`random.Random` with a fixed seed, so the same customers come out on every machine and engine.
"""

from __future__ import annotations

import bisect
import itertools
import random
from functools import cache

FIRST_NAMES = 3000
SURNAMES = 3000
# The exponent of the Zipf law: 1 is the classic one (rank 2 half as frequent as rank 1).
ZIPF = 1.0
# A customer has a second surname this often ("Ana Souza Lima").
SECOND_SURNAME = 0.1
SEED = 56  # the draw's seed: a fixed one, so every seed of every engine names the same people

COMMON_FIRST = [
    "Maria", "Ana", "José", "João", "Antônio", "Francisco", "Carlos", "Paulo", "Pedro", "Lucas",
    "Luiz", "Marcos", "Luís", "Gabriel", "Rafael", "Francisca", "Daniel", "Marcelo", "Bruno",
    "Eduardo", "Felipe", "Raimundo", "Rodrigo", "Antônia", "Adriana", "Juliana", "Márcia",
    "Fernanda", "Patrícia", "Aline", "Sandra", "Camila", "Amanda", "Bruna", "Jéssica", "Letícia",
    "Júlia", "Luciana", "Vanessa", "Mariana", "Gabriela", "Vera", "Vitória", "Larissa", "Cláudia",
    "Beatriz", "Rita", "Sofia", "Helena", "Olívia", "Úrsula", "Quésia", "Tiago", "Vitor",
    "Henrique", "Isabela", "Karina", "Nicolas", "Wesley", "Yara", "Zeca", "Diego", "Elisa",
    "Conceição", "Íris", "Caio", "Débora", "Inês", "Joaquim", "Sebastião",
]  # fmt: skip
COMMON_SURNAMES = [
    "Silva", "Santos", "Oliveira", "Souza", "Rodrigues", "Ferreira", "Alves", "Pereira", "Lima",
    "Gomes", "Costa", "Ribeiro", "Martins", "Carvalho", "Almeida", "Lopes", "Soares", "Fernandes",
    "Vieira", "Barbosa", "Rocha", "Dias", "Nascimento", "Andrade", "Moreira", "Nunes", "Marques",
    "Machado", "Mendes", "Freitas", "Cardoso", "Ramos", "Gonçalves", "Santana", "Teixeira",
    "Araújo", "Pinto", "Monteiro", "Batista", "Farias", "Castro", "Melo", "Barros", "Correia",
    "Conceição", "Magalhães", "Brandão", "Damião", "Guimarães", "Simões", "Assunção", "Falcão",
    "Quintanilha", "Loureiro", "Figueiredo", "Sampaio", "Tavares", "Peixoto", "Aragão", "Leão",
]  # fmt: skip

_ONSETS = ["b", "c", "d", "f", "g", "j", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "cr",
           "dr", "fr", "gr", "pr", "tr", "ch", "lh", "nh", "qu", "gu"]  # fmt: skip
_FIRST_ONSETS = [onset for onset in _ONSETS if onset not in ("lh", "nh")]
_VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "a", "i"]
_ACCENTED = {"a": "áâã", "e": "éê", "i": "í", "o": "óôõ", "u": "ú"}
_FIRST_ENDS = ["a", "o", "ana", "ina", "ela", "ino", "elo", "ia", "io", "son", "ete", "ice", "ão"]
_SURNAME_ENDS = ["es", "eira", "ado", "inho", "ão", "ira", "oso", "ares", "edo", "ança", "ais", "ota", "iz"]


def _invented(rng: random.Random, ends: list[str]) -> str:
    """A name of one or two syllables and an ending, perhaps with one accent (the ends with ã
    and ç carry their own)."""
    syllables = []
    for n in range(rng.choice((1, 2))):
        onsets = _ONSETS if n else _FIRST_ONSETS  # no word starts with "lh" or "nh"
        syllables.append(rng.choice(onsets) + rng.choice(_VOWELS))
    stem = "".join(syllables)
    if rng.random() < 0.12:  # one accented vowel, as in "Quésia", "Olívia"
        spots = [i for i, ch in enumerate(stem) if ch in _ACCENTED]
        i = rng.choice(spots)
        stem = stem[:i] + rng.choice(_ACCENTED[stem[i]]) + stem[i + 1 :]
    return (stem + rng.choice(ends)).capitalize()


def _names(head: list[str], ends: list[str], count: int, seed: int) -> tuple[str, ...]:
    rng = random.Random(seed)
    names = list(dict.fromkeys(head))
    seen = {name.casefold() for name in names}
    while len(names) < count:
        name = _invented(rng, ends)
        if name.casefold() not in seen:
            seen.add(name.casefold())
            names.append(name)
    return tuple(names)


@cache
def first_names() -> tuple[str, ...]:
    """FIRST_NAMES first names, the most common first."""
    return _names(COMMON_FIRST, _FIRST_ENDS, FIRST_NAMES, SEED)


@cache
def surnames() -> tuple[str, ...]:
    """SURNAMES surnames, the most common first."""
    return _names(COMMON_SURNAMES, _SURNAME_ENDS, SURNAMES, SEED + 1)


@cache
def _cumulative(count: int) -> tuple[float, ...]:
    """The Zipf law's cumulative weights over ranks 1..count."""
    return tuple(itertools.accumulate(1 / rank**ZIPF for rank in range(1, count + 1)))


def _draw(rng: random.Random, names: tuple[str, ...]) -> str:
    weights = _cumulative(len(names))
    return names[bisect.bisect_right(weights, rng.random() * weights[-1])]


@cache
def customers(count: int) -> tuple[str, ...]:
    """`count` customer names, drawn in a fixed order: the first n of them are the same whatever
    `count` (a bigger seed has more customers, the same first ones). Names repeat, as in life."""
    rng = random.Random(SEED + 2)
    first, last = first_names(), surnames()
    drawn = []
    for _ in range(count):
        name = f"{_draw(rng, first)} {_draw(rng, last)}"
        if rng.random() < SECOND_SURNAME:
            name += f" {_draw(rng, last)}"
        drawn.append(name)
    return tuple(drawn)
