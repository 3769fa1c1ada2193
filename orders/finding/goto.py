""" "Go to": the value a reader types, read for the list's sort, as the key prefix to open the list at.

A date and time for newest/oldest, an amount for amount, a name (prefix, normalized by
orders/data/names.py) for customer. Each is
parsed strictly here (a 400 that says what was expected, never a guess); the library then checks
that the column can hold it (InvalidPosition, also a 400) and seals the position
(orders/finding/reader.py start), and this module says what a reader is told when
nothing is there.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from orders.finding.params import InvalidParameter
from orders.finding.search import Search, SearchError
from orders.finding.sorts import SORTS, GotoKind, SortChoice

MAX_NAME = 64
# An amount as readers write it (the separators are read by _amount): "1234.50", "1,234.50",
# "1234,50", "1.234,50", "1 234,50".
_AMOUNT = re.compile(r"[0-9][0-9 ,.\u00a0\u202f]{0,18}")
_AMOUNT_HELP = "an amount like 1234.50, 1,234.50 or 1234,50"
MAX_ZONE_MINUTES = 14 * 60  # the zones in use, UTC-12:00 to UTC+14:00: tz, and a zone typed in `to`

# What an <input type="datetime-local"> or a person sends: a date, optionally a time; and what
# the API writes (an order's created_at: seconds with a fraction and "Z"), so that a client can go
# to a row it has: a time may have a fraction and a zone ("Z" or +02:00), which then wins over tz.
_WHEN = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(?P<zone>Z|[+-][0-9]{2}:[0-9]{2})?)?"
)


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
# refuses a date without a time), and a phone's keyboard needs no picker for "2026-03-11". The
# example is a date and time, whole in the field (tests/test_browser_find.py); that a date alone
# goes to its day is what a refusal says ("Go to takes a date (2026-03-11) or a date and time").
GOTO_FIELDS: dict[GotoKind, GotoField] = {
    "datetime": GotoField(
        "Go to date and time",
        {
            "type": "text",
            "placeholder": "2026-03-11 14:30",
            "autocomplete": "off",
            "data-local-time": "",
        },
        "created",
        "day",
    ),
    "amount": GotoField(
        "Go to amount",
        # Text, not a number field: a number field refuses "1,234.50" (a comma) in most locales.
        {"type": "text", "inputmode": "decimal", "autocomplete": "off", "placeholder": "1,234.50"},
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


class GotoError(InvalidParameter):
    """A go-to refused. As SearchError: the message names the parameter (`to ...`, the API's 400),
    `reason` says the same without it, for the list page's sentence under the field ("Go to takes
    a real date and time, not '2026-02-30'."). `api`: the message's own words where a client needs
    more than a reader (the forms the API writes)."""

    def __init__(self, reason: str, api: str | None = None) -> None:
        super().__init__(f"to {api or reason}")
        self.reason = reason


@dataclass(frozen=True)
class Goto:
    """A go-to as typed (`to`, and the reader's zone `tz` for a date), and its value for the sort."""

    text: str
    value: Any
    tz_offset: str | None = None

    @classmethod
    def parse(cls, sort: str, raw: str, tz_offset: str | None) -> Goto:
        value = value_for(sort, raw, tz_offset)
        zone = _split_zone(raw.strip())[1] if SORTS[sort].goto == "datetime" else None
        # A zone typed is the reader's zone for this go-to (its messages show times in it).
        return cls(raw.strip(), value, tz_offset if zone is None else str(zone))


def value_for(sort: str, raw: str, tz_offset: str | None = None) -> Any:
    """The first key column's value for `sort` from the text typed, or GotoError."""
    raw = raw.strip()
    if not raw:
        raise GotoError("takes a value: type where to go")
    spec = SORTS[sort]
    if spec.goto == "datetime":
        when = _when(raw, tz_offset)
        if spec.sort.columns[0].descending and "T" not in raw and " " not in raw:
            # A date alone means that whole day: newest first, the day starts at its last moment.
            when = _shifted(when, dt.timedelta(days=1, microseconds=-1))
        return when
    if spec.goto == "amount":
        return amount(raw)
    if len(raw) > MAX_NAME:
        raise GotoError(f"takes a name (its start) of at most {MAX_NAME} characters")
    # The words of the name, as the search reads them: "ú", "U" and "u" go to the same place,
    # and "Pereira" to the first name with a word starting with it (orders/finding/reader.py).
    try:
        return Search.parse_words(raw)
    except SearchError as err:
        raise GotoError(err.reason) from None


def amount(raw: str) -> Decimal:
    """The amount typed, with the reader's separators where they say one thing: the last of "."
    or "," followed by one or two digits is the decimal point, every other separator groups
    thousands (groups of three digits); "1,234" and "1.234" are 1234 (an amount has at most two
    decimals). Anything else is refused with the forms that are understood."""
    text = raw.strip()
    if not (_AMOUNT.fullmatch(text) and text[-1].isdigit()):
        raise GotoError(f"takes {_AMOUNT_HELP}, not {raw[:40]!r}")
    whole, fraction = text, ""
    decimal = re.fullmatch(r"(.*[0-9])[.,]([0-9]{1,2})", text)
    if decimal is not None:
        whole, fraction = decimal.groups()
    groups = re.split(r"[ ,.\u00a0\u202f]", whole)
    separators = set(re.findall(r"[ ,.\u00a0\u202f]", whole))
    mixes_decimal = decimal is not None and text[len(whole)] in separators
    if (
        len(separators) > 1
        or mixes_decimal
        or (len(groups) > 1 and (not 1 <= len(groups[0]) <= 3 or any(len(g) != 3 for g in groups[1:])))
        # Thousands are not grouped after a leading zero: "0.001" and "0,500" were 1 and 500.
        or (len(groups) > 1 and groups[0].startswith("0"))
    ):
        raise GotoError(f"takes {_AMOUNT_HELP} (thousands in groups of three), not {raw[:40]!r}")
    digits = "".join(groups)
    if len(digits.lstrip("0")) > 10:
        raise GotoError(f"takes an amount below 10,000,000,000, not {raw[:40]!r}")
    return Decimal(f"{digits}.{fraction or '0'}")


def _when(raw: str, tz_offset: str | None) -> dt.datetime:
    if not (raw.isascii() and _WHEN.fullmatch(raw)):
        raise GotoError(
            f"takes a date (2026-03-11) or a date and time (2026-03-11 14:30), not {raw[:40]!r}",
            api="takes a date (2026-03-11) or date and time (2026-03-11T10:30, or with seconds and"
            f" a zone as the API writes them: 2026-03-11T10:30:00.000000Z), not {raw[:40]!r}",
        )
    local, zone = _split_zone(raw)
    try:
        typed = dt.datetime.fromisoformat(local.replace(" ", "T"))
    except ValueError as err:
        raise GotoError(f"takes a real date and time, not {raw[:40]!r}") from err
    # static/js/controls.js sends the reader's offset from UTC (minutes, as Date.getTimezoneOffset gives it),
    # because the list shows times in the reader's zone; without JavaScript the page shows UTC.
    minutes = 0
    if tz_offset:
        if not re.fullmatch(r"-?[0-9]{1,3}", tz_offset) or abs(int(tz_offset)) > MAX_ZONE_MINUTES:
            raise InvalidParameter(
                f"tz must be minutes from UTC, from -{MAX_ZONE_MINUTES} to {MAX_ZONE_MINUTES}"
            )
        minutes = int(tz_offset)
    if zone is not None:  # a zone typed wins over tz
        minutes = zone
    return _shifted(typed, dt.timedelta(minutes=minutes)).replace(tzinfo=dt.UTC)


def _split_zone(raw: str) -> tuple[str, int | None]:
    """A date and time typed, without its zone, and the zone as minutes behind UTC (tz's sign):
    ("2026-03-11T12:20", -120) for "2026-03-11T12:20+02:00"; (raw, None) without one."""
    found = _WHEN.fullmatch(raw) if raw.isascii() else None
    if not found or not found["zone"]:
        return raw, None
    zone = found["zone"]
    hours, minutes = (0, 0) if zone == "Z" else (int(zone[1:3]), int(zone[4:6]))
    # A zone as tz allows it, minutes under 60: +99:00 moved the go-to by four days, silently.
    if minutes >= 60 or hours * 60 + minutes > MAX_ZONE_MINUTES:
        raise GotoError(f"takes a zone of Z or from -14:00 to +14:00, not {zone!r}")
    total = hours * 60 + minutes
    return raw[: found.start("zone")], -total if zone.startswith("+") else total


def _shifted(when: dt.datetime, by: dt.timedelta) -> dt.datetime:
    """`when + by`, held at the ends of the calendar: going to 9999-12-31 in a zone ahead of
    UTC goes past every order (the top), never to an OverflowError."""
    try:
        return when + by
    except OverflowError:
        limit = dt.datetime.max if by > dt.timedelta(0) else dt.datetime.min
        return limit.replace(tzinfo=when.tzinfo)


# --- What the list says when nothing is where the reader went ------------------------------
# (orders/finding/reader.py start reads the rows; these say what they mean.)


def nothing_past(choice: SortChoice, goto: Goto) -> str:
    """No row lies at or past the value typed."""
    before = choice.sort.columns[0].descending
    where = "of" if choice.goto == "amount" else "on or before" if before else "on or after"
    tail = " or less" if choice.goto == "amount" else ""
    return f"no order {where} {_typed(choice, goto)}{tail} in this list: nothing moved"


def nothing_at(choice: SortChoice, goto: Goto, first: Any) -> str:
    """The value typed lies before the list's first row (`first`)."""
    shown = _shown(choice, goto, first)
    return f"no order at {_typed(choice, goto)} in this list, which starts at {shown}: nothing moved"


_PLAIN_AMOUNT = re.compile(r"[0-9]+(?:\.[0-9]{1,2})?")  # no separator read as a thousands one


def _typed(choice: SortChoice, goto: Goto) -> str:
    """The value typed as it was understood: an amount in the list's own form, with the text
    typed beside it where they differ ("12.345" is 12,345.00: a separator before three digits
    groups thousands, `amount`), so the answer never seems to deny a row that is there."""
    text = goto.text.strip()[:40]
    if choice.goto != "amount":
        return text
    understood = f"{goto.value:,.2f}"
    said_alike = (
        text in (understood, understood.removesuffix(".00")) or _PLAIN_AMOUNT.fullmatch(text) is not None
    )
    return understood if said_alike else f"{understood} (typed {text!r})"


def covers(choice: SortChoice, goto: Goto, row: Any) -> bool:
    """Whether `row` is what the value typed names, at the precision typed (a day, a minute, a
    second; an amount to the cent)."""
    if choice.goto == "amount":
        return bool(row.amount == goto.value)
    typed = _split_zone(goto.text)[0].replace(" ", "T")  # a zone typed is goto's own (Goto.parse)
    shown = _local(row.created_at, goto).isoformat(timespec="microseconds" if "." in typed else "seconds")
    return shown.startswith(typed)


def _local(when: dt.datetime, goto: Goto) -> dt.datetime:
    """`when` (UTC) in the zone the reader typed in (tz: minutes behind UTC), without a zone."""
    return when.replace(tzinfo=None) - dt.timedelta(minutes=int(goto.tz_offset or 0))


def _shown(choice: SortChoice, goto: Goto, row: Any) -> str:
    if choice.goto == "amount":
        return f"{row.amount:,.2f}"
    return _local(row.created_at, goto).isoformat(sep=" ", timespec="minutes")
