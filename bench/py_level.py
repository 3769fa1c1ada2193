"""Python level: one page through ``paginate()``, ``sqlakeyset.select_page()`` and a plain OFFSET query.

All three go through the same ORM session and return Order objects, so this adds what the
database level leaves out: statement construction and compilation, parameter processing, row
loading into objects, and (for ``paginate()``) the previous-page check and cursor signing.
Methods and depths alternate within every round (all depths in the same rounds). Before each
timed call the session is closed and a connection checked out again, untimed: every call
starts like a request, with an empty identity map, but without the pool's pre-ping in the
measurement.

The async pair (``pagination.asyncio.paginate`` and ``sqlakeyset.asyncio.select_page``) runs the
same statement through an ``AsyncSession`` on the engine's async driver (aiosqlite, psycopg's
async mode, aiomysql), each call driven to completion on one event loop, in the same rounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import sqlakeyset
import sqlakeyset.asyncio
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from orders.db import make_engine
from orders.models import Order
from pagination import CursorCodec, paginate
from pagination import asyncio as apagination

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

METHODS = ("paginate", "sqlakeyset", "offset", "paginate async", "sqlakeyset async")
ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+psycopg", "mysql": "mysql+aiomysql"}


def measure(target: Target, *, rounds: int, budget_s: float, codec: CursorCodec) -> list[dict[str, Any]]:
    """One result row per (depth, method); all of them timed in the same interleaved rounds."""
    engine = make_engine(target.url)
    aengine = create_async_engine(
        engine.url.set(drivername=ASYNC_DRIVERS[engine.dialect.name]),
        connect_args={"postgresql": {"options": "-c timezone=UTC"}, "mysql": {"charset": "utf8mb4"}}.get(
            engine.dialect.name, {}
        ),
    )
    loop = asyncio.new_event_loop()
    results: list[dict[str, Any]] = []
    try:
        with Session(engine) as session:
            asession = AsyncSession(aengine)

            def fresh() -> None:
                session.close()
                session.connection()
                loop.run_until_complete(asession.close())
                loop.run_until_complete(asession.connection())

            calls: dict[tuple[int, str], Callable[[], list[int]]] = {}
            same: dict[int, bool] = {}
            for depth in target.depths:
                for name, call in _methods(session, codec, depth).items():
                    calls[depth, name] = call
                for name, call in _async_methods(asession, loop, session, codec, depth).items():
                    calls[depth, name] = call
                fresh()
                same[depth] = len({tuple(calls[depth, name]()) for name in METHODS}) == 1
            samples = interleaved(
                calls, rounds=rounds, budget_s=budget_s * len(target.depths), before_each=fresh
            )
            session.close()
            loop.run_until_complete(asession.close())
        for depth in target.depths:
            for name in METHODS:
                results.append(
                    {
                        "engine": target.label,
                        "rows": target.rows,
                        "depth": depth,
                        "method": name,
                        "ms": summary(samples[depth, name]),
                        "same_rows": same[depth],
                    }
                )
            cells = "  ".join(f"{name} {summary(samples[depth, name])['median']:.3f} ms" for name in METHODS)
            log(
                f"  py {target.label:>14} depth {depth:>9,}: {cells}"
                + ("" if same[depth] else "  ROWS DIFFER")
            )
    finally:
        engine.dispose()
        loop.run_until_complete(aengine.dispose())
        loop.close()
    return results


def _methods(session: Session, codec: CursorCodec, depth: int) -> dict[str, Callable[[], list[int]]]:
    """The three ways to read the page at `depth`, each returning the ids it got."""
    keys = keys_before(session, depth)
    cursor = cursor_for(codec, keys)
    stmt = select(Order)
    offset_stmt = ordered().offset(depth).limit(LIMIT)

    def ours() -> list[int]:
        page = paginate(session, stmt, NEWEST, limit=LIMIT, codec=codec, after=cursor, filters=FILTERS)
        return [o.id for o in page.items]

    def theirs() -> list[int]:
        page = sqlakeyset.select_page(session, ordered(), per_page=LIMIT, after=keys)
        return [row[0].id for row in page]

    def offset() -> list[int]:
        return [o.id for o in session.scalars(offset_stmt)]

    return {"paginate": ours, "sqlakeyset": theirs, "offset": offset}


def _async_methods(
    asession: AsyncSession, loop: asyncio.AbstractEventLoop, session: Session, codec: CursorCodec, depth: int
) -> dict[str, Callable[[], list[int]]]:
    """The two keyset reads of the page at `depth` through the AsyncSession."""
    keys = keys_before(session, depth)
    cursor = cursor_for(codec, keys)
    stmt = select(Order)

    def ours() -> list[int]:
        page = loop.run_until_complete(
            apagination.paginate(
                asession, stmt, NEWEST, limit=LIMIT, codec=codec, after=cursor, filters=FILTERS
            )
        )
        return [o.id for o in page.items]

    def theirs() -> list[int]:
        page = loop.run_until_complete(
            sqlakeyset.asyncio.select_page(asession, ordered(), per_page=LIMIT, after=keys)
        )
        return [row[0].id for row in page]

    return {"paginate async": ours, "sqlakeyset async": theirs}
