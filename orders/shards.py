"""Shards on PostgreSQL's own engine: the coordinator's partitioned `orders`, one postgres_fdw
foreign partition per shard server (DATABASE_SHARD_URLS), rows placed by a hash of the id.

`flask init-db` calls `init_shards`: every shard is migrated like any database (the migrations
stay the one source of truth: each shard gets the table and its indexes), then the coordinator
(DATABASE_URL, which holds no rows) gets

- the postgres_fdw extension, one foreign server per shard (with `fetch_size`, `batch_size` and a
  `connect_timeout`) and a user mapping for the current user;
- the partitioned parent `orders ... PARTITION BY HASH (id)`, its columns copied from a migrated
  shard (IMPORT FOREIGN SCHEMA, then CREATE TABLE ... LIKE), so nothing restates the schema;
- one foreign partition per shard, `FOR VALUES WITH (MODULUS n, REMAINDER i)`;
- the id sequence `orders_id_seq`, owned by the coordinator (never by the parent, which is
  rebuilt when the layout changes): ids stay globally unique and increasing in time.

A comment on the parent records the layout it was built for (migration, shards, fetch_size); a
second run with the same layout changes nothing. The parent holds no rows, so rebuilding it for a
new layout loses nothing, but a different number of shards would place ids elsewhere: refused
while any shard holds orders (resharding is not supported).

Why the app needs nothing else: reads through the parent are a Merge Append of one Foreign Scan
per shard, each shard's ORDER BY and seek predicate shipped to it (the sort registry builds
bounded seeks when shards are configured, orders/sorts.py); INSERT is routed by the hash of the
id the coordinator's sequence gave; DELETE ... WHERE id = :id is pruned to one shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import make_url

from .db import make_engine, migrate

PARENT = "orders"
SEQUENCE = "orders_id_seq"
TEMPLATE_SCHEMA = "orders_shard_template"
SERVER_PREFIX = "orders_shard_"
# Rows a batched INSERT through a foreign partition sends per round trip (seeding, bulk loads).
BATCH_SIZE = 1000
CONNECT_TIMEOUT_SECONDS = 5


class ShardSetupError(RuntimeError):
    """A layout init-db cannot build (said in one line by the CLI)."""


def fetch_size_for(page_size: int) -> int:
    """Rows each shard sends per fetch: a whole cursor page of the HTML list (page_size + 2: the
    page, the row that says another page follows, the boundary row), so the first fetch from a
    shard always covers what a page can take from it, and a page pulls at most that much more
    than it shows from each shard (LIMIT is not pushed through the partitioned parent)."""
    return page_size + 2


@dataclass(frozen=True)
class ShardServer:
    host: str
    port: int
    dbname: str
    user: str
    password: str | None

    @classmethod
    def from_url(cls, url: str) -> ShardServer:
        parsed = make_url(url)
        if parsed.get_backend_name() != "postgresql":
            raise ShardSetupError(f"DATABASE_SHARD_URLS: {parsed.render_as_string()} is not PostgreSQL")
        return cls(
            parsed.host or "localhost",
            parsed.port or 5432,
            parsed.database or "postgres",
            parsed.username or "postgres",
            parsed.password,
        )

    @property
    def shown(self) -> str:
        return f"{self.host}:{self.port}/{self.dbname}"


def layout_comment(revision: str, servers: Sequence[ShardServer], fetch_size: int) -> str:
    return (
        f"sharded orders: migration {revision}; fetch_size {fetch_size}; enable_sort off; "
        f"shards {', '.join(s.shown for s in servers)}"
    )


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _head_revision(engine: Engine) -> str:
    with engine.connect() as conn:
        revision = conn.scalar(text("SELECT version_num FROM alembic_version"))
    return str(revision)


def _shard_rows(conn: Connection) -> bool:
    return conn.scalar(text(f"SELECT EXISTS (SELECT 1 FROM {PARENT})")) is True


def _current_layout(conn: Connection) -> tuple[bool, str | None, bool]:
    """(whether `orders` exists, its layout comment or None, whether it is partitioned)."""
    row = conn.execute(
        text(
            "SELECT obj_description(c.oid, 'pg_class'), c.relkind = 'p' FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = :name AND n.nspname = current_schema()"
        ),
        {"name": PARENT},
    ).first()
    return (True, row[0], bool(row[1])) if row else (False, None, False)


def init_shards(coordinator_url: str, shard_urls: Sequence[str], *, page_size: int) -> str:
    """Migrate every shard, then build (or keep) the coordinator's partitioned parent and foreign
    partitions; return one line saying what was done."""
    servers = [ShardServer.from_url(url) for url in shard_urls]
    revisions = set()
    for url in shard_urls:
        engine = make_engine(url)
        try:
            migrate(engine)
            revisions.add(_head_revision(engine))
        finally:
            engine.dispose()
    if len(revisions) != 1:
        raise ShardSetupError(f"the shards are at different migrations: {sorted(revisions)}")
    revision = revisions.pop()
    fetch_size = fetch_size_for(page_size)
    wanted = layout_comment(revision, servers, fetch_size)
    engine = make_engine(coordinator_url)
    try:
        with engine.begin() as conn:
            exists, comment, partitioned = _current_layout(conn)
            if comment == wanted:
                return f"coordinator and {len(servers)} shards are at migration {revision} (nothing to do)"
            if exists and not partitioned:
                raise ShardSetupError(
                    f"{PARENT} exists on the coordinator and is not a sharded parent: "
                    "give an empty database as DATABASE_URL when DATABASE_SHARD_URLS is set"
                )
            _build(conn, servers, revision, fetch_size, wanted, rebuild=exists)
    finally:
        engine.dispose()
    return (
        f"coordinator with {len(servers)} foreign partitions at migration {revision} "
        f"(fetch_size {fetch_size})"
    )


def _build(
    conn: Connection,
    servers: Sequence[ShardServer],
    revision: str,
    fetch_size: int,
    comment: str,
    *,
    rebuild: bool,
) -> None:
    """One transaction on the coordinator (PostgreSQL's DDL is transactional: a failure leaves
    the previous layout as it was)."""
    run = conn.exec_driver_sql
    if rebuild:
        old = conn.scalar(
            text(
                "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhparent "
                "WHERE c.relname = :name"
            ),
            {"name": PARENT},
        )
        if old != len(servers) and _shard_rows(conn):
            raise ShardSetupError(
                f"the coordinator has {old} shards and DATABASE_SHARD_URLS lists {len(servers)}, "
                "and the shards hold orders: resharding (moving rows to new hash partitions) is not supported"
            )
        run(f"DROP TABLE {PARENT}")
    run("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
    run(f"CREATE SEQUENCE IF NOT EXISTS {SEQUENCE} AS bigint")
    for i, server in enumerate(servers):
        name = f"{SERVER_PREFIX}{i + 1}"
        options = {
            "host": server.host,
            "port": str(server.port),
            "dbname": server.dbname,
            "fetch_size": str(fetch_size),
            "batch_size": str(BATCH_SIZE),
            "connect_timeout": str(CONNECT_TIMEOUT_SECONDS),
        }
        run(f"DROP SERVER IF EXISTS {name} CASCADE")
        listed = ", ".join(f"{key} {_literal(value)}" for key, value in options.items())
        run(f"CREATE SERVER {name} FOREIGN DATA WRAPPER postgres_fdw OPTIONS ({listed})")
        user = {"user": server.user, **({"password": server.password} if server.password else {})}
        listed = ", ".join(f"{key} {_literal(value)}" for key, value in user.items())
        run(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {name} OPTIONS ({listed})")
    # The parent's columns are the migrated shard's: imported, then copied by LIKE.
    run(f"DROP SCHEMA IF EXISTS {TEMPLATE_SCHEMA} CASCADE")
    run(f"CREATE SCHEMA {TEMPLATE_SCHEMA}")
    first = f"{SERVER_PREFIX}1"
    run(f"IMPORT FOREIGN SCHEMA public LIMIT TO ({PARENT}) FROM SERVER {first} INTO {TEMPLATE_SCHEMA}")
    run(f"CREATE TABLE {PARENT} (LIKE {TEMPLATE_SCHEMA}.{PARENT}) PARTITION BY HASH (id)")
    run(f"DROP SCHEMA {TEMPLATE_SCHEMA} CASCADE")
    run(f"ALTER TABLE {PARENT} ALTER COLUMN id SET DEFAULT nextval('{SEQUENCE}')")
    for i in range(len(servers)):
        name = f"{SERVER_PREFIX}{i + 1}"
        run(
            f"CREATE FOREIGN TABLE {PARENT}_shard_{i + 1} PARTITION OF {PARENT} "
            f"FOR VALUES WITH (MODULUS {len(servers)}, REMAINDER {i}) "
            f"SERVER {name} OPTIONS (schema_name 'public', table_name {_literal(PARENT)})"
        )
    # Never hand out an id a shard already holds (a coordinator rebuilt over existing shards).
    run(
        f"SELECT setval('{SEQUENCE}', max(id)) FROM {PARENT} "
        f"HAVING max(id) > (SELECT last_value FROM {SEQUENCE})"
    )
    # The coordinator holds no rows: a sort there means pulling a whole range from every shard
    # to keep 20 rows. Its planner guesses foreign tables' sizes (autovacuum never analyzes
    # them), and when the guess is below a page's LIMIT it prefers that sort to the Merge
    # Append of shards that each ship ORDER BY (seen with one shard, or a rare status): sorts
    # are disabled here, for every session on this database (a sort with no alternative runs).
    database = conn.scalar(text("SELECT current_database()"))
    run(f'ALTER DATABASE "{database}" SET enable_sort = off')
    run(f"COMMENT ON TABLE {PARENT} IS {_literal(comment)}")
    # The coordinator records the shards' migration too, so tools asking it see where it stands.
    run("CREATE TABLE IF NOT EXISTS alembic_version (version_num varchar(32) NOT NULL PRIMARY KEY)")
    run("DELETE FROM alembic_version")
    conn.execute(text("INSERT INTO alembic_version VALUES (:r)"), {"r": revision})
