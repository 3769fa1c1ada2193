"""Shards (`make bench-shards`): a page through the coordinator's postgres_fdw partitions, with 1,
2 and 4 shard servers (devtools/shards.py); writes bench/results/shards.json.

For each shard count, on the same 300,000 orders (seed_orders, three a minute):

- p50/p95 of a `newest` page of 20 at depth 0, 50% and 90%: ours (`paginate()` with the sort's
  bounded keyset, as the app pages when DATABASE_SHARD_URLS is set: LIMIT 22 through a Merge
  Append of one Foreign Scan per shard) against `OFFSET n LIMIT 20` on the partitioned parent;
  both return the same rows (checked before timing);
- the rows each shard sent for one page: the `FETCH` statements postgres_fdw ran on it, counted
  by pg_stat_statements on each shard (fetch_size is PAGE_SIZE + 2 = 22);
- export rows/s: the whole table in the export's keyset batches (5,000) through the coordinator;
- heavy ties: a `customer` page 90% deep (the demo's 25 names: thousands of rows share the
  position's name), the index entries each shard reads for one fetch, from `EXPLAIN (ANALYZE)` on
  the shard of the Remote SQL the coordinator sent: the seek the app ships (its range starts at
  the name, the rows tying with it before the position are read and filtered) against the split
  seek (the tie range `customer_key = :k AND id > :id` and the rest `customer_key > :k`, each
  shipped with its ORDER BY, merged by the coordinator; not what the app runs, docs/shards.md);
- add-shard: 2 shards to 3 (orders/data/shards.py: half of one shard's rows copied by logical
  replication, then one switch transaction) while a writer inserts one order per transaction
  and a reader reads first pages through the coordinator: the rows moved, how long the switch
  held its lock (what add-shard reports), the longest gap between the writer's commits and
  between the reader's pages while it ran, and how long the whole add took.

What two cores cannot show: every server, the coordinator and this client share two cores, so
shards add no parallel capacity here (and postgres_fdw reads them one after another under Merge
Append anyway); a round trip is a loopback hop, not a network one. The numbers show what each
page costs in work (rows read and sent per shard), how it grows with depth and with the number of
shards, not how far more machines would scale.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.orm import Session

from bench.common import (
    FILTERS,
    LIMIT,
    SECRET,
    SqlCapture,
    cursor_for,
    interleaved,
    keys_before,
    log,
    stopwatch,
    summary,
)
from bench.formatting import ms, num, table
from devtools.gunicorn import ROOT
from devtools.shards import Topology, topology
from orders.data.db import make_engine
from orders.data.models import Order
from orders.data.seed import seed_orders
from orders.data.shards import add_shard, fetch_size_for, init_shards
from orders.exports.stream import EXPORT_BATCH_SIZE
from orders.finding.sorts import SORTS
from pagination import AFTER, CursorCodec, Position, filters_fingerprint, iterate, paginate

RESULTS = ROOT / "bench" / "results" / "shards.json"
NOW = dt.datetime(2026, 3, 11, 12, 0, tzinfo=dt.UTC)
KEYSET = SORTS["newest"].sort
SEEK = "bounded"  # what the app pages shards with (orders/finding/request.py ListRequest.seek)
TABLE = Order.__table__
FETCHED = "SELECT coalesce(sum(rows), 0) FROM pg_stat_statements WHERE query LIKE 'FETCH%'"
CUSTOMER = SORTS["customer"].sort
# The split seek of a customer page: two exact index ranges, each shipped with its ORDER BY.
SPLIT = (
    "(SELECT * FROM orders WHERE customer_key = %(k)s AND id >= %(id)s "
    "ORDER BY customer_key, id LIMIT %(n)s) "
    "UNION ALL (SELECT * FROM orders WHERE customer_key > %(k)s ORDER BY customer_key, id LIMIT %(n)s) "
    "ORDER BY customer_key, id LIMIT %(n)s"
)


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


def _entries_read(top: Topology, engine: Engine, sql: str, params: Any) -> tuple[list[int], list[int]]:
    """(index entries each shard reads for one fetch of what the coordinator sent it for `sql`,
    the ids `sql` returns). postgres_fdw reads a shard in fetches of fetch_size rows: each
    Foreign Scan's Remote SQL is run on its shard with that LIMIT under EXPLAIN (ANALYZE), and
    the entries read are the scans' rows kept plus those removed by their filters."""
    fetch = fetch_size_for(LIMIT)
    with engine.connect() as conn:
        ids = [row.id for row in conn.exec_driver_sql(sql, params)]
        (plan,) = conn.exec_driver_sql("EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) " + sql, params).one()
    read = [0] * len(top.shards)
    for scan in _plan_nodes(plan[0]["Plan"]):
        if scan.get("Node Type") != "Foreign Scan":
            continue
        index = int(scan["Relation Name"].rsplit("_", 1)[1]) - 1
        shard = create_engine(top.shards[index].url(), isolation_level="AUTOCOMMIT")
        try:
            with shard.connect() as conn:
                (shard_plan,) = conn.exec_driver_sql(
                    f"EXPLAIN (ANALYZE, FORMAT JSON) {scan['Remote SQL']} LIMIT {fetch}"
                ).one()
        finally:
            shard.dispose()
        read[index] += sum(
            node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            for node in _plan_nodes(shard_plan[0]["Plan"])
            if node.get("Node Type", "").endswith("Scan")
        )
    return read, ids


def heavy_ties(top: Topology, engine: Engine, codec: CursorCodec, rows: int) -> dict[str, Any]:
    """Index entries read per shard for a customer page 90% deep: the app's seek and the split."""
    with Session(engine) as session:
        position = select(*(c.expr for c in CUSTOMER.columns)).order_by(*CUSTOMER.order_by())
        name, last = session.execute(position.offset(rows * 9 // 10).limit(1)).one()
        cursor = codec.encode(Position("customer", AFTER, filters_fingerprint(FILTERS), (name, last)))
        with SqlCapture(engine) as captured:
            page = paginate(
                session,
                select(TABLE),
                CUSTOMER,
                limit=LIMIT,
                codec=codec,
                after=cursor,
                filters=FILTERS,
                seek=SEEK,
            )
        shown = [r.id for r in page.items]
    (statement,) = [c for c in captured.statements if "FROM orders" in c.statement and "LIMIT" in c.statement]
    app, app_ids = _entries_read(top, engine, statement.statement, statement.parameters)
    split, split_ids = _entries_read(top, engine, SPLIT, {"k": name, "id": last, "n": LIMIT + 2})
    # Inclusive like the app's statement, which reads the boundary row too (its `_keyset_at`).
    assert app_ids == split_ids and shown == app_ids[1 : LIMIT + 1], "the split seek returns another page"
    ties = []
    for server in top.shards:
        shard = create_engine(server.url(), isolation_level="AUTOCOMMIT")
        with shard.connect() as conn:
            ties.append(
                int(conn.scalar(text("SELECT count(*) FROM orders WHERE customer_key = :k"), {"k": name}))
            )
        shard.dispose()
    return {"ties_per_shard": ties, "app_entries_per_shard": app, "split_entries_per_shard": split}


def _fetched_per_shard(top: Topology, run: Any) -> list[int]:
    """Rows each shard sent to the coordinator while `run()` ran (pg_stat_statements' FETCHes)."""
    engines = [create_engine(s.url(), isolation_level="AUTOCOMMIT") for s in top.shards]
    try:
        for engine in engines:
            with engine.connect() as conn:
                conn.execute(text("SELECT pg_stat_statements_reset()"))
        run()
        counts = []
        for engine in engines:
            with engine.connect() as conn:
                counts.append(int(conn.scalar(text(FETCHED))))
        return counts
    finally:
        for engine in engines:
            engine.dispose()


def measure(shards: int, rows: int, rounds: int) -> dict[str, Any]:
    codec = CursorCodec(SECRET)
    with topology(shards) as top:
        log(f"{shards} shard(s): init-db and seeding {rows:,} orders through the coordinator...")
        init_shards(top.url, [s.url() for s in top.shards], page_size=LIMIT)
        engine = make_engine(top.url)
        with stopwatch() as seeding, Session(engine) as session:
            seed_orders(session, rows, now=NOW)
        for server in top.shards:
            shard = create_engine(server.url(), isolation_level="AUTOCOMMIT")
            with shard.connect() as conn:
                conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
                conn.execute(text("ANALYZE orders"))
            shard.dispose()
        depths = [0, rows // 2, rows * 9 // 10]
        session = Session(engine)
        methods: dict[tuple[int, str], Any] = {}
        for depth in depths:
            cursor = cursor_for(codec, keys_before(session, depth))

            def ours(cursor: str | None = cursor) -> list[int]:
                page = paginate(
                    session,
                    select(TABLE),
                    KEYSET,
                    limit=LIMIT,
                    codec=codec,
                    after=cursor,
                    filters=FILTERS,
                    seek=SEEK,
                )
                session.rollback()
                return [r.id for r in page.items]

            def offset(depth: int = depth) -> list[int]:
                stmt = select(TABLE).order_by(*KEYSET.order_by()).offset(depth).limit(LIMIT)
                ids = [r.id for r in session.execute(stmt)]
                session.rollback()
                return ids

            assert ours() == offset(), f"keyset and OFFSET disagree at depth {depth}"
            methods[depth, "keyset"], methods[depth, "offset"] = ours, offset
        fetched = {f"{d}/{m}": _fetched_per_shard(top, call) for (d, m), call in methods.items()}
        log(f"{shards} shard(s): timing {len(methods)} (depth, method) pairs...")
        samples = interleaved(methods, rounds=rounds, budget_s=60)
        with stopwatch() as export:
            exported = 0
            for batch in iterate(
                session, select(TABLE), KEYSET, batch_size=EXPORT_BATCH_SIZE, filters=FILTERS, seek=SEEK
            ):
                exported += len(batch.items)
                session.rollback()
        assert exported == rows
        session.close()
        ties = heavy_ties(top, engine, codec, rows)
        engine.dispose()
        return {
            "shards": shards,
            "rows": rows,
            "fetch_size": fetch_size_for(LIMIT),
            "seed_seconds": seeding["seconds"],
            "export_rows_per_s": rows / export["seconds"],
            "heavy_ties": ties,
            "pages": [
                {
                    "depth": d,
                    "method": m,
                    **summary(samples[d, m]),
                    "fetched_per_shard": fetched[f"{d}/{m}"],
                }
                for (d, m) in methods
            ],
        }


def measure_add(rows: int) -> dict[str, Any]:
    """add-shard from 2 shards to 3 under a writer and a reader, on `rows` orders."""
    codec = CursorCodec(SECRET)
    with topology(2, spare=1) as top:
        log(f"add-shard: 2 shards, seeding {rows:,} orders...")
        urls = [s.url() for s in top.shards]
        init_shards(top.url, urls, page_size=LIMIT)
        engine = make_engine(top.url)
        with Session(engine) as session:
            seed_orders(session, rows, now=NOW)
        stop = threading.Event()
        commits: list[float] = []
        pages: list[float] = []

        def writer() -> None:
            with Session(engine) as session:
                while not stop.is_set():
                    session.add(Order(customer="Writer", amount=1, status="paid", created_at=NOW))
                    session.commit()
                    commits.append(time.monotonic())
                    time.sleep(0.01)

        def reader() -> None:
            with Session(engine) as session:
                while not stop.is_set():
                    paginate(
                        session, select(TABLE), KEYSET, limit=LIMIT, codec=codec, filters=FILTERS, seek=SEEK
                    )
                    session.rollback()
                    pages.append(time.monotonic())
                    time.sleep(0.01)

        threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(1)
            log("add-shard: adding the third shard...")
            started = time.monotonic()
            added = add_shard(top.url, urls, top.spare[0].url(), page_size=LIMIT)
            ended = time.monotonic()
            time.sleep(1)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        engine.dispose()
        return {
            "rows": rows,
            "moved": added.moved,
            "lock_held_s": added.paused_s,
            "add_seconds": ended - started,
            "writer_longest_gap_s": _longest_gap(commits, started, ended),
            "reader_longest_gap_s": _longest_gap(pages, started, ended),
        }


def _longest_gap(times: list[float], start: float, end: float) -> float:
    around = [t for t in times if start - 1 <= t <= end + 1]
    return max((b - a for a, b in itertools.pairwise(around)), default=float("nan"))


def report_add(result: dict[str, Any]) -> str:
    return table(
        [
            "add-shard 2 -> 3",
            "rows moved",
            "switch held its lock",
            "longest gap: writer / reader",
            "whole add",
        ],
        [
            [
                f"{num(result['rows'])} orders",
                num(result["moved"]),
                ms(result["lock_held_s"] * 1000) + " ms",
                " / ".join(ms(result[k] * 1000) for k in ("writer_longest_gap_s", "reader_longest_gap_s"))
                + " ms",
                f"{result['add_seconds']:.1f} s",
            ]
        ],
    )


def report(results: list[dict[str, Any]]) -> str:
    lines = []
    header = [
        "shards",
        "depth",
        "ours p50 / p95 ms",
        "OFFSET p50 / p95 ms",
        "rows sent per shard: ours",
        "OFFSET",
    ]
    body = []
    for result in results:
        by = {(p["depth"], p["method"]): p for p in result["pages"]}
        for depth in sorted({p["depth"] for p in result["pages"]}):
            ours, off = by[depth, "keyset"], by[depth, "offset"]
            body.append(
                [
                    result["shards"],
                    f"{depth / result['rows']:.0%}",
                    f"{ms(ours['median'])} / {ms(ours['p95'])}",
                    f"{ms(off['median'])} / {ms(off['p95'])}",
                    ", ".join(num(n) for n in ours["fetched_per_shard"]),
                    ", ".join(num(n) for n in off["fetched_per_shard"]),
                ]
            )
    lines.append(table(header, body))
    lines.append("")
    lines.append(
        table(
            ["shards", "deep/shallow (ours)", "deep/shallow (OFFSET)", "export rows/s"],
            [
                [
                    r["shards"],
                    _ratio(r, "keyset"),
                    _ratio(r, "offset"),
                    num(r["export_rows_per_s"]),
                ]
                for r in results
            ],
        )
    )
    lines.append("")
    lines.append(
        table(
            [
                "shards",
                "customer page 90% deep: rows tying with the position, per shard",
                "entries read per page: app's seek",
                "split seek",
            ],
            [
                [
                    r["shards"],
                    ", ".join(num(n) for n in r["heavy_ties"]["ties_per_shard"]),
                    _per_shard(r["heavy_ties"]["app_entries_per_shard"]),
                    _per_shard(r["heavy_ties"]["split_entries_per_shard"]),
                ]
                for r in results
            ],
        )
    )
    return "\n".join(lines)


def _per_shard(counts: list[int]) -> str:
    return f"{num(sum(counts))} ({', '.join(num(n) for n in counts)})"


def _ratio(result: dict[str, Any], method: str) -> str:
    by = {p["depth"]: p["median"] for p in result["pages"] if p["method"] == method}
    return f"{by[max(by)] / by[0]:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--shards", default="1,2,4", help='shard counts, comma-separated ("": the add only)')
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--output", default=None, help=f"default {RESULTS} (--quick: bench/results/quick/)")
    parser.add_argument("--quick", action="store_true", help="30,000 rows, 5 rounds (about a minute)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = min(args.rows, 30_000), min(args.rounds, 5)
    output = Path(args.output or (RESULTS.parent / "quick" / RESULTS.name if args.quick else RESULTS))
    output.parent.mkdir(parents=True, exist_ok=True)
    results = [measure(int(n), args.rows, args.rounds) for n in args.shards.split(",") if n]
    added = measure_add(args.rows)
    with output.open("w") as out:
        json.dump({"pages": results, "add_shard": added}, out, indent=1)
    print(report(results))
    print()
    print(report_add(added))


if __name__ == "__main__":
    main()
