"""Names in human order: the normalized key the "Customer A–Z" sort, go-to by name and search
read, the same on SQLite, PostgreSQL and MariaDB.

Database collations differ per engine and per server (SQLite compares bytes, PostgreSQL follows
the cluster's locale or ICU, MariaDB the column's collation), so the order is the project's own:
`name_key(customer)` is stored in `orders.customer_key` (written with every order, see
orders/data/models.py) and compared in code point order on every engine (`NameKey` below).

The key is the name
1. NFKD-decomposed and casefolded (twice: casefolding can leave compatibility characters, and
   decomposing can leave capitals, e.g. "ℌ" -> "H"), so "ÁNA", "ána" and "Ana" are one key and
   "ß" is "ss", "ﬁ" is "fi";
2. without nonspacing and enclosing marks (Unicode categories Mn, Me, after NFKD): "Úrsula" is "ursula",
   "Çé" is "ce";
3. with the Latin letters NFKD leaves whole folded as readers type them (`_LATIN`: "Łukasz"
   is "lukasz", "Ørsted" "orsted", "Ægir" "aegir", "Þór" "thor"; letters of living orthographies
   only, never another script's), every apostrophe-like character made "'" ("O’Brien" is
   "o'brien") and every hyphen-like one "-";
4. with runs of white space made one space, so "Ana  Souza" is "ana souza";
5. cut at KEY_LENGTH characters (NFKD can expand a character up to 18-fold; the id breaks ties).

Where other scripts go: after Latin, in Unicode code point order of what remains (digits and
punctuation first, then Latin a-z, then Greek, Cyrillic, Armenian, Hebrew, Arabic, ..., Hangul
jamo, CJK). Greek and Cyrillic fold case and lose accents too ("Ωμέγα" is "ωμεγα"); a script with no
case (Arabic, CJK) keeps its letters as they are.

The search (orders/finding/search.py) reads the words of the whole normalized name (`name_words`:
steps 1 to 4, not cut at KEY_LENGTH): runs of letters, digits and the marks that stay (Unicode
L*, N*, M*); anything else separates them (spaces, punctuation), except an apostrophe or a hyphen
between two of them, which joins (`searched_words`): "Jean-Luc O'Brien" is found by "jean",
"luc", "jeanluc", "o", "brien" and "obrien". A query joins at an apostrophe and splits at a
hyphen (`key_words`): "o'brien" is the one word "obrien", "jean-luc" the two "jean" and "luc".
In a script written without spaces (CJK: Han, kana, Hangul) each character within a word's first
WORD_PREFIX starts a word, so "王小明" is found by "小明" too. A word is matched on its first
WORD_PREFIX characters.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from sqlalchemy import String
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.types import TypeDecorator

KEY_LENGTH = 64
# A name's word is searchable by each of its first WORD_PREFIX prefixes (orders/finding/search.py): a
# longer query word is matched on its first WORD_PREFIX characters.
WORD_PREFIX = 16
_LAST = 0x10FFFF
# Nonspacing and enclosing marks: accents, cedillas, tildes (spacing vowel signs, Mc, stay).
_MARKS = ("Mn", "Me")

# Latin letters that NFKD does not decompose (a stroke, a bar or a hook is part of the letter, or
# it is a ligature or a letter of its own), as they are after casefolding, and the ASCII a reader
# without the letter types for them. Letters of living orthographies that names are written in
# (Nordic, Polish, Croatian/Serbian, Vietnamese, Maltese, Sami, Turkish, Azerbaijani, Greenlandic,
# French, Hausa, Ewe, Akan, Bambara, ...); every value is what anyascii 0.3.3 gives for the letter
# (docs/finding.md says why a table of our own and not that library). Letters of other scripts
# (Greek, Cyrillic, CJK, ...) are never here: they keep their letters.
_LATIN = {
    "æ": "ae",  # Æ: Danish, Norwegian, Icelandic
    "ð": "d",  # Ð: Icelandic, Faroese
    "đ": "d",  # Đ: Croatian, Serbian, Vietnamese (and Ɖ's ɖ below)
    "ħ": "h",  # Ħ: Maltese
    "ı": "i",  # dotless i: Turkish, Azerbaijani (İ decomposes to i and a dot)
    "ĸ": "q",  # kra: Greenlandic before 1973 (written q since)
    "ł": "l",  # Ł: Polish, Sorbian
    "ŋ": "ng",  # Ŋ: Sami, Wolof, Ewe
    "ø": "o",  # Ø: Danish, Norwegian, Faroese
    "œ": "oe",  # Œ: French
    "ŧ": "t",  # Ŧ: Northern Sami
    "þ": "th",  # Þ: Icelandic
    "ƒ": "f",  # Ƒ: Ewe
    "ƙ": "k",  # Ƙ: Hausa
    "ƴ": "y",  # Ƴ: Hausa, Fula
    "ƶ": "z",  # Ƶ: Polish handwriting
    "ǝ": "e",  # Ǝ: Pan-Nigerian
    "ǥ": "g",  # Ǥ: Skolt Sami
    "ɓ": "b",  # Ɓ: Hausa, Fula
    "ɔ": "o",  # Ɔ: Akan, Ewe, Lingala
    "ɖ": "d",  # Ɖ: Ewe, Fon
    "ɗ": "d",  # Ɗ: Hausa, Fula
    "ə": "e",  # Ə: Azerbaijani
    "ɛ": "e",  # Ɛ: Akan, Ewe, Lingala
    "ɣ": "g",  # Ɣ: Ewe, Dinka
    "ɨ": "i",  # Ɨ: orthographies of Africa and the Americas
    "ɲ": "n",  # Ɲ: Bambara
    "ʉ": "u",  # Ʉ: orthographies of Africa and the Americas
    "ʋ": "v",  # Ʋ: Ewe
}
# Apostrophes as names are written and typed (after NFKD: the fullwidth one is "'" by then), made
# "'": between two letters or digits an apostrophe joins (`searched_words`). The middle dot joins
# too: Catalan's "l·l" (Ŀ is "l·" after NFKD). The acute accent "´" is not here: NFKD makes it a
# space and an accent, so it separates, as a space does.
_APOSTROPHES = "'`\u2018\u2019\u201b\u2032\u02b9\u02bb\u02bc\u02bd\u02be\u02bf\ua78c\u00b7"
# Hyphens (after NFKD: the non-breaking one is U+2010 by then, the fullwidth and small ones "-"),
# made "-": between two letters or digits a hyphen joins the name's words ("jeanluc") and separates
# a query's ("jean-luc" is "jean" and "luc").
_HYPHENS = "-\u2010\u2012\u2013"
_FOLD = str.maketrans({**_LATIN, **{ch: "'" for ch in _APOSTROPHES}, **{ch: "-" for ch in _HYPHENS}})


def name_key(name: str) -> str:
    """The sort, go-to and search key of a customer name (see the module's docstring)."""
    return normalized_name(name)[:KEY_LENGTH]


def normalized_name(name: str) -> str:
    """Steps 1 to 4 of the module's docstring: the name's key before it is cut."""
    text = name
    for _ in range(2):
        text = unicodedata.normalize("NFKD", text).casefold()
    text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if unicodedata.category(ch) not in _MARKS)
    if not text.isascii() or "`" in text:  # an ASCII name has nothing else to fold
        text = text.translate(_FOLD)
    return " ".join(text.split())


def name_words(name: str) -> set[str]:
    """What the search table holds for a customer name: the prefixes of the words of its whole
    normalized form. Not of its key, which is cut at KEY_LENGTH characters: "ß" is "ss" and "ﬃ"
    is "ffi", so a name of 59 characters lost its last word ("... Groß GmbH": "gmb")."""
    return word_prefixes(normalized_name(name))


def key_is_whole(key: str) -> bool:
    """Whether a key holds its whole name (was not cut): then its words are the name's."""
    return len(key) < KEY_LENGTH


def _is_word_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LNM"


# The same for a key in ASCII (most are, once accents are gone), by regular expression: the loop
# below costs a call per character.
_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]+(?:['-][A-Za-z0-9]+)*")
_ASCII_PART = re.compile(r"(['-]?)([A-Za-z0-9]+)")


def _tokens(key: str) -> list[list[tuple[str, str]]]:
    """The runs of a normalized key that no separator breaks, each as its parts (letters, digits,
    marks) with the joiner before each ("" for the first): "jean-luc o'brien" is
    [[("", "jean"), ("-", "luc")], [("", "o"), ("'", "brien")]]. An apostrophe or hyphen joins
    only between two word characters; anywhere else it separates, as any other character does."""
    if key.isascii():
        return [_ASCII_PART.findall(token) for token in _ASCII_TOKEN.findall(key)]
    tokens: list[list[tuple[str, str]]] = []
    parts: list[tuple[str, str]] = []
    current: list[str] = []
    joiner = ""
    last = len(key) - 1
    for i, ch in enumerate(key):
        if _is_word_char(ch):
            current.append(ch)
        elif ch in "'-" and current and i < last and _is_word_char(key[i + 1]):
            parts.append((joiner, "".join(current)))
            joiner, current = ch, []
        elif current:
            parts.append((joiner, "".join(current)))
            tokens.append(parts)
            parts, current, joiner = [], [], ""
    if current:
        parts.append((joiner, "".join(current)))
        tokens.append(parts)
    return tokens


def key_words(key: str) -> list[str]:
    """The words of a query normalized as a name is (`normalized_name`), in order: an apostrophe
    inside a word is dropped ("o'brien" is "obrien"), a hyphen separates ("jean-luc" is "jean",
    "luc"), as anything else that is not a letter, digit or mark does."""
    words: list[str] = []
    for token in _tokens(key):
        word = ""
        for joiner, part in token:
            if joiner == "-":
                words.append(word)
                word = ""
            word += part
        words.append(word)
    return words


_FIRST_STARTER = "\u1100"  # the least character `_starts_a_word` (a key without one has none)


def _starts_a_word(ch: str) -> bool:
    """Whether `ch`, inside a word, starts one too: a character of a script written without
    spaces between words (CJK: Han ideographs, kana, and a Hangul syllable, which NFKD makes a
    leading consonant jamo and more). Ranges rather than names: this runs per character."""
    code = ord(ch)
    return (
        0x3400 <= code <= 0x9FFF  # CJK Extension A, Yijing hexagrams, CJK Unified Ideographs
        or 0x3041 <= code <= 0x30FF  # Hiragana, Katakana
        or 0x1100 <= code <= 0x115F  # Hangul leading consonants (a syllable's start, after NFKD)
        or 0xA960 <= code <= 0xA97F  # Hangul leading consonants, extended
        or 0x31F0 <= code <= 0x31FF  # Katakana phonetic extensions
        or 0xF900 <= code <= 0xFAFF  # CJK Compatibility Ideographs (those NFKD leaves)
        or 0x1AFF0 <= code <= 0x1B16F  # Kana Extended-A and -B, Kana Supplement (hentaigana), small kana
        or 0x20000 <= code <= 0x3FFFF  # CJK Extensions B to I and their supplements
        or 0x3005 <= code <= 0x3007  # 々 (the iteration mark of 佐々木), 〆, 〇
    )


def searched_words(key: str) -> set[str]:
    """The words a name with this normalized key is found by (word_prefixes cuts them): each part
    between separators and joiners ("o", "brien"); each run joined at its apostrophes, split at
    its hyphens ("obrien"); each run joined whole ("jeanluc"); and in CJK, each word from every
    character of its first WORD_PREFIX on ("王小明", "小明", "明")."""
    words: set[str] = set()
    for token in _tokens(key):
        parts = [part for _, part in token]
        words.update(parts)
        if len(token) > 1:
            words.add("".join(parts))
            words.update(key_words("".join(joiner + part for joiner, part in token)))
    if not key.isascii() and max(key) >= _FIRST_STARTER:
        # Within what a word is compared on (its first WORD_PREFIX characters): a CJK run of n
        # characters is then n(n+1)/2 prefixes, 136 at most, not n(n+1)/2 for any n.
        for word in list(words):
            compared = word[:WORD_PREFIX]
            words.update(compared[i:] for i in range(1, len(compared)) if _starts_a_word(compared[i]))
    return words


def word_prefixes(key: str) -> set[str]:
    """What the search table holds for a name with this key: every prefix, one to WORD_PREFIX
    characters long, of each of its words (`searched_words`; once each: "Ana Alves" holds "a"
    once)."""
    return {word[:n] for word in searched_words(key) for n in range(1, min(len(word), WORD_PREFIX) + 1)}


def prefix_upper_bound(prefix: str) -> str | None:
    """The least string greater than every string that starts with `prefix` (None: no bound).

    `key >= prefix AND key < bound` is the prefix as one index range, on every engine and without
    LIKE (SQLite's LIKE cannot use a binary index unless case_sensitive_like is on). Code point
    order is UTF-8 byte order, so the bound skips the surrogates, which no engine stores.
    """
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < _LAST:
            nxt = last + 1
            if 0xD800 <= nxt <= 0xDFFF:
                nxt = 0xE000
            return "".join(chars) + chr(nxt)
    return None


class NameKey(TypeDecorator[str]):
    """Text compared in code point order on every engine: the column of `name_key` values.

    SQLite's default BINARY collation compares UTF-8 bytes; PostgreSQL's "C" collation compares
    bytes too (UTF-8 byte order is code point order); MariaDB's utf8mb4_nopad_bin compares code
    points without the PAD SPACE rule of utf8mb4_bin (which would make "a" equal "a ").
    """

    impl = String(KEY_LENGTH)
    cache_ok = True

    def load_dialect_impl(self, dialect: Any) -> Any:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.VARCHAR(KEY_LENGTH, collation="C"))
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(
                mysql.VARCHAR(KEY_LENGTH, charset="utf8mb4", collation="utf8mb4_nopad_bin")
            )
        return dialect.type_descriptor(String(KEY_LENGTH))

    @property
    def python_type(self) -> type:
        return str
