"""CSV export by keyset batches: constant memory, resumable by cursor, optionally one snapshot."""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from pagination import Batch, CursorCodec, iterate

from .listing import ListRequest
from .models import Order
from .serialize import CSV_COLUMNS, csv_row

EXPORT_BATCH_SIZE = 5000
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


def csv_text(batch: Batch, *, raw: bool = False) -> str:
    """One batch as CSV lines. Text cells a spreadsheet would run as a formula get a leading '
    (serialize.neutralize); raw=True writes them as stored (`flask export --raw`)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    rows = [csv_row(row, raw=raw) for row in batch.items]
    if not any(_careful(row[1]) for row in rows):
        writer.writerows(rows)
        return buffer.getvalue()
    # csv quotes a field only for the delimiter, the quote character and the characters of the
    # line terminator ("\n"): a bare carriage return would be written unquoted and end the row
    # in a spreadsheet, and a ";" unquoted splits the cell where ";" is the separator. Such rows
    # are written with every field quoted; the decision is per row, so batch sizes never change it.
    careful = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for row in rows:
        (careful if _careful(row[1]) else writer).writerow(row)
    return buffer.getvalue()


def _careful(customer: str) -> bool:
    return "\r" in customer or ";" in customer


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


def csv_chunks(batches: Iterable[Batch], *, header: bool = True, after: str | None = None) -> Iterator[str]:
    """The CSV text of `batches`. If reading a batch fails part-way (the first one is read
    before the response starts, so its failure is a 503), the last line is INTERRUPTED with the
    cursor that resumes behind the last row written (`after` before any), and ExportInterrupted
    ends the stream without its chunked terminator."""
    if header:
        yield csv_header()
    resume = after or ""
    try:
        for batch in batches:
            yield csv_text(batch)
            resume = batch.cursor or resume
    except (DBAPIError, PoolTimeout) as err:
        log.warning("export interrupted, resume after=%s: %s", resume, str(err).splitlines()[0][:200])
        yield f"{INTERRUPTED}{resume}\n"
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
