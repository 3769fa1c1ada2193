"""Run the whole benchmark: ``python -m bench.run [--quick] [--engines sqlite,postgresql,mysql]``.

Seeds throwaway databases on SQLite, PostgreSQL and MariaDB (plus a 3M-row PostgreSQL table in
full mode), measures the database, Python, HTTP and export levels, and writes
``bench/results/summary.json`` (raw: ``raw/results.json``, untracked), ``report.md`` and
``latency.png``, and the README's Performance numbers (``bench.readme``). ``--quick`` writes to
``bench/results/quick/``, which git ignores: a user's quick run never dirties the checkout.

It is a benchmark, not a test: targets are printed as PASS/MISS but never asserted. The exit
status is non-zero only when a phase crashed (the others still run and are reported), and every
database and process it starts is removed again, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from pagination import CursorCodec

from . import (
    browser_level,
    databases,
    db_level,
    export_level,
    http_level,
    metrics_level,
    py_level,
    rail_level,
    readme,
    report,
    search_crowd,
    search_level,
    stages,
)
from .common import SECRET, Target, log

RESULTS_DIR = Path(__file__).resolve().parent / "results"
QUICK_DIR = RESULTS_DIR / "quick"  # untracked (.gitignore)
ENGINES = ("sqlite", "postgresql", "mysql")


@dataclass(frozen=True)
class Plan:
    """Sizes, depths and repetitions of one mode."""

    mode: str
    rows: int  # the main table on every engine
    small_rows: int  # the export comparison table
    large_rows: int | None  # PostgreSQL only; None skips it
    depths: tuple[int, ...]
    large_depths: tuple[int, ...]
    db_rounds: int
    py_rounds: int
    budget_s: float  # per depth and method group: slow OFFSETs stop early (at least 3 rounds)
    http_seconds: float  # per endpoint, split into http_passes interleaved passes
    http_passes: int
    http_warmup_s: float
    http_connections: int
    http_quiet_wait_s: float  # how long to wait for other work on the machine to stop first
    metrics_rounds: int  # metrics on against off (bench/metrics_level.py): interleaved rounds...
    metrics_seconds: float  # ...of this many seconds a side
    profile_requests: int
    browser_rows: int  # the browser level's seeded SQLite app
    wheel_rows: int  # rows the wheel scroll goes down through (and back up)
    crowd_seconds: float  # the search crowd (bench/search_crowd.py): quiet, then loaded, each


FULL = Plan(
    mode="full",
    rows=300_000,
    small_rows=30_000,
    large_rows=3_000_000,
    depths=(0, 1_000, 10_000, 100_000, 250_000),
    large_depths=(0, 1_000, 10_000, 100_000, 250_000, 2_500_000),
    db_rounds=50,
    py_rounds=50,
    budget_s=10.0,
    http_seconds=12.0,
    http_passes=12,
    http_warmup_s=2.0,
    http_connections=4,
    http_quiet_wait_s=120.0,
    metrics_rounds=24,
    metrics_seconds=2.0,
    profile_requests=500,
    browser_rows=8000,
    wheel_rows=3000,
    crowd_seconds=20.0,
)
# A tenth of the rows and depths, a few rounds, short loads: about a minute in all.
QUICK = Plan(
    mode="quick",
    rows=30_000,
    small_rows=3_000,
    large_rows=None,
    depths=(0, 100, 1_000, 10_000, 25_000),
    large_depths=(),
    db_rounds=15,
    py_rounds=15,
    budget_s=0.6,
    http_seconds=3.0,
    http_passes=3,
    http_warmup_s=1.0,
    http_connections=4,
    http_quiet_wait_s=10.0,
    metrics_rounds=3,
    metrics_seconds=1.0,
    profile_requests=100,
    browser_rows=6000,  # the level scrolls through 5,000 rows
    wheel_rows=600,
    crowd_seconds=4.0,
)


def machine_info() -> dict[str, Any]:
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    nproc = (
        subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
        if shutil.which("nproc")
        else ""
    )
    versions = {}
    for package in ("SQLAlchemy", "sqlakeyset", "Flask", "psycopg", "PyMySQL", "gunicorn", "pyinstrument"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    wrk = shutil.which("wrk")
    wrk_version = ""
    if wrk:  # "wrk debian/4.1.0-3+b2 [epoll] Copyright ..." on the first line
        first_line = (subprocess.run([wrk, "-v"], capture_output=True, text=True).stdout + "\n").splitlines()[
            0
        ]
        wrk_version = first_line.split(" [")[0]
    return {
        "nproc": nproc or str(os.cpu_count()),
        "cpu": cpu_model,
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": versions,
        "wrk": wrk_version or None,
        "loadavg_start": os.getloadavg(),
    }


def code_version() -> dict[str, Any]:
    """The commit measured, and whether the app code had uncommitted changes (others edit it too)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()

    if not shutil.which("git"):
        return {}
    dirty = git("status", "--porcelain", "--", "pagination", "orders", "app.py", "templates", "migrations")
    return {"commit": git("rev-parse", "--short", "HEAD"), "app_code_dirty": bool(dirty)}


def _raise_on_sigterm(_signum: int, _frame: Any) -> None:
    raise SystemExit(143)  # unwinds through the ExitStack: databases dropped, gunicorn stopped


class Run:
    """The state of one benchmark run: plan, results, and crash bookkeeping per phase."""

    def __init__(self, plan: Plan, engines: list[str], skip_browser: bool = False):
        self.plan = plan
        self.engines = engines
        self.skip_browser = skip_browser
        self.codec = CursorCodec(SECRET)
        self.tmp_dir = Path(tempfile.mkdtemp(prefix="bench-"))
        self.results: dict[str, Any] = {
            "mode": plan.mode,
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "plan": asdict(plan),
            "machine": machine_info(),
            "code": code_version(),
            "engines": {},
            "phases": {},
            "db_level": [],
            "py_level": [],
            "search": [],
            "search_words": [],
            "rail": [],
            "search_crowd": [],
            "http": None,
            "cost": None,
            "profile": None,
            "metrics": None,
            "export": [],
            "errors": [],
        }

    def phase(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run one phase; a crash is recorded (and makes the exit status non-zero), not fatal."""
        log(f"== {name}")
        t0 = time.perf_counter()
        try:
            return fn()
        except Exception as err:
            log(f"!! {name} failed: {err!r}")
            traceback.print_exc()
            self.results["errors"].append(
                {"phase": name, "error": repr(err), "traceback": traceback.format_exc()}
            )
            return None
        finally:
            self.results["phases"][name] = round(time.perf_counter() - t0, 1)

    def database(self, stack: ExitStack, kind: str, label: str, rows: int, depths: tuple[int, ...]) -> Target:
        url = stack.enter_context(databases.throwaway(kind, label, self.tmp_dir))
        info = {**databases.server_info(url), **databases.seed(url, rows)}
        self.results["engines"][label] = info
        log(
            f"  {label:>16}: {rows:>9,} rows seeded in {info['seed_seconds']:.2f} s "
            f"(analyze {info['analyze_seconds']:.2f} s), {info['version']}"
        )
        return Target(label, kind, url, rows, list(depths), info)

    def execute(self) -> None:
        plan = self.plan
        with ExitStack() as stack:
            main: list[Target] = []
            small: dict[str, Target] = {}
            large: Target | None = None
            for kind in self.engines:
                reason = databases.server_available(kind)
                if reason:
                    log(f"!! SKIPPING {kind}: server not available: {reason}")
                    self.results["engines"][kind] = {"skipped": reason}
                    continue
                target = self.phase(
                    f"seed {kind}", lambda k=kind: self.database(stack, k, k, plan.rows, plan.depths)
                )
                if target:
                    main.append(target)
                    label = f"{kind}-{plan.small_rows // 1000}k"
                    small_target = self.phase(
                        f"seed {label}",
                        lambda k=kind, lb=label: self.database(stack, k, lb, plan.small_rows, ()),
                    )
                    if small_target:
                        small[kind] = small_target
            if plan.large_rows and "postgresql" in [t.kind for t in main]:
                label = f"postgresql-{plan.large_rows // 1_000_000}M"
                large = self.phase(
                    f"seed {label}",
                    lambda: self.database(stack, "postgresql", label, plan.large_rows, plan.large_depths),
                )
            measured = [*main, *([large] if large else [])]

            for target in measured:
                rows = self.phase(
                    f"db level {target.label}",
                    lambda t=target: db_level.measure(
                        t, rounds=plan.db_rounds, budget_s=plan.budget_s, codec=self.codec
                    ),
                )
                self.results["db_level"] += rows or []
            for target in measured:
                rows = self.phase(
                    f"python level {target.label}",
                    lambda t=target: py_level.measure(
                        t, rounds=plan.py_rounds, budget_s=plan.budget_s, codec=self.codec
                    ),
                )
                self.results["py_level"] += rows or []
            for target in measured:
                rows = self.phase(
                    f"search level {target.label}",
                    lambda t=target: search_level.measure(
                        t, rounds=plan.db_rounds, budget_s=plan.budget_s, codec=self.codec
                    ),
                )
                self.results["search"] += rows or []
            if self.results["search"]:
                log(search_level.report(self.results["search"]))
            for target in measured:
                rows = self.phase(
                    f"search words level {target.label}",
                    lambda t=target: search_level.measure_words(
                        t, rounds=plan.db_rounds * 4, budget_s=plan.budget_s, codec=self.codec
                    ),
                )
                self.results["search_words"] += rows or []
            if self.results["search_words"]:
                log(search_level.report_words(self.results["search_words"]))
            for target in measured:
                rows = self.phase(
                    f"rail level {target.label}",
                    lambda t=target: rail_level.measure(
                        t, rounds=plan.db_rounds, budget_s=plan.budget_s, codec=self.codec
                    ),
                )
                self.results["rail"] += rows or []
            if self.results["rail"]:
                log(rail_level.report(self.results["rail"]))

            postgres = next((t for t in main if t.kind == "postgresql"), None)
            if postgres:
                self.results["http"] = self.phase(
                    "http level",
                    lambda: http_level.measure(
                        postgres,
                        self.codec,
                        seconds=plan.http_seconds,
                        passes=plan.http_passes,
                        warmup_s=plan.http_warmup_s,
                        connections=plan.http_connections,
                        tmp_dir=self.tmp_dir,
                        quiet_wait_s=plan.http_quiet_wait_s,
                    ),
                )
                # In-process beside the gunicorn ratio just measured: one run, one line (issue 59).
                self.results["cost"] = self.phase(
                    "request cost",
                    lambda: stages.measure(
                        postgres.url,
                        postgres.label,
                        requests=plan.profile_requests,
                        depth=min(postgres.rows * 9 // 10, 20_000),
                        quiet_wait_s=plan.http_quiet_wait_s / 4,
                    ),
                )
                if self.results["cost"]:
                    log(stages.table(self.results["cost"]))
                    log(stages.goals(self.results["cost"], self.results.get("http")))
                self.results["metrics"] = self.phase(
                    "metrics cost",
                    lambda: metrics_level.measure(
                        postgres,
                        self.codec,
                        rounds=plan.metrics_rounds,
                        seconds=plan.metrics_seconds,
                        warmup_s=plan.http_warmup_s,
                        connections=plan.http_connections,
                        tmp_dir=self.tmp_dir,
                    ),
                )
                self.results["profile"] = self.phase(
                    "profile",
                    lambda: http_level.profile(postgres, self.codec, requests=plan.profile_requests),
                )
            else:
                log("!! no PostgreSQL: HTTP level, metrics cost and profile skipped")

            for target in [*[small[t.kind] for t in main if t.kind in small], *measured]:
                row = self.phase(
                    f"export {target.label}",
                    lambda t=target: export_level.run_export(t.url, t.rows, self.tmp_dir, t.label),
                )
                if row:
                    self.results["export"].append({**row, "kind": target.kind})
            # Seeded apart: a shop's names (the levels above count on the 25 demo names).
            crowd = ",".join(k for k in self.engines if k in ("postgresql", "mysql"))
            for kind, url in databases.seeded(crowd, "crowd", plan.rows, self.tmp_dir, shop_names=True):
                row = self.phase(
                    f"search crowd {kind}",
                    lambda k=kind, u=url: search_crowd.measure(
                        k, u, seconds=plan.crowd_seconds, tmp_dir=self.tmp_dir
                    ),
                )
                if row:
                    self.results["search_crowd"].append(row)
            if self.results["search_crowd"]:
                log(search_crowd.report(self.results["search_crowd"]))
            log("== dropping databases")
        # Last, alone: Chromium's frame timings suffer most from other work on the two cores.
        if not self.skip_browser:
            self.results["browser"] = self.phase(
                "browser level", lambda: browser_level.measure(plan.browser_rows)
            )
            self.results["wheel"] = self.phase(
                "browser wheel scroll",
                lambda: browser_level.measure_wheel(plan.browser_rows, plan.wheel_rows),
            )

    def finish(self, started: float) -> None:
        shutil.rmtree(self.tmp_dir, ignore_errors=True)
        self.results["duration_s"] = round(time.perf_counter() - started, 1)
        self.results["machine"]["loadavg_end"] = os.getloadavg()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small tables, few repetitions: about a minute")
    parser.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help="comma-separated subset of sqlite,postgresql,mysql (default: all three)",
    )
    parser.add_argument(
        "--output", type=Path, default=None, help="directory for the results (default: bench/results, quick/)"
    )
    parser.add_argument("--no-browser", action="store_true", help="leave out the browser level (Chromium)")
    args = parser.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(args.engines) - set(ENGINES)
    if unknown:
        parser.error(f"unknown engines: {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    started = time.perf_counter()
    run = Run(plan, args.engines, skip_browser=args.no_browser)
    out_dir = args.output or (QUICK_DIR if args.quick else RESULTS_DIR)
    log(f"bench: {plan.mode} run on {', '.join(args.engines)}; results to {out_dir}")
    try:
        run.execute()
    except BaseException as err:  # Ctrl-C or SIGTERM: say so in the report, then stop
        run.results["errors"].append({"phase": "run", "error": f"interrupted: {err!r}"})
        raise
    finally:
        # Also after Ctrl-C or a crash: whatever was measured is written.
        run.finish(started)
        written = write_outputs(run.results, out_dir)
    if written and out_dir == RESULTS_DIR and not run.results["errors"]:
        # A complete full run is the one source of the README's numbers.
        readme.main()
    log(f"bench: done in {run.results['duration_s']:.0f} s; {len(run.results['errors'])} phase(s) failed")
    return 0 if written and not run.results["errors"] else 1


def write_outputs(results: dict[str, Any], out_dir: Path) -> bool:
    try:
        print(report.write(results, out_dir), flush=True)
        log(f"bench: wrote {out_dir}/summary.json, raw/results.json, report.md, latency.png")
        return True
    except Exception:
        traceback.print_exc()
        return False


if __name__ == "__main__":
    sys.exit(main())
