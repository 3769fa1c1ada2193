"""Positions from values (start_at) and metadata sealed into cursors, on every engine, through the
app's sorts and Order model (the library's own tests, tests/test_library_*.py, import no app)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orders.data.models import Order
from orders.finding.sorts import LIBRARY_SORTS
from pagination import InvalidCursor, InvalidPosition, PaginationError, iterate, paginate, start_at

from .fixtures import clear
from .helpers import BASE, add_orders, get_page, statement, unpaged_ids
from .hunt import examples

UTC = dt.UTC
TIMES = [BASE + dt.timedelta(minutes=m) for m in (0, 0, 0, 1, 1, 2, 5, 5)]
NAMES = ["ana", "ana", "anabela", "bia", "bia", "caio", "caio", "duda"]
AMOUNTS = [Decimal(a) for a in ("1.00", "1.00", "5.00", "5.00", "9.99", "9.99", "20.00", "20.00")]
row = st.tuples(
    st.sampled_from(TIMES), st.sampled_from(NAMES), st.sampled_from(AMOUNTS), st.sampled_from(["paid"])
)


def walk_both_ways(engine, codec, keyset, cursor, limit):
    """Every row from the cursor's page forward, and every row before it by prev_cursor."""
    first = get_page(engine, keyset, codec, limit, None, after=cursor)
    forward, page = [o.id for o in first.items], first
    while page.has_more:
        page = get_page(engine, keyset, codec, limit, None, after=page.next_cursor)
        forward += [o.id for o in page.items]
    backward, page = [], first
    while page.has_previous:
        page = get_page(engine, keyset, codec, limit, None, before=page.prev_cursor)
        backward = [o.id for o in page.items] + backward
    return first, backward, forward


def in_sort_order(key, keyset):
    return key if not keyset.columns[0].descending else tuple(-k for k in key)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(row, max_size=30),
    limit=st.integers(1, 5),
    sort=st.sampled_from(["newest", "oldest", "amount", "customer"]),
    data=st.data(),
)
def test_a_page_at_values_starts_at_the_first_row_at_or_past_them(engine, codec, rows, limit, sort, data):
    clear(engine)
    add_orders(engine, rows)
    keyset = LIBRARY_SORTS[sort]
    expected = unpaged_ids(engine, keyset, None)
    column = keyset.columns[0].expr.key
    pool = {"newest": TIMES, "oldest": TIMES, "amount": AMOUNTS, "customer": [*NAMES, "an", "a", "e"]}[sort]
    value = data.draw(st.sampled_from(pool), label="value")
    with_id = data.draw(st.booleans(), label="with id")
    values = [value, data.draw(st.integers(0, 40))] if with_id else [value]
    cursor = start_at(keyset, values, codec=codec, filters={"status": None})

    first, backward, forward = walk_both_ways(engine, codec, keyset, cursor, limit)
    # The rows at or past the values in the sort's order, by Python's reckoning of that order.
    by_id = {r.id: r for r in _orders(engine)}

    def at_or_past(order_id):
        got = (getattr(by_id[order_id], column), order_id)[: len(values)]
        want = tuple(values)
        if keyset.columns[0].descending:
            return (
                got <= want
                if len(values) == 1
                else (got[0] < want[0] or (got[0] == want[0] and got[1] <= want[1]))
            )
        return got >= want

    assert forward == [i for i in expected if at_or_past(i)]
    assert backward + forward == expected
    assert first.has_previous == bool(backward)


def _orders(engine):
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    with Session(engine) as session:
        return list(session.scalars(select(Order)))


def test_a_customer_prefix_jump_lands_on_the_first_name_at_or_after_it(engine, codec):
    clear(engine)
    ids = add_orders(
        engine, [(BASE, name, Decimal("1.00"), "paid") for name in ["ana", "bia", "bruno", "caio"]]
    )
    keyset = LIBRARY_SORTS["customer"]
    page = get_page(
        engine, keyset, codec, 10, None, after=start_at(keyset, ["b"], codec=codec, filters={"status": None})
    )
    assert [o.id for o in page.items] == ids[1:]
    assert page.has_previous and not page.has_more
    back = get_page(engine, keyset, codec, 10, None, before=page.prev_cursor)
    assert [o.id for o in back.items] == ids[:1]
    # Past everything: an empty page that still leads back.
    page = get_page(
        engine, keyset, codec, 10, None, after=start_at(keyset, ["zz"], codec=codec, filters={"status": None})
    )
    assert page.items == [] and page.has_previous and not page.has_more
    back = get_page(engine, keyset, codec, 2, None, before=page.prev_cursor)
    assert [o.id for o in back.items] == ids[2:]


def test_newest_jump_to_a_time_starts_at_that_time_or_earlier(engine, codec):
    clear(engine)
    times = [BASE + dt.timedelta(minutes=m) for m in range(6)]
    ids = add_orders(engine, [(t, "ana", Decimal("1.00"), "paid") for t in times])
    keyset = LIBRARY_SORTS["newest"]
    moment = (BASE + dt.timedelta(minutes=3, seconds=30)).astimezone(dt.timezone(dt.timedelta(hours=-3)))
    cursor = start_at(keyset, [moment], codec=codec, filters={"status": None})
    page = get_page(engine, keyset, codec, 2, None, after=cursor)
    assert [o.id for o in page.items] == [ids[3], ids[2]]
    assert page.has_previous and page.has_more


@pytest.mark.parametrize(
    ("sort", "values", "shown"),
    [
        ("newest", ["2026-03-11"], "'2026-03-11'"),
        ("newest", [dt.datetime(2026, 3, 11, 10, 39)], "datetime.datetime(2026, 3, 11, 10, 39)"),
        ("amount", [Decimal("1E+10")], "Decimal('1E+10')"),
        ("amount", [5], "5"),
        ("customer", ["x" * 65], "'xxxxx"),
        ("customer", ["a\x00b"], "'a\\x00b'"),
        ("customer", ["ana", 2**63], str(2**63)),
        ("customer", ["ana", 1, 2], "not 3: ['ana', 1, 2]"),
        ("customer", [], "not 0"),
    ],
)
def test_values_a_column_cannot_hold_are_an_invalid_position_naming_them(codec, sort, values, shown):
    with pytest.raises(InvalidPosition) as caught:
        start_at(LIBRARY_SORTS[sort], values, codec=codec)
    assert shown in str(caught.value)
    assert isinstance(caught.value, PaginationError)


def test_a_position_is_bound_to_its_sort_and_filters(codec):
    cursor = start_at(LIBRARY_SORTS["customer"], ["ana"], codec=codec, filters={"status": "paid"})
    position = codec.decode(cursor)
    assert position.inclusive and position.keys == ("ana",)
    LIBRARY_SORTS["customer"].check(position, direction="after", filters=position.filters)
    with pytest.raises(PaginationError):
        LIBRARY_SORTS["newest"].check(position, direction="after", filters=position.filters)
    # A prefix is a start_at() position only: a cursor made from a row holds every key.
    from pagination import Position

    exclusive = codec.decode(codec.encode(Position("customer", "after", position.filters, ("ana",))))
    with pytest.raises(InvalidCursor, match="does not fit"):
        LIBRARY_SORTS["customer"].check(exclusive, direction="after", filters=position.filters)


def test_meta_is_sealed_into_every_cursor_a_page_or_batch_returns(engine, session, codec):
    add_orders(
        engine, [(BASE + dt.timedelta(minutes=i % 3), "ana", Decimal("1.00"), "paid") for i in range(7)]
    )
    meta = {"lsn": "0/3000060"}
    keyset = LIBRARY_SORTS["newest"]
    first = paginate(session, statement(None), keyset, limit=3, codec=codec, meta=meta)
    middle = paginate(
        session, statement(None), keyset, limit=3, codec=codec, after=first.next_cursor, meta=meta
    )
    cursors = [
        first.next_cursor,
        first.head_cursor,
        middle.next_cursor,
        middle.prev_cursor,
        middle.head_cursor,
    ]
    assert all(codec.decode(c).meta == meta for c in cursors)
    assert (
        codec.decode(paginate(session, statement(None), keyset, limit=3, codec=codec).next_cursor).meta == {}
    )
    batches = list(iterate(session, statement(None), keyset, batch_size=3, codec=codec, meta=meta))
    assert [codec.decode(b.cursor).meta for b in batches] == [meta] * len(batches)
    # A page does not check meta: another stamp on the way is the caller's business.
    paginate(
        session, statement(None), keyset, limit=3, codec=codec, after=first.next_cursor, meta={"lsn": "0/1"}
    )
