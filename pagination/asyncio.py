"""The async edge: `paginate()`, `iterate()` and `iterate_ranges()` for an ``AsyncSession`` or an
``AsyncConnection``, with the sync functions' own parameters (taken from them, not restated).

Not a second implementation: each call runs the sync one on the session's (or connection's)
sync facade through SQLAlchemy's ``run_sync``, where every statement it executes awaits the
async driver (aiosqlite, psycopg, asyncpg, aiomysql, asyncmy) underneath. So an async page is
the same statements, the same rows and the same cursors as a sync one.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from . import paging

__all__ = ["iterate", "iterate_ranges", "paginate"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
AsyncExecutor = AsyncSession | AsyncConnection


def _awaited(
    sync: Callable[Concatenate[Any, _P], _R],
) -> Callable[Concatenate[AsyncExecutor, _P], Coroutine[Any, Any, _R]]:
    """`sync(session, ...)` as a coroutine function of an async session, same parameters."""

    @functools.wraps(sync)
    async def call(session: AsyncExecutor, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await session.run_sync(lambda facade: sync(facade, *args, **kwargs))

    return call


def _iterated(
    sync: Callable[Concatenate[Any, _P], Iterator[_R]],
) -> Callable[Concatenate[AsyncExecutor, _P], AsyncIterator[_R]]:
    """`sync(session, ...)`'s items as an async iterator (``async for``): each item's queries run
    when the iterator is advanced."""

    @functools.wraps(sync)
    async def walk(session: AsyncExecutor, /, *args: _P.args, **kwargs: _P.kwargs) -> AsyncIterator[_R]:
        facade: Any = session.sync_session if isinstance(session, AsyncSession) else session.sync_connection
        items = sync(facade, *args, **kwargs)  # a generator: nothing runs before the first next()
        end = object()
        while True:
            item = await session.run_sync(lambda _: next(items, end))
            if item is end:
                return
            yield item  # type: ignore[misc]  # not `end`, so an item of `sync`

    return walk


paginate = _awaited(paging.paginate)
iterate = _iterated(paging.iterate)
iterate_ranges = _iterated(paging.iterate_ranges)
