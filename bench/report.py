"""Turn the raw results into Markdown tables; write raw/results.json, summary.json, report.md and
latency.png.

The targets are evaluated in ``targets`` and the plot drawn in ``plot``; this module lays out
the report (the machine, the PASS/MISS list, one table per level) and writes the files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import browser_level, summary
from . import formatting as fmt
from .common import LIMIT
from .export_level import marginal_rate
from .floor_app import FLOOR_NAMES
from .plot import plot, plot_wheel
from .targets import evaluate


def _machine(results: dict[str, Any]) -> str:
    m = results["machine"]
    versions = ", ".join(
        f"{fmt.engine_name(label)} {info['version']}"
        for label, info in results["engines"].items()
        if "version" in info and label in ("sqlite", "postgresql", "mysql")
    )
    packages = ", ".join(f"{k} {v}" for k, v in m["packages"].items())
    skipped = [
        f"{label}: {info['skipped']}" for label, info in results["engines"].items() if "skipped" in info
    ]
    code = results.get("code", {})
    lines = [
        f"- Code measured: commit {code.get('commit', '?')}"
        + (" with uncommitted changes to the app code" if code.get("app_code_dirty") else ""),
        f"- Machine: `nproc` = {m['nproc']}, {m['cpu']}, {m['memory_gb']} GB RAM, {m['platform']}",
        f"- Engines: {versions}",
        f"- Python {m['python']}; {packages}; load generator: {m.get('wrk') or 'none'}",
        f"- Load average at start {tuple(round(x, 2) for x in m['loadavg_start'])}, at end "
        f"{tuple(round(x, 2) for x in m.get('loadavg_end', ()))} (other work on the machine adds noise)",
    ]
    pg = results["engines"].get("postgresql", {})
    if "shared_buffers" in pg:
        lines.append(
            f"- PostgreSQL shared_buffers {pg['shared_buffers']}, work_mem {pg['work_mem']}, jit {pg['jit']}"
        )
    my = results["engines"].get("mysql", {})
    if "innodb_buffer_pool_size" in my:
        lines.append(
            f"- MariaDB innodb_buffer_pool_size {my['innodb_buffer_pool_size'] / 2**20:.0f} MiB, "
            f"query cache {my['query_cache_type']}"
        )
    lines += [f"- SKIPPED {s}" for s in skipped]
    return "\n".join(lines)


def _targets_md(targets: list[dict[str, Any]]) -> str:
    rows = [
        [t["status"] if t["kind"] == "target" else f"({t['status']})", t["target"], t["measured"]]
        for t in targets
    ]
    return fmt.table(["result", "target", "measured (medians, one run)"], rows)


def _seeding_md(results: dict[str, Any]) -> str:
    rows = [
        [
            fmt.engine_name(label),
            f"{i['rows']:,}",
            f"{i['seed_seconds']:.2f}",
            f"{i['rows_per_second']:,.0f}",
            f"{i['analyze_seconds']:.2f}",
        ]
        for label, i in results["engines"].items()
        if "seed_seconds" in i
    ]
    return fmt.table(["database", "rows", "seed_orders() s", "rows/s", "ANALYZE s"], rows)


def _db_md(results: dict[str, Any]) -> str:
    db = fmt.index(results["db_level"])
    parts = [
        "Median of interleaved runs of the captured statement on a raw DBAPI connection: client round trip "
        "in ms, server-side execution time in parentheses (PostgreSQL `Execution Time`, MariaDB "
        "`r_total_time_ms`); rows read from the plan (SQLite: VM instructions, it has no row counter). "
        "`keyset` is the page query of `paginate()` (LIMIT 21; on cursor pages LIMIT 22, read from the "
        "cursor's own row, whose presence proves a previous page); `probe` is a separate probe "
        "statement, when `paginate()` sends one (only when the cursor's row is gone)."
    ]
    for engine in fmt.engines(results["db_level"]):
        depths = fmt.depths(results["db_level"], engine)
        sqlite = fmt.kind(engine) == "sqlite"
        unit = "VM steps" if sqlite else "rows"

        def cell(depth: int, method: str, engine: str = engine, sqlite: bool = sqlite) -> tuple[str, str]:
            r = db.get((engine, depth, method))
            if not r:
                return "–", "–"
            server = r["server_ms"]["median"]
            t = fmt.ms(r["client_ms"]["median"]) + (f" ({fmt.ms(server)})" if server is not None else "")
            return t, fmt.num(r["vm_steps"] if sqlite else r["rows_read"])

        # The probe columns only when paginate() sent a separate probe statement.
        probed = any((engine, d, "keyset_probe") in db for d in depths)
        methods = (
            ("offset", "keyset", "keyset_probe", "sqlakeyset")
            if probed
            else ("offset", "keyset", "sqlakeyset")
        )
        rows = []
        for depth in depths:
            cells = [c for m in methods for c in cell(depth, m)]
            off, key = db.get((engine, depth, "offset")), db.get((engine, depth, "keyset"))
            ratio = fmt.ratio(off["client_ms"]["median"], key["client_ms"]["median"]) if off and key else None
            same = all(
                db[(engine, depth, m)]["same_rows"] for m in ("offset", "keyset") if (engine, depth, m) in db
            )
            rows.append([f"{depth:,}", *cells, fmt.x(ratio), "yes" if same else "**NO**"])
        rows_n = results["engines"].get(engine, {}).get("rows")
        titles = {"offset": "OFFSET", "keyset": "keyset", "keyset_probe": "probe", "sqlakeyset": "sqlakeyset"}
        header = ["depth", *(f"{titles[m]} {what}" for m in methods for what in ("ms", unit))]
        header += ["OFFSET / keyset", "same rows"]
        parts.append(f"### {fmt.engine_name(engine)} ({fmt.num(rows_n)} rows)\n\n" + fmt.table(header, rows))
        deep = depths[-1]
        plans = []
        for m in ("offset", "keyset", "keyset_probe", "sqlakeyset"):
            r = db.get((engine, deep, m))
            if r:
                planning = (
                    f" (planning {fmt.ms(r['planning_ms'])} ms)" if r.get("planning_ms") is not None else ""
                )
                plans.append(f"- {m}: {r['plan']}{planning}")
        parts.append(f"Plans at depth {deep:,}:\n\n" + "\n".join(plans))
    return "\n\n".join(parts)


def _sql_md(results: dict[str, Any]) -> str:
    db = fmt.index(results["db_level"])
    parts = []
    for engine in fmt.engines(results["db_level"]):
        if "-" in engine:
            continue  # the large table sends the same SQL as its engine's main table
        deep = fmt.depths(results["db_level"], engine)[-1]
        for method in ("keyset", "keyset_probe", "sqlakeyset"):
            r = db.get((engine, deep, method))
            if r:
                sql = f"{r['sql'].strip()}\n-- {r['parameters']}"
                parts.append(f"{fmt.engine_name(engine)}, {method}:\n\n```sql\n{sql}\n```")
    return (
        "<details><summary>The captured SQL at the deepest position</summary>\n\n"
        + "\n\n".join(parts)
        + "\n\n</details>"
    )


def _py_md(results: dict[str, Any]) -> str:
    py = fmt.index(results["py_level"])
    parts = [
        "Median ms per page through one ORM session (closed and reconnected, untimed, before every call), "
        "methods interleaved in every round. `paginate()` includes its previous-page check (the "
        "cursor's own row, read with the page) and cursor signing. The async columns: the same "
        "statement through an AsyncSession (aiosqlite, psycopg async, aiomysql), "
        "`pagination.asyncio.paginate` vs `sqlakeyset.asyncio.select_page`, in the same rounds. "
        "`hand-written`: the page's statement written by hand (`tuple_(created_at, id) < (x, y)`, "
        "on MariaDB the expanded form with a leading bound; LIMIT 21), no cursors, no previous-page "
        "check: the floor paginate() is measured against."
    ]
    for engine in fmt.engines(results["py_level"]):
        rows = []
        for depth in fmt.depths(results["py_level"], engine):
            cells = [
                py.get((engine, depth, m))
                for m in (
                    "paginate",
                    "sqlakeyset",
                    "offset",
                    "paginate async",
                    "sqlakeyset async",
                    "hand-written",
                )
            ]
            medians = [c["ms"]["median"] if c else None for c in cells]
            p95s = [c["ms"]["p95"] if c else None for c in cells]
            n = cells[0]["ms"]["n"] if cells[0] else 0
            rows.append(
                [
                    f"{depth:,}",
                    *(f"{fmt.ms(m)} (p95 {fmt.ms(p)})" for m, p in zip(medians, p95s, strict=True)),
                    fmt.x(fmt.ratio(medians[0], medians[1])),
                    fmt.x(fmt.ratio(medians[2], medians[0])),
                    fmt.x(fmt.ratio(medians[3], medians[4])),
                    fmt.x(fmt.ratio(medians[0], medians[5])),
                    n,
                ]
            )
        header = [
            "depth",
            "paginate() ms",
            "sqlakeyset ms",
            "OFFSET ms",
            "async paginate ms",
            "async sqlakeyset ms",
            "hand-written ms",
            "paginate / sqlakeyset",
            "OFFSET / paginate",
            "async paginate / sqlakeyset",
            "paginate / hand-written",
            "runs",
        ]
        parts.append(f"### {fmt.engine_name(engine)}\n\n" + fmt.table(header, rows))
    return "\n\n".join(parts)


def _http_md(results: dict[str, Any]) -> str:
    http = results.get("http")
    if not http:
        return "Not measured (no PostgreSQL, or the phase failed)."
    points = http["endpoints"]
    trivial = next(p for p in points if p["name"] in FLOOR_NAMES)

    def share(p: dict[str, Any]) -> str:
        # Results from before the per-round share: the best passes' ratio, said so.
        if "share_of_trivial" not in p:
            return f"{p['rps'] / trivial['rps']:.0%} (best passes)"
        rounds = p["share_of_trivial_rounds"]
        return f"{p['share_of_trivial']:.1%} ({min(rounds):.0%}-{max(rounds):.0%})"

    rows = [
        [
            p["name"],
            f"{p['rps']:,.0f}",
            fmt.ms(p["p50_ms"]),
            fmt.ms(p["p95_ms"]),
            fmt.ms(p["p99_ms"]),
            f"{p['rps_all_passes']:,.0f} / {fmt.ms(p['p50_ms_median_of_passes'])}",
            f"{p['requests']:,}",
            p["errors"] + p["non_2xx_3xx"],
            share(p),
        ]
        for p in points
    ]
    header = ["endpoint", "req/s", "p50 ms", "p95 ms", "p99 ms", "all passes: req/s / median p50"]
    table = fmt.table([*header, "requests", "errors", f"of the {trivial['name']}'s req/s"], rows)
    return (
        f"gunicorn, {http['workers']} workers (gthread, one thread each), on the {http['rows']:,}-row "
        "PostgreSQL database; "
        f"{http['load_generator']} with {http['connections']} connections, "
        f"{http['seconds_per_endpoint']:g} s per endpoint after a warm-up, in {http.get('passes', 1)} "
        "interleaved passes over all endpoints. Each endpoint's figures come from its best pass "
        "(highest req/s: other work on the machine only slows a pass down); all passes are in "
        "results.json. The deep fragment was checked to start at the right row: "
        f"{'yes' if http['deep_fragment_verified'] else '**NO**'}.\n\n{table}\n\n"
        + (
            "The share of the floor is per round: each pass over the floor's pass of "
            "the same round, the median of the rounds (their range in brackets); every request on a "
            "connection of its own (`Connection: close`), so that a pass does not stay on one worker. "
            if "share_of_trivial" in trivial
            else ""
        )
        + (
            "The floor is a **bare Flask app** (`bench/floor_app.py`: one route returning `hello`, no "
            "hooks) under a second gunicorn started by the same command; only 2xx answers count; "
            if trivial["name"] == FLOOR_NAMES[0]
            else "The floor is the **trivial Flask route**, which returns `ok` through the same app, "
            "hooks and gunicorn; "
        )
        + "`/static/app.css` is Flask's static-file view; "
        "`/healthz` is readiness: it connects afresh (its own engine, no pool) and checks the "
        "database and the rate-limit storage at most once a second per process, and answers "
        "from that check otherwise. The load generator shares the 2 cores with "
        "gunicorn and PostgreSQL." + _busy(http)
    )


def _busy(http: dict[str, Any]) -> str:
    before, after = http.get("cpu_busy_percent_before"), http.get("cpu_busy_percent_after")
    if before is None:
        return ""
    rounds = [p.get("cpu_busy_before") for p in http["endpoints"][0]["passes"]]
    busy_rounds = sum(1 for b in rounds if b is not None and b >= 10)
    text = (
        f"\n\nOther work on the machine (CPU busy while the server idled): {before:.0f}% before the load, "
        f"{after:.0f}% after; {busy_rounds} of {len(rounds)} rounds of passes started busy (each round "
        "first waits up to 15 s for quiet)"
    )
    if max(before, after) > 15 or busy_rounds > len(rounds) // 2:
        return text + " — **the machine was not quiet: these HTTP numbers are pessimistic.**"
    return text + "."


def _profile_md(results: dict[str, Any]) -> str:
    prof = results.get("profile")
    if not prof:
        return "Not measured."
    deep, first = prof["deep"], prof["first"]
    first_areas = {a["area"]: a for a in first["areas"]}
    rows = []
    for a in deep["areas"]:
        if a["share"] < 0.005:
            continue
        before = first_areas.get(a["area"], {}).get("ms_per_request")
        extra = a["ms_per_request"] - before if before is not None else None
        rows.append(
            [a["area"], f"{a['share']:.0%}", fmt.ms(a["ms_per_request"]), fmt.ms(before), fmt.ms(extra)]
        )
    rows.append(
        [
            "**total per request (unprofiled)**",
            "100%",
            fmt.ms(deep["ms_per_request_unprofiled"]),
            fmt.ms(first["ms_per_request_unprofiled"]),
            fmt.ms(deep["ms_per_request_unprofiled"] - first["ms_per_request_unprofiled"]),
        ]
    )

    def line(p: dict[str, Any]) -> str:
        return (
            f"- `{p['path']}` ({p['name']}): {p['ms_per_request_unprofiled']:.2f} ms per request "
            f"unprofiled, {p['statements_per_request']:.1f} SQL statements per request taking "
            f"{p['sql_ms_per_request']:.2f} ms (cursor execute, from engine events; the pool's pre-ping "
            "on checkout does not pass through them)"
        )

    return (
        f"{deep['requests']} requests each, `HX-Request: true`, through Flask's test client under "
        "pyinstrument (in-process: no HTTP server, no network to the client):\n\n"
        + line(deep)
        + "\n"
        + line(first)
        + "\n\nSelf time by area; frames outside these packages count for their caller's area; ms = share x "
        "the unprofiled time per request:\n\n"
        + fmt.table(["area", "share (deep)", "ms deep", "ms depth 0", "extra at depth"], rows)
        + f"\n\nTop functions by self time, ms per request ({deep['name']}):\n\n```\n"
        + deep["flat_top"]
        + "\n```\n\n<details><summary>Call tree (top)</summary>\n\n```\n"
        + deep["tree_top"]
        + "\n```\n\n</details>"
    )


def _export_md(results: dict[str, Any]) -> str:
    exports = results["export"]
    if not exports:
        return "Not measured."
    rows = []
    for e in exports:
        small = min((s for s in exports if s["kind"] == e["kind"]), key=lambda s: s["rows"])
        marginal = marginal_rate(small, e) if small is not e else None
        rows.append(
            [
                fmt.engine_name(e["engine"]),
                f"{e['rows']:,}",
                "yes" if e["exported_rows"] == e["rows"] else f"**{e['exported_rows']:,}**",
                f"{e['seconds']:.2f}",
                f"{e['rows_per_second']:,.0f}",
                fmt.num(marginal),
                f"{e['max_rss_mb']:.1f}",
                fmt.x(e["max_rss_mb"] / small["max_rss_mb"]),
                "–" if e["cpu_seconds"] is None else f"{e['cpu_seconds']:.2f}",
                f"{e['stream_rows_per_second']:,.0f}" if "stream_seconds" in e else "–",
                f"{e['dump_tool']}: {e['dump_seconds']:.2f} s" if "dump_seconds" in e else "–",
                f"**{e['stream_of_dump']:.2f}**" if "stream_of_dump" in e else "–",
            ]
        )
    source = exports[0].get("memory_source", "/usr/bin/time %M")
    batch = f"{exports[0]['batch_size']:,}" if "batch_size" in exports[0] else "the default"
    header = [
        "database",
        "rows",
        "all rows written",
        "wall s",
        "rows/s",
        "rows/s w/o start-up",
        "peak RSS MB",
        "RSS vs smallest",
        "CPU s",
        "download rows/s",
        "engine's own dump",
        "download / dump",
    ]
    return (
        f"`flask --app app export --output <file>` in a child process (batch size {batch}), wall clock "
        f"including Python start-up; peak RSS: {source} (Maximum resident set size); rows/s without "
        "start-up is the difference to the smallest export of the same "
        "engine. Download: `GET /orders/export.csv` streamed to its end in-process (best of three), "
        "beside the engine's own fastest dump of the same columns in the same order, in the same run "
        "(PostgreSQL: `COPY (SELECT ...) TO STDOUT` through psycopg; MariaDB: `mariadb --batch`; "
        "SQLite: `sqlite3 -csv`). On PostgreSQL the export is itself one COPY per batch.\n\n"
        + fmt.table(header, rows)
    )


def _browser_md(results: dict[str, Any]) -> str:
    parts = []
    if results.get("browser"):
        parts.append(browser_level.report(results["browser"]))
    if results.get("wheel"):
        parts.append(
            browser_level.wheel_report(results["wheel"])
            + " (bench/browser_level.py; the plot: wheel.png). Frame timings suffer from any other work "
            f"on the machine: load average {results['machine'].get('loadavg_end', [0.0])[0]:.2f} at the end."
        )
    return "\n\n".join(parts) or "Not measured (`--no-browser`, or Chromium missing)."


NOTES = """\
- Database-level targets use the server-side median where the engine measures it (PostgreSQL
  `Execution Time` with TIMING OFF, MariaDB `r_total_time_ms`); both exclude planning, which the
  plan lines quote. SQLite runs in-process, so its time is the call itself.
- All depths and methods of a table are timed in the same rounds, in a shuffled order, so that
  a burst of other work on the machine lands on all of them alike. Every timed call directly
  follows an untimed call of the same method: a fast query timed right after a slow one (the
  90 ms MariaDB OFFSET filesort) ran 0.3-0.4 ms slower, which charged the fast methods for the
  slow ones.
- The raw DBAPI connection keeps psycopg's default automatic prepared statements (after 5
  executions), as the app's engine does.
- PostgreSQL tables get `VACUUM (ANALYZE)` after seeding (statistics, visibility map, hint bits;
  it also pre-empts the insert-triggered autovacuum); MariaDB gets `ANALYZE TABLE`; SQLite is left
  as the app leaves it (no `sqlite_stat1`).
- sqlakeyset picks its predicate by dialect: a row value on SQLite and MySQL/MariaDB, the
  expanded form with a leading bound on PostgreSQL with psycopg 3 (its native-tuple path is for
  psycopg2 only). So it scans on MariaDB, as docs/design.md predicts for row values there.
- Rows read: PostgreSQL counts actual rows of the scan nodes plus rows removed by filter; index
  tuples skipped inside an Index Cond are not counted, so the buffers (in results.json) are the
  cross-check. MariaDB: r_rows x r_loops of each table access.
"""


def markdown(results: dict[str, Any], *, details: bool = True) -> str:
    title = f"# Keyset pagination benchmark ({results['mode']} run)"
    intro = (
        f"Started {results['started']}, took {results.get('duration_s', 0):.0f} s. Sort `newest` "
        f"(created_at desc, id desc), {LIMIT} rows per page, three orders per minute (ties on purpose). "
        f"Produced by `python -m bench.run{' --quick' if results['mode'] == 'quick' else ''}`; raw numbers "
        "in results.json."
    )
    sections = [
        title,
        intro,
        _machine(results),
        "## Targets\n\n" + _targets_md(results["targets"]),
        "## Seeding\n\n" + _seeding_md(results),
        "## Database level\n\n" + _db_md(results),
        "## Python level\n\n" + _py_md(results),
        "## HTTP level\n\n" + _http_md(results),
        "## Export\n\n" + _export_md(results),
        "## Browser level\n\n" + _browser_md(results),
    ]
    if details:
        sections.insert(6, _sql_md(results))
        sections.append("## Profile of the deep fragment\n\n" + _profile_md(results))
        sections.append("## How it was measured\n\n" + NOTES)
    if results["errors"]:
        sections.append(
            "## Failed phases\n\n" + "\n".join(f"- {e['phase']}: `{e['error']}`" for e in results["errors"])
        )
    return "\n\n".join(sections) + "\n"


def write(results: dict[str, Any], out_dir: Path, suffix: str = "") -> str:
    """Evaluate the targets, write raw/results.json (untracked), summary.json (what the docs are
    generated from, bench/summary.py), report.md and latency.png; return the stdout summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results["targets"] = evaluate(results)
    (out_dir / "raw").mkdir(exist_ok=True)
    (out_dir / "raw" / f"results{suffix}.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    summary.write(results, out_dir / f"summary{suffix}.json")
    (out_dir / f"report{suffix}.md").write_text(markdown(results))
    if results["db_level"] or results["py_level"]:
        plot(results, out_dir / f"latency{suffix}.png")
    if results.get("wheel"):
        plot_wheel(results["wheel"], out_dir / f"wheel{suffix}.png")
    return markdown(results, details=False)
