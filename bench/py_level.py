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

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import sqlakeyset
import sqlakeyset.asyncio
from sqlalchemy import and_, literal, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from orders.data.db import make_engine
from orders.data.models import Order
from pagination import CursorCodec, paginate
from pagination import asyncio as apagination

from . import formatting as fmt
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

METHODS = ("paginate", "sqlakeyset", "offset", "paginate async", "sqlakeyset async", "hand-written")
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
            log(
                f"  py {target.label:>14} depth {depth:>9,}: {_cells(samples, depth)}"
                + ("" if same[depth] else "  ROWS DIFFER")
            )
    finally:
        engine.dispose()
        loop.run_until_complete(aengine.dispose())
        loop.close()
    return results


def _cells(samples: dict[tuple[int, str], list[float]], depth: int) -> str:
    """Each method's median at `depth`, then ours/theirs (sync and async): <= 1.00x is the goal."""
    median = {name: summary(samples[depth, name])["median"] for name in METHODS}
    cells = "  ".join(f"{name} {median[name]:.3f} ms" for name in METHODS)
    ratios = "  ".join(
        f"{ours}/{theirs} {fmt.x(fmt.ratio(median[ours], median[theirs]))}"
        for ours, theirs in (
            ("paginate", "sqlakeyset"),
            ("paginate async", "sqlakeyset async"),
            ("paginate", "hand-written"),
        )
    )
    return f"{cells}  |  {ratios}"


def _methods(session: Session, codec: CursorCodec, depth: int) -> dict[str, Callable[[], list[int]]]:
    """The three ways to read the page at `depth`, each returning the ids it got."""
    keys = keys_before(session, depth)
    cursor = cursor_for(codec, keys)
    # Both through their public API as a web handler calls them: the statement built anew, a
    # cursor string in, the next page's cursor string out (sqlakeyset's bookmark is its cursor;
    # encoding included). A new statement per call is what a request pays: a plan remembered by
    # the statement object would never be found again.
    bookmark = sqlakeyset.serialize_bookmark((keys, False)) if keys is not None else None

    def ours() -> list[int]:
        page = paginate(
            session, select(Order), NEWEST, limit=LIMIT, codec=codec, after=cursor, filters=FILTERS
        )
        assert page.next_cursor
        return [o.id for o in page.items]

    def theirs() -> list[int]:
        page = sqlakeyset.select_page(session, ordered(), per_page=LIMIT, page=bookmark)
        assert page.paging.bookmark_next
        return [row[0].id for row in page]

    def offset() -> list[int]:
        return [o.id for o in session.scalars(ordered().offset(depth).limit(LIMIT))]

    seek = _hand_seek(session, keys)

    def hand() -> list[int]:
        # The physical floor: the page's statement written by hand, LIMIT n + 1 for "more?", no
        # cursor sealed or opened, no previous-page check.
        stmt = select(Order) if seek is None else select(Order).where(seek)
        found = session.scalars(
            stmt.order_by(Order.created_at.desc(), Order.id.desc()).limit(LIMIT + 1)
        ).all()
        return [o.id for o in found[:LIMIT]]

    return {"paginate": ours, "sqlakeyset": theirs, "offset": offset, "hand-written": hand}


def _hand_seek(session: Session, keys: tuple[Any, ...] | None) -> Any:
    """The seek a developer writes by hand: ``tuple_(a, b) < (x, y)``, the row value, where the
    engine reads it as one index range (SQLite, PostgreSQL); on MariaDB, which scans for a row
    value, the expanded form with a leading bound, its fastest (docs/design.md)."""
    if keys is None:
        return None
    at, last = keys
    if session.get_bind().dialect.name in ("mysql", "mariadb"):
        return and_(
            Order.created_at <= at,
            or_(Order.created_at < at, and_(Order.created_at == at, Order.id < last)),
        )
    return tuple_(Order.created_at, Order.id) < tuple_(literal(at, Order.created_at.type), literal(last))


def _async_methods(
    asession: AsyncSession, loop: asyncio.AbstractEventLoop, session: Session, codec: CursorCodec, depth: int
) -> dict[str, Callable[[], list[int]]]:
    """The two keyset reads of the page at `depth` through the AsyncSession."""
    keys = keys_before(session, depth)
    cursor = cursor_for(codec, keys)
    bookmark = sqlakeyset.serialize_bookmark((keys, False)) if keys is not None else None

    def ours() -> list[int]:
        page = loop.run_until_complete(
            apagination.paginate(
                asession, select(Order), NEWEST, limit=LIMIT, codec=codec, after=cursor, filters=FILTERS
            )
        )
        assert page.next_cursor
        return [o.id for o in page.items]

    def theirs() -> list[int]:
        page = loop.run_until_complete(
            sqlakeyset.asyncio.select_page(asession, ordered(), per_page=LIMIT, page=bookmark)
        )
        assert page.paging.bookmark_next
        return [row[0].id for row in page]

    return {"paginate async": ours, "sqlakeyset async": theirs}


def main(argv: list[str] | None = None) -> int:
    """This level alone: ``python -m bench.py_level [--rows N] [--engines ...]`` seeds throwaway
    databases, measures depth 0 and 90% interleaved, prints the medians and the ratios."""
    from . import databases
    from .common import SECRET

    parser = argparse.ArgumentParser(prog="python -m bench.py_level", description=main.__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--engines", default="sqlite,postgresql,mysql")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per depth and engine")
    args = parser.parse_args(argv)
    codec = CursorCodec(SECRET)
    with tempfile.TemporaryDirectory(prefix="bench-py-") as tmp, ExitStack() as stack:
        for kind in args.engines.split(","):
            reason = databases.server_available(kind)
            if reason:
                log(f"!! {kind} skipped: {reason}")
                continue
            url = stack.enter_context(databases.throwaway(kind, kind, Path(tmp)))
            databases.seed(url, args.rows)
            target = Target(kind, kind, url, args.rows, [0, args.rows * 9 // 10])
            measure(target, rounds=args.rounds, budget_s=args.budget, codec=codec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
