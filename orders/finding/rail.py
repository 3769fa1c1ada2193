"""The scrubber rail of a sort: the whole list's shape in buckets (months, or weeks and days where
they are dense, for the date sorts; amount bands for amount; initials for customer), each with its
count and a cursor at its first row, built from the counts the writes keep (rail_counts,
migration 0008), never COUNT(*).

One read per rail: the family's rows of rail_counts (a day, an amount bin or an initial, per
status: a few hundred rows at 300,000 orders, once folded: orders/data/rail_fold.py), summed
per bucket by the database; the date rails sum them per month, then per day only in the months
dense enough to split (a second read, of those months' days). The layout (which months split
into weeks, which bins make a band) is chosen from the whole list's counts, so it is the same
under every status filter and a status's rail shows that status's shape over it; the counts are
the filter's.

The buckets' ranges are fixed values of the sort's first key column (a UTC day, an amount in
cents, a code point), so a bucket's count is exactly the rows in its range (as committed) and its
cursor (`pagination.start_at` at the range's first value in the sort's order) opens the list at
its first row in one index range: the go-to the app already has, without a read.

A search gets no rail: its words are not counted per bucket, and a whole list's shape would be a
wrong one (`Rail.note` says so). Nor does a coordinator of shards (each shard keeps its counts).
"""

from __future__ import annotations

import calendar
import datetime as dt
import functools
import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, SQLColumnExpression, case, func, literal_column, select

from orders.data.models import RailCount, keeps_rail
from orders.finding.estimates import rounded
from orders.finding.request import ListRequest
from orders.finding.sorts import SORTS, GotoKind
from pagination import CursorCodec, start_at

# Which family of rail_counts each go-to kind reads.
FAMILY: dict[GotoKind, str] = {"datetime": "day", "amount": "amount", "name": "initial"}
# A month holding more than this share of the whole list is shown as its weeks (days 1-7, 8-14,
# 15-21, 22 to the end), and such a week as its days: years of orders get a rail of months, ten
# weeks one of weeks, a week one of days.
DENSE_SHARE = 1 / 8
# Amount bins are grouped into about this many bands of similar shares of the whole list.
BANDS = 20
_LARGEST_AMOUNT = Decimal("9999999999.99")  # orders/writing/grammar.py MAX_AMOUNT
_MICROSECOND = dt.timedelta(microseconds=1)
_CENT = Decimal("0.01")
SEARCH_NOTE = (
    "no rail for a search: the counts are kept per bucket of the whole list, not per name word, "
    "so its shape would be wrong"
)
SHARDS_NOTE = "no rail over shards: each shard keeps its own counts"


@dataclass(frozen=True)
class Bucket:
    """One part of the rail: a range [low, high) of the sort's first key column (ascending; high
    None: to the end), its orders now, and where the list opens at its first row."""

    key: str  # stable within a layout: "2026-03", "2026-03-08", "51200", "b"
    label: str  # "March 2026", "512.00 to 537.99", "B"
    short: str  # what the rail prints where there is room: "Mar 2026", "512", "B"
    count: int
    low: str  # ISO 8601 (UTC) for a date, an amount, a name prefix
    high: str | None
    cursor: str  # an `after` cursor: the list opened there starts at the bucket's first row
    # The part of [low, high) its orders fill, as finely as the counts know it (from the first
    # day, or amount bin, with an order of the status to the end of the last one): where the rail
    # marks the reader's place within the bucket. A month with a week of orders is that week.
    span_low: str
    span_high: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "short": self.short,
            "count": self.count,
            "low": self.low,
            "high": self.high,
            "cursor": self.cursor,
            "span_low": self.span_low,
            "span_high": self.span_high,
        }

    @property
    def valuetext(self) -> str:
        """What a screen reader hears for the bucket: "March 2026, about 9,800 orders"."""
        n = rounded(self.count)
        return f"{self.label}, {'about ' if n != self.count else ''}{n:,} order{'s' if n != 1 else ''}"


@dataclass(frozen=True)
class Rail:
    sort: str
    status: str | None
    kind: GotoKind
    unit: str  # "month or week", "amount band", "initial": what a bucket is, in words
    buckets: list[Bucket] = field(default_factory=list)
    note: str | None = None  # why there are no buckets (a search, shards)

    @property
    def title(self) -> str:
        """What the rail is called: "Jump to a month or week", "Jump to an initial"."""
        return f"Jump to {'an' if self.unit[0] in 'aeiou' else 'a'} {self.unit}"

    @property
    def total(self) -> int:
        return sum(b.count for b in self.buckets)

    def as_json(self) -> dict[str, Any]:
        return {
            "sort": self.sort,
            "status": self.status,
            "kind": self.kind,
            "unit": self.unit,
            "total": self.total,
            "buckets": [b.as_json() for b in self.buckets],
            "note": self.note,
        }

    def etag(self) -> str:
        """Changes when a count (or a bucket, or a cursor) changes: the body's own digest."""
        body = json.dumps(self.as_json(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.blake2b(body, digest_size=12).hexdigest()


UNITS: dict[GotoKind, str] = {"datetime": "month or week", "amount": "amount band", "name": "initial"}


def build(listing: ListRequest, connection: Connection) -> Rail:
    """The rail of `listing`'s sort and status (its cursor, go-to and page size play no part)."""
    kind = listing.choice.goto
    rail = Rail(listing.sort_name, listing.status, kind, UNITS[kind])
    if listing.search is not None:
        return Rail(rail.sort, rail.status, kind, rail.unit, note=SEARCH_NOTE)
    if listing.sharded or not keeps_rail(connection):
        return Rail(rail.sort, rail.status, kind, rail.unit, note=SHARDS_NOTE)
    n = RailCount.n
    own = n if listing.status is None else case((RailCount.status == listing.status, n), else_=0)
    filled: dict[str, tuple[str, str]] = {}  # a whole month's first and last day with orders
    if kind == "datetime":
        whole, mine, filled = _month_sums(connection, own)
    else:
        whole, mine = _sums(connection, FAMILY[kind], own, RailCount.bucket)
    ranges = _LAYOUTS[kind](whole)
    descending = listing.sort.columns[0].descending
    buckets = []
    for r in ranges:
        count = sum(mine[b] for b in r.members)
        if count <= 0:
            continue  # nothing to land on: no first row
        first = r.high_value - r.step if descending and r.high_value is not None else r.low_value
        if descending and r.high_value is None:
            first = r.top
        cursor = _cursor(listing.codec, listing.sort_name, listing.status, first)
        span_low, span_high = _SPANS[kind](r, mine, filled)
        buckets.append(Bucket(r.key, r.label, r.short, count, r.low, r.high, cursor, span_low, span_high))
    if descending:
        buckets.reverse()
    return Rail(rail.sort, rail.status, kind, rail.unit, buckets)


def _sums(
    connection: Connection,
    family: str,
    own: SQLColumnExpression[Any],
    key: SQLColumnExpression[str],
    *where: Any,
) -> tuple[dict[str, int], dict[str, int]]:
    """Summed per `key` by the database: the whole list's counts and the status's (`own`)."""
    rows = connection.execute(
        select(key, func.sum(RailCount.n), func.sum(own))
        .where(RailCount.family == family, *where)
        .group_by(key)
    ).all()
    return {k: int(all_of) for k, all_of, _ in rows}, {k: int(of_status) for k, _, of_status in rows}


# A day bucket's month ("2026-03" of "2026-03-11"), its bounds written out: bound parameters
# would make the SELECT's expression and the GROUP BY's two different ones to PostgreSQL.
_MONTH = func.substr(RailCount.bucket, literal_column("1"), literal_column("7"))


def _month_sums(
    connection: Connection, own: SQLColumnExpression[Any]
) -> tuple[dict[str, int], dict[str, int], dict[str, tuple[str, str]]]:
    """The date rails' counts: each month's, and each day's of the months dense enough to be
    split (DENSE_SHARE); and each month's first and last day with an order of the status (where
    the rail marks a place in it). Summed by the database per day, then per month: years of
    orders are tens of rows to read and lay out rather than hundreds of days (11 ms at 3 million
    orders read per day, most of it Python's). Two statements: a write committed between them
    may be in one and not the other, as a write in flight is (the rail is exact once it has
    landed).

    Per day first, so that the first and last day are exact: a day's rows may count an order
    that has gone since the last fold (the folded row counts it, a stripe takes it away), and the
    rows' own least and greatest day named such days (0.4 ms more at 3 million orders than the
    sums alone; per day, 0.8 ms)."""
    family = FAMILY["datetime"]
    by_day = select(
        RailCount.bucket.label("day"), func.sum(RailCount.n).label("whole"), func.sum(own).label("mine")
    )
    day = by_day.where(RailCount.family == family).group_by(RailCount.bucket).subquery()
    of_month = func.substr(day.c.day, literal_column("1"), literal_column("7"))
    has = case((day.c.mine > 0, day.c.day))  # a day with an order of the status
    by_month = select(of_month, func.sum(day.c.whole), func.sum(day.c.mine), func.min(has), func.max(has))
    rows = connection.execute(by_month.group_by(of_month)).all()
    whole = {m: int(n) for m, n, _, _, _ in rows}
    mine = {m: int(n) for m, _, n, _, _ in rows}
    filled = {m: (first, last) for m, _, _, first, last in rows if first is not None}
    total = sum(n for n in whole.values() if n > 0)
    dense = sorted(month for month, n in whole.items() if n > total * DENSE_SHARE)
    if dense:
        days_whole, days_mine = _sums(connection, family, own, RailCount.bucket, _MONTH.in_(dense))
        whole.update(days_whole)
        mine.update(days_mine)
    return whole, mine, filled


@functools.lru_cache(maxsize=4096)
def _cursor(codec: CursorCodec, sort: str, status: str | None, first: Any) -> str:
    """The `after` cursor at a bucket's first value. Sealing is deterministic (the same position
    gives the same cursor), and a bucket's first value is fixed, so it is sealed once per process,
    not per rail (sealing 20 cursors was most of a rail's time). Keyed by the codec itself: a
    new secret makes new cursors."""
    return start_at(SORTS[sort].sort, [first], codec=codec, filters={"status": status})


@dataclass(frozen=True)
class _Range:
    """A bucket's layout: its members (rail_counts buckets), its range as values and as text."""

    key: str
    label: str
    short: str
    members: tuple[str, ...]
    low_value: Any
    high_value: Any
    step: Any  # the least difference of the column's values: high_value - step is the last one in
    top: Any  # the first value read downwards when the range has no end
    low: str
    high: str | None


# --- Dates: months, dense months as weeks -----------------------------------------------------


def _iso(day: dt.date) -> str:
    return f"{day.isoformat()}T00:00:00Z"


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def _days(whole: dict[str, int]) -> list[_Range]:
    """`whole`: each month's count ("2026-03") and each day's ("2026-03-11") of the months that
    `_month_sums` found dense: a month with its days is split, one without is whole (the rule
    is judged there, once)."""
    months = {key: n for key, n in whole.items() if len(key) == 7 and n > 0}
    total = sum(months.values())
    days_of: dict[str, list[str]] = defaultdict(list)
    for key, n in whole.items():
        if len(key) == 10 and n > 0:
            days_of[key[:7]].append(key)

    def dense(n: int, length: int) -> bool:
        # A week is judged as seven days: the last one of a month runs to 10, and splitting it
        # alone into days gave a rail of weeks with a few days at each month's end.
        return n * 7 / length > total * DENSE_SHARE

    ranges: list[_Range] = []
    for key in sorted(months):
        year, month = int(key[:4]), int(key[5:7])
        last = calendar.monthrange(year, month)[1]
        days = days_of.get(key)
        if not days:
            ranges.append(_date_range(year, month, 1, last, [key], "month"))
            continue
        for first, end in ((1, 7), (8, 14), (15, 21), (22, last)):
            week = [d for d in days if first <= int(d[8:10]) <= end]
            if not week:
                continue
            if not dense(sum(whole[d] for d in week), end - first + 1):
                ranges.append(_date_range(year, month, first, end, week, "week"))
                continue
            for d in sorted(week):
                ranges.append(_date_range(year, month, int(d[8:10]), int(d[8:10]), [d], "day"))
    return ranges


def _date_range(year: int, month: int, first: int, end: int, members: list[str], unit: str) -> _Range:
    """The days `first` to `end` of a month, as a month, a week or a day; `members`: the counts'
    keys it sums (the month's, or its days')."""
    low = dt.date(year, month, first)
    high = dt.date(year, month, end) + dt.timedelta(days=1)
    name, abbr = f"{calendar.month_name[month]} {year}", calendar.month_abbr[month]
    key, label, short = {
        "month": (f"{year:04d}-{month:02d}", name, f"{abbr} {year}"),
        "week": (low.isoformat(), f"{first}–{end} {name}", f"{first} {abbr}"),
        "day": (low.isoformat(), f"{first} {name}", f"{first} {abbr}"),
    }[unit]
    return _Range(
        key,
        label,
        short,
        tuple(sorted(members)),
        _midnight(low),
        _midnight(high),
        _MICROSECOND,
        None,
        _iso(low),
        _iso(high),
    )


# --- Amounts: fixed bins of two significant digits, grouped into bands of similar shares -------


def amount_bin(bucket: str) -> tuple[int, int]:
    """The cents [low, high) of an amount bin of rail_counts: "0351" is 51,000 to 51,999 cents
    (5 digits starting "51"), "013" is 3 cents (1 digit)."""
    digits, lead = int(bucket[:2]), int(bucket[2:])
    if digits <= 2:
        return lead, lead + 1
    scale = 10 ** (digits - 2)
    return lead * scale, (lead + 1) * scale


def _money(cents: int) -> Decimal:
    return (Decimal(cents) / 100).quantize(_CENT)


def _short_money(cents: int) -> str:
    return f"{cents // 100:,}" if cents % 100 == 0 else f"{_money(cents):,}"


def _amounts(whole: dict[str, int]) -> list[_Range]:
    bins = sorted((amount_bin(b), b) for b, n in whole.items() if n > 0)
    total = sum(whole[b] for _, b in bins)
    if not bins:
        return []
    share = total / BANDS
    groups: list[list[tuple[tuple[int, int], str]]] = [[]]
    seen = 0
    threshold = share
    for item in bins:
        if groups[-1] and seen >= threshold:
            groups.append([])
            threshold = (int(seen / share) + 1) * share  # by the cumulative share: a write moves a
            # boundary only where it crosses one, and only to the next bin
        groups[-1].append(item)
        seen += whole[item[1]]
    ranges = []
    for i, group in enumerate(groups):
        low = group[0][0][0]
        high = groups[i + 1][0][0][0] if i + 1 < len(groups) else None
        label = (
            f"{_money(low):,} to {_money(high - 1):,}" if high is not None else f"{_money(low):,} and more"
        )
        ranges.append(
            _Range(
                str(low),
                label,
                _short_money(low),
                tuple(b for _, b in group),
                _money(low),
                None if high is None else _money(high),
                _CENT,
                _LARGEST_AMOUNT,
                str(_money(low)),
                None if high is None else str(_money(high)),
            )
        )
    return ranges


# --- Initials: a to z, what sorts before a, other scripts after z ------------------------------

_BEFORE_A = "#"
_AFTER_Z = "~"


def initial_of(key: str) -> str:
    """The rail bucket of a customer key (the rule migration 0008's SQL computes)."""
    first = key[:1]
    return _BEFORE_A if first < "a" else first if first <= "z" else _AFTER_Z


def _initials(whole: dict[str, int]) -> list[_Range]:
    ranges = []
    for bucket in sorted(b for b, n in whole.items() if n > 0):  # "#" < "a".."z" < "~"
        if bucket == _BEFORE_A:
            low, high, label, short = "", "a", "Digits and signs", "#"
        elif bucket == _AFTER_Z:
            low, high, label, short = "{", None, "Other scripts", "…"
        else:
            low, high, label, short = bucket, chr(ord(bucket) + 1), bucket.upper(), bucket.upper()
        ranges.append(_Range(bucket, label, short, (bucket,), low, high, None, None, low, high))
    return ranges


_LAYOUTS = {"datetime": _days, "amount": _amounts, "name": _initials}


# --- Where a bucket's orders lie: its span -----------------------------------------------------


def _date_span(r: _Range, mine: dict[str, int], filled: dict[str, tuple[str, str]]) -> tuple[str, str | None]:
    """From the first day with an order of the status to the end of the last: a whole month's
    by `filled`, a week's or a day's by its days' counts."""
    days: list[str] = []
    for member in r.members:
        if len(member) == 7:
            days += filled.get(member, ())
        elif mine.get(member, 0) > 0:
            days.append(member)
    if not days:
        return r.low, r.high
    first, last = dt.date.fromisoformat(min(days)), dt.date.fromisoformat(max(days))
    return _iso(first), _iso(last + dt.timedelta(days=1))


def _amount_span(r: _Range, mine: dict[str, int], _: dict[str, tuple[str, str]]) -> tuple[str, str | None]:
    """From the first amount bin with an order of the status to the end of the last (the last
    band, which has no end, gets one)."""
    bins = [amount_bin(b) for b in r.members if mine.get(b, 0) > 0]
    if not bins:
        return r.low, r.high
    return str(_money(min(low for low, _ in bins))), str(_money(max(high for _, high in bins)))


def _name_span(r: _Range, _: dict[str, int], __: dict[str, tuple[str, str]]) -> tuple[str, str | None]:
    return r.low, r.high  # an initial's names: the rail marks the middle


_SPANS = {"datetime": _date_span, "amount": _amount_span, "name": _name_span}
