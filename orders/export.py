"""CSV export by keyset batches: constant memory, resumable by cursor, optionally one snapshot;
each batch one index range, formatted by the server on PostgreSQL (COPY) and MariaDB (lines)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import ColumnElement, Text, cast, func, literal
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from pagination import Batch, CursorCodec, iterate, iterate_ranges

from .listing import ListRequest
from .models import Order
from .serialize import CSV_COLUMNS, csv_line, iso_utc_sql, neutralize_sql

EXPORT_BATCH_SIZE = 20_000  # rows per keyset batch: per-batch costs (a probe, a transaction) under 5%
log = logging.getLogger(__name__)


def export_batches(
    session: Session,
    listing: ListRequest,
    codec: CursorCodec,
    *,
    batch_size: int = EXPORT_BATCH_SIZE,
    one_transaction: bool = False,
) -> Iterator[Batch]:
    """The export's batches. Unless one_transaction (a --consistent snapshot), each batch is read
    in a short transaction of its own that ends before the batch is handed on: while a client
    downloads at its own pace, or a HEAD request never asks for the body, the export holds no
    connection, no snapshot and no lock (an "idle in transaction" session would block every
    ALTER TABLE behind it). Keyset batches need nothing from the previous transaction: the next
    one starts from the last row's keys."""
    # Plain rows of the CSV's columns in its order, not ORM objects: an export needs no
    # identity map, and building one per row costs more than the query.
    columns = [Order.__table__.c[name] for name in CSV_COLUMNS]
    batches = iterate(
        session,
        listing.statement().with_only_columns(*columns, maintain_column_froms=True),
        listing.keyset,
        batch_size=batch_size,
        codec=codec,
        after=listing.after,
        filters=listing.filters,
    )
    for batch in batches:  # iterate() has fetched the whole batch when it yields it
        if not one_transaction:
            session.rollback()  # a read-only transaction: ends it, gives the connection back
        yield batch


@dataclass(frozen=True)
class Chunk:
    """One batch of the export as CSV bytes, how many rows it holds, and the cursor that
    resumes right behind it."""

    data: bytes
    rows: int
    cursor: str | None


def export_chunks(
    session: Session,
    listing: ListRequest,
    codec: CursorCodec,
    *,
    batch_size: int = EXPORT_BATCH_SIZE,
    one_transaction: bool = False,
    raw: bool = False,
) -> Iterator[Chunk]:
    """The export as CSV chunks, one per keyset batch, each batch one index range: on PostgreSQL
    a `COPY (SELECT ...) TO STDOUT` (the server formats the CSV: several times faster than rows
    through Python), on MariaDB a SELECT of lines the server formats (csv_line_sql), on SQLite
    rows formatted here. All write the same bytes (tests/test_security_csv.py compares them on
    generated names)."""
    if session.get_bind().dialect.name in ("postgresql", "mysql", "mariadb"):
        yield from _server_chunks(
            session, listing, codec, batch_size=batch_size, one_transaction=one_transaction, raw=raw
        )
        return
    for batch in export_batches(
        session, listing, codec, batch_size=batch_size, one_transaction=one_transaction
    ):
        yield Chunk(csv_text(batch, raw=raw).encode(), len(batch.items), batch.cursor)


def _server_chunks(
    session: Session,
    listing: ListRequest,
    codec: CursorCodec,
    *,
    batch_size: int,
    one_transaction: bool,
    raw: bool,
) -> Iterator[Chunk]:
    """The export's ranges (iterate_ranges) formatted by the server: PostgreSQL COPYs each range
    (csv_sql_columns), MariaDB selects its lines (csv_line_sql)."""
    dialect = session.get_bind().dialect.name
    copies = _Copies() if dialect == "postgresql" else None
    columns = csv_sql_columns(raw=raw) if copies else [csv_line_sql(dialect, raw=raw)]
    stmt = listing.statement().with_only_columns(*columns, maintain_column_froms=True)
    ranges = iterate_ranges(
        session,
        stmt,
        listing.keyset,
        batch_size=batch_size,
        codec=codec,
        after=listing.after,
        filters=listing.filters,
    )
    for part in ranges:
        if copies:
            data, rows = copies.read(session, part.statement, part.params), part.rows
        else:
            lines = session.execute(part.statement, part.params).scalars().all()
            data, rows = "".join(lines).encode(), len(lines)
        if not one_transaction:
            session.rollback()  # the probe and the read shared one short transaction
        yield Chunk(data, rows, part.cursor)


def compile_for_copy(statement: Any, dialect: Any) -> Any:
    """`statement` compiled as PostgreSQL SQL that COPY can take (IN lists rendered out)."""
    return statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})


def copy_params(compiled: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of `compiled` with `params`, after the column types' own conversions (what
    SQLAlchemy applies before every execute). COPY takes no server-side parameters: psycopg
    binds these on the client."""
    processors = compiled._bind_processors
    return {
        k: processors[k](v) if k in processors else v for k, v in compiled.construct_params(params).items()
    }


class _Copies:
    """COPY (statement) TO STDOUT, each statement compiled once: iterate_ranges() runs the same
    statement object for every range with other parameters (compiling it took 4 ms a batch)."""

    def __init__(self) -> None:
        # By id, holding the statement itself so that its id cannot be reused meanwhile.
        self._compiled: dict[int, tuple[Any, Any, str]] = {}

    def read(self, session: Session, statement: Any, params: dict[str, Any]) -> bytes:
        """The rows as PostgreSQL's CSV (the customer always quoted, as csv_line writes it), read
        whole: the batch's transaction ends before a slow client reads it."""
        connection = session.connection()
        if id(statement) not in self._compiled:
            compiled = compile_for_copy(statement, connection.dialect)
            sql = f"COPY ({compiled}) TO STDOUT (FORMAT csv, FORCE_QUOTE (customer))"
            self._compiled[id(statement)] = (statement, compiled, sql)
        _, compiled, sql = self._compiled[id(statement)]
        bound = copy_params(compiled, params)
        dbapi_connection: Any = connection.connection.dbapi_connection
        data = bytearray()
        try:
            with dbapi_connection.cursor() as cursor, cursor.copy(sql, bound) as copy:
                for block in copy:
                    data += block
        except psycopg.Error as err:  # classified like every other driver error (orders/errors.py)
            raise DBAPIError.instance(sql, bound, err, psycopg.Error) from err
        return bytes(data)


def csv_sql_columns(*, raw: bool = False) -> list[ColumnElement[Any]]:
    """The CSV's columns as PostgreSQL writes them: the same text as csv_line() gives, the
    customer neutralized in SQL (serialize.neutralize_sql) unless raw."""
    c = Order.__table__.c
    customer = c.customer if raw else neutralize_sql(c.customer, "postgresql")
    created = iso_utc_sql(c.created_at, "postgresql")
    return [cast(c.id, Text), customer.label("customer"), cast(c.amount, Text), c.status, created]


def csv_line_sql(dialect: str, *, raw: bool = False) -> ColumnElement[str]:
    """csv_line() as one SQL expression, for MariaDB: the server formats the line, and the
    driver parses one text per row instead of five typed values (PyMySQL is pure Python:
    fetching the five columns alone took 2.7 times as long as fetching the lines)."""
    c = Order.__table__.c
    customer = c.customer if raw else neutralize_sql(c.customer, dialect)
    quoted = func.replace(customer, literal('"'), literal('""'))
    created = iso_utc_sql(c.created_at, dialect)
    parts = [c.id, ',"', quoted, '",', c.amount, ",", c.status, ",", created, "\n"]
    return func.concat(*(literal(p) if isinstance(p, str) else p for p in parts))


def csv_text(batch: Batch, *, raw: bool = False) -> str:
    """One batch as CSV lines (serialize.csv_line): the customer always quoted, the one free
    text cell; ids, amounts, statuses and timestamps never hold a separator, a quote or a line
    break. Names a spreadsheet would run as a formula are neutralized unless raw=True."""
    return "".join([csv_line(row, raw=raw) for row in batch.items])


def csv_header() -> str:
    return ",".join(CSV_COLUMNS) + "\n"


# The last line of a download that stopped before its end, then the stream is aborted without
# HTTP's end of chunked body. Both, because each catches the clients the other misses: an HTTP
# client that checks the framing (curl: exit 18, requests: ChunkedEncodingError, urllib:
# IncompleteRead, browsers: "Failed - Network error") sees the abort; a program that only reads
# lines until EOF (many a script, a proxy that re-frames) sees a line that is no row (one field
# where rows have five; a "#" that no id starts with) and the cursor to resume with. A marker on
# every *complete* export would change every file, and a resumed export's pieces would no
# longer concatenate to the whole.
INTERRUPTED = "#interrupted: the export stopped before its end; resume with after="


class ExportInterrupted(RuntimeError):
    """A download stopped mid-way (the database went away): the WSGI server aborts the stream."""


class QuietInterruptedExports(logging.Filter):
    """For gunicorn's error log (gunicorn.conf.py): an interrupted export is already logged in
    one line with its resume cursor (csv_chunks); gunicorn's "Error handling request" and its
    traceback for the aborted stream say nothing more."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ExportInterrupted))


def csv_chunks(chunks: Iterable[Chunk], *, header: bool = True, after: str | None = None) -> Iterator[bytes]:
    """The CSV bytes of `chunks`. If reading a batch fails part-way (the first one is read
    before the response starts, so its failure is a 503), the last line is INTERRUPTED with the
    cursor that resumes behind the last row written (`after` before any), and ExportInterrupted
    ends the stream without its chunked terminator."""
    if header:
        yield csv_header().encode()
    resume = after or ""
    try:
        for chunk in chunks:
            yield chunk.data
            resume = chunk.cursor or resume
    except (DBAPIError, PoolTimeout) as err:
        log.warning("export interrupted, resume after=%s: %s", resume, str(err).splitlines()[0][:200])
        yield f"{INTERRUPTED}{resume}\n".encode()
        raise ExportInterrupted(f"export interrupted; resume with after={resume}") from err


@contextmanager
def snapshot(session: Session) -> Iterator[Session]:
    """Run the session's reads in one REPEATABLE READ transaction: a consistent export.

    PostgreSQL and MariaDB/InnoDB take the snapshot at the transaction's first read, which is
    the export's first batch. SQLite needs an explicit BEGIN: Python's sqlite3 driver opens a
    transaction only before a write, so without it every batch would read the newest data;
    with it, the read transaction (WAL) keeps the snapshot of its first read until it ends.
    """
    dialect = session.get_bind().dialect.name
    if dialect != "sqlite":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    else:
        session.connection().exec_driver_sql("BEGIN")
    try:
        yield session
    finally:
        session.rollback()
