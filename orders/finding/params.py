"""A list request's parameters as the client sent them: one rule each for a parameter given twice,
an integer out of range, and a character no engine stores; every error names the parameter."""

from __future__ import annotations

import re

from werkzeug.datastructures import MultiDict


class InvalidParameter(ValueError):
    """A query parameter a client got wrong; the message names it and says what is allowed."""


# Unicode's categories Cc and Cs, as ranges: one regex search per value instead of a category
# lookup per character (a cursor is ~100 characters; the loop was 0.1 ms of every list request).
# tests/test_pages.py checks the ranges against unicodedata over every code point.
_UNSTORABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _unstorable(text: str) -> str | None:
    """The first character of `text` no parameter may carry, as U+XXXX, or None. Control
    characters (NUL first: PostgreSQL refuses it in text, and the request was a 500) and lone
    surrogates (no driver encodes them) mean nothing in a search, a cursor or a date."""
    found = _UNSTORABLE.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


# What a person types or pastes: the search (q) and go-to (to). There a tab or a line break is
# whitespace, read as a space (a name copied from a spreadsheet's cell brings one along; the
# search's words are separated by anything not a letter or digit, and both are trimmed). The
# control characters Python calls whitespace (str.isspace): HT, LF, VT, FF, CR, FS-US, NEL.
TYPED = ("q", "to")
_TYPED_SPACE = re.compile(r"[\t\n\x0b\x0c\r\x1c-\x1f\x85]+")  # CR LF is one break: one space


def check_text_parameters(args: MultiDict[str, str]) -> None:
    """One rule for every parameter of a list request (q, to, tz, cursors, sort, ...), names
    included: a character no engine stores is a 400 naming the parameter, before any is read
    (in `q` and `to` whitespace is whitespace: `typed`)."""
    for name, value in args.items(multi=True):
        if (found := _unstorable(name)) is not None:
            raise InvalidParameter(f"a parameter name contains {found}: control characters are not allowed")
        if name in TYPED:
            value = _TYPED_SPACE.sub(" ", value)
        if (found := _unstorable(value)) is not None:
            raise InvalidParameter(f"{name} contains {found}: control characters are not allowed")


def typed(args: MultiDict[str, str], name: str) -> str | None:
    """The one value of `q` or `to`, its tabs and line breaks read as spaces (TYPED)."""
    value = single(args, name)
    return None if value is None else _TYPED_SPACE.sub(" ", value)


def single(args: MultiDict[str, str], name: str) -> str | None:
    """The one value of a query parameter, or None; a parameter given twice is refused."""
    values = args.getlist(name)
    if len(values) > 1:
        raise InvalidParameter(f"{name} was given {len(values)} times; give it once")
    return values[0] if values else None


def parse_int(args: MultiDict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = single(args, name)
    if raw is None:
        return default
    # Compared by length before int(): CPython refuses to convert over 4,300 digits (a ValueError
    # that was a 500 for `limit=111...1`), and a number longer than the bound is out of range.
    digits = raw.lstrip("0") if raw.isascii() and raw.isdigit() else None
    if digits is None or len(digits) > len(str(high)) or not low <= int(digits or "0") <= high:
        raise InvalidParameter(f"{name} must be an integer from {low} to {high}, not {raw[:40]!r}")
    return int(digits or "0")
