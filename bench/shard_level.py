"""Shards (`make bench-shards`): a page through the coordinator's postgres_fdw partitions, with 1,
2 and 4 shard servers (devtools/shards.py); writes bench/results/shards.json.

For each shard count, on the same 300,000 orders (seed_orders, three a minute):

- p50/p95 of a `newest` page of 20 at depth 0, 50% and 90%: ours (`paginate()` with the sort's
  bounded keyset, as the app pages when DATABASE_SHARD_URLS is set: LIMIT 22 through a Merge
  Append of one Foreign Scan per shard) against `OFFSET n LIMIT 20` on the partitioned parent;
  both return the same rows (checked before timing);
- the rows each shard sent for one page: the `FETCH` statements postgres_fdw ran on it, counted
  by pg_stat_statements on each shard (fetch_size is PAGE_SIZE + 2 = 22);
- export rows/s: the whole table in the export's keyset batches (5,000) through the coordinator.

What two cores cannot show: every server, the coordinator and this client share two cores, so
shards add no parallel capacity here (and postgres_fdw reads them one after another under Merge
Append anyway); a round trip is a loopback hop, not a network one. The numbers show what each
page costs in work (rows read and sent per shard), how it grows with depth and with the number of
shards, not how far more machines would scale.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from bench.common import FILTERS, LIMIT, SECRET, cursor_for, interleaved, keys_before, log, stopwatch, summary
from bench.formatting import ms, num, table
from devtools.gunicorn import ROOT
from devtools.shards import Topology, topology
from orders.db import make_engine
from orders.export import EXPORT_BATCH_SIZE
from orders.models import Order
from orders.seed import seed_orders
from orders.shards import fetch_size_for, init_shards
from orders.sorts import SORTS
from pagination import CursorCodec, iterate, paginate

RESULTS = ROOT / "bench" / "results" / "shards.json"
NOW = dt.datetime(2026, 3, 11, 12, 0, tzinfo=dt.UTC)
BOUNDED = SORTS["newest"].bounded_keyset
TABLE = Order.__table__
FETCHED = "SELECT coalesce(sum(rows), 0) FROM pg_stat_statements WHERE query LIKE 'FETCH%'"


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
                    session, select(TABLE), BOUNDED, limit=LIMIT, codec=codec, after=cursor, filters=FILTERS
                )
                session.rollback()
                return [r.id for r in page.items]

            def offset(depth: int = depth) -> list[int]:
                stmt = select(TABLE).order_by(*BOUNDED.order_by()).offset(depth).limit(LIMIT)
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
                session, select(TABLE), BOUNDED, batch_size=EXPORT_BATCH_SIZE, filters=FILTERS
            ):
                exported += len(batch.items)
                session.rollback()
        assert exported == rows
        session.close()
        engine.dispose()
        return {
            "shards": shards,
            "rows": rows,
            "fetch_size": fetch_size_for(LIMIT),
            "seed_seconds": seeding["seconds"],
            "export_rows_per_s": rows / export["seconds"],
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
    return "\n".join(lines)


def _ratio(result: dict[str, Any], method: str) -> str:
    by = {p["depth"]: p["median"] for p in result["pages"] if p["method"] == method}
    return f"{by[max(by)] / by[0]:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--shards", default="1,2,4", help="shard counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--output", default=None, help=f"default {RESULTS} (--quick: bench/results/quick/)")
    parser.add_argument("--quick", action="store_true", help="30,000 rows, 5 rounds (about a minute)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = min(args.rows, 30_000), min(args.rounds, 5)
    output = Path(args.output or (RESULTS.parent / "quick" / RESULTS.name if args.quick else RESULTS))
    output.parent.mkdir(parents=True, exist_ok=True)
    results = [measure(int(n), args.rows, args.rounds) for n in args.shards.split(",")]
    with output.open("w") as out:
        json.dump(results, out, indent=1)
    print(report(results))


if __name__ == "__main__":
    main()
