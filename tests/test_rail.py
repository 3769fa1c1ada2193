"""The scrubber rail on the server, on every engine (orders/finding/rail.py, migration 0008): after
writes of every kind (ORM and Core inserts, the API's POST and DELETE, bulk deletes, status,
amount, date and name updates, a rolled-back write), each bucket's count is COUNT(*) of its
range by the rule written here apart from the SQL, the buckets hold every order once, and each
bucket's cursor opens the list at its first row. The ETag changes with the counts; a search
gets no rail and says so."""

from __future__ import annotations

import datetime as dt
import random
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.orm import Session

from orders.data.db import make_engine, migrate
from orders.data.models import RAIL_COUNTS, STATUSES, Order
from orders.data.names import name_key
from orders.data.rail_fold import FAMILIES, FOLDED, fold
from orders.data.seed import seed_orders
from orders.finding.rail import SEARCH_NOTE
from orders.finding.sorts import SORTS

from .databases import SERVERS, migrated_database, throwaway_database
from .fixtures import authorized_client, make_app, with_token

UTC = dt.UTC
# Names across the scripts and the sort's ends: digits and signs before a, accents folded into a
# to z, Greek, Cyrillic, CJK and Arabic after z.
NAMES = [
    "Ana Souza", "Úrsula Freitas", "Çé Lima", "zoë Ward", "Ωμέγα Πάνος", "Иван Петров", "王小明",
    "محمد علي", "1st Choice Ltd", "'Apostrophe", "ß Straße", "Ørsted", "ﬁsh Shop", "Ǆemal", "{Brace}",
    "Émile Zola", "yara M", "Quésia Farias",
]  # fmt: skip


NEW_YEAR = dt.datetime(2026, 1, 1, tzinfo=UTC)


def some_amount(rng: random.Random) -> Decimal:
    """Across the whole range an order may hold (0 to 9,999,999,999.99), log-uniform: cents,
    tens, millions alike; the ends themselves too."""
    pick = rng.random()
    if pick < 0.03:
        return Decimal("0.00")
    if pick < 0.06:
        return Decimal("9999999999.99")
    largest = Decimal("9999999999.99")
    return (Decimal(10) ** Decimal(rng.uniform(-2, 10))).quantize(Decimal("0.01")).min(largest)


def some_time(rng: random.Random) -> dt.datetime:
    """1970 to 2026 (the API's range), with midnights and the last microsecond of a day (a bucket's
    edges) drawn often."""
    day = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(days=rng.randrange(0, 20_700))
    pick = rng.random()
    if pick < 0.15:
        return day
    if pick < 0.3:
        return day - dt.timedelta(microseconds=1)
    return day + dt.timedelta(microseconds=rng.randrange(86_400_000_000))


def some_order(rng: random.Random) -> dict[str, Any]:
    return {
        "customer": rng.choice(NAMES),
        "amount": some_amount(rng),
        "status": rng.choice(STATUSES),
        "created_at": some_time(rng),
    }


def write_everything(engine: Engine, client: Any, rng: random.Random) -> None:
    """Every kind of write the app and its operators make, some rolled back."""
    with Session(engine) as session:
        session.add_all(Order(**some_order(rng)) for _ in range(150))  # ORM
        session.commit()
        session.execute(insert(Order), [some_order(rng) for _ in range(150)])  # Core, bulk
        session.commit()
    with Session(engine) as session:
        seed_orders(session, 300, now=dt.datetime(2026, 11, 30, 23, 30, tzinfo=UTC))  # the seed's SQL
    for _ in range(20):  # the API
        body = some_order(rng)
        body = {**body, "amount": str(body["amount"]), "created_at": body["created_at"].isoformat()}
        assert client.post("/api/orders", json=body).status_code == 201
    with Session(engine) as session:
        ids = list(session.scalars(select(Order.id)))
        for order_id in rng.sample(ids, 15):
            client.delete(f"/api/orders/{order_id}")
        session.execute(delete(Order).where(Order.id.in_(rng.sample(ids, 40))))  # bulk
        session.commit()
        ids = list(session.scalars(select(Order.id)))
        session.execute(update(Order).where(Order.id.in_(rng.sample(ids, 60))).values(status="shipped"))
        session.commit()
        for order in session.scalars(select(Order).where(Order.id.in_(rng.sample(ids, 30)))):
            # Re-dated, re-priced, renamed (nothing in the app does, SQL by hand may)
            order.created_at, order.amount = some_time(rng), some_amount(rng)
            order.customer = rng.choice(NAMES)
        session.commit()
        # One column at a time, by SQL (the ORM sets every changed column in one UPDATE).
        for column, value in (
            ("amount", some_amount(rng)),
            ("created_at", some_time(rng)),
            ("customer_key", name_key(rng.choice(NAMES))),
        ):
            session.execute(update(Order).where(Order.id.in_(rng.sample(ids, 10))).values({column: value}))
        session.commit()
        session.execute(delete(Order).where(Order.id.in_(rng.sample(ids, 50))))
        session.add(Order(**some_order(rng)))
        session.flush()
        session.rollback()  # counted for nothing


# --- The rule, apart from the SQL --------------------------------------------------------------


def first_key(order: Any, sort: str) -> Any:
    term = SORTS[sort].sort.columns[0]
    return getattr(order, str(term.expr.key))


def low_high(bucket: dict[str, Any], sort: str) -> tuple[Any, Any]:
    kind = SORTS[sort].goto
    if kind == "datetime":
        parse = dt.datetime.fromisoformat
        return parse(bucket["low"]), bucket["high"] and parse(bucket["high"])
    if kind == "amount":
        return Decimal(bucket["low"]), bucket["high"] and Decimal(bucket["high"])
    return bucket["low"], bucket["high"]


def in_bucket(value: Any, bucket: dict[str, Any], sort: str) -> bool:
    low, high = low_high(bucket, sort)
    return bool(low <= value and (high is None or value < high))


def sort_key(order: Any, sort: str) -> tuple[Any, ...]:
    keys = []
    for term in SORTS[sort].sort.columns:
        value = getattr(order, str(term.expr.key))
        if isinstance(value, dt.datetime):
            value = value.timestamp() * 1_000_000  # a number to negate
        keys.append(-value if term.descending else value)
    return tuple(keys)


def check_rail(client: Any, engine: Engine, sort: str, status: str | None) -> None:
    query = {"sort": sort, **({"status": status} if status else {})}
    response = client.get("/api/orders/rail", query_string=query)
    assert response.status_code == 200, response.json
    rail = response.json
    with Session(engine) as session:
        stmt = select(Order)
        if status:
            stmt = stmt.where(Order.status == status)
        orders = sorted(session.scalars(stmt), key=lambda o: sort_key(o, sort))
    assert rail["total"] == len(orders)
    buckets = rail["buckets"]
    assert buckets, "a list of orders has a rail"
    held: list[int] = []
    firsts: list[int] = []
    for bucket in buckets:
        mine = [o for o in orders if in_bucket(first_key(o, sort), bucket, sort)]
        assert bucket["count"] == len(mine), (sort, status, bucket["label"])
        held += [o.id for o in mine]
        # The bucket's cursor opens the list at its first row, in the list's order.
        page = client.get("/api/orders", query_string={**query, "after": bucket["cursor"], "limit": 1}).json
        assert page["items"][0]["id"] == str(mine[0].id), (sort, status, bucket["label"])
        firsts.append(mine[0].id)
        check_span(bucket, sort, [first_key(o, sort) for o in mine])
    assert sorted(held) == sorted(o.id for o in orders), "every order in exactly one bucket"
    # The buckets in the list's order: each one's first row comes after the one before's.
    positions = {o.id: i for i, o in enumerate(orders)}
    assert [positions[i] for i in firsts] == sorted(positions[i] for i in firsts)


def check_span(bucket: dict[str, Any], sort: str, values: list[Any]) -> None:
    """The bucket's span holds its orders, within its range; a date bucket's runs from the day of
    its earliest order to the end of its latest's (where the rail marks a place in it)."""
    span = {"low": bucket["span_low"], "high": bucket["span_high"]}
    assert all(in_bucket(v, span, sort) for v in values), (sort, bucket)
    (low, high), (span_low, span_high) = low_high(bucket, sort), low_high(span, sort)
    assert low <= span_low and (high is None or (span_high is not None and span_high <= high)), bucket
    if SORTS[sort].goto == "datetime":
        days = sorted(v.astimezone(UTC).date() for v in values)
        assert span_low == dt.datetime.combine(days[0], dt.time(), UTC), (bucket, days[0])
        assert span_high == dt.datetime.combine(days[-1] + dt.timedelta(days=1), dt.time(), UTC), bucket
    elif SORTS[sort].goto == "name":
        assert (span_low, span_high) == (low, high), bucket


@pytest.fixture
def writer(app):
    return authorized_client(with_token(app))


@pytest.mark.parametrize("sort", list(SORTS))
def test_after_mixed_writes_each_bucket_counts_its_rows_and_opens_at_its_first(writer, engine, sort):
    write_everything(engine, writer, random.Random(61))
    for status in [None, *STATUSES]:
        check_rail(writer, engine, sort, status)


def test_names_fold_into_initials_as_the_sort_orders_them(writer, engine):
    with Session(engine) as session:
        session.add_all(
            Order(customer=name, amount=Decimal(1), status="paid", created_at=NEW_YEAR) for name in NAMES
        )
        session.commit()
    rail = writer.get("/api/orders/rail?sort=customer").json
    labels = [b["label"] for b in rail["buckets"]]
    # "Úrsula" is U, "Çé" C, "ß" S, "ﬁsh" F, "Ǆemal" D, "Ørsted" O (NFKD leaves ø whole: the
    # name's folding makes it o, orders/data/names.py _LATIN); digits and signs first, other
    # scripts last.
    assert name_key("Ørsted")[:1] == "o"
    assert labels == [
        "Digits and signs",
        "A",
        "C",
        "D",
        "E",
        "F",
        "O",
        "Q",
        "S",
        "U",
        "Y",
        "Z",
        "Other scripts",
    ]
    counts = {b["label"]: b["count"] for b in rail["buckets"]}
    assert counts["Other scripts"] == 5  # Greek, Cyrillic, CJK, Arabic, "{"
    assert counts["Digits and signs"] == 2  # "1st", "'Apostrophe"
    assert sum(counts.values()) == len(NAMES)


def test_the_etag_changes_with_the_counts_and_a_client_may_ask_again_cheaply(writer, engine):
    with Session(engine) as session:
        seed_orders(session, 500, now=dt.datetime(2026, 11, 30, tzinfo=UTC))
    first = writer.get("/api/orders/rail?sort=amount")
    etag = first.headers["ETag"]
    again = writer.get("/api/orders/rail?sort=amount", headers={"If-None-Match": etag})
    assert again.status_code == 304 and not again.data
    body = {"customer": "Ana", "amount": "12.34", "status": "paid"}
    created = writer.post("/api/orders", json=body)
    assert created.status_code == 201
    moved = writer.get("/api/orders/rail?sort=amount", headers={"If-None-Match": etag})
    assert moved.status_code == 200 and moved.headers["ETag"] != etag
    assert moved.json["total"] == first.json["total"] + 1
    # Another status's rail did not move: its ETag stands.
    shipped = writer.get("/api/orders/rail?sort=amount&status=shipped")
    writer.delete(f"/api/orders/{created.json['id']}")
    assert (
        writer.get(
            "/api/orders/rail?sort=amount&status=shipped", headers={"If-None-Match": shipped.headers["ETag"]}
        ).status_code
        == 304
    )


def test_a_search_gets_no_rail_and_says_why_positions_are_refused(client, engine):
    with Session(engine) as session:
        seed_orders(session, 100, now=dt.datetime(2026, 11, 30, tzinfo=UTC))
    searched = client.get("/api/orders/rail?q=ana")
    assert searched.status_code == 200
    assert searched.json["buckets"] == [] and searched.json["note"] == SEARCH_NOTE
    for bad in ("to=2026-01-01", "after=abc", "sort=nope", "status=lost"):
        response = client.get(f"/api/orders/rail?{bad}")
        assert response.status_code == 400, bad
        assert response.json["error"]["message"]


def test_an_empty_list_has_an_empty_rail(client):
    rail = client.get("/api/orders/rail").json
    assert rail["buckets"] == [] and rail["total"] == 0 and rail["note"] is None


def rows_per_bucket(engine: Engine) -> dict[tuple[str, str, str], int]:
    """How many rail_counts rows each (family, status, bucket) has."""
    c = RAIL_COUNTS.c
    with engine.connect() as connection:
        found = connection.execute(
            select(c.family, c.status, c.bucket, func.count()).group_by(c.family, c.status, c.bucket)
        )
        return {(family, status, bucket): n for family, status, bucket, n in found}


def test_a_fold_leaves_one_row_per_bucket_and_every_count_as_it_was(writer, engine):
    """After writes of every kind (folded by the seed in their middle, striped again after it), a
    fold gathers each bucket's rows into one, and every rail counts what it counted."""
    write_everything(engine, writer, random.Random(62))
    assert max(rows_per_bucket(engine).values()) > 1, "the writes after the seed's fold left stripes"
    folded = fold(engine)
    assert set(folded) == set(FAMILIES) and all(folded.values()), folded
    assert set(rows_per_bucket(engine).values()) == {1}
    for sort in SORTS:
        for status in (None, "paid"):
            check_rail(writer, engine, sort, status)
    assert fold(engine) == dict.fromkeys(FAMILIES, 0), "a second fold finds nothing to fold"


# --- Concurrent writers on the servers: no count lost, no deadlock ------------------------------


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path) -> Iterator[Engine]:
    with migrated_database(request.param, tmp_path, "rail") as url:
        engine = make_engine(url)
        yield engine
        engine.dispose()


def test_concurrent_writers_and_a_reader_keep_the_rail_exact(server: Engine) -> None:
    """Four writers insert, delete and re-status one order per transaction (as the API writes),
    some rolled back, while a reader builds the rail again and again (as a reader drags) and the
    counts are folded again and again; at the end every bucket of every sort is COUNT(*) of its
    range."""
    app = make_app(server.url.render_as_string(hide_password=False))
    client = app.test_client()
    with Session(server) as session:
        seed_orders(session, 2000, now=dt.datetime(2026, 11, 30, tzinfo=UTC))
    errors: list[BaseException] = []
    stop = threading.Event()

    def write(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(40):
                with Session(server) as session:
                    kind = rng.choice(["insert", "delete", "update"])
                    if kind == "insert":
                        session.add(Order(**some_order(rng)))
                        session.flush()
                    elif kind == "delete":
                        session.execute(delete(Order).where(Order.id == rng.randint(1, 2000)))
                    else:
                        new = rng.choice(STATUSES)
                        changed = update(Order).where(Order.id == rng.randint(1, 2000))
                        session.execute(changed.values(status=new))
                    if rng.random() < 0.2:
                        session.rollback()
                    else:
                        session.commit()
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    def read() -> None:
        try:
            while not stop.is_set():
                for sort in SORTS:
                    assert client.get(f"/api/orders/rail?sort={sort}").status_code == 200
        except BaseException as err:
            errors.append(err)

    folded: list[int] = []

    def fold_again_and_again() -> None:  # as cron's `flask fold-rail` would, only far oftener
        try:
            while not stop.is_set():
                folded.append(sum(fold(server).values()))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    others = [threading.Thread(target=read), threading.Thread(target=fold_again_and_again)]
    for thread in [*others, *threads]:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    stop.set()
    for thread in others:
        thread.join(timeout=60)
    assert not errors, errors
    assert not any(t.is_alive() for t in [*threads, *others]), "a thread hung"
    assert sum(folded) > 0, "the folds ran beside the writers and folded what they wrote"
    for sort in SORTS:
        for status in (None, "paid"):
            check_rail(client, server, sort, status)
    app.extensions["engine"].dispose()


def test_a_fold_waits_for_no_writer(server: Engine) -> None:
    """A writer's open transaction holds its buckets' stripes: the fold leaves them (it would
    otherwise wait for them and fail after LOCK_WAIT_S), folds the rest, and the next fold,
    after the writer's commit, gathers them too; every count as the orders are."""
    app = make_app(server.url.render_as_string(hide_password=False))
    client = app.test_client()
    with Session(server) as session:
        seed_orders(session, 200, now=dt.datetime(2026, 11, 30, tzinfo=UTC))
        others = select(Order.id).where(Order.status != "cancelled").order_by(Order.id).limit(2)
        shown = session.scalars(others).all()
        session.execute(update(Order).where(Order.id.in_(shown)).values(status="cancelled"))
        session.commit()  # a stripe row per bucket of these two, beside the seed's folded rows
    with server.connect() as connection:
        stripes = connection.scalar(select(func.count()).where(RAIL_COUNTS.c.stripe < FOLDED))
    assert stripes == 12  # each order's three buckets, its old status's (-1) and cancelled's (+1)
    with Session(server) as writer:
        # Held until its commit: the first order's cancelled buckets' stripes (the new status's
        # rows are not there for others yet).
        writer.execute(update(Order).where(Order.id == shown[0]).values(status="shipped"))
        folded = fold(server)
        assert sum(folded.values()) == stripes - 3, folded
        writer.commit()
    fold(server)
    assert set(rows_per_bucket(server).values()) == {1}
    for sort in SORTS:
        for status in (None, "cancelled", "shipped"):
            check_rail(client, server, sort, status)
    app.extensions["engine"].dispose()


# --- Migration 0008 counts the orders that were there before it -------------------------------


@pytest.mark.parametrize("kind", ["sqlite", *SERVERS])
def test_the_migration_counts_the_orders_already_there(kind: str, tmp_path) -> None:
    with throwaway_database(kind, tmp_path, "railmig") as url:
        engine = make_engine(url)
        migrate(engine, "0007")
        rng = random.Random(8)
        with Session(engine) as session:
            session.execute(insert(Order), [some_order(rng) for _ in range(300)])
            session.commit()
        migrate(engine)
        app = make_app(url)
        client = app.test_client()
        for sort in SORTS:
            check_rail(client, engine, sort, None)
        app.extensions["engine"].dispose()
        engine.dispose()
