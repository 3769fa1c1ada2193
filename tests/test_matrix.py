"""Every list reader x every combination of the list's parameters, on SQLite, PostgreSQL and MariaDB.

The readers: the HTML page (walked by its "Next page" links, and back by "Previous page"), its
htmx fragments, the JSON API (both ways), the CSV download and the `flask export` command. The
parameters, as the UI and the API produce them: every sort x status (all, one) x search (none, an
order number, a word, several words, words never together, no match, accents and capitals) x
go-to (none, a value inside the list, past its end, before its start, as each sort takes it:
dates, amounts with separators, surnames).

For each combination every reader answers 200 or 400 (never a 5xx: the app runs with a short
statement timeout, so a read that does not stay bounded fails as a 503 here), all agree on the
status, and every reader that answers returns exactly the rows of the rule written apart from
the code (`expected`), in the same order. And every engine sends the same bytes for the same
orders, answer by answer: the browser tests (which see nothing but these bodies) run on SQLite
alone for what they check of the front end, and on PostgreSQL too where the rows' timing is the
point (docs/testing.md, "One engine in the browser").
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
import re
from collections.abc import Iterator
from contextlib import ExitStack
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

import pytest
from flask import Flask
from sqlalchemy import select

from orders.data.db import make_engine
from orders.data.models import Order
from orders.data.names import key_words, name_key
from orders.finding import search_window
from orders.finding.sorts import SORTS
from orders.web.request_log import HEADER

from .databases import APP_ENGINES, migrated_database
from .fixtures import CLIENT_LIMITS, make_app
from .helpers import BASE, add_orders, link

NAMES = [
    "Ana Souza",
    "Úrsula Freitas",
    "João Pereira",
    "Mariana Souza Lima",
    "Ana Lima",
    "Zoë Ångström",
    "Bruno Lima",
    "Quésia Farias",
    "ana souza",  # the same key as "Ana Souza": ties on the name too
]
STATUSES = ["paid", "shipped", "pending", "cancelled"]
ROWS = 45
LIMIT = 7  # pages of 7 rows: every walk crosses several pages and ties at their edges

SEARCHES = {
    "none": None,
    "number": "#12",
    "word": "sou",
    "words": "ana LIMA",
    "words never together": "a b c d e",
    "no match": "zzqx",
    "accents": "ÚRS",
}
# What each go-to kind is tried with: a value inside the list, past its end, before its start.
GOTOS: dict[str, dict[str, str | None]] = {
    "datetime": {
        "none": None,
        "day": (BASE - dt.timedelta(minutes=5)).strftime("%Y-%m-%d"),
        "minute": (BASE - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M"),
        "before the data": "2001-01-01",
        "after the data": "2099-12-31 10:00",
    },
    "amount": {
        "none": None,
        "plain": "4.50",
        "comma decimal": "4,5",
        "thousands": "1,234.50",
        "below the data": "0.10",
    },
    "name": {"none": None, "first name": "ana", "surname": "Lima", "accented": "ÅNG", "absent": "Xyzzy"},
}
MAX_STATEMENT_MS = 2000  # far above any of these reads; a read that is not bounded fails as a 503


def dataset(rows: int) -> list[tuple[dt.datetime, str, Decimal, str]]:
    """The matrix's orders: ties on the date, the amount and the name's key."""
    return [
        (
            BASE - dt.timedelta(minutes=i // 3),  # three orders a minute: ties on the date
            NAMES[(i * 5) % len(NAMES)],
            Decimal((i * 7) % 11) + Decimal("0.50"),  # ties on the amount
            STATUSES[i % 4],
        )
        for i in range(rows)
    ]


@pytest.fixture(scope="module")
def matrix_apps(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Flask]]:
    """One app per engine, each on a database of its own holding the same orders (the same ids).
    `make test-quick` (no database server) takes SQLite alone: the rows, not the comparison."""
    kinds = ["sqlite"] if request.config.getoption("--quick") else APP_ENGINES
    with ExitStack() as stack:
        apps = {}
        for kind in kinds:
            url = stack.enter_context(migrated_database(kind, tmp_path_factory.mktemp("matrix"), "matrix"))
            engine = make_engine(url)
            add_orders(engine, dataset(ROWS))
            engine.dispose()
            apps[kind] = make_app(
                url, PAGE_SIZE=LIMIT, STATEMENT_TIMEOUT_MS=MAX_STATEMENT_MS, **CLIENT_LIMITS
            )
        yield apps
        for app in apps.values():
            app.extensions["engine"].dispose()


@pytest.fixture(scope="module", autouse=True)
def small_search_window() -> Iterator[None]:
    """Windows of 3 entries: several-word searches cross many cut windows, empty pages among
    them, in every walk (orders/finding/search_window.py SEARCH_WINDOW; 1,000 in the app)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_window, "SEARCH_WINDOW", 3)
        yield


@pytest.fixture(scope="module")
def all_rows(matrix_apps: dict[str, Flask]) -> dict[str, list[Any]]:
    """Each engine's orders, as it reads them back."""
    rows = {}
    for kind, app in matrix_apps.items():
        with app.extensions["engine"].connect() as connection:
            rows[kind] = list(connection.execute(select(Order.__table__)))
    return rows


# --- The rule, written apart from the code ---------------------------------------------------


def sort_key(sort: str, row: Any) -> tuple[Any, ...]:
    return {
        "newest": lambda r: (-r.created_at.timestamp(), -r.id),
        "oldest": lambda r: (r.created_at.timestamp(), r.id),
        "amount": lambda r: (-r.amount, -r.id),
        "customer": lambda r: (name_key(r.customer), r.id),
    }[sort](row)


def has_words(customer: str, typed: str) -> bool:
    """Each word typed starts a word of the name, case and accents ignored (docs/finding.md)."""
    words = key_words(name_key(customer))
    return all(any(w.startswith(t) for w in words) for t in key_words(name_key(typed)))


def found_by(row: Any, q: str | None) -> bool:
    if q is None:
        return True
    if re.fullmatch(r"#?[0-9]+", q):
        return bool(row.id == int(q.lstrip("#")))
    return has_words(row.customer, q)


def typed_amount(to: str) -> Decimal:
    """The amounts GOTOS types: "1,234.50" (comma thousands) or "4,5" (comma decimal)."""
    return Decimal(to.replace(",", "")) if "." in to else Decimal(to.replace(",", "."))


def at_or_past(sort: str, row: Any, to: str) -> bool:
    if SORTS[sort].goto == "amount":
        return bool(row.amount <= typed_amount(to))
    day_only = len(to) == 10
    when = dt.datetime.fromisoformat(to.replace(" ", "T")).replace(tzinfo=dt.UTC)
    if sort == "newest":
        return row.created_at <= (when + dt.timedelta(days=1) if day_only else when) - (
            dt.timedelta(microseconds=1) if day_only else dt.timedelta(0)
        )
    return bool(row.created_at >= when)


def covers(sort: str, row: Any, to: str) -> bool:
    """Whether the row is what was typed, at the precision typed."""
    if SORTS[sort].goto == "amount":
        return bool(row.amount == typed_amount(to))
    return row.created_at.isoformat(timespec="seconds").startswith(to.replace(" ", "T"))


def expected(
    rows: list[Any], sort: str, status: str | None, q: str | None, to: str | None
) -> list[int] | None:
    """The ids the list shows, in order, or None where go-to finds nothing there (a 400)."""
    kept = sorted(
        (r for r in rows if (status is None or r.status == status) and found_by(r, q)),
        key=lambda r: sort_key(sort, r),
    )
    if to is None:
        return [r.id for r in kept]
    if SORTS[sort].goto == "name":
        first = next((i for i, r in enumerate(kept) if has_words(r.customer, to)), None)
    else:
        first = next((i for i, r in enumerate(kept) if at_or_past(sort, r, to)), None)
        if first == 0 and not covers(sort, kept[0], to):
            first = None  # before the list's first row: nothing moves
    return None if first is None else [r.id for r in kept[first:]]


# --- The readers -------------------------------------------------------------------------------


def ids_in(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr id="order-\d+" data-id="(\d+)"', html)]


class Refused(Exception):
    """A reader's 400, with its message."""


def check(response: Any) -> Any:
    shown = response.get_data(as_text=True)
    # 404: the page's answer to an order number the list does not hold ("There is no order #N").
    missing = response.status_code == 404 and 'id="search-message"' in shown
    assert response.status_code in (200, 303, 400) or missing, (response.status_code, shown[:300])
    if response.status_code == 400:
        raise Refused(response.get_data(as_text=True))
    return response


def read_pages(client: Any, query: str, *, fragments: bool) -> tuple[list[int], list[int]]:
    """The rows of the page walk forward (next links; as htmx fragments after the first page),
    and the rows walked back from its last page by the prev links (full pages)."""
    response = check(client.get(f"/orders?{query}"))
    if opened := re.fullmatch(r"/orders/([0-9]+)", response.headers.get("Location", "")):
        return [int(opened.group(1))], []  # an order number found: the page opens that order
    if response.status_code == 303:
        response = check(client.get(response.headers["Location"]))
    html = response.get_data(as_text=True)
    forward, pages = ids_in(html), [html]
    headers = {"HX-Request": "true"} if fragments else {}
    while (url := link(html, "next")) is not None:
        html = check(client.get(url, headers=headers)).get_data(as_text=True)
        forward += ids_in(html)
        pages.append(html)
    last = pages[-1]
    if fragments:
        return forward, []
    backward, html = ids_in(last), last
    while (url := link(html, "prev")) is not None:
        html = check(client.get(url)).get_data(as_text=True)
        backward = ids_in(html) + backward
    return forward, backward


def read_api(client: Any, query: str) -> tuple[list[int], list[int]]:
    body = check(client.get(f"/api/orders?{query}&limit={LIMIT}")).get_json()
    forward, last = [int(o["id"]) for o in body["items"]], body
    walk = f"/api/orders?{strip_goto(query)}&limit={LIMIT}"
    while last["has_more"]:
        last = check(client.get(f"{walk}&after={last['next_cursor']}")).get_json()
        forward += [int(o["id"]) for o in last["items"]]
    backward, page = [int(o["id"]) for o in last["items"]], last
    while page["has_previous"]:
        page = check(client.get(f"{walk}&before={page['prev_cursor']}")).get_json()
        backward = [int(o["id"]) for o in page["items"]] + backward
    return forward, backward


def strip_goto(query: str) -> str:
    return "&".join(part for part in query.split("&") if not part.startswith("to="))


def read_export(client: Any, query: str) -> list[int]:
    text = check(client.get(f"/orders/export.csv?{query}")).get_data(as_text=True)
    return [int(r["id"]) for r in csv.DictReader(io.StringIO(text))]


def read_command(app: Flask, args: dict[str, str], answers: list[tuple[str, int, bytes]]) -> list[int]:
    options = list(itertools.chain.from_iterable((f"--{k}", v) for k, v in args.items()))
    result = app.test_cli_runner().invoke(args=["export", *options])
    answers.append((f"flask export {' '.join(options)}", result.exit_code, result.stdout_bytes))
    if result.exit_code == 2:
        raise Refused(result.stderr)
    assert result.exit_code == 0, (result.exit_code, result.stderr, result.exception)
    return [int(r["id"]) for r in csv.DictReader(io.StringIO(result.stdout))]


def combinations() -> Iterator[Any]:
    for sort, status, (q_kind, q) in itertools.product(SORTS, [None, "paid"], SEARCHES.items()):
        for to_kind, to in GOTOS[SORTS[sort].goto].items():
            yield pytest.param(sort, status, q, to, id=f"{sort}-{status or 'all'}-{q_kind}-{to_kind}")


class Recorded:
    """A test client that keeps every answer (address, status, bytes), each request sent with the
    same request id: an error page quotes it, the one part of a body that is not the data's."""

    def __init__(self, app: Flask):
        self.client = app.test_client()
        self.answers: list[tuple[str, int, bytes]] = []

    def get(self, url: str, headers: dict[str, str] | None = None) -> Any:
        response = self.client.get(url, headers={HEADER: "matrix", **(headers or {})})
        self.answers.append((url, response.status_code, response.get_data()))
        return response


def read_all(
    app: Flask, rows: list[Any], sort: str, status: str | None, q: str | None, to: str | None
) -> list[tuple[str, int, bytes]]:
    """Every reader's rows checked against the rule on one engine; returns every answer read."""
    args = {k: v for k, v in {"sort": sort, "status": status, "q": q, "to": to}.items() if v is not None}
    query = urlencode(args)
    want = expected(rows, sort, status, q, to)
    client = Recorded(app)
    readers = {
        "page": lambda: read_pages(client, query, fragments=False),
        "fragments": lambda: read_pages(client, query, fragments=True),
        "api": lambda: read_api(client, query),
        "export": lambda: (read_export(client, query), []),
        "command": lambda: (read_command(app, args, client.answers), []),
    }
    for name, read in readers.items():
        try:
            forward, backward = read()
        except Refused as refused:
            assert want is None, f"{name} refused what the list holds: {refused}"
            assert "nothing moved" in str(refused) or "no name" in str(refused), (name, str(refused)[:300])
            continue
        assert want is not None, f"{name} answered where go-to has nothing to go to"
        assert forward == want, name
        if backward:
            # Walked back from the last page: every row before it, up to the list's first row.
            full = expected(rows, sort, status, q, None)
            assert full is not None
            assert backward == full, f"{name} walked back"
    return client.answers


@pytest.mark.parametrize(("sort", "status", "q", "to"), list(combinations()))
def test_every_reader_shows_the_same_rows_for_every_combination(
    matrix_apps: dict[str, Flask],
    all_rows: dict[str, list[Any]],
    sort: str,
    status: str | None,
    q: str | None,
    to: str | None,
) -> None:
    """The rows of the rule, from every reader, on every engine; and every engine sends the same
    bytes. The latter is what lets the browser tests run on one engine: the browser sees nothing
    but these bodies (pages, fragments, errors), so what it does on one engine it does on all:
    the cursors in the links (a key read back otherwise by one engine would differ here), the
    amounts, dates, names, counts and messages as rendered."""
    answers = {kind: read_all(app, all_rows[kind], sort, status, q, to) for kind, app in matrix_apps.items()}
    first, *others = answers
    for kind in others:
        for ours, theirs in zip(answers[first], answers[kind], strict=False):
            assert theirs == ours, f"{kind} sent other bytes than {first} for {ours[0]}"
        assert len(answers[kind]) == len(answers[first]), f"{kind} answered {len(answers[kind])} times"


@pytest.mark.parametrize(
    "address",
    ["/orders/1", f"/orders/{ROWS}", "/orders/999999", "/orders?after=not-a-cursor", "/api/orders?after=x"],
)
def test_an_order_and_an_error_read_the_same_on_every_engine(
    matrix_apps: dict[str, Flask], address: str
) -> None:
    answers = {kind: Recorded(app).get(address) for kind, app in matrix_apps.items()}
    first = next(iter(answers.values()))
    assert first.status_code in (200, 400, 404), first.status_code
    for kind, answer in answers.items():
        assert (answer.status_code, answer.get_data()) == (first.status_code, first.get_data()), kind
