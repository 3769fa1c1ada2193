"""rail_counts: orders per (family, status, bucket, stripe), kept by triggers on `orders` in the
writing transaction, for the scrubber rail of every sort (orders/finding/rail.py, docs/finding.md).

Striped as order_counts is (an order counts in stripe id % STRIPES): every new order falls in
today's day bucket, so one row per bucket would make every writer of a status wait for the one
before it to commit (and for as long as a commit waits for a synchronous standby). A rail reads
the family's rows summed per bucket; a fold (orders/data/rail_fold.py) gathers a bucket's
stripes into stripe FOLDED, which no writer writes.

Three families, one bucket of each per order, each bucket a range of one sort's first key column:
- `day`: the UTC day of created_at, "2026-03-11" (the rail groups days into months and weeks);
- `amount`: the amount's first two significant digits and its length in cents, "0351" for 512.30
  (51230 cents: 5 digits, "51"), so the bins' text order is the amounts' order and each bin is a
  fixed range of amounts (the rail groups bins into bands of similar shares);
- `initial`: the first character of customer_key when it is a to z, "#" before a ("1 Ana", ""),
  "~" after z (Greek, Cyrillic, CJK, ...): in the customer sort's code point order.

Run it with writes stopped (as every migration here): on MariaDB, whose DDL commits at once, a
write between the triggers' creation and the first fill would be counted twice or not at all.
PostgreSQL does it in one transaction holding off writers (LOCK TABLE).

Self-contained (its SQL is written here, not imported): a later change of the app's code leaves
what this revision created as it was.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _initial(key: str) -> str:
    first = f"substr({key}, 1, 1)"
    return f"CASE WHEN {first} < 'a' THEN '#' WHEN {first} <= 'z' THEN {first} ELSE '~' END"


# The bucket of each family for a row `r` (r.created_at, r.amount, r.customer_key), per engine.
# SQLite keeps timestamps as ISO text in UTC and amounts as integer cents; MariaDB a naive UTC
# DATETIME(6); PostgreSQL a timestamptz (its day read in UTC, whatever the session's zone).
BUCKETS = {
    "postgresql": {
        "day": "to_char({r}.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
        "amount": "lpad(length(({r}.amount * 100)::bigint::text)::text, 2, '0') "
        "|| substr(({r}.amount * 100)::bigint::text, 1, 2)",
        "initial": _initial("{r}.customer_key"),
    },
    "mysql": {
        "day": "DATE_FORMAT({r}.created_at, '%Y-%m-%d')",
        "amount": "CONCAT(LPAD(CHAR_LENGTH(CAST(CAST({r}.amount * 100 AS SIGNED) AS CHAR)), 2, '0'), "
        "SUBSTRING(CAST(CAST({r}.amount * 100 AS SIGNED) AS CHAR), 1, 2))",
        "initial": _initial("{r}.customer_key"),
    },
    "sqlite": {
        "day": "substr({r}.created_at, 1, 10)",
        "amount": "printf('%02d', length(CAST({r}.amount AS TEXT))) "
        "|| substr(CAST({r}.amount AS TEXT), 1, 2)",
        "initial": _initial("{r}.customer_key"),
    },
}
BUCKETS["mariadb"] = BUCKETS["mysql"]
FAMILIES = ("amount", "day", "initial")  # the order every writer takes the rows in
STRIPES = 16  # orders/data/models.py STRIPES
FOLDED = 16  # orders/data/rail_fold.py FOLDED: a bucket's stripes gathered, written by no writer


def _rows(dialect: str, r: str, sign: str) -> str:
    """SELECT family, status, bucket, stripe, n for the rows `r` (a table or a row alias), n = sign."""
    return " UNION ALL ".join(
        f"SELECT '{family}' AS family, {r}.status AS status, "
        f"{BUCKETS[dialect][family].format(r=r)} AS bucket, "
        f"{r}.id % {STRIPES} AS stripe, {sign} AS n FROM {r}"
        for family in FAMILIES
    )


# PostgreSQL: one function, statement triggers with transition tables (a bulk INSERT adds each
# bucket's count once, not once per row); an UPDATE adds the new rows and takes the old ones off
# in one statement, writing only the buckets whose count changed. Rows are taken in key order, so
# two statements lock them in the same order and never deadlock on them. The search_path is the
# one it was made with (a shard's orders are written by postgres_fdw sessions that search
# pg_catalog alone).
RAIL_LOCK_TIMEOUT_MS = 2000  # a writer waits at most this for another's bucket row (see below)
POSTGRESQL = [
    f"""
    CREATE FUNCTION orders_rail_rows() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        -- A bucket's row is shared by every writer of that day, band or initial. On a shard two
        -- postgres_fdw writers can each hold one shard's bucket row and wait for the other's on
        -- another shard: a deadlock no server sees whole, which would wait for ever. A bounded
        -- wait (unless the session set its own) ends it in lock_not_available, which the app
        -- answers 503 with Retry-After (orders/core/errors.py); the writer's transaction is undone.
        IF current_setting('lock_timeout') = '0' THEN
            PERFORM set_config('lock_timeout', '{RAIL_LOCK_TIMEOUT_MS}', true);
        END IF;
        IF TG_OP = 'INSERT' THEN
            INSERT INTO rail_counts (family, status, bucket, stripe, n)
            SELECT family, status, bucket, stripe, sum(n) FROM ({_rows("postgresql", "new_rows", "1")}) AS c
            GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
            ON CONFLICT (family, status, bucket, stripe) DO UPDATE SET n = rail_counts.n + EXCLUDED.n;
        ELSIF TG_OP = 'DELETE' THEN
            INSERT INTO rail_counts (family, status, bucket, stripe, n)
            SELECT family, status, bucket, stripe, sum(n) FROM ({_rows("postgresql", "old_rows", "-1")}) AS c
            GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
            ON CONFLICT (family, status, bucket, stripe) DO UPDATE SET n = rail_counts.n + EXCLUDED.n;
        ELSE
            INSERT INTO rail_counts (family, status, bucket, stripe, n)
            SELECT family, status, bucket, stripe, sum(n)
            FROM ({_rows("postgresql", "new_rows", "1")}
                  UNION ALL {_rows("postgresql", "old_rows", "-1")}) AS c
            GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0 ORDER BY 1, 2, 3, 4
            ON CONFLICT (family, status, bucket, stripe) DO UPDATE SET n = rail_counts.n + EXCLUDED.n;
        END IF;
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER orders_rail_insert AFTER INSERT ON orders REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION orders_rail_rows()",
    "CREATE TRIGGER orders_rail_delete AFTER DELETE ON orders REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION orders_rail_rows()",
    "CREATE TRIGGER orders_rail_update AFTER UPDATE ON orders "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION orders_rail_rows()",
]


def _values(dialect: str, row: str, n: str) -> str:
    """One INSERT of the three buckets of `row` (NEW or OLD), each counted `n`."""
    values = ", ".join(
        f"('{family}', {row}.status, {BUCKETS[dialect][family].format(r=row)}, {row}.id % {STRIPES}, {n})"
        for family in FAMILIES
    )
    return f"INSERT INTO rail_counts (family, status, bucket, stripe, n) VALUES {values} "


_MARIADB_ADD = "ON DUPLICATE KEY UPDATE n = n + VALUES(n)"
_CHANGED = (
    "NOT (OLD.status <=> NEW.status AND OLD.created_at <=> NEW.created_at "
    "AND OLD.amount <=> NEW.amount AND OLD.customer_key <=> NEW.customer_key AND OLD.id <=> NEW.id)"
)
MARIADB = [
    "CREATE TRIGGER orders_rail_insert AFTER INSERT ON orders FOR EACH ROW "
    + _values("mysql", "NEW", "1")
    + _MARIADB_ADD,
    "CREATE TRIGGER orders_rail_delete AFTER DELETE ON orders FOR EACH ROW "
    + _values("mysql", "OLD", "-1")
    + _MARIADB_ADD,
    f"CREATE TRIGGER orders_rail_update AFTER UPDATE ON orders FOR EACH ROW BEGIN IF {_CHANGED} THEN "
    + _values("mysql", "OLD", "-1")
    + _MARIADB_ADD
    + "; "
    + _values("mysql", "NEW", "1")
    + _MARIADB_ADD
    + "; END IF; END",
]

_SQLITE_ADD = "ON CONFLICT (family, status, bucket, stripe) DO UPDATE SET n = n + excluded.n"
SQLITE = [
    "CREATE TRIGGER orders_rail_insert AFTER INSERT ON orders BEGIN "
    + _values("sqlite", "NEW", "1")
    + _SQLITE_ADD
    + "; END",
    "CREATE TRIGGER orders_rail_delete AFTER DELETE ON orders BEGIN "
    + _values("sqlite", "OLD", "-1")
    + _SQLITE_ADD
    + "; END",
    "CREATE TRIGGER orders_rail_update "
    "AFTER UPDATE OF status, created_at, amount, customer_key, id ON orders BEGIN "
    + _values("sqlite", "OLD", "-1")
    + _SQLITE_ADD
    + "; "
    + _values("sqlite", "NEW", "1")
    + _SQLITE_ADD
    + "; END",
]
TRIGGERS = {"postgresql": POSTGRESQL, "mysql": MARIADB, "mariadb": MARIADB, "sqlite": SQLITE}
TRIGGER_NAMES = ["orders_rail_insert", "orders_rail_delete", "orders_rail_update"]


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    if not sa.inspect(bind).has_table("order_counts"):
        return  # a sharded coordinator keeps no counts (its shards do)
    if dialect == "postgresql":
        # No write between the first count and the triggers taking over (released at commit).
        op.execute("LOCK TABLE orders IN SHARE ROW EXCLUSIVE MODE")
    op.create_table(
        "rail_counts",
        sa.Column("family", sa.String(8), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("bucket", sa.String(16), nullable=False),
        sa.Column("stripe", sa.SmallInteger, nullable=False, autoincrement=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("family", "status", "bucket", "stripe"),
        sqlite_with_rowid=False,  # the key is the table: a rail reads one range of it
    )
    for statement in TRIGGERS[dialect]:
        op.execute(statement)
    # The orders already there, one row per bucket, as a fold leaves them (no writer waits here).
    op.execute(
        "INSERT INTO rail_counts (family, status, bucket, stripe, n) "
        f"SELECT family, status, bucket, {FOLDED}, sum(n) FROM ({_rows(dialect, 'orders', '1')}) AS c "
        "GROUP BY family, status, bucket"
    )


def downgrade() -> None:
    bind = op.get_bind()
    if not sa.inspect(bind).has_table("rail_counts"):
        return
    for name in TRIGGER_NAMES:
        on = " ON orders" if bind.dialect.name == "postgresql" else ""
        op.execute(f"DROP TRIGGER {name}{on}")
    if bind.dialect.name == "postgresql":
        op.execute("DROP FUNCTION orders_rail_rows()")
    op.drop_table("rail_counts")
