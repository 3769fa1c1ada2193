"""About how many orders: the list's total and each status's, never COUNT(*) (which reads every
row, or every index entry, of a 300,000-row table per page).

Read from order_counts (orders/data/models.py): STRIPES rows per status, kept by triggers on `orders`
in the transaction of every INSERT, DELETE and status UPDATE (migration 0004), so the figures are
the committed counts, whatever wrote the rows (the API, the seed, a bulk load, SQL by hand) and
however the status mix moves. Reading them is 64 rows of one small table on every engine.

A coordinator of shards has no order_counts (each shard keeps its own): there the planner's
estimate (`EXPLAIN`, from the table's statistics, as good as the last ANALYZE) stands in.

Each figure is shown as "about N" (templates/orders.html), rounded to two significant digits
(at most 5% from the count).

Beside them, `number_digits`: how many digits the largest order number has, which sizes the
list's number column (static/app.css `--id-digits`), exact, from one end of the primary key.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from orders.data.models import STATUSES, Order, OrderCount, keeps_counts

SAMPLE = 1000


@dataclass(frozen=True)
class Estimates:
    total: int | None  # None: the engine knows nothing yet
    by_status: dict[str, int] = field(default_factory=dict)

    def of(self, status: str | None) -> int | None:
        return self.total if status is None else self.by_status.get(status)


def rounded(n: int) -> int:
    """Two significant digits: an estimate should not look like a count."""
    if n < 100:
        return n
    scale = 10 ** (int(math.log10(n)) - 1)
    return int(round(n / scale) * scale)


def estimate(session: Session) -> Estimates:
    if keeps_counts(session.connection()):
        return _counted(session)
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return _planner(session, _postgresql_rows)
    if dialect in ("mysql", "mariadb"):
        return _planner(session, _mysql_rows)
    return _sqlite(session)


def _counted(session: Session) -> Estimates:
    rows = session.execute(select(OrderCount.status, func.sum(OrderCount.n)).group_by(OrderCount.status))
    by_status = {s: 0 for s in STATUSES} | {status: int(n) for status, n in rows}
    return Estimates(sum(by_status.values()), by_status)


def _planner(session: Session, rows: Any) -> Estimates:
    total = rows(session, "SELECT 1 FROM orders", {})
    by_status = {s: rows(session, "SELECT 1 FROM orders WHERE status = :s", {"s": s}) for s in STATUSES}
    return Estimates(total, by_status)


def _postgresql_rows(session: Session, sql: str, params: dict[str, Any]) -> int:
    plan = session.execute(text("EXPLAIN (FORMAT JSON) " + sql), params).scalar_one()
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def _mysql_rows(session: Session, sql: str, params: dict[str, Any]) -> int:
    row = session.execute(text("EXPLAIN " + sql), params).mappings().first()
    return int(row["rows"] or 0) if row else 0


def _sqlite(session: Session) -> Estimates:
    low, high = session.execute(select(func.min(Order.id), func.max(Order.id))).one()
    if low is None:
        return Estimates(0, {s: 0 for s in STATUSES})
    total = high - low + 1
    newest = select(Order.id).order_by(Order.id.desc()).limit(SAMPLE).subquery()
    counts = dict(
        session.execute(
            select(Order.status, func.count()).where(Order.id.in_(select(newest.c.id))).group_by(Order.status)
        ).all()
    )
    sampled = sum(counts.values()) or 1
    return Estimates(total, {s: round(total * counts.get(s, 0) / sampled) for s in STATUSES})


def number_digits(session: Session) -> int:
    """The digits of the largest order number (MAX of the primary key: one end of its index on
    every engine, pushed down to each shard): the number column is made wide enough for it, so
    that a number is shown whole and never runs into the name (static/app.css)."""
    largest = session.execute(select(func.max(Order.id))).scalar()
    return len(str(largest or 0))
