"""The strict grammar of what clients send: customer names, amounts and JSON bodies.

One rule per value, whatever its JSON type: an amount given as the string "12.30" and as the
number 12.30 is read from the same text by the same pattern, never through a binary float
(so 0.30000000000000001 is refused as a number exactly as it is as a string).
"""

from __future__ import annotations

import json
import re
import unicodedata
from decimal import Decimal
from typing import Any

from orders.data.models import CUSTOMER_MAX_LENGTH

MAX_AMOUNT = Decimal("9999999999.99")  # NUMERIC(12, 2)
# Digits 0-9 only (no "1_000", no Arabic-Indic or full-width digits, no sign, no exponent, no
# leading zero): at most 10 integer digits and 2 decimals, which is what NUMERIC(12, 2) holds.
AMOUNT = re.compile(r"(0|[1-9][0-9]{0,9})(\.[0-9]{1,2})?", re.ASCII)

# Bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): they reorder
# the text around them, so "abc\u202efdp.exe" shows as "abcexe.pdf".
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Letters and symbols that render as nothing, beside the format (Cf) and separator (Z*) categories.
BLANK_LOOKING = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f\u17b4\u17b5")
# Zero-width characters that join or mark nothing at either end of a name (a byte-order mark
# pasted from a file, a joiner left from an edit): taken off with the surrounding spaces, so
# "\ufeffAna" is the customer "Ana", not a second one that looks the same. Within a name they
# stay (a joiner in an emoji sequence or a Persian word belongs there).
ZERO_WIDTH_EDGES = "\ufeff\u200b\u200c\u200d\u2060"


def _noncharacter(ch: str) -> bool:
    """Unicode's 66 noncharacters (U+FDD0-U+FDEF and the last two of every plane): never text."""
    code = ord(ch)
    return 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE


class GrammarError(ValueError):
    """A value that does not follow its grammar; the message says what would."""


class JsonNumber:
    """A JSON number kept as the text the client sent (json.loads gives us its literal)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


class DuplicateKey(ValueError):
    """A JSON object that names one key twice (json.loads would silently keep the last)."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKey(f"the key {key[:40]!r} appears twice")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json would accept NaN and Infinity


def loads(data: bytes) -> Any:
    """Parse a JSON body: numbers stay text (JsonNumber), no NaN/Infinity, no duplicate keys.
    Raises ValueError (UnicodeDecodeError, JSONDecodeError, DuplicateKey) or RecursionError."""
    return json.loads(
        data,
        parse_float=JsonNumber,
        parse_int=JsonNumber,
        parse_constant=_no_constants,
        object_pairs_hook=_object,
    )


def customer_name(value: Any) -> str:
    """A customer name as stored: NFC, without surrounding spaces, visible, without control,
    bidi-override or isolate characters, at most CUSTOMER_MAX_LENGTH characters."""
    if not isinstance(value, str):
        raise GrammarError("required: a non-empty string")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        # JSON can carry a lone surrogate ("\ud800"); no database driver can store one.
        raise GrammarError("must be valid Unicode text (no lone surrogates)")
    # One spelling per name: "José" composed (U+00E9) and decomposed (e + U+0301) are one customer.
    name = unicodedata.normalize("NFC", value).strip()
    while name != (trimmed := name.strip(ZERO_WIDTH_EDGES).strip()):
        name = trimmed
    if any(_noncharacter(ch) for ch in name):
        raise GrammarError("must be Unicode text (no noncharacters such as U+FFFF)")
    categories = [unicodedata.category(ch) for ch in name]
    if any(cat in ("Cc", "Zl", "Zp") for cat in categories):
        raise GrammarError("must not contain control characters or line breaks (C0, C1, U+2028/9)")
    if BIDI_CONTROLS.intersection(name):
        raise GrammarError("must not contain bidirectional overrides or isolates (U+202A-E, U+2066-9)")
    visible = [
        ch
        for ch, cat in zip(name, categories, strict=True)
        # Private use (Co) shows only in a font made for it: not a visible character on its own.
        if cat not in ("Cf", "Zs", "Mn", "Me", "Co") and ch not in BLANK_LOOKING
    ]
    if not visible:
        raise GrammarError("required: a name with at least one visible character")
    if len(name) > CUSTOMER_MAX_LENGTH:
        raise GrammarError(f"at most {CUSTOMER_MAX_LENGTH} characters")
    return name


def amount(value: Any) -> Decimal:
    """An amount from a JSON string or number, by one grammar: 0 to 9999999999.99, at most two
    decimals, ASCII digits, no sign, no exponent, no separators."""
    if isinstance(value, JsonNumber):
        text = value.text
    elif isinstance(value, str):
        text = value
    else:
        raise GrammarError('required: a decimal with at most 2 places, e.g. "12.34"')
    if not AMOUNT.fullmatch(text):
        raise GrammarError(
            'must be a decimal from 0 to 9999999999.99 with at most 2 places and ASCII digits, e.g. "12.34"'
        )
    return Decimal(text).quantize(Decimal("0.01"))
