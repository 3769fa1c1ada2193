"""CSV export by keyset batches: constant memory, resumable by cursor, optionally one snapshot;
each batch one index range whose CSV lines the engine formats and hands over in one piece
(PostgreSQL an ARRAY, MariaDB a GROUP_CONCAT; SQLite, in process, line by line)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Text, cast, func, literal
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from orders.data.models import Order
from orders.exports.csv_format import (
    CSV_COLUMNS,
    SQLITE_NEUTRALIZE,
    iso_utc_sql,
    neutralize,
    neutralize_sql,
)
from orders.finding import reader
from orders.finding.request import ListRequest
from pagination import Keyset, Range

EXPORT_BATCH_SIZE = 20_000  # rows per keyset batch: per-batch costs (a probe, a transaction) under 5%
# The most `flask export --batch-size` takes: a batch's CSV is made in memory (about 60 MB at this
# size), and a LIMIT past the engines' integers was a database error, not the option's.
MAX_BATCH_SIZE = 1_000_000
# The web export's first batch, read before its response starts (so that a bad start or a dead
# database is an error status): a HEAD, or a client gone before the body, costs this one small
# range, not the two full batches the read-ahead has under way, and a download's first bytes
# come as much sooner.
FIRST_BATCH_SIZE = 1_000
log = logging.getLogger(__name__)


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
    *,
    batch_size: int = EXPORT_BATCH_SIZE,
    first_batch_size: int | None = None,
    one_transaction: bool = False,
    raw: bool = False,
) -> Iterator[Chunk]:
    """The export as CSV chunks, one per keyset batch (iterate_ranges: a probe finds the batch's
    last row, then one read of the index range up to it), in the batch's own short transaction
    unless one_transaction (a --consistent snapshot): while a client downloads at its own pace,
    or a HEAD request never asks for the body, the export holds no connection, no snapshot and no
    lock (an "idle in transaction" session would block every ALTER TABLE behind it); the next
    batch starts from the last row's keys. The engine formats every line (csv_line_sql: the same bytes as
    csv_line(), tests/test_security_csv.py compares them on generated names) and joins a
    batch's lines itself (batch_sql): a driver hands rows to Python one call each (psycopg one
    COPY row per call, PyMySQL parsing each row in Python), which cost more than the engine's
    whole work; one value per batch costs nothing per row."""
    dialect = session.get_bind().dialect.name
    sort = listing.sort
    stmt = listing.statement(*export_columns(dialect, sort, raw=raw))
    batch_reader = _BatchReader(sort)
    # A server engine probes the next range on a session of its own (_one_ahead) and reads two
    # ranges at once on two more (_read_ahead): the server formats a batch (to_char, the formula
    # guard, the concatenation) on one core per query, so one query at a time bounds a download
    # by one server core (tests/test_export_cli.py shows two reads under way at once). The
    # caller's session is never touched by those threads: a caller that closes it while a read
    # is under way would hand that connection to another request. A
    # snapshot (one_transaction) is one session's, and SQLite works in this process, where a
    # second thread would only contend for the GIL: those probe and read in turn.
    ahead = not one_transaction and dialect != "sqlite"
    own = [Session(bind=session.get_bind()) for _ in range(3)] if ahead else []
    probing = own[0] if ahead else session
    # Where the list starts: its cursor, or its go-to's first row (read here, on the caller's
    # session, in its own short transaction unless one_transaction).
    start = reader.start(listing, session)
    if listing.goto is not None and not one_transaction:
        session.rollback()
    ranges = _ranges(listing, probing, stmt, start, batch_size, first_batch_size or batch_size)
    probed = _one_ahead(ranges, probing) if ahead else None
    try:
        if probed is not None:
            # The first chunk alone: nothing is read ahead until the caller asks for the second.
            if (first := next(probed, None)) is None:
                return
            yield _chunk(batch_reader, first, own[1])  # its transaction ended: none waits on the caller
            yield from _read_ahead(probed, batch_reader, own[1:])
            return
        for part in ranges:
            data = batch_reader.read(session, part.statement, part.params)
            if not one_transaction:
                session.rollback()  # the read's short transaction (with the probe's, in turn)
            yield Chunk(data, part.rows, part.cursor)
    finally:
        if probed is not None:
            probed.close()  # waits for the probe under way (_read_ahead waited for its reads)
        for other in own:  # no thread uses them any more
            close_after_stream(other)  # on a lost connection: one line, never instead of the error


def _ranges(
    listing: ListRequest, session: Session, stmt: Any, start: Any, batch_size: int, first_size: int
) -> Iterator[Range]:
    """The export's ranges from `start`: the first of `first_size` rows, then `batch_size` each
    (resumed behind the first by its cursor, as a resumed export is)."""
    if first_size >= batch_size:
        yield from reader.ranges(listing, session, stmt, start=start, batch_size=batch_size)
        return
    opening = reader.ranges(listing, session, stmt, start=start, batch_size=first_size)
    try:
        first = next(opening, None)
    finally:
        opening.close()  # type: ignore[attr-defined]  # a generator, typed as the Iterator it is
    if first is None:
        return
    yield first
    if first.rows >= first_size:  # a full range: more may follow
        yield from reader.ranges(listing, session, stmt, start=first.cursor, batch_size=batch_size)


def _chunk(reader: _BatchReader, part: Range, session: Session) -> Chunk:
    """One range read as a chunk, in a short transaction of its own (ended before it returns)."""
    try:
        return Chunk(reader.read(session, part.statement, part.params), part.rows, part.cursor)
    finally:
        session.rollback()


def _read_ahead(ranges: Iterator[Range], reader: _BatchReader, sessions: list[Session]) -> Iterator[Chunk]:
    """The chunks of `ranges` in order, up to len(sessions) of them read at once, each on a
    worker thread and a session of its own (range k on sessions[k % n]), in a short transaction.

    Memory stays len(sessions) + 1 batches (the one yielded, the ones read meanwhile), whatever
    the row count. A read's error reaches the caller after every batch before it, so the
    interruption marker's cursor stays the last batch written. A caller that stops early (a
    client gone) waits for the reads under way, at most one statement each; none starts after."""

    pending: deque[Future[Chunk]] = deque()
    pool = ThreadPoolExecutor(max_workers=len(sessions), thread_name_prefix="export-read")
    try:
        for k, part in enumerate(ranges):
            if len(pending) == len(sessions):
                yield pending.popleft().result()
            pending.append(pool.submit(_chunk, reader, part, sessions[k % len(sessions)]))
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _one_ahead(ranges: Iterator[Range], session: Session) -> Generator[Range, None, None]:
    """`ranges`, each probed on a worker thread while the caller reads the one before it.

    Each probe is a short transaction of its own (rolled back at once). A probe's error reaches
    the caller where that range would have come, after every range before it: the interruption
    marker's cursor stays the last range written. A caller that stops early (a client gone)
    waits for the probe under way, at most one statement, before the session is closed."""

    def probe() -> Range | None:
        try:
            return next(ranges, None)
        finally:
            session.rollback()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="export-probe") as worker:
        pending = worker.submit(probe)
        while (part := pending.result()) is not None:
            pending = worker.submit(probe)
            yield part


def export_columns(dialect: str, sort: Keyset, *, raw: bool = False) -> list[ColumnElement[Any]]:
    """What a batch's statement selects: the CSV line, and on MariaDB the sort's keys too
    (GROUP_CONCAT orders by them: MariaDB drops the ORDER BY of a derived table)."""
    line = csv_line_sql(dialect, raw=raw).label("line")
    keys = [t.expr.label(f"_keyset_{i}") for i, t in enumerate(sort.columns)]  # named as batch_sql reads them
    return [line, *keys] if dialect in ("mysql", "mariadb") else [line]


def batch_sql(sql: str, dialect: str, sort: Keyset) -> str:
    """The SQL that reads one batch's lines (`sql`, the range's SELECT) as one text.

    PostgreSQL: ARRAY(subquery) keeps the subquery's order (an aggregate over a subquery only
    "usually" does); MariaDB: GROUP_CONCAT ordered by the keys; SQLite: the range itself (its
    rows come from C in the same process, and its group_concat() promises no order)."""
    if dialect == "postgresql":
        # As UTF-8 bytes (bytea, read in binary format: _BatchReader): psycopg hands them over
        # as they are; as text it would decode a batch into a str to be encoded again, the
        # client's work on every byte done twice.
        return f"SELECT convert_to(array_to_string(ARRAY({sql}), ''), 'UTF8')"
    if dialect in ("mysql", "mariadb"):
        order = ", ".join(
            f"_batch._keyset_{i} {'DESC' if t.descending else 'ASC'}" for i, t in enumerate(sort.columns)
        )
        # As bytes (BINARY): PyMySQL hands them over as they are, not decoded into a str that
        # is encoded again.
        concat = f"GROUP_CONCAT(_batch.line ORDER BY {order} SEPARATOR '')"
        return f"SELECT CAST({concat} AS BINARY) FROM ({sql}) AS _batch"
    return sql


# GROUP_CONCAT's own limit (1 MB by default) cuts a longer result with only a warning: a batch
# of 20,000 lines is 1.3 MB of seeded names and at most 13 MB of the longest ones. Set per
# connection, before each batch: it changes nothing else.
_GROUP_CONCAT_MAX = "SET SESSION group_concat_max_len = 4294967295"


def compile_for_driver(statement: Any, dialect: Any) -> Any:
    """`statement` compiled as SQL the driver runs as it is (IN lists rendered out)."""
    return statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})


def driver_params(compiled: Any, params: dict[str, Any]) -> Any:
    """The parameters of `compiled` with `params`, after the column types' own conversions (what
    SQLAlchemy applies before every execute), as the driver takes them: by name, or in order
    for SQLite's "?"."""
    processors = compiled._bind_processors
    values = {
        k: processors[k](v) if k in processors else v for k, v in compiled.construct_params(params).items()
    }
    return [values[k] for k in compiled.positiontup] if compiled.positional else values


class _BatchReader:
    """Reads a batch's lines through the driver, each statement compiled once: iterate_ranges()
    runs the same statement object for every range with other parameters (compiling it took
    4 ms a batch)."""

    def __init__(self, sort: Keyset) -> None:
        self._sort = sort
        # By id, holding the statement itself so that its id cannot be reused meanwhile.
        self._compiled: dict[int, tuple[Any, Any, str]] = {}

    def read(self, session: Session, statement: Any, params: dict[str, Any]) -> bytes:
        """The batch's CSV lines, read whole: its transaction ends before a slow client reads it."""
        connection = session.connection()
        dialect = connection.dialect
        if id(statement) not in self._compiled:
            compiled = compile_for_driver(statement, dialect)
            self._compiled[id(statement)] = (
                statement,
                compiled,
                batch_sql(str(compiled), dialect.name, self._sort),
            )
        _, compiled, sql = self._compiled[id(statement)]
        bound = driver_params(compiled, params)
        dbapi_connection: Any = connection.connection.dbapi_connection
        try:
            # PostgreSQL's result in binary format: a bytea is then the bytes themselves.
            binary = {"binary": True} if dialect.name == "postgresql" else {}
            cursor = dbapi_connection.cursor(**binary)
            try:
                if dialect.name == "sqlite":
                    dbapi_connection.create_function(SQLITE_NEUTRALIZE, 1, neutralize, deterministic=True)
                    # Lines as SQLite's own UTF-8 bytes: decoding each into a str that is
                    # encoded again was a third of the read.
                    dbapi_connection.text_factory = bytes
                    try:
                        cursor.execute(sql, bound)
                        return b"".join([line for (line,) in cursor])
                    finally:
                        dbapi_connection.text_factory = str
                if dialect.name != "postgresql":
                    cursor.execute(_GROUP_CONCAT_MAX)
                cursor.execute(sql, bound)
                (text,) = cursor.fetchone()
            finally:
                cursor.close()
        except dialect.loaded_dbapi.Error as err:  # classified like every other driver error
            raise DBAPIError.instance(sql, bound, err, dialect.loaded_dbapi.Error) from err
        if text is None:  # GROUP_CONCAT of no rows
            return b""
        return text if isinstance(text, bytes) else text.encode()


def csv_line_sql(dialect: str, *, raw: bool = False) -> ColumnElement[str]:
    """csv_line() as one SQL expression: the customer neutralized (neutralize_sql, of
    orders/exports/csv_format.py) unless raw, always quoted; the other cells never hold a
    separator, a quote or a line break."""
    c = Order.__table__.c
    customer = c.customer if raw else neutralize_sql(c.customer, dialect)
    quoted = func.replace(customer, literal('"'), literal('""'))
    created = iso_utc_sql(c.created_at, dialect)
    if dialect == "sqlite":  # integer cents (types.Money); %.2f of a double is exact to 15 digits
        amount: ColumnElement[Any] = func.printf(literal("%.2f"), c.amount / literal(100.0))
    else:
        amount = cast(c.amount, Text)
    parts: list[str | ColumnElement[Any]] = [
        cast(c.id, Text),
        ',"',
        quoted,
        '",',
        amount,
        ",",
        c.status,
        ",",
        created,
        "\n",
    ]
    elements: list[ColumnElement[Any]] = [literal(p) if isinstance(p, str) else p for p in parts]
    if dialect in ("mysql", "mariadb"):  # || is OR there
        return func.concat(*elements)
    line = elements[0]
    for element in elements[1:]:
        line = line.op("||")(element)
    return line


def csv_header(*, bom: bool = False) -> str:
    """The first line; with `bom`, after a UTF-8 byte order mark, the one sign of UTF-8 that Excel
    reads when a CSV file is opened by double-click (without it Excel takes the file for the
    legacy code page: "Úrsula" shows as "Ãšrsula"). docs/operations.md says who gets it."""
    return ("\ufeff" if bom else "") + ",".join(CSV_COLUMNS) + "\n"


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


def csv_chunks(
    chunks: Iterable[Chunk], *, header: bool = True, after: str | None = None, bom: bool = False
) -> Iterator[bytes]:
    """The CSV bytes of `chunks`. If reading a batch fails part-way (the first one is read
    before the response starts, so its failure is a 503), the last line is INTERRUPTED with the
    cursor that resumes behind the last row written (`after` before any), and ExportInterrupted
    ends the stream without its chunked terminator."""
    if header:
        yield csv_header(bom=bom).encode()
    resume = after or ""
    try:
        for chunk in chunks:
            yield chunk.data
            resume = chunk.cursor or resume
    except (DBAPIError, PoolTimeout) as err:
        log.warning("export interrupted, resume after=%s: %s", resume, str(err).splitlines()[0][:200])
        yield f"{INTERRUPTED}{resume}\n".encode()
        raise ExportInterrupted(f"export interrupted; resume with after={resume}") from err


def close_after_stream(session: Session) -> None:
    """Close a download's session when its stream ends. Its cleanup never replaces the error
    that ended the stream: after the database went away, close()'s rollback raises "the
    connection is lost", which hid ExportInterrupted (and its one-line log) behind a traceback."""
    try:
        session.close()
    except Exception as err:  # DBAPIError mostly; anything else as well, this is cleanup
        log.warning("export's session closed on a lost connection: %s", str(err).splitlines()[0][:200])


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
