"""Database level: the exact SQL each method sends, re-run raw, with its plan and the rows it reads.

For every depth, the three methods are run once through SQLAlchemy while a
``before_cursor_execute`` listener records the statement and DBAPI parameters they really send:

- ``offset``: ``select(Order).order_by(...).offset(n).limit(20)``;
- ``keyset``: the page query ``paginate()`` sends (built by ``keyset_select``, LIMIT 21: the
  extra row tells whether a next page exists; on a cursor page the read starts at the cursor's
  own row, LIMIT 22, which proves a previous page), and ``keyset_probe``, a second statement, if
  ``paginate()`` sends one (it does only when the cursor's row is gone);
- ``sqlakeyset``: what ``sqlakeyset.select_page(..., after=<keys of row n-1>)`` sends.

They must return the same rows. Each statement is then re-run on a raw DBAPI connection (no ORM,
no compilation) in interleaved rounds for the client round-trip time, and through the engine's
plan reader: PostgreSQL ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` (rows = actual rows of the
scan nodes + rows removed by filter; server time = "Execution Time", repeated with TIMING OFF
so that per-node clock reads do not inflate the deep OFFSET), MariaDB ``ANALYZE FORMAT=JSON``
(r_rows x r_loops of each table, access_type, r_total_time_ms), SQLite ``EXPLAIN QUERY PLAN``
and the count of VM instructions (``set_progress_handler(handler, 1)``; SQLite has no row count).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import sqlakeyset
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from orders.data.db import make_engine
from orders.data.models import Order
from pagination import CursorCodec, paginate

from .common import (
    FILTERS,
    LIMIT,
    NEWEST,
    Captured,
    SqlCapture,
    Target,
    cursor_for,
    interleaved,
    keys_before,
    log,
    ordered,
    summary,
)

METHODS = ("offset", "keyset", "keyset_probe", "sqlakeyset")


def _orders_queries(capture: SqlCapture) -> list[Captured]:
    # Only the statements on the orders table (a pool pre-ping or BEGIN is not ours to time).
    return [c for c in capture.statements if "FROM orders" in c.statement]


def capture_methods(engine: Engine, depth: int, codec: CursorCodec) -> tuple[dict[str, Captured], dict]:
    """The statement each method sends for the page at `depth`, and a check of their rows."""
    with Session(engine) as session:
        keys = keys_before(session, depth)
        with SqlCapture(engine) as cap:
            offset_ids = [o.id for o in session.scalars(ordered().offset(depth).limit(LIMIT))]
        captured = {"offset": _orders_queries(cap)[-1]}
        session.expunge_all()
        with SqlCapture(engine) as cap:
            page = paginate(
                session,
                select(Order),
                NEWEST,
                limit=LIMIT,
                codec=codec,
                after=cursor_for(codec, keys),
                filters=FILTERS,
            )
        ours = _orders_queries(cap)
        captured["keyset"] = ours[0]
        if len(ours) > 1:  # the previous-page probe runs only on a page reached by a cursor
            captured["keyset_probe"] = ours[1]
        session.expunge_all()
        with SqlCapture(engine) as cap:
            theirs = sqlakeyset.select_page(session, ordered(), per_page=LIMIT, after=keys)
        captured["sqlakeyset"] = _orders_queries(cap)[-1]
        check = {
            "keys": [str(k) for k in keys] if keys else None,
            "first_id": offset_ids[0] if offset_ids else None,
            "same_rows": offset_ids == [o.id for o in page.items] == [row[0].id for row in theirs],
            "statements_per_page": {"keyset": len(ours), "sqlakeyset": len(_orders_queries(cap))},
        }
    return captured, check


class RawRunner:
    """Re-runs captured statements on one raw DBAPI connection, as the driver received them."""

    def __init__(self, engine: Engine):
        self.kind = engine.dialect.name
        self.raw = engine.raw_connection()

    def fetch(self, captured: Captured, prefix: str = "") -> list[Any]:
        cursor = self.raw.cursor()
        try:
            cursor.execute(prefix + captured.statement, captured.parameters)
            return cursor.fetchall()
        finally:
            cursor.close()

    def end_transaction(self) -> None:
        self.raw.rollback()

    def close(self) -> None:
        self.raw.close()

    # --- plan readers, one per engine -----------------------------------------------------

    def plan(self, captured: Captured) -> dict[str, Any]:
        """Rows read, plan shape and (where the engine reports it) server time, from one run."""
        if self.kind == "postgresql":
            return _pg_plan(self.fetch(captured, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ")[0][0][0])
        if self.kind in ("mysql", "mariadb"):
            return _mariadb_plan(json.loads(self.fetch(captured, "ANALYZE FORMAT=JSON ")[0][0]))
        return self._sqlite_plan(captured)

    def server_ms(self, captured: Captured) -> float | None:
        """Execution time as the server measures it (no network, no driver); None on SQLite."""
        if self.kind == "postgresql":
            doc = self.fetch(captured, "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) ")[0][0][0]
            return float(doc["Execution Time"])
        if self.kind in ("mysql", "mariadb"):
            doc = json.loads(self.fetch(captured, "ANALYZE FORMAT=JSON ")[0][0])
            return float(doc["query_block"]["r_total_time_ms"])
        return None

    def _sqlite_plan(self, captured: Captured) -> dict[str, Any]:
        details = [row[3] for row in self.fetch(captured, "EXPLAIN QUERY PLAN ")]
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0  # 0: carry on

        connection = self.raw.driver_connection
        connection.set_progress_handler(count, 1)
        try:
            self.fetch(captured)
        finally:
            connection.set_progress_handler(None, 1)
        return {"rows_read": None, "vm_steps": steps, "plan": " / ".join(details), "server_ms": None}


def _pg_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _pg_nodes(child)


def _pg_plan(doc: dict[str, Any]) -> dict[str, Any]:
    nodes = list(_pg_nodes(doc["Plan"]))
    rows_read = 0
    shape = []
    for node in nodes:
        name = node["Node Type"]
        if node.get("Parent Relationship") in ("InitPlan", "SubPlan"):
            name = f"[{node['Parent Relationship']}] {name}"
        if "Index Name" in node:
            name += f" using {node['Index Name']}"
        if "Index Cond" in node:
            name += " (Index Cond)"
        if "Filter" in node:
            name += f" (Filter, {node.get('Rows Removed by Filter', 0):,.0f} removed)"
        shape.append(name)
        if "Scan" in node["Node Type"]:
            # "Rows Removed by ..." are per-loop averages, like "Actual Rows".
            per_loop = (
                node["Actual Rows"]
                + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Index Recheck", 0)
            )
            rows_read += per_loop * node["Actual Loops"]
    top = doc["Plan"]
    return {
        "rows_read": int(rows_read),
        "plan": " > ".join(shape),
        "server_ms": float(doc["Execution Time"]),
        "planning_ms": float(doc["Planning Time"]),
        "shared_buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
    }


def _mariadb_tables(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "table" and isinstance(value, dict):
                yield value
            yield from _mariadb_tables(value)
    elif isinstance(node, list):
        for item in node:
            yield from _mariadb_tables(item)


def _mariadb_plan(doc: dict[str, Any]) -> dict[str, Any]:
    tables = list(_mariadb_tables(doc["query_block"]))
    shape = []
    for table in tables:
        part = f"{table.get('access_type')} on {table.get('key') or 'table'}"
        if "index_condition" in table:
            part += " (index condition)"
        if "attached_condition" in table:
            part += " (attached condition)"
        shape.append(part)
    if "filesort" in json.dumps(doc):
        shape.append("filesort")
    return {
        "rows_read": int(sum(float(t.get("r_rows", 0)) * float(t.get("r_loops", 1)) for t in tables)),
        "access_type": [t.get("access_type") for t in tables],
        "plan": " + ".join(shape),
        "server_ms": float(doc["query_block"]["r_total_time_ms"]),
        "planning_ms": float(doc.get("query_optimization", {}).get("r_total_time_ms", 0.0)),
    }


def _server_times(
    runner: RawRunner, captured: dict[tuple[int, str], Captured], *, rounds: int, budget_s: float
) -> dict[tuple[int, str], list[float]]:
    """Server-side execution times (ms), interleaved like the client timings; none on SQLite."""
    server: dict[tuple[int, str], list[float]] = {key: [] for key in captured}
    if runner.kind == "sqlite":
        return server

    def timer(key: tuple[int, str], c: Captured) -> Any:
        return lambda: server[key].append(runner.server_ms(c))

    interleaved({name: timer(name, c) for name, c in captured.items()}, rounds=rounds, budget_s=budget_s)
    return server


def measure(target: Target, *, rounds: int, budget_s: float, codec: CursorCodec) -> list[dict[str, Any]]:
    """One result row per (depth, method): client and server medians, rows read, plan, SQL.

    All depths and methods are timed in the same interleaved rounds (`budget_s` per depth).
    """
    engine = make_engine(target.url)
    runner = RawRunner(engine)
    results: list[dict[str, Any]] = []
    try:
        captured: dict[tuple[int, str], Captured] = {}
        plans: dict[tuple[int, str], dict[str, Any]] = {}
        checks: dict[int, dict[str, Any]] = {}
        for depth in target.depths:
            by_method, checks[depth] = capture_methods(engine, depth, codec)
            if not checks[depth]["same_rows"]:
                log(f"  WARNING {target.label} depth {depth}: the methods returned different rows")
            for name, c in by_method.items():
                captured[depth, name] = c
                plans[depth, name] = runner.plan(c)  # also warms the cache
            runner.end_transaction()
        budget = budget_s * len(target.depths)
        client = interleaved(
            {key: (lambda c=c: runner.fetch(c)) for key, c in captured.items()},
            rounds=rounds,
            budget_s=budget,
        )
        server = _server_times(runner, captured, rounds=rounds, budget_s=budget)
        runner.end_transaction()
        for depth in target.depths:
            for name in METHODS:
                if (depth, name) not in captured:
                    continue
                key = (depth, name)
                results.append(
                    {
                        "engine": target.label,
                        "rows": target.rows,
                        "depth": depth,
                        "method": name,
                        "client_ms": summary(client[key]),
                        "server_ms": summary(server[key]),
                        **{k: v for k, v in plans[key].items() if k != "server_ms"},
                        "sql": captured[key].statement,
                        "parameters": repr(captured[key].parameters),
                        **checks[depth],
                    }
                )
            log(f"  db {target.label:>14} depth {depth:>9,}: " + _cells(depth, client, plans))
    finally:
        runner.close()
        engine.dispose()
    return results


def _cells(depth: int, client: dict[tuple[int, str], list[float]], plans: dict[tuple[int, str], Any]) -> str:
    cells = []
    for name in METHODS:
        if (depth, name) not in client:
            continue
        plan = plans[depth, name]
        cell = f"{name} {summary(client[depth, name])['median']:.3f} ms"
        if plan.get("rows_read") is not None:
            cell += f"/{plan['rows_read']:,} rows"
        if plan.get("vm_steps") is not None:
            cell += f"/{plan['vm_steps']:,} steps"
        cells.append(cell)
    return "  ".join(cells)
