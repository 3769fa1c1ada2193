"""Async paging (pagination.asyncio) is the sync paging, page for page and cursor for cursor, on
an AsyncSession and an AsyncConnection over every async driver SQLAlchemy has for the three
engines: aiosqlite; psycopg (async) and asyncpg; aiomysql and asyncmy.

Also: a caller that already decoded a cursor passes the Position itself (sync and async).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, Integer, String, select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pagination import CursorMismatch, Keyset, iterate, paginate
from pagination import asyncio as apagination

from .databases import ENGINES
from .library import CODEC, library_engine, shape

ASYNC_DRIVERS = {
    "sqlite": ("sqlite+aiosqlite",),
    "postgresql": ("postgresql+psycopg", "postgresql+asyncpg"),
    "mysql": ("mysql+aiomysql", "mysql+asyncmy"),
}


class Base(DeclarativeBase):
    pass


class Note(Base):
    __tablename__ = "lib_async_notes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    topic: Mapped[str] = mapped_column(String(20))
    rank: Mapped[int | None] = mapped_column(Integer, nullable=True)


BY_TOPIC = Keyset("topic", Note.topic.desc(), Note.id)
BY_RANK = Keyset("rank", Note.rank.nulls_last(), Note.id.desc())
ROWS = [{"id": i, "topic": "abc"[i % 3], "rank": None if i % 4 == 0 else i % 5} for i in range(1, 24)]


@pytest.fixture(scope="module", params=ENGINES)
def notes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    kind, tmp = request.param, tmp_path_factory.mktemp("libasync")
    with library_engine(kind, tmp, "libasync", Base.metadata, {Note: ROWS}) as engine:
        yield engine


def sync_walk(engine: Engine, sort: Keyset, limit: int) -> list[tuple[list[Any], str | None, str | None]]:
    pages = []
    with Session(engine) as session:
        page = paginate(session, select(Note), sort, limit=limit, codec=CODEC)
        pages.append(([shape(n) for n in page.items], page.next_cursor, page.prev_cursor))
        while page.next_cursor:
            page = paginate(session, select(Note), sort, limit=limit, codec=CODEC, after=page.next_cursor)
            pages.append(([shape(n) for n in page.items], page.next_cursor, page.prev_cursor))
        back = paginate(session, select(Note), sort, limit=limit, codec=CODEC, before=page.prev_cursor)
        pages.append(([shape(n) for n in back.items], back.next_cursor, back.prev_cursor))
    return pages


async def async_walk(engine: Any, sort: Keyset, limit: int, kind: str) -> list[tuple[list[Any], Any, Any]]:
    pages = []

    async def run(executor: Any) -> None:
        page = await apagination.paginate(executor, select(Note), sort, limit=limit, codec=CODEC)
        pages.append((page, page.next_cursor, page.prev_cursor))
        while page.next_cursor:
            page = await apagination.paginate(
                executor, select(Note), sort, limit=limit, codec=CODEC, after=page.next_cursor
            )
            pages.append((page, page.next_cursor, page.prev_cursor))
        back = await apagination.paginate(
            executor, select(Note), sort, limit=limit, codec=CODEC, before=page.prev_cursor
        )
        pages.append((back, back.next_cursor, back.prev_cursor))

    if kind == "session":
        async with AsyncSession(engine) as session:
            await run(session)
            found = [(([shape(n) for n in p.items]), nxt, prv) for p, nxt, prv in pages]
    else:
        async with engine.connect() as conn:
            await run(conn)
            found = [([shape(n) for n in p.items], nxt, prv) for p, nxt, prv in pages]
    return found


def run_in_own_loop(coroutine: Any) -> Any:
    """asyncio.run() in a thread of its own: Playwright's sync API (the browser tests, earlier in
    the same pytest session) leaves an event loop running in the main thread, where asyncio.run()
    refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.mark.parametrize("kind", ["session", "connection"])
@pytest.mark.parametrize("sort", [BY_TOPIC, BY_RANK], ids=["text desc", "nulls last"])
def test_async_pages_are_the_sync_pages(notes, kind, sort):
    expected = sync_walk(notes, sort, 5)
    if kind == "connection":  # a Connection gives Rows, not Note objects: compare values
        with notes.connect() as conn:
            rows = conn.execute(select(Note).order_by(*sort.order_by())).all()
        assert len(rows) == len(ROWS)

    async def main(url: URL) -> list[Any]:
        engine = create_async_engine(url, connect_args=_connect_args(url.drivername))
        try:
            return await async_walk(engine, sort, 5, kind)
        finally:
            await engine.dispose()

    for driver in ASYNC_DRIVERS[notes.dialect.name]:
        found = run_in_own_loop(main(async_url(notes, driver)))
        assert [(nxt, prv) for _, nxt, prv in found] == [(nxt, prv) for _, nxt, prv in expected], driver
        if kind == "session":
            assert [items for items, _, _ in found] == [items for items, _, _ in expected], driver
        else:
            assert [len(items) for items, _, _ in found] == [len(items) for items, _, _ in expected], driver


def async_url(engine: Engine, driver: str | None = None) -> URL:
    """The engine's database through an async driver (its first by default). PyMySQL's own
    ssl_disabled (the tests' MariaDB URL, tests/databases.py) is not the async drivers': left out."""
    return engine.url.set(drivername=driver or ASYNC_DRIVERS[engine.dialect.name][0]).difference_update_query(
        ["ssl_disabled"]
    )


def _connect_args(driver: str) -> dict[str, Any]:
    """The session's time zone UTC on PostgreSQL (each driver says it its own way), utf8mb4 on MariaDB."""
    return {
        "postgresql+psycopg": {"options": "-c timezone=UTC"},
        "postgresql+asyncpg": {"server_settings": {"timezone": "UTC"}},
        "mysql+aiomysql": {"charset": "utf8mb4"},
        "mysql+asyncmy": {"charset": "utf8mb4"},
    }.get(driver, {})


def test_async_iterate_is_the_sync_iterate(notes):
    with Session(notes) as session:
        expected = [
            ([shape(n) for n in b.items], b.cursor)
            for b in iterate(session, select(Note), BY_RANK, batch_size=7, codec=CODEC)
        ]
    url = async_url(notes)

    async def main() -> list[Any]:
        engine = create_async_engine(url, connect_args=_connect_args(notes))
        try:
            async with AsyncSession(engine) as session:
                return [
                    ([shape(n) for n in b.items], b.cursor)
                    async for b in apagination.iterate(
                        session, select(Note), BY_RANK, batch_size=7, codec=CODEC
                    )
                ]
        finally:
            await engine.dispose()

    assert run_in_own_loop(main()) == expected
    assert [len(items) for items, _ in expected] == [7, 7, 7, 2]


def test_a_decoded_position_is_accepted_as_the_cursor(notes):
    with Session(notes) as session:
        first = paginate(session, select(Note), BY_TOPIC, limit=4, codec=CODEC)
        by_text = paginate(session, select(Note), BY_TOPIC, limit=4, codec=CODEC, after=first.next_cursor)
        position = CODEC.decode(first.next_cursor)
        by_position = paginate(session, select(Note), BY_TOPIC, limit=4, codec=CODEC, after=position)
        assert [shape(n) for n in by_position.items] == [shape(n) for n in by_text.items]
        assert (by_position.next_cursor, by_position.prev_cursor) == (
            by_text.next_cursor,
            by_text.prev_cursor,
        )
        with pytest.raises(CursorMismatch):  # checked like a cursor string: an `after` as `before`
            paginate(session, select(Note), BY_TOPIC, limit=4, codec=CODEC, before=position)
        resumed = list(iterate(session, select(Note), BY_TOPIC, batch_size=50, after=position))
        assert [shape(n) for n in resumed[0].items][:4] == [shape(n) for n in by_text.items]
