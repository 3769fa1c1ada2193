"""About how many orders: the list's total and each status's, from what the engine already knows,
never COUNT(*) (which reads every row, or every index entry, of a 300,000-row table per page).

- PostgreSQL: the planner's own row estimate (`EXPLAIN`), built from the table's statistics:
  pg_class.reltuples scaled to the table's current size, and the status column's most common
  values in pg_stats. As good as the last ANALYZE (autovacuum runs it as the table changes).
- MariaDB/MySQL: the optimizer's estimate (`EXPLAIN`): InnoDB's table statistics for the total,
  and a dive into the (status, created_at, id) index for a status (records_in_range: a few pages).
- SQLite keeps no statistics worth reading without ANALYZE: the total is max(id) - min(id) + 1
  (two index seeks; exact until rows are deleted, then too high), and a status's share is
  counted in the SAMPLE newest orders by id (one short primary-key range) and scaled.

Each figure is shown as "about N" (templates/orders.html), rounded to two significant digits.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from .models import STATUSES, Order

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
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return _planner(session, _postgresql_rows)
    if dialect in ("mysql", "mariadb"):
        return _planner(session, _mysql_rows)
    return _sqlite(session)


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
