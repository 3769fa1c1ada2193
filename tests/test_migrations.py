"""The schema has one source: the migrations. The models must describe exactly what they build,
and the commands `make run` uses work through Flask's own CLI runner."""

from __future__ import annotations

import datetime as dt
import unicodedata
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask import Flask
from sqlalchemy import Engine, delete, func, insert, inspect, select, text
from sqlalchemy.orm import Session

from orders.data.db import make_engine, migrate
from orders.data.models import CUSTOMER_WORDS, ORDER_WORDS, STATUSES, Base, Order
from orders.data.names import WORD_PREFIX, name_key, name_words
from orders.finding import reader
from orders.finding.request import ListRequest
from orders.finding.search import Search
from pagination import CursorCodec

from .databases import ENGINES, migrated_database, throwaway_database
from .fixtures import CLIENT_LIMITS, make_app
from .helpers import BASE, walk_api


@pytest.fixture(params=ENGINES)
def empty_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    with throwaway_database(request.param, tmp_path, "schema") as url:
        yield url


def test_migrations_build_exactly_the_models(empty_url: str) -> None:
    """Alembic's autogenerate, the comparison `alembic revision --autogenerate` makes, finds
    nothing to add, drop or change between the migrated database and orders/data/models.py."""
    engine = make_engine(empty_url)
    migrate(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert differences == [], differences


def test_init_db_and_seed_if_empty_through_the_cli_runner(empty_url: str) -> None:
    app: Flask = make_app(empty_url)
    runner = app.test_cli_runner()
    # Idempotent (make run calls it on every start), and each run says what it did.
    for said in ("created the database", "already at the newest migration"):
        result = runner.invoke(args=["init-db"])
        assert result.exit_code == 0, result.output
        assert said in result.output, result.output
    result = runner.invoke(args=["seed", "--rows", "30", "--if-empty"])
    assert result.exit_code == 0, result.output
    assert "seeded 30 orders" in result.output
    result = runner.invoke(args=["seed", "--rows", "30", "--if-empty"])
    assert result.exit_code == 0 and "not seeding" in result.output
    with Session(app.extensions["engine"]) as session:
        assert session.scalar(select(func.count()).select_from(Order)) == 30
    app.extensions["engine"].dispose()


def schema_of(engine: Engine) -> dict[str, object]:
    """Every table's columns, indexes, keys and foreign keys, the triggers (name and definition),
    PostgreSQL's functions, and the migration the database is at."""
    triggers = {
        "sqlite": "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'",
        "postgresql": "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal",
        "mysql": "SELECT trigger_name, action_statement, action_order FROM information_schema.triggers "
        "WHERE trigger_schema = DATABASE()",
    }[engine.dialect.name]
    functions = "SELECT proname, prosrc FROM pg_proc WHERE pronamespace = CAST('public' AS regnamespace)"
    with engine.connect() as conn:
        insp = inspect(conn)
        return {
            "tables": {
                table: (
                    [
                        (c["name"], str(c["type"]), c["nullable"], c.get("default"))
                        for c in insp.get_columns(table)
                    ],
                    sorted(
                        (i["name"], tuple(i["column_names"]), i["unique"]) for i in insp.get_indexes(table)
                    ),
                    insp.get_pk_constraint(table)["constrained_columns"],
                    sorted(str(sorted(fk.items())) for fk in insp.get_foreign_keys(table)),
                )
                for table in insp.get_table_names()
            },
            "triggers": sorted(tuple(row) for row in conn.execute(text(triggers))),
            "functions": sorted(tuple(row) for row in conn.execute(text(functions)))
            if engine.dialect.name == "postgresql"
            else [],
            "revision": conn.scalar(text("SELECT version_num FROM alembic_version")),
        }


@pytest.mark.parametrize("kind", ENGINES)
def test_a_copy_of_the_migrated_template_is_the_migrated_schema(kind: str, tmp_path) -> None:
    """tests/databases.py migrated_database copies a template instead of migrating: the copy has
    what the migrations build, down to the triggers, and its triggers work."""
    with throwaway_database(kind, tmp_path, "original") as url:
        original = make_engine(url)
        migrate(original)
        expected = schema_of(original)
        original.dispose()
    with migrated_database(kind, tmp_path, "copy") as url:
        copy = make_engine(url)
        try:
            assert schema_of(copy) == expected
            with Session(copy) as session:
                session.add(Order(customer="Ana Souza", amount=1, status="paid", created_at=BASE))
                session.commit()
                counted = session.scalar(text("SELECT sum(n) FROM order_counts WHERE status = 'paid'"))
                words = session.scalar(text("SELECT count(*) FROM order_words"))
                assert (counted, words > 0) == (1, True)
                session.execute(delete(Order))
                session.commit()
                assert session.scalar(text("SELECT count(*) FROM order_words")) == 0
        finally:
            copy.dispose()


# --- Migration 0010: the keys and words of the names the new folding changes ------------------


def _normalized_before(name: str) -> str:
    """orders/data/names.py normalized_name as 0009's code had it: no Latin letters folded, no
    apostrophes or hyphens made one."""
    text = name
    for _ in range(2):
        text = unicodedata.normalize("NFKD", text).casefold()
    text = "".join(
        ch for ch in unicodedata.normalize("NFKD", text) if unicodedata.category(ch) not in ("Mn", "Me")
    )
    return " ".join(text.split())


def _words_before(name: str) -> set[str]:
    """name_words as 0009's code had it: the prefixes of the runs of letters, digits and marks."""
    runs = "".join(ch if unicodedata.category(ch)[0] in "LNM" else " " for ch in _normalized_before(name))
    return {run[:n] for run in runs.split() for n in range(1, min(len(run), WORD_PREFIX) + 1)}


# Each name's orders: the new folding changes the key, the words or both of the first ones.
CHANGED = {
    "Łukasz Nowak": 1100,  # the key ("łukasz" is "lukasz"), in more than one batch of 1,000
    "O’Brien": 3,  # the key ("o’brien" is "o'brien") and the words ("obrien")
    "O'Brien": 2,  # the words alone: the key was "o'brien" already
    "Søren Ørsted": 2,
    "王小明": 2,  # the words alone ("小明")
    "山田 太郎": 1,  # the words alone ("田", "郎")
    "Jean-Luc Picard": 2,  # the words alone ("jeanluc")
    "Weißgerber Großhandel Süßwaren Straßenbau Meißner Groß Łódź": 2,  # a cut key that changes
    "Weißgerber Großhandel Süßwaren Straßenbau Meißner Groß GmbH Ø": 2,  # cut, the same: words
}
UNCHANGED = {
    "Ana Souza": 3,
    "Lukasz Nowak": 2,  # the key "Łukasz Nowak" gets: its orders and names are shared after
    "Борис Ёлкин": 2,
    "Ωμέγα": 1,
    "李 娜": 1,  # CJK words of one character each: no character inside one to start another
    "Weißgerber Großhandel Süßwaren Straßenbau Meißner Groß GmbH": 2,  # the Ø one's cut key
}


def _initial(key: str) -> str:
    """Migration 0008's `initial` bucket of a key."""
    first = key[:1]
    return "#" if first < "a" else first if first <= "z" else "~"


def _xmins(engine: Engine, ids: list[int]) -> dict[str, object]:
    """PostgreSQL's row versions of these orders and their words: a row written again has a new one."""
    with engine.connect() as conn:
        orders = conn.execute(
            text("SELECT id, xmin::text FROM orders WHERE id = ANY(:ids)"), {"ids": ids}
        ).all()
        words = conn.execute(
            text("SELECT id, word, xmin::text FROM order_words WHERE id = ANY(:ids)"), {"ids": ids}
        ).all()
    return {"orders": sorted(map(tuple, orders)), "words": sorted(map(tuple, words))}


def test_migration_0010_writes_again_only_the_keys_and_words_the_folding_changes(empty_url: str) -> None:
    """A database of 0009 holding names the new folding changes: after the migration every
    order's key and words are the new folding's, the names table holds exactly the names' words
    (the old keys' gone), the rail's counts follow the moved keys, and the orders it does not
    change are not written (PostgreSQL: their rows' versions are the same)."""
    assert all(_normalized_before(n) != name_key(n) or _words_before(n) != name_words(n) for n in CHANGED)
    assert all(_normalized_before(n)[:64] == name_key(n) for n in UNCHANGED)
    assert all(_words_before(n) == name_words(n) for n in UNCHANGED)
    engine = make_engine(empty_url)
    try:
        migrate(engine, "0009")
        names = [name for name, n in (CHANGED | UNCHANGED).items() for _ in range(n)]
        with engine.begin() as conn:
            conn.execute(
                insert(Order.__table__),
                [
                    {
                        "customer": name,
                        "customer_key": _normalized_before(name)[:64],  # as 0009's code wrote it
                        "amount": Decimal(i % 7),
                        "status": STATUSES[i % 4],
                        "created_at": BASE - dt.timedelta(minutes=i),
                    }
                    for i, name in enumerate(names)
                ],
            )
            orders = conn.execute(select(Order.__table__)).all()
            # One order without words, as a shard's are (written through the coordinator, which
            # keeps none): its key is folded, and it is given no words.
            wordless = min(o.id for o in orders if o.customer == "Łukasz Nowak")
            conn.execute(
                insert(ORDER_WORDS),
                [
                    {
                        "id": o.id,
                        "word": w,
                        "created_at": o.created_at,
                        "amount": o.amount,
                        "customer_key": o.customer_key,
                    }
                    for o in orders
                    if o.id != wordless
                    for w in sorted(_words_before(o.customer))
                ],
            )
            pairs = {(w, o.customer_key) for o in orders for w in _words_before(o.customer)}
            conn.execute(insert(CUSTOMER_WORDS), [{"word": w, "customer_key": k} for w, k in sorted(pairs)])
        kept = sorted(o.id for o in orders if o.customer in UNCHANGED)
        postgresql = engine.dialect.name == "postgresql"
        versions = _xmins(engine, kept) if postgresql else None
        counts = _counts(engine)

        migrate(engine)

        with engine.connect() as conn:
            after = {o.id: o for o in conn.execute(select(Order.__table__))}
            words = {(r.id, r.word, r.customer_key) for r in conn.execute(select(ORDER_WORDS))}
            copies = conn.execute(
                select(ORDER_WORDS.c.id, ORDER_WORDS.c.created_at, ORDER_WORDS.c.amount).distinct()
            ).all()
            named = set(
                map(tuple, conn.execute(select(CUSTOMER_WORDS.c.word, CUSTOMER_WORDS.c.customer_key)))
            )
            rail = dict(
                conn.execute(
                    text("SELECT bucket, SUM(n) FROM rail_counts WHERE family = 'initial' GROUP BY bucket")
                ).all()
            )
        assert {i: o.customer_key for i, o in after.items()} == {
            i: name_key(o.customer) for i, o in after.items()
        }
        assert words == {
            (i, w, name_key(o.customer))
            for i, o in after.items()
            if i != wordless
            for w in name_words(o.customer)
        }
        assert all((c.created_at, c.amount) == (after[c.id].created_at, after[c.id].amount) for c in copies)
        assert named == {(w, name_key(n)) for n in CHANGED | UNCHANGED for w in name_words(n)}
        assert {b: int(n) for b, n in rail.items() if n} == dict(
            Counter(_initial(name_key(n)) for n in names)
        )
        assert _counts(engine) == counts  # the statuses' counts: nothing moved there
        if postgresql:
            assert _xmins(engine, kept) == versions
        with Session(engine) as session:
            for typed in ("lukasz", "obrien", "o'brien", "小明", "jeanluc", "orsted", "lodz", "gmbh o"):
                listing = ListRequest(
                    "customer", None, 2000, Search.parse(typed), codec=CursorCodec("k" * 32)
                )
                found = {row.customer for row in reader.page(listing, session).items}
                assert found and found <= set(CHANGED | UNCHANGED), typed
            assert {
                row.customer
                for row in reader.page(
                    ListRequest("newest", None, 2000, Search.parse("lukasz"), codec=CursorCodec("k" * 32)),
                    session,
                ).items
            } == {"Łukasz Nowak", "Lukasz Nowak"}
    finally:
        engine.dispose()


def _counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, SUM(n) FROM order_counts GROUP BY status")).all()
    return {status: int(n) for status, n in rows}


def test_a_customer_cursor_from_before_0010_is_refused_or_goes_on_without_a_wrong_row(empty_url: str) -> None:
    """A reader of "Customer A–Z" mid-walk when 0010 moves "Łukasz", "Ørsted" and "Ŧor" from
    after z to among the L, O and T names: the cursor from before is refused with the app's 400,
    or the walk goes on (never a 500) and returns no row twice and none out of order. Keys only
    get smaller, so what it can miss is the rows that moved from after its place to before it."""
    engine = make_engine(empty_url)
    try:
        migrate(engine, "0009")
        names = ["Ana", "Łukasz", "Lusia", "Ŧor", "Zeca", "Ørsted", "Ωμέγα"]
        with engine.begin() as conn:
            conn.execute(
                insert(Order.__table__),
                [
                    {
                        "customer": name,
                        "customer_key": _normalized_before(name),
                        "amount": 1,
                        "status": "paid",
                        "created_at": BASE,
                    }
                    for name in names
                    for _ in range(2)
                ],
            )
        app = make_app(empty_url, **CLIENT_LIMITS)
        client = app.test_client()
        seen: list[dict[str, object]] = []
        after = None
        for _ in range(2):  # Ana, Ana, Lusia; Lusia, Zeca, Zeca: the cursor is at the last Zeca
            body = client.get(
                "/api/orders", query_string={"sort": "customer", "limit": 3, "after": after}
            ).json
            seen += body["items"]
            after = body["next_cursor"]
        assert [item["customer"] for item in seen] == ["Ana", "Ana", "Lusia", "Lusia", "Zeca", "Zeca"]
        app.extensions["engine"].dispose()

        migrate(engine)

        app = make_app(empty_url, **CLIENT_LIMITS)
        client = app.test_client()
        response = client.get("/api/orders", query_string={"sort": "customer", "limit": 3, "after": after})
        assert response.status_code in (200, 400), response.get_data(as_text=True)
        if response.status_code == 400:
            assert response.json["error"]["code"] in ("cursor_mismatch", "invalid_cursor"), response.json
        else:
            rest = walk_api(client, sort="customer", limit=3, after=after)
            ids = [item["id"] for item in seen + rest]
            assert len(ids) == len(set(ids)), "a row came twice"
            keys = [(name_key(str(item["customer"])), item["id"]) for item in seen + rest]
            assert keys[len(seen) :] == sorted(keys[len(seen) :]) and keys[len(seen)] > keys[len(seen) - 1]
            missed = {item["customer"] for item in walk_api(client, sort="customer")} - {
                item["customer"] for item in seen + rest
            }
            # Past "zeca" before (after z), before it now.
            assert missed <= {"Łukasz", "Ŧor", "Ørsted"}, missed
        app.extensions["engine"].dispose()
    finally:
        engine.dispose()
