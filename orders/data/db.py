"""Database wiring: one engine and sessionmaker per app, one session per request, migrations."""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flask import Flask, current_app, g
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, InvalidatePoolError
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"

# --- Client-side bounds: a server that hangs (kill -STOP, a partition) ends the wait ---------
#
# A server that refuses is noticed at once; one that hangs is noticed only by the client's own
# clocks. Each wait has its own: connecting (libpq/PyMySQL connect_timeout, which also covers a
# listener that accepts and never answers), a free connection from the pool (pool_timeout), and
# every answer to a statement once connected (read_timeout below). statement_timeout is the
# server's and never fires when the server itself is frozen. TCP keepalives (and libpq's
# tcp_user_timeout) notice a partition on an idle pooled connection; they cannot notice a
# frozen process, whose kernel still acknowledges every packet: only the read timeout does.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 5, "keepalives_count": 3}


# --- A commit that waits for the synchronous standby --------------------------------------
#
# On a primary with synchronous_commit (Patroni's synchronous_mode), COMMIT waits until the
# synchronous standby has the commit. That wait is bounded by the client's read timeout (wait()
# below): a standby that hangs makes the request a 503, never a 201, and the client's retry with
# its Idempotency-Key is safe (the retry's insert of the same key waits for the first commit and
# fails by its statement_timeout until the standby has it). statement_timeout itself never ends
# the wait: PostgreSQL disables it before it commits (finish_xact_command in postgres.c), which
# tests/test_synchronous_commit.py shows with a 1 s statement_timeout and a frozen standby.
# A query cancel does end it (pg_cancel_backend, an operator's or a pooler's): PostgreSQL then
# reports COMMIT done with only a WARNING, "canceling wait for synchronous replication due to
# user request" ("The transaction has already committed locally, but might not have been
# replicated to the standby."). That commit is reported failed here (the connection is closed: a
# 503), so no write is acknowledged before the standby has it.
SYNC_WAIT_CANCELLED = "canceling wait for synchronous replication"


def _bounded_psycopg(read_timeout: float) -> Any:
    """A psycopg Connection class whose every wait for the server ends after `read_timeout` s.

    psycopg's `Connection.wait()` is the one place a sync connection waits on its socket
    (statements, fetches, COPY, commit, rollback, the pool's ping); its `timeout` raises
    `_WaitTimeout` mid-protocol, after which the connection cannot be used: it is closed, so
    SQLAlchemy sees a disconnect (invalidates it, and errors.py answers 503). A commit whose
    wait for the synchronous standby was cancelled fails as well (see SYNC_WAIT_CANCELLED)."""
    import psycopg
    from psycopg import errors as pg_errors

    class BoundedConnection(psycopg.Connection):
        # Set by bound_reads() when it connects: the warnings of a cancelled synchronous wait.
        cancelled_waits: list[str]

        def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
            try:
                return super().wait(gen, interval=interval, timeout=timeout or read_timeout)
            except pg_errors._WaitTimeout:  # psycopg's own: "convert it to a public one"
                self.close()
                raise psycopg.OperationalError(
                    f"the server did not answer within {read_timeout:g} s (client read timeout)"
                ) from None

        def commit(self) -> None:
            self.cancelled_waits.clear()
            super().commit()
            if self.cancelled_waits:
                self.close()  # a disconnect for SQLAlchemy: 503, and the client retries
                why = self.cancelled_waits[0]
                raise psycopg.OperationalError(f"the synchronous standby did not confirm the commit: {why}")

    return BoundedConnection


def _note_cancelled_wait(waits: list[str], diagnostic: Any) -> None:
    message = diagnostic.message_primary or ""
    if message.startswith(SYNC_WAIT_CANCELLED):
        waits.append(message)


def bound_reads(engine: Engine, read_timeout_ms: int) -> None:
    """Connect `engine` (PostgreSQL, psycopg) with _bounded_psycopg's class: every wait for the
    server ends after `read_timeout_ms`. For every engine that talks to a server that may hang,
    the router's position probes included (orders/data/replicas/router.py)."""
    connection_class = _bounded_psycopg(read_timeout_ms / 1000)

    @event.listens_for(engine, "do_connect")
    def _bounded_connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        # SQLAlchemy's documented hook for connecting another way; the dialect would call
        # psycopg.connect(), the same classmethod on psycopg's own class.
        connection = connection_class.connect(*cargs, **cparams)
        # The handler holds the list, not the connection: no reference cycle through psycopg.
        waits: list[str] = []
        connection.cancelled_waits = waits
        connection.add_notice_handler(functools.partial(_note_cancelled_wait, waits))
        return connection


def make_engine(
    url: str,
    *,
    statement_timeout_ms: int | None = None,
    pre_ping: bool = True,
    connect_timeout_s: int = 5,
    read_timeout_ms: int | None = None,
    pool_timeout_s: float | None = None,
    poolclass: Any = None,
) -> Engine:
    """An engine that notices dead connections (pre-ping), bounds how long a query may run on
    the server (statement_timeout_ms) and how long the client waits for a server that does not
    answer (connect_timeout_s, read_timeout_ms, pool_timeout_s; None: no client bound)."""
    kwargs: dict[str, Any] = {"pool_pre_ping": pre_ping}
    if poolclass is not None:
        kwargs["poolclass"] = poolclass
    elif pool_timeout_s is not None and not url.startswith("sqlite"):
        kwargs["pool_timeout"] = pool_timeout_s
    connect_args: dict[str, Any] = {}
    if url.startswith("postgresql"):
        connect_args["connect_timeout"] = connect_timeout_s
        connect_args.update(KEEPALIVES)
        if read_timeout_ms:
            # Unacknowledged data (a partition mid-statement) drops the connection as well.
            connect_args["tcp_user_timeout"] = int(read_timeout_ms)
        # UTC sessions: timestamps come back already in UTC, no per-value conversion. No JIT: the
        # app's statements are index ranges of a page's rows, which run in a millisecond, but
        # a search's correlated counts are costed as if they read whole ranges (850,000 at
        # 300,000 orders, past jit_above_cost), and compiling them took 350 ms each
        # (docs/finding.md, "No JIT").
        options = "-c timezone=UTC -c jit=off"
        if statement_timeout_ms:
            options += f" -c statement_timeout={int(statement_timeout_ms)}"
        connect_args["options"] = options
    elif url.startswith(("mysql", "mariadb")):
        connect_args.update(connect_timeout=connect_timeout_s, charset="utf8mb4")
        if read_timeout_ms:
            # PyMySQL's socket timeouts: a frozen server is a lost connection (2013), a 503.
            connect_args.update(read_timeout=read_timeout_ms / 1000, write_timeout=read_timeout_ms / 1000)
    elif url.startswith("sqlite"):
        # Flask serves requests on several threads; each checks out its own connection.
        connect_args["check_same_thread"] = False
        connect_args["timeout"] = 15
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    if url.startswith("postgresql") and read_timeout_ms:
        bound_reads(engine, read_timeout_ms)

    if url.startswith(("mysql", "mariadb")) and statement_timeout_ms:
        seconds = statement_timeout_ms / 1000

        @event.listens_for(engine, "connect")
        def _set_timeout(dbapi_conn: Any, _record: Any) -> None:
            with dbapi_conn.cursor() as cur:
                cur.execute(f"SET SESSION max_statement_time = {seconds:.3f}")

    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            sqlite_pragmas(dbapi_conn)

    return engine


def sqlite_pragmas(dbapi_conn: Any) -> None:
    """What every SQLite connection runs with (also set back after a seed, orders/data/seed.py)."""
    cur = dbapi_conn.cursor()
    # WAL lets the scroll read while a writer inserts.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


# --- Pinging a pooled connection before use, except where a dead one is retried ----------------
#
# A pooled connection may be dead (the server restarted, a proxy dropped it): a ping on checkout
# (SQLAlchemy's pool_pre_ping) finds out and reconnects, at one round trip per checkout. The list
# reads (a page, a fragment, the new-orders count) skip it: they run again on a fresh connection
# when their first statement finds the connection dead (orders/web/read_routing.py), which is the
# rare case; every other checkout (writes, one order, the export's batches) is pinged as before.
_UNPINGED: contextvars.ContextVar[bool] = contextvars.ContextVar("unpinged_checkout", default=False)
# Marks an unpinged connection whose first statement has not answered yet: what a ping would
# have tested. Only a disconnect there is a stale pooled connection, retried.
_UNPROVEN = "unproven"


def _ping_on_checkout(engine: Engine) -> None:
    """pool_pre_ping as a checkout listener, skipped while `_UNPINGED` is set: SQLAlchemy's own
    ping is a pool-wide setting; this one can be left out per request. A dead connection raises
    InvalidatePoolError, on which the pool drops it and every connection older than it (the
    server restarted) and connects afresh, as pre-ping does. A connection checked out unpinged
    is marked until its first statement answers; a disconnect before that sets
    `g.stale_checkout`, which orders/web/read_routing.py reads."""
    dialect = engine.dialect

    @event.listens_for(engine, "connect")
    def _fresh(_dbapi_conn: Any, record: Any) -> None:
        record.info["fresh"] = True  # just connected: no ping needed (as pre-ping skips it)

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        if record.info.pop("fresh", False):
            return
        if _UNPINGED.get():
            record.info[_UNPROVEN] = True  # until its first statement answers (_proven)
            return
        try:
            dialect.do_ping(dbapi_conn)
        except dialect.loaded_dbapi.Error as err:
            if dialect.is_disconnect(err, dbapi_conn, None):
                raise InvalidatePoolError(str(err).splitlines()[0][:200]) from err
            raise

    @event.listens_for(engine, "after_cursor_execute")
    def _proven(conn: Any, *_args: Any) -> None:
        conn.info.pop(_UNPROVEN, None)

    @event.listens_for(engine, "handle_error")
    def _stale(context: Any) -> None:
        # Read before SQLAlchemy invalidates the connection (which clears its info).
        conn = context.connection
        if context.is_disconnect and conn is not None and conn.info.get(_UNPROVEN):
            g.stale_checkout = True


@contextmanager
def unpinged_checkouts() -> Iterator[None]:
    """Within it, this thread's checkouts skip the ping (see _ping_on_checkout): a list read,
    which runs again itself when its first statement finds the connection dead."""
    token = _UNPINGED.set(True)
    try:
        yield
    finally:
        _UNPINGED.reset(token)


def open_read_session() -> None:
    """The request's session for a list read: on PostgreSQL at READ COMMITTED, in autocommit.

    At READ COMMITTED every statement takes its own snapshot, inside a transaction or not, so a
    read-only request sees the same rows either way; without the transaction it saves the BEGIN
    and ROLLBACK round trips (a fragment is then one round trip: its one SELECT). Other
    isolation levels, and the other engines, keep their transaction."""
    if "db_session" in g:
        return
    dialect = current_app.extensions["engine"].dialect
    # The server's default, known once the engine has connected (before: a transaction, as ever).
    if dialect.name == "postgresql" and getattr(dialect, "default_isolation_level", None) == "READ COMMITTED":
        g.db_session = current_app.extensions["read_sessionmaker"]()


# --- A demoted primary: writes refused with 25006 ----------------------------------------------
#
# A pooled connection to a node that was the primary and is now a standby (a switchover, with a
# proxy or a DNS name that still pointed at it when the pool reconnected) passes every ping and
# fails every write with SQLSTATE 25006 (read_only_sql_transaction), for as long as it stays
# pooled: pools have been seen stuck so for days. A write refused so is a lost primary: the
# connection and every pooled one older than it are dropped (a disconnect for SQLAlchemy), and
# the next checkout connects afresh, to the writable node (DATABASE_URL's libpq multi-host
# `target_session_attrs=read-write`, or whatever the proxy points at now). A refused write changed
# nothing (its transaction was on the read-only node), so it runs once more at once
# (orders/web/write_retry.py); if that is refused too, the answer is 503 with Retry-After.
READ_ONLY_TRANSACTION = "25006"


def _read_only_is_lost_primary(engine: Engine) -> None:
    @event.listens_for(engine, "handle_error")
    def _demoted(context: Any) -> None:
        if getattr(context.original_exception, "sqlstate", None) == READ_ONLY_TRANSACTION:
            context.is_disconnect = True  # SQLAlchemy then invalidates the connection and the pool


def health_engine(url: str, timeout_ms: int) -> Engine:
    """/healthz's own engine: a fresh connection per check (NullPool: nothing to leak or to go
    stale) bounded by the health check's timeout, not a request's: a load balancer learns
    about a hung database within that bound. libpq's connect_timeout is whole seconds, 2 s at
    least."""
    from sqlalchemy.pool import NullPool

    engine = make_engine(
        url,
        pre_ping=False,
        connect_timeout_s=max(2, -(-timeout_ms // 1000)),
        read_timeout_ms=timeout_ms,
        statement_timeout_ms=timeout_ms // 2,
        poolclass=NullPool,
    )
    return engine


def migrate(engine: Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Bring the schema to `revision` with Alembic (idempotent). Returns the revision before and
    after (None before: a new, empty database), for a message that says what happened
    (`describe_migration`)."""
    # Imported here: Alembic is a tenth of a second of start-up that only init-db and the
    # first run need, not every export or worker.
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        before = MigrationContext.configure(connection).get_current_revision()
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        after = MigrationContext.configure(connection).get_current_revision()
    return before, after


def describe_migration(before: str | None, after: str | None) -> str:
    """What `migrate` did, in words: created, upgraded, or nothing to do."""
    if before is None:
        return f"created the database (migrations up to {after})"
    if before != after:
        return f"upgraded the database from migration {before} to {after}"
    return f"the database is already at the newest migration ({after}); nothing to do"


def client_bounds(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The client's own waits from the settings, for every engine the app opens (the primary,
    each replica, the CLI's): none of them may wait on a hung server without limit."""
    return {
        "connect_timeout_s": cfg["DATABASE_CONNECT_TIMEOUT_S"],
        "read_timeout_ms": cfg["DATABASE_READ_TIMEOUT_MS"],
        "pool_timeout_s": cfg["DATABASE_POOL_TIMEOUT_S"],
    }


def init_app(app: Flask) -> None:
    cfg = app.config
    engine = make_engine(
        cfg["DATABASE_URL"],
        statement_timeout_ms=cfg.get("STATEMENT_TIMEOUT_MS"),
        # Pinged on checkout all the same, except in list reads (_ping_on_checkout).
        pre_ping=False,
        **client_bounds(cfg),
    )
    _ping_on_checkout(engine)
    if engine.dialect.name == "postgresql":
        _read_only_is_lost_primary(engine)
    app.extensions["engine"] = engine
    app.extensions["health_engine"] = health_engine(cfg["DATABASE_URL"], cfg["HEALTHZ_TIMEOUT_MS"])
    app.extensions["sessionmaker"] = sessionmaker(engine, expire_on_commit=False)
    # The same pool; its connections in autocommit while a list read holds them (_open_read_session).
    app.extensions["read_sessionmaker"] = sessionmaker(
        engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False
    )
    app.teardown_appcontext(close_session)


def get_session() -> Session:
    """The request's session, opened on first use."""
    if "db_session" not in g:
        g.db_session = current_app.extensions["sessionmaker"]()
    session: Session = g.db_session
    return session


def close_session(_exc: BaseException | None = None) -> None:
    session = g.pop("db_session", None)
    if session is not None:
        try:
            session.close()
        except DBAPIError:
            # The connection died after the answer was made (its node crashed or was demoted
            # in a failover): the ROLLBACK of close() cannot reach it. Drop the connection; a
            # teardown error would turn the answer into the server's bare 500.
            session.invalidate()
