"""The rail's counts folded: each bucket's stripes gathered into one row, so that a rail reads
about one row per bucket and status rather than up to STRIPES.

Writers count an order in its bucket's stripe `id % STRIPES` (migration 0008): concurrent writers
of one bucket (every new order falls in today's day) take different rows. A rail sums every
stripe of its family, so it read up to 16 rows per bucket and status: 44,000 for the date rails
at 3 million orders, 14,000 for the amount rail at 300,000 (16-19 and 15 ms on PostgreSQL and
MariaDB, over the rail's 5 ms goal; 3.3 and 4.9 ms folded: docs/finding.md). The fold moves
the stripes' counts into stripe FOLDED, which no writer writes (`id % STRIPES` is below it),
and deletes them; the rail reads the folded row plus the stripes written since the last fold.

It never waits for a writer: the stripes it takes are those no open transaction holds (FOR
UPDATE SKIP LOCKED; a stripe an uncommitted order holds is left for the next fold). A writer
that comes for a stripe the fold holds waits until the fold commits (milliseconds), then finds
it gone and writes a fresh one. Folds wait only for each other, on the folded rows, bounded by
LOCK_WAIT_S. Each family is one transaction; the sum of a bucket's rows never changes in it, so
a rail read at any moment sees the same counts before, during and after.

Run by the seed (before its commit) and by `flask fold-rail` (docs/operations.md: every few
minutes from cron; between folds a rail reads at most the stripes written since).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, delete, select, text, tuple_

from orders.data.models import RAIL_COUNTS, STRIPES, add_counts, keeps_rail

FOLDED = STRIPES  # the stripe a fold keeps a bucket's count in: no writer's (id % STRIPES)
FAMILIES = ("amount", "day", "initial")  # migration 0008's FAMILIES, the writers' order
LOCK_WAIT_S = 2  # a fold waits at most this for another fold's row
_CHUNK = 500  # keys per DELETE: well under every engine's bound on parameters


def fold_family(connection: Connection, family: str) -> int:
    """Folds `family`'s stripes that no open transaction holds, in the connection's transaction;
    returns how many stripe rows it folded."""
    c = RAIL_COUNTS.c
    taken = connection.execute(
        select(c.status, c.bucket, c.stripe, c.n)
        .where(c.family == family, c.stripe < FOLDED)
        .order_by(c.status, c.bucket, c.stripe)
        .with_for_update(skip_locked=True)
    ).all()
    if not taken:
        return 0
    sums: dict[tuple[str, str], int] = defaultdict(int)
    for status, bucket, _stripe, n in taken:
        sums[(status, bucket)] += n
    keys = [(status, bucket, stripe) for status, bucket, stripe, _n in taken]
    for low in range(0, len(keys), _CHUNK):
        connection.execute(
            delete(RAIL_COUNTS).where(
                c.family == family, tuple_(c.status, c.bucket, c.stripe).in_(keys[low : low + _CHUNK])
            )
        )
    rows = [
        {"family": family, "status": status, "bucket": bucket, "stripe": FOLDED, "n": n}
        for (status, bucket), n in sorted(sums.items())
        if n  # adding nothing changes nothing
    ]
    if rows:
        add_counts(connection, RAIL_COUNTS, rows)
    return len(taken)


def fold(engine: Engine) -> dict[str, int]:
    """Every family folded, one transaction each, then the table vacuumed; the stripe rows
    folded per family. A database without rail_counts (a coordinator of shards: each shard
    keeps its own) folds nothing."""
    folded: dict[str, int] = {}
    for family in FAMILIES:
        with _bounded(engine) as connection:
            if not keeps_rail(connection):
                return {}
            folded[family] = fold_family(connection, family)
    if any(folded.values()):
        vacuum(engine)
    return folded


def vacuum(engine: Engine) -> None:
    """PostgreSQL: the rows a fold deleted taken out of rail_counts now, not when autovacuum
    comes (a rail reads the whole small table, dead rows too: at 3 million orders the date rails
    took 5.7 ms just after a fold of 44,000 stripes, 3.3 ms vacuumed). SKIP_LOCKED: not at all when
    another vacuum holds the table. InnoDB purges by itself; SQLite's pages are reused."""
    if engine.dialect.name != "postgresql":
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text(f"VACUUM (SKIP_LOCKED) {RAIL_COUNTS.name}"))


@contextmanager
def _bounded(engine: Engine) -> Iterator[Connection]:
    """A transaction whose lock waits end after LOCK_WAIT_S. On MariaDB in READ COMMITTED: its
    locking read takes the rows it reads and no gaps between them, so no writer's new bucket
    row waits for a fold."""
    dialect = engine.dialect.name
    mariadb = dialect in ("mysql", "mariadb")
    options = {"isolation_level": "READ COMMITTED"} if mariadb else {}
    with engine.connect().execution_options(**options) as connection:
        try:
            with connection.begin():
                if mariadb:
                    connection.execute(text(f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_S}"))
                elif dialect == "postgresql":
                    connection.execute(text(f"SET LOCAL lock_timeout = '{LOCK_WAIT_S}s'"))
                yield connection
        finally:
            if mariadb and not connection.invalidated:  # the pooled connection as it was
                connection.rollback()
                connection.execute(text("SET SESSION innodb_lock_wait_timeout = DEFAULT"))
                connection.commit()
