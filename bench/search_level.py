"""Search level: the time of one searched page (paginate() on a connection, as the app reads it),
per engine and sort, at 10% and 90% depth of a common word's matches (one customer in 25) and
for a rare word (one order in 20,000), against an unsearched page 90% deep in the same sort and
against the search before order_words (the start of the whole name: the customer_key range in
"Customer A–Z", the sort's own index with other customers skipped elsewhere), for a common and a
rare name.

Interleaved rounds (bench/common.py `interleaved`), medians in ms, ratios within one run. The
rare orders are inserted through the ORM (words written as the API writes them) and deleted
after, so the other levels see the table as seeded.

The words level (`measure_words`, `report_words`): one first page of a search of 1 to 10 words
as the app reads it (orders/finding/reader.py page: the rarest word's range, a bounded window of it), for
words that are each common but never together (the worst case: no page fills) and for absent
words; p50 and p99 per engine.

    python -m bench.search_level [--rows 60000] [--engines sqlite,postgresql,mysql] [--words-only]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, delete, text
from sqlalchemy.orm import Session

from orders.data.db import make_engine
from orders.data.models import Order
from orders.finding import reader
from orders.finding.request import ListRequest
from orders.finding.search import Search, name_start
from orders.finding.sorts import SORTS
from pagination import AFTER, CursorCodec, Position, filters_fingerprint, paginate

from .common import LIMIT, Target, interleaved, markdown_table, summary
from .databases import SEED_NOW, seeded

RARE = "Zacarias Quintanilha"
COMMON, RARE_WORD = "fre", "quint"  # Úrsula Freitas's surname: 1 customer in 25 (not the first word)


def _cursor(
    conn: Connection, codec: CursorCodec, sort: str, filters: Any, stmt: Any, keyset: Any, at: int
) -> str:
    keys = conn.execute(
        stmt.with_only_columns(*(c.expr for c in keyset.columns), maintain_column_froms=True)
        .order_by(*keyset.order_by())
        .offset(at)
        .limit(1)
    ).one()
    return codec.encode(Position(sort, AFTER, filters_fingerprint(filters), tuple(keys)))


def measure(target: Target, *, rounds: int, budget_s: float, codec: CursorCodec) -> list[dict[str, Any]]:
    engine = make_engine(target.url)
    rare_orders = max(1, target.rows // 20_000)
    try:
        with Session(engine) as session:
            # Spread over the table's dates (the seed's minutes), as a rare customer's orders are.
            minutes = target.rows // 3
            session.add_all(
                Order(
                    customer=RARE,
                    amount=i + 1,
                    status="paid",
                    created_at=SEED_NOW - dt.timedelta(minutes=minutes * i // rare_orders),
                )
                for i in range(rare_orders)
            )
            session.commit()
        _analyze(engine)
        common_matches = target.rows // 25
        results = []
        with engine.connect() as conn:
            for sort in SORTS:
                cases: dict[str, tuple[Any, Any, Any, str]] = {}
                plain = ListRequest(sort, None, LIMIT)
                cases["unsearched page at 90%"] = (
                    plain.statement(),
                    plain.sort,
                    plain.filters,
                    _cursor(
                        conn,
                        codec,
                        sort,
                        plain.filters,
                        plain.statement(),
                        plain.sort,
                        int(target.rows * 0.9),
                    ),
                )
                for label, word, depth, matches in (
                    (f"common word '{COMMON}' at 10%", COMMON, 0.1, common_matches),
                    (f"common word '{COMMON}' at 90%", COMMON, 0.9, common_matches),
                    (f"rare word '{RARE_WORD}'", RARE_WORD, 0.0, rare_orders),
                ):
                    listing = ListRequest(sort, None, LIMIT, Search.parse(word))
                    stmt, keyset = listing.statement(), listing.sort
                    at = int(matches * depth)
                    cursor = _cursor(conn, codec, sort, listing.filters, stmt, keyset, at)
                    cases[label] = (stmt, keyset, listing.filters, cursor)
                # Before order_words: the start of the whole name ("urs" finds Úrsula; "fre" nothing).
                old = ListRequest(sort, None, LIMIT)
                old_stmt = name_start(old.statement(), "urs")
                old_filters = {"status": None, "q": "urs"}
                cursor = _cursor(
                    conn, codec, sort, old_filters, old_stmt, old.sort, int(common_matches * 0.9)
                )
                cases["before: name start 'urs' at 90%"] = (old_stmt, old.sort, old_filters, cursor)
                # ... and for a rare name: the sort's own index read until its few orders are met.
                rare_stmt, rare_filters = name_start(old.statement(), "zac"), {"status": None, "q": "zac"}
                cursor = _cursor(conn, codec, sort, rare_filters, rare_stmt, old.sort, 0)
                cases["before: name start 'zac' (rare)"] = (rare_stmt, old.sort, rare_filters, cursor)

                def page(case: tuple[Any, Any, Any, str]) -> None:
                    stmt, keyset, filters, after = case
                    conn.rollback()
                    found = paginate(
                        conn, stmt, keyset, limit=LIMIT, codec=codec, filters=filters, after=after
                    )
                    assert found.items

                timings = interleaved(
                    {label: functools.partial(page, case) for label, case in cases.items()},
                    rounds=rounds,
                    budget_s=budget_s,
                )
                for label, values in timings.items():
                    results.append({"engine": target.label, "sort": sort, "case": label, **summary(values)})
        return results
    finally:
        with Session(engine) as session:
            session.execute(delete(Order).where(Order.customer == RARE))
            session.commit()
        engine.dispose()


# Each common (a surname or first name's start held by 1 to 3 customers in 25), never all together.
COMMON_WORDS = ["fre", "ana", "lim", "sou", "per", "cas", "mel", "gom", "dia", "bar"]
ABSENT_WORDS = ["xqa", "xqb", "xqc", "xqd", "xqe", "xqf", "xqg", "xqh", "xqi", "xqj"]


def measure_words(
    target: Target, *, rounds: int, budget_s: float, codec: CursorCodec
) -> list[dict[str, Any]]:
    """p50/p99 of one first page of a search of 1-10 words, common (never together) and absent,
    in "Newest first", read as the app reads it."""
    engine = make_engine(target.url)
    _analyze(engine)
    cases: dict[str, ListRequest] = {}
    for n in range(1, 11):
        for kind, words in (("common", COMMON_WORDS), ("absent", ABSENT_WORDS)):
            search = Search.parse(" ".join(words[:n]))
            cases[f"{n} {kind}"] = ListRequest("newest", None, LIMIT, search, codec=codec)
    try:
        with Session(engine) as session:

            def page(listing: ListRequest) -> None:
                session.rollback()
                reader.page(listing, session)

            timings = interleaved(
                {label: functools.partial(page, listing) for label, listing in cases.items()},
                rounds=rounds,
                budget_s=budget_s,
            )
        results = []
        for label, values in timings.items():
            ordered = sorted(values)
            p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] if ordered else None
            results.append({"engine": target.label, "case": label, **summary(values), "p99": p99})
        return results
    finally:
        engine.dispose()


def report_words(results: list[dict[str, Any]]) -> str:
    """One table: words x engine, p50 / p99 ms of a first page."""
    engines = list(dict.fromkeys(r["engine"] for r in results))
    cases = list(dict.fromkeys(r["case"] for r in results))
    cell = {(r["engine"], r["case"]): r for r in results}
    rows = [
        [case]
        + [
            f"{cell[(e, case)]['median']:.2f} / {cell[(e, case)]['p99']:.2f}" if (e, case) in cell else "-"
            for e in engines
        ]
        for case in cases
    ]
    return markdown_table(
        "words level: p50 / p99 ms of one first page, newest first (n, words)", ["words", *engines], rows
    )


def _analyze(engine: Any) -> None:
    kind = engine.dialect.name
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if kind == "postgresql":
            conn.execute(text("VACUUM (ANALYZE) order_words"))
        elif kind in ("mysql", "mariadb"):
            conn.execute(text("ANALYZE TABLE order_words")).fetchall()


def report(results: list[dict[str, Any]]) -> str:
    """A table per engine: median ms per case and sort, and each case over the unsearched page."""
    tables = []
    for engine in dict.fromkeys(r["engine"] for r in results):
        mine = [r for r in results if r["engine"] == engine]
        sorts = list(dict.fromkeys(r["sort"] for r in mine))
        cell = {(r["sort"], r["case"]): r["median"] for r in mine}
        rows = []
        for case in dict.fromkeys(r["case"] for r in mine):
            shown = []
            for sort in sorts:
                ms, base = cell[(sort, case)], cell[(sort, "unsearched page at 90%")]
                shown.append(f"{ms:.3f} ({ms / base:.2f}x)")
            rows.append([case, *shown])
        title = f"{engine}: median ms of one page (x the unsearched page at 90% in the same sort)"
        tables.append(markdown_table(title, ["case", *sorts], rows))
    return "\n".join(tables)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.search_level", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--engines", default="sqlite,postgresql,mysql")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--words-only", action="store_true", help="Only the words level.")
    args = parser.parse_args(argv)
    words: list[dict[str, Any]] = []
    codec = CursorCodec("bench-search-secret-bench-search-secret")
    results: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-search-"))
    for kind, url in seeded(args.engines, "search", args.rows, tmp):
        target = Target(kind, kind, url, args.rows, [])
        words += measure_words(target, rounds=args.rounds * 4, budget_s=40.0, codec=codec)
        if not args.words_only:
            results += measure(target, rounds=args.rounds, budget_s=20.0, codec=codec)
    if results:
        print(report(results))
    print(report_words(words))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
