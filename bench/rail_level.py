"""Rail level: the time to build one sort's rail as GET /api/orders/rail builds it
(orders/finding/rail.py `build` on a connection: one read of rail_counts, the layout, a cursor
per bucket) and its answer's size, per engine, sort and status; against the same buckets counted
at read time (`COUNT(*) ... GROUP BY` the bucket over orders, the read the kept counts replace),
in the same run.

Interleaved rounds (bench/common.py `interleaved`), medians and p99 in ms; the ratio is the
read-time count's median over the kept counts' median.

    python -m bench.rail_level [--rows 300000] [--engines sqlite,postgresql,mysql]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import importlib.util
import json
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, text

from orders.data.db import make_engine
from orders.finding import rail
from orders.finding.request import ListRequest
from orders.finding.sorts import SORTS
from pagination import CursorCodec

from .common import Target, interleaved, markdown_table, summary
from .databases import seeded

# One sort per family (newest and oldest read the same counts), with and without a status.
CASES = [("newest", None), ("newest", "paid"), ("amount", None), ("customer", None)]
_MIGRATION = Path(__file__).resolve().parent.parent / "migrations" / "versions" / "0008_rail_counts.py"


def _bucket_sql() -> dict[str, dict[str, str]]:
    """The migration's bucket expressions (its one home), for the read-time count."""
    spec = importlib.util.spec_from_file_location("rail_counts_migration", _MIGRATION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: dict[str, dict[str, str]] = module.BUCKETS
    return found


def measure(target: Target, *, rounds: int, budget_s: float, codec: CursorCodec) -> list[dict[str, Any]]:
    engine = make_engine(target.url)
    buckets = _bucket_sql()[engine.dialect.name]
    try:
        with engine.connect() as conn:
            methods: dict[tuple[str, str], Any] = {}
            sizes: dict[str, dict[str, int]] = {}
            for sort, status in CASES:
                listing = ListRequest(sort, status, codec=codec)
                case = f"{sort}{' · ' + status if status else ''}"
                methods[(case, "kept counts")] = functools.partial(_build, conn, listing)
                family = rail.FAMILY[SORTS[sort].goto]
                counted = text(
                    f"SELECT status, {buckets[family].format(r='orders')} AS bucket, count(*) "
                    "FROM orders GROUP BY 1, 2"
                )
                methods[(case, "COUNT(*) at read time")] = functools.partial(_count, conn, counted)
                built = _build(conn, listing)
                body = json.dumps(built.as_json(), separators=(",", ":")).encode()
                zipped = len(gzip.compress(body))
                sizes[case] = {"buckets": len(built.buckets), "bytes": len(body), "gzip": zipped}
            timings = interleaved(methods, rounds=rounds, budget_s=budget_s)
        results = []
        for (case, method), values in timings.items():
            ordered = sorted(values)
            p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] if ordered else None
            row = {"engine": target.label, "case": case, "method": method, **summary(values), "p99": p99}
            results.append({**row, **sizes[case]})
        return results
    finally:
        engine.dispose()


def _build(conn: Connection, listing: ListRequest) -> rail.Rail:
    conn.rollback()  # a fresh snapshot each time, as a request reads
    return rail.build(listing, conn)


def _count(conn: Connection, counted: Any) -> None:
    conn.rollback()
    conn.execute(counted).all()


def report(results: list[dict[str, Any]]) -> str:
    """One table: engine and case, the kept counts' p50 / p99 ms, the answer's size, and the
    read-time count's p50 with its ratio."""
    cell = {(r["engine"], r["case"], r["method"]): r for r in results}
    rows = []
    for engine, case in dict.fromkeys((r["engine"], r["case"]) for r in results):
        kept, counted = cell[(engine, case, "kept counts")], cell[(engine, case, "COUNT(*) at read time")]
        rows.append(
            [
                engine,
                case,
                str(kept["buckets"]),
                f"{kept['bytes']:,} ({kept['gzip']:,})",
                f"{kept['median']:.2f} / {kept['p99']:.2f}",
                f"{counted['median']:.1f}",
                f"{counted['median'] / kept['median']:.0f}x",
            ]
        )
    header = ["engine", "rail", "buckets", "bytes (gzip)", "kept counts p50 / p99", "COUNT(*) p50", "ratio"]
    return markdown_table(
        "rail level: one rail built (ms, p50 / p99), its answer, against COUNT(*) at read time", header, rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rail_level", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--engines", default="sqlite,postgresql,mysql")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    codec = CursorCodec("bench-rail-secret-bench-rail-secret-0123")
    results: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-rail-"))
    for kind, url in seeded(args.engines, "rail", args.rows, tmp):
        target = Target(kind, kind, url, args.rows, [])
        results += measure(target, rounds=args.rounds, budget_s=30.0, codec=codec)
    print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
