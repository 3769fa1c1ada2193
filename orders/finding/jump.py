""" "Go to": the value a reader types, read for the list's sort, as the key prefix to open the list at.

A date and time for newest/oldest, an amount for amount, a name (prefix, normalized by
orders/data/names.py) for customer. Each is
parsed strictly here (a 400 that says what was expected, never a guess); the library then checks
that the column can hold it (InvalidPosition, also a 400) and seals the position.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from orders.data.names import KEY_LENGTH, name_key
from orders.finding.listing import InvalidParameter, ListRequest
from orders.finding.sorts import SORTS, GotoKind
from pagination import BEFORE, CursorCodec, Position, filters_fingerprint

MAX_NAME = 64
_AMOUNT = re.compile(r"[0-9]{1,10}(\.[0-9]{1,2})?")
# What an <input type="datetime-local"> or a person sends: a date, optionally a time.
_WHEN = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2})?)?")


@dataclass(frozen=True)
class GotoField:
    """What the browser shows for a kind of go-to: the field's label, the input's attributes
    (templates/orders.html renders them) and which cell of a row the find bar's position reads,
    shown how (static/js/controls.js: "day" a date, "text" as is, "initial" the first letter)."""

    label: str
    attributes: dict[str, str]
    cell: str
    shown: str


# One home for the kinds' front end: the template and the script read these, never the kind's name.
# A date and time is typed as text: a date alone is a whole day (an <input type="datetime-local">
# refuses a date without a time), and a phone's keyboard needs no picker for "2026-03-11".
GOTO_FIELDS: dict[GotoKind, GotoField] = {
    "datetime": GotoField(
        "Go to date and time",
        {
            "type": "text",
            "placeholder": "2026-03-11 or 2026-03-11 14:30",
            "autocomplete": "off",
            "data-local-time": "",
        },
        "created",
        "day",
    ),
    "amount": GotoField(
        "Go to amount",
        {"type": "number", "min": "0", "step": "0.01", "inputmode": "decimal"},
        "amount",
        "text",
    ),
    "name": GotoField(
        "Go to customer name",
        {"type": "text", "maxlength": "64", "autocomplete": "off", "placeholder": "Start of a name"},
        "customer",
        "initial",
    ),
}


def value_for(sort: str, raw: str, tz_offset: str | None = None) -> Any:
    """The first key column's value for `sort` from the text typed, or InvalidParameter."""
    raw = raw.strip()
    if not raw:
        raise InvalidParameter("to is empty: give a value to go to")
    spec = SORTS[sort]
    if spec.goto == "datetime":
        when = _when(raw, tz_offset)
        if spec.keyset.columns[0].descending and "T" not in raw and " " not in raw:
            # A date alone means that whole day: newest first, the day starts at its last moment.
            when = _shifted(when, dt.timedelta(days=1, microseconds=-1))
        return when
    if spec.goto == "amount":
        if not (raw.isascii() and _AMOUNT.fullmatch(raw)):
            raise InvalidParameter(f"to must be an amount like 120 or 120.50 for this sort, not {raw[:40]!r}")
        return Decimal(raw)
    if len(raw) > MAX_NAME:
        raise InvalidParameter(f"to is a name (prefix) of at most {MAX_NAME} characters")
    # The customer sort reads the normalized key: "ú", "U" and "u" go to the same place.
    key = name_key(raw)
    if not key:
        raise InvalidParameter("to has no letters or digits to go to")
    return key


def _when(raw: str, tz_offset: str | None) -> dt.datetime:
    if not (raw.isascii() and _WHEN.fullmatch(raw)):
        raise InvalidParameter(
            f"to must be a date (2026-03-11) or date and time (2026-03-11T10:30), not {raw[:40]!r}"
        )
    try:
        naive = dt.datetime.fromisoformat(raw.replace(" ", "T"))
    except ValueError as err:
        raise InvalidParameter(f"to is not a real date and time: {raw[:40]!r}") from err
    # static/js/controls.js sends the reader's offset from UTC (minutes, as Date.getTimezoneOffset gives it),
    # because the list shows times in the reader's zone; without JavaScript the page shows UTC.
    minutes = 0
    if tz_offset:
        if not re.fullmatch(r"-?[0-9]{1,3}", tz_offset) or abs(int(tz_offset)) > 14 * 60:
            raise InvalidParameter("tz must be minutes from UTC, from -840 to 840")
        minutes = int(tz_offset)
    return _shifted(naive, dt.timedelta(minutes=minutes)).replace(tzinfo=dt.UTC)


def _shifted(when: dt.datetime, by: dt.timedelta) -> dt.datetime:
    """`when + by`, held at the ends of the calendar: going to 9999-12-31 in a zone ahead of
    UTC goes past every order (the top), never to an OverflowError."""
    try:
        return when + by
    except OverflowError:
        limit = dt.datetime.max if by > dt.timedelta(0) else dt.datetime.min
        return limit.replace(tzinfo=when.tzinfo)


# --- End: the last rows of the list, as the first page of the reverse order ------------------

# Past every value a key column of each kind can hold here, on every engine (MariaDB's DATETIME
# starts at year 1000; Money is NUMERIC(12, 2); a NameKey is at most KEY_LENGTH characters).
_LOWEST: dict[type, Any] = {
    dt.datetime: dt.datetime(1000, 1, 1, tzinfo=dt.UTC),
    Decimal: Decimal("-9999999999.99"),
    int: -(2**63),
    str: "",
}
_HIGHEST: dict[type, Any] = {
    dt.datetime: dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
    Decimal: Decimal("9999999999.99"),
    int: 2**63 - 1,
    str: "\U0010ffff" * KEY_LENGTH,
}


def end_cursor(listing: ListRequest, codec: CursorCodec) -> str:
    """A `before` cursor past the last row of the list's sort: the page it opens is the list's
    last `limit` rows, read from the end of the sort's index in one request (one index range
    read backwards), not through the rows in between."""
    keys = []
    for column in listing.keyset.columns:
        kind = column.type.python_type
        keys.append((_LOWEST if column.descending else _HIGHEST)[kind])
    return codec.encode(Position(listing.sort, BEFORE, filters_fingerprint(listing.filters), tuple(keys)))
