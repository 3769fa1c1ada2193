"""The async edge: `paginate()` and `iterate()` for an ``AsyncSession`` or an ``AsyncConnection``.

Not a second implementation: each call runs the sync one on the session's (or connection's)
sync facade through SQLAlchemy's ``run_sync``, where every statement it executes awaits the
async driver (aiosqlite, psycopg, asyncpg, aiomysql, asyncmy) underneath. So an async page is
the same statements, the same rows and the same cursors as a sync one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from .cursor import CursorCodec, Position
from .paging import iterate as _iterate
from .paging import paginate as _paginate
from .results import Batch, Page
from .sort import Keyset

__all__ = ["iterate", "paginate"]


async def paginate(
    session: AsyncSession | AsyncConnection,
    stmt: Select[Any],
    sort: Keyset,
    *,
    limit: int,
    codec: CursorCodec,
    after: str | Position | None = None,
    before: str | Position | None = None,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
) -> Page:
    """`pagination.paginate()` on an AsyncSession or AsyncConnection (same arguments, same Page)."""

    def page(sync: Any) -> Page:
        return _paginate(
            sync,
            stmt,
            sort,
            limit=limit,
            codec=codec,
            after=after,
            before=before,
            filters=filters,
            meta=meta,
        )

    return await session.run_sync(page)


async def iterate(
    session: AsyncSession | AsyncConnection,
    stmt: Select[Any],
    sort: Keyset,
    *,
    batch_size: int,
    codec: CursorCodec | None = None,
    after: str | Position | None = None,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
) -> AsyncIterator[Batch]:
    """`pagination.iterate()` as an async iterator: ``async for batch in iterate(...)``. Each
    batch is one query, run when the iterator is advanced."""
    sync: Any = session.sync_session if isinstance(session, AsyncSession) else session.sync_connection
    batches = _iterate(
        sync, stmt, sort, batch_size=batch_size, codec=codec, after=after, filters=filters, meta=meta
    )
    while True:
        batch = await session.run_sync(lambda _: next(batches, None))
        if batch is None:
            return
        yield batch
