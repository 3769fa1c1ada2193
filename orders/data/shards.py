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
new layout loses nothing (the partitions keep their bounds), but a different number of shards
would place ids elsewhere: refused while any shard holds orders. `add_shard` grows the layout
instead, one shard at a time, while the list keeps serving (below).

Why the app needs nothing else: reads through the parent are a Merge Append of one Foreign Scan
per shard, each shard's ORDER BY and seek predicate shipped to it (pages use the bounded seek
when shards are configured: orders/finding/request.py ListRequest.seek); INSERT is routed by the hash
of the id the coordinator's sequence gave; DELETE ... WHERE id = :id is pruned to one shard.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from orders.data.db import make_engine, migrate

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


# libpq options a shard URL may carry in its query string besides `host` (one per node), passed
# to the foreign server as they are: how libpq picks the node to use. postgres_fdw refuses
# user/password there (they go in the user mapping) and client_encoding (it sets its own).
LIBPQ_OPTIONS = ("target_session_attrs", "load_balance_hosts", "sslmode", "application_name")


@dataclass(frozen=True)
class ShardServer:
    """One shard: a server, or a highly available cluster reached by a libpq multi-host
    connection (`?host=h1:p1&host=h2:p2&target_session_attrs=read-write`, as DATABASE_URL takes
    it), which postgres_fdw passes to libpq: each new connection tries the nodes in order and
    keeps the first that accepts writes, so after a failover the next transaction reaches the
    promoted node (docs/shards.md)."""

    hosts: tuple[str, ...]
    ports: tuple[int, ...]
    dbname: str
    user: str
    password: str | None
    libpq: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_url(cls, url: str) -> ShardServer:
        parsed = make_url(url)
        if parsed.get_backend_name() != "postgresql":
            raise ShardSetupError(f"DATABASE_SHARD_URLS: {parsed.render_as_string()} is not PostgreSQL")
        query = dict(parsed.query)
        listed = query.pop("host", ())
        nodes = [listed] if isinstance(listed, str) else list(listed)
        hosts, ports = [], []
        for node in nodes or [f"{parsed.host or 'localhost'}:{parsed.port or 5432}"]:
            host, _, port = node.rpartition(":") if ":" in node else (node, "", "")
            if port and not port.isdigit():
                raise ShardSetupError(f"DATABASE_SHARD_URLS: {node!r} is not host:port")
            hosts.append(host)
            ports.append(int(port or parsed.port or 5432))
        unknown = sorted(set(query) - set(LIBPQ_OPTIONS))
        if unknown:
            raise ShardSetupError(
                f"DATABASE_SHARD_URLS: {', '.join(unknown)} not passed to a shard "
                f"(host and {', '.join(LIBPQ_OPTIONS)} are)"
            )
        libpq = tuple(sorted((key, str(value)) for key, value in query.items()))
        return cls(
            tuple(hosts),
            tuple(ports),
            parsed.database or "postgres",
            parsed.username or "postgres",
            parsed.password,
            libpq,
        )

    @property
    def shown(self) -> str:
        nodes = ",".join(f"{h}:{p}" for h, p in zip(self.hosts, self.ports, strict=True))
        extra = "&".join(f"{k}={v}" for k, v in self.libpq)
        return f"{nodes}/{self.dbname}" + (f"?{extra}" if extra else "")

    def options(self) -> dict[str, str]:
        """The foreign server's connection options: libpq's comma-separated host and port lists."""
        return {
            "host": ",".join(self.hosts),
            "port": ",".join(map(str, self.ports)),
            "dbname": self.dbname,
            **dict(self.libpq),
        }


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
    bounds = [(len(servers), i) for i in range(len(servers))]
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
        if old == len(servers):
            # Keep where rows are: after add-shard the moduli differ (a split partition).
            bounds = [(p.modulus, p.remainder) for p in _partitions(conn)]
        run(f"DROP TABLE {PARENT}")
    run("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
    run(f"CREATE SEQUENCE IF NOT EXISTS {SEQUENCE} AS bigint")
    for i, server in enumerate(servers):
        _server(conn, i + 1, server, fetch_size)
    # The parent's columns are the migrated shard's: imported, then copied by LIKE.
    run(f"DROP SCHEMA IF EXISTS {TEMPLATE_SCHEMA} CASCADE")
    run(f"CREATE SCHEMA {TEMPLATE_SCHEMA}")
    first = f"{SERVER_PREFIX}1"
    run(f"IMPORT FOREIGN SCHEMA public LIMIT TO ({PARENT}) FROM SERVER {first} INTO {TEMPLATE_SCHEMA}")
    run(f"CREATE TABLE {PARENT} (LIKE {TEMPLATE_SCHEMA}.{PARENT}) PARTITION BY HASH (id)")
    run(f"DROP SCHEMA {TEMPLATE_SCHEMA} CASCADE")
    run(f"ALTER TABLE {PARENT} ALTER COLUMN id SET DEFAULT nextval('{SEQUENCE}')")
    for i, (modulus, remainder) in enumerate(bounds):
        _partition(conn, i + 1, modulus, remainder)
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


def _server(conn: Connection, number: int, server: ShardServer, fetch_size: int) -> None:
    """Foreign server `orders_shard_<number>` for `server`, and the current user's mapping."""
    run = conn.exec_driver_sql
    name = f"{SERVER_PREFIX}{number}"
    options = {
        **server.options(),
        "fetch_size": str(fetch_size),
        "batch_size": str(BATCH_SIZE),
        "connect_timeout": str(CONNECT_TIMEOUT_SECONDS),
    }
    run(f"DROP SERVER IF EXISTS {name} CASCADE")
    listed = ", ".join(f"{key} {_literal(value)}" for key, value in options.items())
    try:
        run(f"CREATE SERVER {name} FOREIGN DATA WRAPPER postgres_fdw OPTIONS ({listed})")
    except DBAPIError as err:  # an option this PostgreSQL's libpq lacks (load_balance_hosts < 16)
        why = str(err.orig).splitlines()[0]
        raise ShardSetupError(f"DATABASE_SHARD_URLS: shard {number} ({server.shown}): {why}") from None
    user = {"user": server.user, **({"password": server.password} if server.password else {})}
    listed = ", ".join(f"{key} {_literal(value)}" for key, value in user.items())
    run(f"CREATE USER MAPPING FOR CURRENT_USER SERVER {name} OPTIONS ({listed})")


def _partition(conn: Connection, number: int, modulus: int, remainder: int) -> None:
    """Foreign partition `orders_shard_<number>` on its server's `orders`: the ids whose hash
    leaves `remainder` under `modulus`."""
    conn.exec_driver_sql(
        f"CREATE FOREIGN TABLE {PARENT}_shard_{number} PARTITION OF {PARENT} "
        f"FOR VALUES WITH (MODULUS {modulus}, REMAINDER {remainder}) "
        f"SERVER {SERVER_PREFIX}{number} OPTIONS (schema_name 'public', table_name {_literal(PARENT)})"
    )


@dataclass(frozen=True)
class Partition:
    number: int  # orders_shard_<number>, on foreign server orders_shard_<number>
    modulus: int
    remainder: int


_BOUND = re.compile(r"modulus (\d+), remainder (\d+)")


def _partitions(conn: Connection) -> list[Partition]:
    """The coordinator's foreign partitions of `orders`, by shard number."""
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = CAST(:parent AS regclass)"
        ),
        {"parent": PARENT},
    ).all()
    found = []
    for name, bound in rows:
        match = _BOUND.search(str(bound))
        if match is None or not str(name).startswith(f"{PARENT}_shard_"):
            raise ShardSetupError(f"{name} is not a hash partition of a shard: {bound}")
        found.append(Partition(int(str(name).rsplit("_", 1)[1]), int(match[1]), int(match[2])))
    return sorted(found, key=lambda p: p.number)


# --- Growing: add-shard ----------------------------------------------------------------------
#
# Hash partitions of one table may have different moduli when each divides the next larger
# (PostgreSQL's rule), so a partition (MODULUS m, REMAINDER r) splits into (2m, r), which stays,
# and (2m, r + m), which moves: the new shard takes half of the largest shard's rows, the
# others move nothing (docs/shards.md has the numbers). The rows move by logical replication
# (a publication with a row filter on the old shard, a subscription on the new one) while the
# list keeps serving; the switch is one short coordinator transaction.

MOVE = "orders_move"  # the publication, subscription and slot of a move in progress
HASH_PARTITION_SEED = 8816678312871386365  # PostgreSQL's HASH_PARTITION_SEED (partbounds.c)
HASH_COMBINE = 0x49A0F4DD15E5A8E3  # hash_combine64(0, h) adds this (common/hashfn.h)
SWITCH_LOCK_TIMEOUT_MS = 5000  # the switch waits this long for in-flight transactions
COPY_TIMEOUT_S = 600.0  # the initial copy
CATCH_UP_TIMEOUT_S = 10.0  # the last changes, under the switch's lock


def bucket_sql(modulus: int, column: str = "id") -> str:
    """The remainder PostgreSQL's hash partitioning gives a bigint `column` under `modulus`, as
    plain SQL: a publication's row filter allows only built-in immutable functions (no
    satisfies_hash_partition, which needs the parent's oid) and postgres_fdw ships it. The hash
    is hashint8extended with the partitioning seed, combined as hash_combine64(0, h) and taken
    unsigned (numeric arithmetic, since bigint would overflow)."""
    wrap = 2**64
    hashed = f"hashint8extended({column}, {HASH_PARTITION_SEED})::numeric"
    # mod(), not %: the statement goes through DB-API drivers that read % as a placeholder.
    return f"mod(mod({hashed} + {wrap + HASH_COMBINE}, {wrap}), {modulus})"


def _conninfo(server: ShardServer) -> str:
    """A libpq connection string for a subscription to reach `server` (its writable node)."""
    values = {
        **server.options(),
        "user": server.user,
        **({"password": server.password} if server.password else {}),
    }

    def quoted(value: str) -> str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return " ".join(f"{key}={quoted(value)}" for key, value in values.items())


def _autocommit(url: str) -> Engine:
    return make_engine(url).execution_options(isolation_level="AUTOCOMMIT")


def _scalar(engine: Engine, sql: str, params: dict[str, Any] | None = None) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql), params or {}).scalar()


def _wait(what: str, timeout: float, done: Callable[[], bool], every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise ShardSetupError(f"add-shard: {what} within {timeout:g} s; nothing was switched")
        time.sleep(every)


@dataclass(frozen=True)
class AddedShard:
    number: int  # the new shard's place in DATABASE_SHARD_URLS (1-based)
    source: int  # the shard half of whose rows moved
    modulus: int
    remainder: int  # the new shard's bound
    moved: int  # orders moved
    paused_s: float  # how long the switch held the lock: pages and writes waited

    def __str__(self) -> str:
        return (
            f"shard {self.number} added: {self.moved:,} orders moved from shard {self.source} "
            f"(MODULUS {self.modulus}, REMAINDER {self.remainder}); writes paused "
            f"{self.paused_s * 1000:.0f} ms. Append its URL to DATABASE_SHARD_URLS."
        )


def add_shard(coordinator_url: str, shard_urls: Sequence[str], new_url: str, *, page_size: int) -> AddedShard:
    """Split the partition of the largest share in two, copy the moving half to the shard at
    `new_url` by logical replication, then switch the coordinator's partitions in one
    transaction; return what moved and how long writes paused."""
    servers = [ShardServer.from_url(url) for url in shard_urls]
    new = ShardServer.from_url(new_url)
    fetch_size = fetch_size_for(page_size)
    coordinator = make_engine(coordinator_url)
    engines: list[Engine] = [coordinator]
    try:
        revision = _head_revision(coordinator)
        with coordinator.connect() as conn:
            _exists, comment, partitioned = _current_layout(conn)
            partitions = _partitions(conn) if partitioned else []
        if comment != layout_comment(revision, servers, fetch_size) or len(partitions) != len(servers):
            raise ShardSetupError(
                "add-shard: DATABASE_SHARD_URLS is not the coordinator's layout: run init-db with the "
                "current shards first, and add one shard at a time"
            )
        source = min(partitions, key=lambda p: (p.modulus, p.number))
        modulus, stays, moves = 2 * source.modulus, source.remainder, source.remainder + source.modulus
        moving = f"{bucket_sql(modulus)} = {moves}"
        old = _autocommit(shard_urls[source.number - 1])
        target = _autocommit(new_url)
        engines += [old, target]
        migrating = make_engine(new_url)
        try:
            migrate(migrating)
        finally:
            migrating.dispose()
        if _head_revision(target) != revision:
            raise ShardSetupError(f"add-shard: the new shard is not at migration {revision}")
        if _scalar(target, f"SELECT EXISTS (SELECT 1 FROM {PARENT})"):
            raise ShardSetupError("add-shard: the new shard already holds orders")
        if _scalar(old, "SHOW wal_level") != "logical":
            raise ShardSetupError(
                f"add-shard: shard {source.number} needs wal_level = logical (a restart) to publish its rows"
            )
        # The copy: every row of the moving half, then its changes, while the list keeps serving.
        with target.connect() as conn:
            conn.exec_driver_sql(f"DROP SUBSCRIPTION IF EXISTS {MOVE}")
        with old.connect() as conn:
            conn.exec_driver_sql(f"DROP PUBLICATION IF EXISTS {MOVE}")
            conn.exec_driver_sql(f"CREATE PUBLICATION {MOVE} FOR TABLE {PARENT} WHERE ({moving})")
        with target.connect() as conn:
            conn.exec_driver_sql(
                f"CREATE SUBSCRIPTION {MOVE} CONNECTION {_literal(_conninfo(servers[source.number - 1]))} "
                f"PUBLICATION {MOVE} WITH (copy_data = true)"
            )
        try:
            _wait(
                "the new shard did not copy the moving rows",
                COPY_TIMEOUT_S,
                lambda: _scalar(target, "SELECT bool_and(srsubstate = 'r') FROM pg_subscription_rel") is True,
            )
            moved, paused = _switch(coordinator, old, target, servers, new, source, modulus, stays, moves)
        finally:
            with target.connect() as conn:
                conn.exec_driver_sql(f"ALTER SUBSCRIPTION {MOVE} DISABLE")
                conn.exec_driver_sql(f"DROP SUBSCRIPTION {MOVE}")
            with old.connect() as conn:
                conn.exec_driver_sql(f"DROP PUBLICATION IF EXISTS {MOVE}")
                # Not switched (the moving rows are still on the old shard, where the layout
                # reads them): the new shard's copy goes, so that the command can run again.
                if conn.scalar(text(f"SELECT EXISTS (SELECT 1 FROM {PARENT} WHERE {moving})")):
                    conn.exec_driver_sql(f"DELETE FROM {PARENT} WHERE id < 0")  # a fence (_fence)
                    with target.connect() as conn_new:
                        conn_new.exec_driver_sql(f"TRUNCATE {PARENT}")
    finally:
        for engine in engines:
            engine.dispose()
    return AddedShard(len(servers) + 1, source.number, modulus, moves, moved, paused)


def _switch(
    coordinator: Engine,
    old: Engine,
    target: Engine,
    servers: Sequence[ShardServer],
    new: ShardServer,
    source: Partition,
    modulus: int,
    stays: int,
    moves: int,
) -> tuple[int, float]:
    """One coordinator transaction: lock `orders` (pages and writes wait), wait until the new
    shard has every change (_fence), stop publishing deletes, delete the moved rows from the old
    shard (through its foreign partition: committed with the switch), give both their bounds.
    Returns (rows moved, seconds the lock was held)."""
    moving = f"{bucket_sql(modulus)} = {moves}"
    number = len(servers) + 1
    with coordinator.begin() as conn:
        run = conn.exec_driver_sql
        run(f"SET LOCAL lock_timeout = {SWITCH_LOCK_TIMEOUT_MS}")
        run(f"SET LOCAL statement_timeout = {int(CATCH_UP_TIMEOUT_S * 1000) * 3}")
        started = time.monotonic()
        run(f"LOCK TABLE {PARENT} IN ACCESS EXCLUSIVE MODE")
        fence = _fence(old, target, modulus, moves)
        # The DELETE below must not reach the new shard: the publication stops sending deletes
        # (decoding reads the publication as of each change, so this holds from here on).
        with old.connect() as conn_old:
            conn_old.exec_driver_sql(f"ALTER PUBLICATION {MOVE} SET (publish = 'insert, update')")
        deleted = conn.exec_driver_sql(f"DELETE FROM {PARENT}_shard_{source.number} WHERE {moving}").rowcount
        run(f"ALTER TABLE {PARENT} DETACH PARTITION {PARENT}_shard_{source.number}")
        run(f"DROP FOREIGN TABLE {PARENT}_shard_{source.number}")
        _partition(conn, source.number, modulus, stays)
        _server(conn, number, new, int(_server_option(conn, source.number, "fetch_size")))
        _partition(conn, number, modulus, moves)
        if fence is not None:  # the fence row, copied to the new shard: gone with the switch
            run(f"DELETE FROM {PARENT}_shard_{number} WHERE id = {fence}")
        revision = conn.scalar(text("SELECT version_num FROM alembic_version"))
        comment = layout_comment(str(revision), [*servers, new], int(_server_option(conn, 1, "fetch_size")))
        run(f"COMMENT ON TABLE {PARENT} IS {_literal(comment)}")
    moved = deleted - (fence is not None)
    return moved, time.monotonic() - started


def _fence(old: Engine, target: Engine, modulus: int, moves: int) -> int | None:
    """Make sure the new shard has every change the old one committed so far (the caller holds
    the coordinator's lock: no more arrive): commit a fence row on the old shard, in the moving
    half, and wait until the new shard has it. Logical replication applies commits in order, so
    with the fence every earlier change is there too. The fence is a copy of a moving row under a
    negative id (no schema restated here; ids from the sequence are positive); it is deleted
    with the moved rows. None when no row moves (nothing to wait for)."""
    moving = f"{bucket_sql(modulus)} = {moves}"
    with old.connect() as conn:
        # ids -1, -2, ...: the first whose hash lies in the moving half (one in 2m does).
        negative = f"SELECT -g FROM generate_series(1, 1000) g WHERE {bucket_sql(modulus, '-g')} = {moves}"
        free = conn.scalar(text(negative + " LIMIT 1"))
        copy = f"(jsonb_populate_record(o, jsonb_build_object('id', {free}))).*"
        insert = f"INSERT INTO {PARENT} SELECT {copy} FROM {PARENT} o WHERE {moving} LIMIT 1"
        fenced = conn.exec_driver_sql(insert).rowcount
    if not fenced:
        return None
    _wait(
        "the new shard did not catch up",
        CATCH_UP_TIMEOUT_S,
        lambda: _scalar(target, f"SELECT EXISTS (SELECT 1 FROM {PARENT} WHERE id = {free})") is True,
        every=0.005,  # under the lock: every moment counts
    )
    return int(free)


def _server_option(conn: Connection, number: int, option: str) -> str:
    options = conn.scalar(
        text("SELECT srvoptions FROM pg_foreign_server WHERE srvname = :n"), {"n": f"{SERVER_PREFIX}{number}"}
    )
    return str(dict(item.split("=", 1) for item in options or [])[option])
