"""The heart of the project: walking every page gathers exactly the rows that existed
throughout, once each, in order, on every engine, with heavy ties and concurrent writes."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete
from sqlalchemy.orm import Session

from orders.data.models import STATUSES, Order
from orders.finding.sorts import LIBRARY_SORTS
from pagination import Keyset, iterate

from .fixtures import clear
from .helpers import BASE, add_orders, delete_orders, get_page, py_key, statement, unpaged_ids
from .hunt import examples

# Mixed directions over three columns: exercises the expanded seek form on every engine.
MIXED = Keyset("mixed", Order.amount.desc(), Order.customer.asc(), Order.id.asc())
ALL_SORTS = [*LIBRARY_SORTS.values(), MIXED]

# Few distinct values, so most rows tie on the leading sort column: more equal timestamps
# than a page holds is exactly where offset- and naive keyset-paging go wrong.
TIMES = [BASE, BASE + dt.timedelta(microseconds=1), BASE + dt.timedelta(minutes=1)]
CUSTOMERS = ["ana", "bia", "caio"]
AMOUNTS = [Decimal("1.00"), Decimal("9.99"), Decimal("10.00")]
row = st.tuples(
    st.sampled_from(TIMES), st.sampled_from(CUSTOMERS), st.sampled_from(AMOUNTS), st.sampled_from(STATUSES)
)
maybe_status = st.one_of(st.none(), st.sampled_from(STATUSES[:2]))
PROPERTY_SETTINGS = settings(
    max_examples=examples(35),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY_SETTINGS
@given(
    rows=st.lists(row, max_size=45),
    limit=st.integers(1, 8),
    keyset=st.sampled_from(ALL_SORTS),
    status=maybe_status,
)
def test_walks_forward_and_backward_gather_every_row_once_in_order(
    engine, codec, rows, limit, keyset, status
):
    clear(engine)
    add_orders(engine, rows)
    expected = unpaged_ids(engine, keyset, status)

    seen: list[int] = []
    pages = []
    page = get_page(engine, keyset, codec, limit, status)
    assert not page.has_previous  # nothing comes before the first page
    while True:
        assert len(pages) <= len(rows), "the walk does not end"
        pages.append(page)
        seen += [o.id for o in page.items]
        assert len(page.items) <= limit
        if not page.has_more:
            break
        assert len(page.items) == limit
        page = get_page(engine, keyset, codec, limit, status, after=page.next_cursor)
        assert page.has_previous
    assert seen == expected
    # The Python model of the order agrees with the database's.
    assert [py_key(o, keyset) for p in pages for o in p.items] == sorted(
        py_key(o, keyset) for p in pages for o in p.items
    )

    # And back again from the last page to the first by prev_cursor.
    back: list[int] = [o.id for o in page.items]
    for _ in range(len(rows) + 1):
        if not page.has_previous:
            break
        page = get_page(engine, keyset, codec, limit, status, before=page.prev_cursor)
        assert page.has_more
        assert len(page.items) == limit
        back = [o.id for o in page.items] + back
    assert not page.has_previous, "the backward walk does not end"
    assert back == expected


insert_op = st.tuples(st.just("insert"), row)
delete_op = st.tuples(st.just("delete"), st.floats(0, 1, exclude_max=True))
# Someone deletes every row the reader has seen, the cursor's own row included: the next page
# must then say whether anything is left before it, not assume so because a cursor was given.
delete_seen_op = st.tuples(st.just("delete_seen"), st.none())


@PROPERTY_SETTINGS
@given(
    rows=st.lists(row, min_size=1, max_size=40),
    limit=st.integers(1, 6),
    keyset=st.sampled_from(ALL_SORTS),
    status=maybe_status,
    gaps=st.lists(st.lists(st.one_of(insert_op, delete_op, delete_seen_op), max_size=4), max_size=12),
)
def test_walk_during_inserts_and_deletes_never_repeats_or_loses_a_row(
    engine, codec, rows, limit, keyset, status, gaps
):
    clear(engine)
    initial = set(add_orders(engine, rows))
    if status is not None:
        initial = set(unpaged_ids(engine, keyset, status))
    deleted: set[int] = set()

    returned = []
    page = get_page(engine, keyset, codec, limit, status)
    gap = iter(gaps)
    most_pages = len(rows) + sum(op == "insert" for ops in gaps for op, _ in ops) + 1
    for _ in range(most_pages):
        returned += page.items
        if not page.has_more:
            break
        # Between two page loads, other people insert and delete: before the position, after
        # it, tied with it, and the very row the cursor points at.
        for op, arg in next(gap, []):
            if op == "insert":
                add_orders(engine, [arg])
            elif op == "delete_seen":
                seen = {o.id for o in returned}
                with Session(engine) as session:
                    session.execute(delete(Order).where(Order.id.in_(seen)))
                    session.commit()
                deleted |= seen
            else:
                ids = unpaged_ids(engine, keyset, None)
                if ids:
                    victim = ids[int(arg * len(ids))]
                    with Session(engine) as session:
                        session.execute(delete(Order).where(Order.id == victim))
                        session.commit()
                    deleted.add(victim)
        page = get_page(engine, keyset, codec, limit, status, after=page.next_cursor)
        # has_previous tells the truth about the table as it is now, even when the cursor's
        # own row was just deleted: a row lies before the page's first row (before an empty
        # page: anywhere, since nothing lies after the cursor).
        now = unpaged_ids(engine, keyset, status)
        if page.items:
            assert page.has_previous == (now.index(page.items[0].id) > 0)
        else:
            assert page.has_previous == bool(now)
    assert not page.has_more, "the walk does not end"

    ids = [o.id for o in returned]
    assert len(ids) == len(set(ids)), "a row was returned twice"
    assert initial - deleted <= set(ids), "a row that existed throughout was skipped"
    keys = [py_key(o, keyset) for o in returned]
    assert all(a < b for a, b in itertools.pairwise(keys)), "the order went backwards"
    if status is not None:
        assert {o.status for o in returned} <= {status}


@PROPERTY_SETTINGS
@given(
    rows=st.lists(row, max_size=45),
    batch_size=st.integers(1, 9),
    keyset=st.sampled_from(ALL_SORTS),
    status=maybe_status,
)
def test_iterate_yields_every_row_once_in_batches(engine, codec, rows, batch_size, keyset, status):
    clear(engine)
    add_orders(engine, rows)
    expected = unpaged_ids(engine, keyset, status)
    with Session(engine) as session:
        batches = list(
            iterate(
                session,
                statement(status),
                keyset,
                batch_size=batch_size,
                codec=codec,
                filters={"status": status},
            )
        )
    assert [o.id for b in batches for o in b.items] == expected
    assert all(len(b.items) == batch_size for b in batches[:-1])

    # Resuming from any batch's cursor gives exactly the rest.
    for i, batch in enumerate(batches):
        with Session(engine) as session:
            rest = iterate(
                session,
                statement(status),
                keyset,
                batch_size=batch_size,
                codec=codec,
                after=batch.cursor,
                filters={"status": status},
            )
            assert [o.id for b in rest for o in b.items] == [o.id for b in batches[i + 1 :] for o in b.items]


def test_ids_are_never_reused_after_deleting_the_newest(engine):
    # SQLite reuses the largest rowid unless the table is AUTOINCREMENT; a reused id would make a
    # new order look like one the reader has already seen.
    clear(engine)
    (first,) = add_orders(engine, [(BASE, "ana", Decimal("1.00"), "paid")])
    delete_orders(engine, [first])
    (second,) = add_orders(engine, [(BASE, "ana", Decimal("1.00"), "paid")])
    assert second > first


@pytest.mark.parametrize("db_url", ["mysql"], indirect=True)
def test_cursor_row_equal_only_by_collation_is_not_shown_again(engine, codec):
    # The page read starts at the cursor's own row and leaves it out. "Is this the cursor's row"
    # must be the database's equality, the same one the seek predicate uses: under MariaDB's
    # case-insensitive utf8mb4_general_ci, "ANA" equals "ana" and keeps its place in the order,
    # so a Python == would show it a second time.
    # (PostgreSQL and SQLite compare this text by bytes: the edit moves the row instead.)
    assert engine.dialect.name == "mysql"
    clear(engine)
    ids = add_orders(engine, [(BASE, name, Decimal("1.00"), "paid") for name in ["ana"] * 3 + ["bia"] * 3])
    keyset = LIBRARY_SORTS["customer"]
    first = get_page(engine, keyset, codec, 2, None)
    cursor_row = first.items[-1].id
    with Session(engine) as session:
        session.get(Order, cursor_row).customer = "ANA"
        session.commit()
    shown = [o.id for o in first.items]
    page = get_page(engine, keyset, codec, 2, None, after=first.next_cursor)
    assert page.has_previous
    while True:
        shown += [o.id for o in page.items]
        if not page.has_more:
            break
        page = get_page(engine, keyset, codec, 2, None, after=page.next_cursor)
    assert shown == ids, "a row was returned twice or skipped"
