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
3. with runs of white space made one space, so "Ana  Souza" is "ana souza";
4. cut at KEY_LENGTH characters (NFKD can expand a character up to 18-fold; the id breaks ties).

Where other scripts go: after Latin, in Unicode code point order of what remains (digits and
punctuation first, then Latin a-z, then Greek, Cyrillic, Armenian, Hebrew, Arabic, ..., Hangul
jamo, CJK). Greek and Cyrillic fold case and lose accents too ("Ωμέγα" is "ωμεγα"); a script with no
case (Arabic, CJK) keeps its letters as they are.

The search (orders/finding/search.py) reads the words of the whole normalized name (`name_words`:
steps 1 to 3, not cut at KEY_LENGTH): runs of letters, digits and the marks that stay (Unicode
L*, N*, M*); anything else separates them (spaces, hyphens, apostrophes,
punctuation), so "Jean-Luc O'Brien" has the words "jean", "luc", "o", "brien". A word is matched
on its first WORD_PREFIX characters; CJK written without spaces is one word.
"""

from __future__ import annotations

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


def name_key(name: str) -> str:
    """The sort, go-to and search key of a customer name (see the module's docstring)."""
    return normalized_name(name)[:KEY_LENGTH]


def normalized_name(name: str) -> str:
    """Steps 1 to 3 of the module's docstring: the name's key before it is cut."""
    text = name
    for _ in range(2):
        text = unicodedata.normalize("NFKD", text).casefold()
    text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if unicodedata.category(ch) not in _MARKS)
    return " ".join(text.split())


def name_words(name: str) -> set[str]:
    """What the search table holds for a customer name: the prefixes of the words of its whole
    normalized form. Not of its key, which is cut at KEY_LENGTH characters: "ß" is "ss" and "ﬃ"
    is "ffi", so a name of 59 characters lost its last word ("... Groß GmbH": "gmb")."""
    return word_prefixes(normalized_name(name))


def key_is_whole(key: str) -> bool:
    """Whether a key holds its whole name (was not cut): then its words are the name's."""
    return len(key) < KEY_LENGTH


def key_words(key: str) -> list[str]:
    """The words of a normalized key (or of a query, normalized the same way), in order."""
    words: list[str] = []
    current: list[str] = []
    for ch in key:
        if unicodedata.category(ch)[0] in "LNM":
            current.append(ch)
        elif current:
            words.append("".join(current))
            current = []
    if current:
        words.append("".join(current))
    return words


def word_prefixes(key: str) -> set[str]:
    """What the search table holds for a name with this key: every prefix, one to WORD_PREFIX
    characters long, of each of its words (once each: "Ana Alves" holds "a" once)."""
    return {word[:n] for word in key_words(key) for n in range(1, min(len(word), WORD_PREFIX) + 1)}


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
