"""Python level: one page through ``paginate()``, ``sqlakeyset.select_page()`` and a plain OFFSET query.

All three go through the same ORM session and return Order objects, so this adds what the
database level leaves out: statement construction and compilation, parameter processing, row
loading into objects, and (for ``paginate()``) the previous-page probe and cursor signing.
Methods alternate within every round. Before each timed call the session is closed and a
connection checked out again, untimed: every call starts like a request, with an empty identity
map, but without the pool's pre-ping in the measurement.
"""

from __future__ import annotations

from typing import Any

import sqlakeyset
from sqlalchemy import select
from sqlalchemy.orm import Session

from orders.db import make_engine
from orders.models import Order
from pagination import CursorCodec, paginate

from .common import (
    FILTERS,
    LIMIT,
    NEWEST,
    Target,
    cursor_for,
    interleaved,
    keys_before,
    log,
    ordered,
    summary,
)

METHODS = ("paginate", "sqlakeyset", "offset")


def measure(target: Target, *, rounds: int, budget_s: float, codec: CursorCodec) -> list[dict[str, Any]]:
    engine = make_engine(target.url)
    results: list[dict[str, Any]] = []
    try:
        with Session(engine) as session:
            for depth in target.depths:
                keys = keys_before(session, depth)
                cursor = cursor_for(codec, keys)
                stmt = select(Order)
                offset_stmt = ordered().offset(depth).limit(LIMIT)

                def ours(stmt: Any = stmt, cursor: str | None = cursor) -> list[int]:
                    page = paginate(
                        session, stmt, NEWEST, limit=LIMIT, codec=codec, after=cursor, filters=FILTERS
                    )
                    return [o.id for o in page.items]

                def theirs(keys: Any = keys) -> list[int]:
                    page = sqlakeyset.select_page(session, ordered(), per_page=LIMIT, after=keys)
                    return [row[0].id for row in page]

                def offset(offset_stmt: Any = offset_stmt) -> list[int]:
                    return [o.id for o in session.scalars(offset_stmt)]

                def fresh() -> None:
                    session.close()
                    session.connection()

                fresh()
                same = ours() == theirs() == offset()
                samples = interleaved(
                    {"paginate": ours, "sqlakeyset": theirs, "offset": offset},
                    rounds=rounds,
                    budget_s=budget_s,
                    before_each=fresh,
                )
                for name in METHODS:
                    results.append(
                        {
                            "engine": target.label,
                            "rows": target.rows,
                            "depth": depth,
                            "method": name,
                            "ms": summary(samples[name]),
                            "same_rows": same,
                        }
                    )
                cells = "  ".join(f"{name} {summary(samples[name])['median']:.3f} ms" for name in METHODS)
                log(f"  py {target.label:>14} depth {depth:>9,}: {cells}" + ("" if same else "  ROWS DIFFER"))
            session.close()
    finally:
        engine.dispose()
    return results
