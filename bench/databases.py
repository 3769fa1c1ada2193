"""Throwaway benchmark databases: create (uniquely named ``bench_*``), migrate, seed, ANALYZE, drop.

The schema comes from ``orders.data.db.migrate`` (Alembic, the one source of truth) and the rows
from ``orders.data.seed.seed_orders``, so the benchmark measures exactly what the app runs.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.orm import Session

from devtools.databases import create_database, drop_database
from orders.data.db import make_engine, migrate
from orders.data.models import Order
from orders.data.seed import CUSTOMERS, seed_orders

from .common import log, stopwatch

SERVER_URLS = {
    "postgresql": os.environ.get(
        "BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    ),
    "mysql": os.environ.get("BENCH_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/mysql"),
}
# A fixed "now" makes every run seed the same timestamps (and the same cursors).
SEED_NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
RUN_ID = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"


def server_available(kind: str) -> str | None:
    """None when the server answers, else the reason it does not (the engine is then skipped)."""
    if kind == "sqlite":
        return None
    engine = create_engine(SERVER_URLS[kind], connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return None
    except Exception as err:  # any driver error means "not available", reported in the results
        return str(err).splitlines()[0]
    finally:
        engine.dispose()


@contextmanager
def throwaway(kind: str, label: str, tmp_dir: Path) -> Iterator[str]:
    """Yield the URL of a new empty database; drop it afterwards, also when the run fails."""
    name = f"bench_{label}_{RUN_ID}".replace("-", "_").lower()
    if kind == "sqlite":
        path = tmp_dir / f"{name}.db"
        try:
            yield f"sqlite:///{path}"
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    url = create_database(SERVER_URLS[kind], name)
    try:
        yield url
    finally:
        drop_database(SERVER_URLS[kind], name)
        log(f"  dropped {kind} database {name}")


def seeded(
    engines: str, label: str, rows: int, tmp_dir: Path, *, shop_names: bool = False
) -> Iterator[tuple[str, str]]:
    """(engine kind, URL) of a throwaway database seeded with `rows` orders, for each engine of
    `engines` (comma-separated) in turn, dropped when the next one comes; an engine not running
    is skipped and said so. `shop_names`: see seed()."""
    for kind in engines.split(","):
        reason = server_available(kind)
        if reason:
            log(f"!! SKIPPING {kind}: {reason}")
            continue
        with throwaway(kind, f"{label}_{kind}", tmp_dir) as url:
            log(f"== seeding {kind}: {rows:,} orders")
            info = seed(url, rows, shop_names=shop_names)
            log(f"   {info['seed_seconds']:.1f} s")
            yield kind, url


def seed(url: str, rows: int, *, shop_names: bool = False) -> dict[str, Any]:
    """Migrate, seed `rows` orders (timed alone) and ANALYZE; return the timings. The 25 demo
    names the levels count on (search_level: "fre" is one customer in 25), or with `shop_names`
    a shop's as `flask seed` draws them (orders/data/people.py)."""
    engine = make_engine(url)
    try:
        migrate(engine)
        with Session(engine) as session, stopwatch() as seeding:
            seed_orders(session, rows, now=SEED_NOW, customers=None if shop_names else CUSTOMERS)
        with stopwatch() as analyzing:
            analyze(engine)
        with Session(engine) as session:
            count = session.scalar(select(func.count()).select_from(Order))
        if count != rows:
            raise RuntimeError(f"seeded {count} rows, expected {rows}")
        return {
            "rows": rows,
            "seed_seconds": seeding["seconds"],
            "analyze_seconds": analyzing["seconds"],
            "rows_per_second": rows / seeding["seconds"],
        }
    finally:
        engine.dispose()


def analyze(engine: Engine) -> None:
    """Fresh planner statistics, as a table that has been live for a while would have.

    PostgreSQL gets VACUUM (ANALYZE): besides statistics it sets the visibility map and hint
    bits, and it pre-empts the insert-triggered autovacuum that would otherwise start in the
    middle of the measurements. SQLite is left as the app leaves it (no sqlite_stat1).
    """
    kind = engine.dialect.name
    if kind == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM (ANALYZE) orders"))
    elif kind in ("mysql", "mariadb"):
        with engine.connect() as conn:
            conn.execute(text("ANALYZE TABLE orders")).fetchall()


def server_info(url: str) -> dict[str, Any]:
    """Engine version and the settings that decide whether a table fits in memory."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            kind = engine.dialect.name
            if kind == "sqlite":
                return {"version": sqlite3.sqlite_version}
            if kind == "postgresql":
                settings = {
                    name: conn.execute(text(f"SHOW {name}")).scalar()
                    for name in ("shared_buffers", "work_mem", "effective_cache_size", "jit")
                }
                return {"version": conn.execute(text("SHOW server_version")).scalar(), **settings}
            row = conn.execute(text("SELECT VERSION(), @@innodb_buffer_pool_size, @@query_cache_type")).one()
            return {"version": row[0], "innodb_buffer_pool_size": int(row[1]), "query_cache_type": row[2]}
    finally:
        engine.dispose()
