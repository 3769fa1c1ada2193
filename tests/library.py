"""What the library's own tests share: an engine on each throwaway database, made without the app,
and the walk that compares paging with the unpaged query.

Nothing here (nor in tests/test_library_*.py) imports the app (`orders`, `app`): the library is
tested as its own distribution.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, MetaData, create_engine, event, insert, inspect, text
from sqlalchemy.orm import Session

from pagination import AFTER, BEFORE, CursorCodec, Keyset, paginate

from .databases import family, throwaway_database

CODEC = CursorCodec("library-tests-secret-library-tests-secret")


@contextmanager
def library_engine(
    kind: str,
    tmp_dir: Path,
    label: str = "lib",
    schema: MetaData | None = None,
    rows: Mapping[Any, list[dict[str, Any]]] | None = None,
) -> Iterator[Engine]:
    """An engine on a new, empty database of `kind` (dropped afterwards); no app schema in it.
    With `schema`, its tables are made, then `rows` inserted, table by table in their order."""
    with throwaway_database(kind, tmp_dir, label) as url:
        connect_args: dict[str, Any] = {}
        if family(kind) == "postgresql":
            connect_args = {"connect_timeout": 5, "options": "-c timezone=UTC"}
        elif kind == "mysql":
            connect_args = {"connect_timeout": 5, "charset": "utf8mb4"}
        engine = create_engine(url, connect_args=connect_args)
        try:
            if schema is not None:
                schema.create_all(engine)
            if rows:
                with engine.begin() as conn:
                    for table, values in rows.items():
                        conn.execute(insert(table), values)
            yield engine
        finally:
            engine.dispose()


def shape(item: Any) -> Any:
    """What an item is, for comparing with the unpaged rows: ORM objects by identity, Rows by
    their values and column names (a Row with an extra column is another shape)."""
    state = inspect(item, raiseerr=False)
    if state is not None and getattr(state, "identity", None) is not None:
        return (type(item).__name__, state.identity)
    if hasattr(item, "_fields"):
        return (tuple(shape(v) for v in item), item._fields)
    if isinstance(item, tuple):  # a Bundle's value
        return tuple(shape(v) for v in item)
    return item


def unpaged(executor: Any, stmt: Any, sort: Keyset) -> list[Any]:
    """The statement's rows in the sort's order, as paging hands them back.

    On MariaDB with its derived tables, views and CTEs materialized rather than merged: merged,
    MariaDB 10.11 drops rows from a SELECT DISTINCT ordered by a column and then an expression it
    selects (pagination/planning.py, `by_item`), and the rows paging is compared with must not
    have the engine's bug."""
    bind = executor.get_bind(clause=stmt) if isinstance(executor, Session) else executor
    unmerged = bind.dialect.name in ("mysql", "mariadb")
    if unmerged:
        _optimizer(executor, stmt, "derived_merge=off")
    try:
        result = executor.execute(stmt.order_by(*sort.order_by()))
    finally:
        if unmerged:
            _optimizer(executor, stmt, "derived_merge=on")
    if getattr(getattr(result, "context", None), "loaders_require_uniquing", False):
        result = result.unique()  # a joined eager load of a collection, as the ORM requires
    rows = result.all()
    return [shape(row[0]) if len(row) == 1 else shape(row) for row in rows]


def _optimizer(executor: Any, stmt: Any, switch: str) -> None:
    """One MariaDB optimizer switch on the connection `executor` runs `stmt` on."""
    sql = text(f"SET SESSION optimizer_switch = '{switch}'")
    if isinstance(executor, Session):
        executor.execute(sql, bind_arguments={"clause": stmt})
    else:
        executor.execute(sql)


def walk_ranges(executor: Any, ranges: list[Any]) -> list[Any]:
    """The rows of iterate_ranges()'s ranges, each statement run as the caller would."""
    rows = []
    for part in ranges:
        result = executor.execute(part.statement, part.params)
        if getattr(getattr(result, "context", None), "loaders_require_uniquing", False):
            result = result.unique()
        got = result.all()
        assert len(got) == part.rows, (
            "a range holds the rows its probe counted (nothing is written meanwhile)"
        )
        rows += [shape(row[0]) if len(row) == 1 else shape(row) for row in got]
    return rows


def accepted(cursor: str | None, sort: Keyset, direction: str, codec: CursorCodec = CODEC) -> None:
    if cursor is not None:
        position = codec.decode(cursor)
        sort.accept(position, direction=direction, filters=position.filters)


def walk(
    executor: Any,
    stmt: Any,
    sort: Keyset,
    limit: int,
    codec: CursorCodec = CODEC,
    seek: Any = None,
    **start: Any,
) -> tuple[list[Any], list[Any], Any]:
    """(rows before the first page, rows from the first page on, the first page): every page
    both ways from `start`, each returned cursor checked to be accepted."""
    first = paginate(executor, stmt, sort, limit=limit, codec=codec, seek=seek, **start)
    forward, page = [shape(i) for i in first.items], first
    for _ in range(1000):
        accepted(page.head_cursor, sort, BEFORE, codec)
        if not page.has_more:
            break
        assert len(page.items) == limit
        page = paginate(executor, stmt, sort, limit=limit, codec=codec, seek=seek, after=page.next_cursor)
        accepted(page.prev_cursor, sort, BEFORE, codec)
        forward += [shape(i) for i in page.items]
    backward: list[Any] = []
    page = first
    for _ in range(1000):
        if not page.has_previous:
            break
        page = paginate(executor, stmt, sort, limit=limit, codec=codec, seek=seek, before=page.prev_cursor)
        accepted(page.next_cursor, sort, AFTER, codec)
        backward = [shape(i) for i in page.items] + backward
    return backward, forward, first


def walk_back(executor: Any, stmt: Any, sort: Keyset, limit: int, codec: CursorCodec = CODEC) -> list[Any]:
    """Every row, read from the last page back to the first by `prev_cursor`."""
    page = paginate(executor, stmt, sort, limit=limit, codec=codec)
    for _ in range(1000):
        if not page.has_more:
            break
        page = paginate(executor, stmt, sort, limit=limit, codec=codec, after=page.next_cursor)
    rows = [shape(i) for i in page.items]
    for _ in range(1000):
        if not page.has_previous:
            break
        page = paginate(executor, stmt, sort, limit=limit, codec=codec, before=page.prev_cursor)
        assert len(page.items) == limit
        rows = [shape(i) for i in page.items] + rows
    return rows


def statements_of(engine: Engine, run: Any) -> list[tuple[str, Any]]:
    """Run `run()` and return every (SQL, parameters) it sent to the database."""
    seen: list[tuple[str, Any]] = []

    def capture(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool
    ) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        run()
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    return seen


def plan_nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every object in a JSON plan (PostgreSQL EXPLAIN, MariaDB ANALYZE FORMAT=JSON), depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from plan_nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from plan_nodes(value)


def analyze(db: Session | Connection, *tables: str) -> None:
    """Statistics on `tables` as a live server keeps them (PostgreSQL's ANALYZE, MariaDB's
    ANALYZE TABLE), for plans a server would choose; SQLite as the app leaves it (no
    sqlite_stat1)."""
    dialect = db.get_bind().dialect.name if isinstance(db, Session) else db.dialect.name
    if dialect == "postgresql":
        db.execute(text(f"ANALYZE {', '.join(tables)}"))
    elif dialect in ("mysql", "mariadb"):
        db.execute(text(f"ANALYZE TABLE {', '.join(tables)}"))
