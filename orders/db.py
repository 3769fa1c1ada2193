"""Database wiring: one engine and sessionmaker per app, one session per request, migrations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Flask, g
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def make_engine(url: str, *, statement_timeout_ms: int | None = None, pre_ping: bool = True) -> Engine:
    """An engine that notices dead connections (pre-ping) and bounds how long a query may run."""
    kwargs: dict[str, Any] = {"pool_pre_ping": pre_ping}
    connect_args: dict[str, Any] = {}
    if url.startswith("postgresql"):
        connect_args["connect_timeout"] = 5
        # UTC sessions: timestamps come back already in UTC, no per-value conversion.
        options = "-c timezone=UTC"
        if statement_timeout_ms:
            options += f" -c statement_timeout={int(statement_timeout_ms)}"
        connect_args["options"] = options
    elif url.startswith(("mysql", "mariadb")):
        connect_args.update(connect_timeout=5, charset="utf8mb4")
    elif url.startswith("sqlite"):
        # Flask serves requests on several threads; each checks out its own connection.
        connect_args["check_same_thread"] = False
        connect_args["timeout"] = 15
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    if url.startswith(("mysql", "mariadb")) and statement_timeout_ms:
        seconds = statement_timeout_ms / 1000

        @event.listens_for(engine, "connect")
        def _set_timeout(dbapi_conn: Any, _record: Any) -> None:
            with dbapi_conn.cursor() as cur:
                cur.execute(f"SET SESSION max_statement_time = {seconds:.3f}")

    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            # WAL lets the scroll read while a writer inserts.
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

    return engine


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision` with Alembic (idempotent)."""
    # Imported here: Alembic is a tenth of a second of start-up that only init-db and the
    # first run need, not every export or worker.
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def init_app(app: Flask) -> None:
    engine = make_engine(
        app.config["DATABASE_URL"], statement_timeout_ms=app.config.get("STATEMENT_TIMEOUT_MS")
    )
    app.extensions["engine"] = engine
    app.extensions["sessionmaker"] = sessionmaker(engine, expire_on_commit=False)
    app.teardown_appcontext(close_session)


def get_session() -> Session:
    """The request's session, opened on first use."""
    if "db_session" not in g:
        from flask import current_app

        g.db_session = current_app.extensions["sessionmaker"]()
    session: Session = g.db_session
    return session


def close_session(_exc: BaseException | None = None) -> None:
    session = g.pop("db_session", None)
    if session is not None:
        session.close()
