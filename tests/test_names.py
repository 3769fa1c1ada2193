"""Names in human order: the normalized key (orders/data/names.py), and "Customer A–Z" and go-to by
name ordering by it identically on SQLite, PostgreSQL and MariaDB (random Unicode names against
the Python normalization)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from orders.data.db import make_engine, migrate
from orders.data.models import Order
from orders.data.names import KEY_LENGTH, name_key, normalized_name, prefix_upper_bound
from orders.data.seed import CUSTOMERS, seed_orders
from orders.finding.sorts import LIBRARY_SORTS
from pagination import start_at

from .databases import ENGINES, throwaway_database
from .fixtures import clear
from .helpers import BASE, add_orders, get_page, name_strategies
from .hunt import examples

CUSTOMER = LIBRARY_SORTS["customer"]


def test_case_and_accents_are_ignored_and_other_scripts_come_after_latin() -> None:
    assert name_key("Úrsula Freitas") == name_key("ursula freitas") == name_key("URSULA  FREITAS")
    assert name_key("Straße") == "strasse" and name_key("Çé") == "ce" and name_key("ﬁ") == "fi"
    assert name_key("ℌ") == "h"  # decomposing can leave a capital: casefolded again
    assert name_key("Ωμέγα") == name_key("ΩΜΕΓΑ") == "ωμεγα"
    # The seed's Portuguese names in the order a person expects: Úrsula between Tiago and Vitor.
    ordered = sorted(CUSTOMERS, key=name_key)
    assert ordered.index("Úrsula Freitas") == ordered.index("Tiago Moreira") + 1
    assert ordered[-1] == "Zeca Batista"
    # Digits before Latin, Latin before Greek, Greek before Cyrillic, Cyrillic before CJK.
    assert sorted(["日本", "Борис", "Ωμέγα", "zeca", "Ábel", "007"], key=name_key) == [
        "007", "Ábel", "zeca", "Ωμέγα", "Борис", "日本",
    ]  # fmt: skip


def test_the_key_is_bounded_and_a_prefix_bound_is_tight() -> None:
    assert len(name_key("ﷺ" * 64)) == KEY_LENGTH  # NFKD expands this one 18-fold
    assert prefix_upper_bound("ana") == "anb"
    assert prefix_upper_bound("a\ud7ff") == "a\ue000"  # past the surrogates no engine stores
    assert prefix_upper_bound("a\U0010ffff") == "b"
    assert prefix_upper_bound("") is None


def test_latin_letters_nfkd_leaves_whole_fold_as_readers_type_them() -> None:
    """A stroke, a bar or a ligature is folded as an accent is: "Łukasz" is "lukasz" and sorts
    among the L names, not under "Other scripts" after z; other scripts keep their letters."""
    assert name_key("Łukasz") == name_key("LUKASZ") == name_key("łukasz") == "lukasz"
    folded = {
        "Ørsted": "orsted",
        "Đorđe": "dorde",
        "Guðrún": "gudrun",
        "Ħamrun": "hamrun",
        "Ŧeahkká": "teahkka",
        "Ŀlull": "l'lull",  # NFKD: "L·lull"; the middle dot joins, as in "Col·lell"
        "Işıl": "isil",
        "Æbelø": "aebelo",
        "Œuvray": "oeuvray",
        "Þór": "thor",
        "ĸaĸortoĸ": "qaqortoq",
        "Əliyev": "eliyev",
        "Ŋuŋo": "ngungo",
        "Kɔfi Ɛdɔ": "kofi edo",
    }
    assert {name: name_key(name) for name in folded} == folded
    assert name_key("Ωμέγα") == "ωμεγα" and name_key("Ђорђе") == "ђорђе" and name_key("王小明") == "王小明"
    ordered = sorted(["Zeca", "Łukasz", "Lusia", "Luiz", "Ørsted", "Ωμέγα", "Ola"], key=name_key)
    assert ordered == ["Luiz", "Łukasz", "Lusia", "Ola", "Ørsted", "Zeca", "Ωμέγα"]


def test_apostrophes_and_hyphens_are_one_each() -> None:
    """O'Brien however its apostrophe was typed is one key (and one place in the list)."""
    spellings = ["O'Brien", "O’Brien", "O‘Brien", "OʼBrien", "O`Brien", "O＇Brien"]
    assert {name_key(name) for name in spellings} == {"o'brien"}
    assert {name_key(name) for name in ["Jean-Luc", "Jean‐Luc", "Jean‑Luc", "Jean–Luc"]} == {"jean-luc"}


# The folded letters and the apostrophes and hyphens made one (orders/data/names.py _LATIN,
# _APOSTROPHES, _HYPHENS), capitals and small, beside accents and other scripts.
FOLDED = "ŁłØøĐđÐðĦħŦŧĿŀıİÆæŒœÞþĸƏəŊŋƆɔƐɛ’‘ʼʻ`·‐‑–"
_, customer_names = name_strategies("aAáÁàÀâãäçÇéÉêíóôõúÚüßñÑ ΩωБб日ﬁℌ-'" + FOLDED, 24)


@given(customer_names)
@example("Łukasz O’Brien-Æbelø")
def test_the_key_is_idempotent_and_ignores_case(name: str) -> None:
    key = name_key(name)
    assert name_key(key) == key
    assert name_key(name.upper()) == name_key(name.lower()) or not name.isascii()
    # Nothing the folding turns into ASCII is left, and an apostrophe or hyphen is one character.
    folded_away = {ch for ch in FOLDED + FOLDED.lower() + "`" if not ch.isalnum() or not ch.isascii()}
    assert not set(normalized_name(name)) & (folded_away - {"'", "-"})


@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(customer_names, min_size=1, max_size=30), st.integers(1, 7))
@example(["Zeca Batista", "Úrsula Freitas", "ursula", "URSULA", "Ana", "ána", "Борис", "日本", "Straße"], 3)
def test_every_engine_orders_and_goes_to_names_as_python_does(engine, codec, customers, limit) -> None:
    clear(engine)
    add_orders(engine, [(BASE, name, Decimal("1.00"), "paid") for name in customers])
    with Session(engine) as session:
        stored = session.execute(select(Order.id, Order.customer, Order.customer_key)).all()
    assert all(key == name_key(customer) for _, customer, key in stored)  # written with every order
    expected = [row_id for row_id, _, _ in sorted(stored, key=lambda r: (name_key(r.customer), r.id))]

    walked: list[int] = []
    page = get_page(engine, CUSTOMER, codec, limit, None)
    while True:
        walked += [row.id for row in page.items]
        if not page.has_more:
            break
        page = get_page(engine, CUSTOMER, codec, limit, None, after=page.next_cursor)
    assert walked == expected

    # Go to: what a person types, in any case or accent, opens the list at the same row, the
    # first whose key is at or past it in Python's order.
    typed = customers[0][:2]
    for variant in {typed, typed.upper(), typed.lower()}:
        cursor = start_at(CUSTOMER, [name_key(variant)], codec=codec, filters={"status": None})
        first = get_page(engine, CUSTOMER, codec, limit, None, after=cursor).items
        at = [
            r.id
            for r in sorted(stored, key=lambda r: (name_key(r.customer), r.id))
            if r.customer_key >= name_key(variant)
        ]
        assert [r.id for r in first] == at[:limit], variant


def test_go_to_u_and_ursula_agree_with_accents(client) -> None:
    engine = client.application.extensions["engine"]
    add_orders(
        engine,
        [(BASE - dt.timedelta(minutes=i), name, Decimal("1.00"), "paid") for i, name in enumerate(CUSTOMERS)],
    )
    places = set()
    for typed in ("ú", "U", "u", "Ú"):
        response = client.get("/orders", query_string={"sort": "customer", "to": typed})
        assert response.status_code == 303
        places.add(response.headers["Location"])
    assert len(places) == 1
    page = client.get(places.pop()).get_data(as_text=True)
    assert page.index("Úrsula Freitas") < page.index("Vitor Araújo")
    assert "Tiago Moreira" not in page.split('id="rows"')[1].split("</tbody>")[0].split("Úrsula")[0]


def test_the_migration_and_the_seed_write_the_key(engine) -> None:
    clear(engine)
    with Session(engine) as session:
        seed_orders(session, 60)  # PostgreSQL's own INSERT ... SELECT path, the others' Core INSERT
        rows = session.execute(select(Order.customer, Order.customer_key)).all()
        assert rows and all(key == name_key(customer) for customer, key in rows)
        # The engine's own comparison of the column is code point order (its collation).
        assert session.scalar(text("SELECT COUNT(*) FROM orders WHERE customer_key < 'ursula'")) == sum(
            name_key(c) < "ursula" for c, _ in rows
        )


@pytest.fixture(params=ENGINES)
def empty_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    with throwaway_database(request.param, tmp_path, "names") as url:
        yield url


def test_migration_0002_fills_the_key_of_the_rows_already_there(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        migrate(engine, "0001")
        names = ["Úrsula Freitas", "ana", "ÁNA", "Zeca Batista", "Борис"] * 2100  # more than a batch
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO orders (customer, amount, status, created_at) VALUES (:c, 1, 'paid', :t)"),
                [{"c": name, "t": BASE.replace(tzinfo=None)} for name in names],
            )
        migrate(engine)
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT customer, customer_key FROM orders")).all()
        assert len(rows) == len(names) and all(key == name_key(customer) for customer, key in rows)
    finally:
        engine.dispose()
