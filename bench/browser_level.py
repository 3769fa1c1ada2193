"""Browser level: what the reader's Chromium does with the list (``python -m bench.browser_level``).

Measured through Playwright and the Chrome DevTools Protocol on a seeded SQLite app served in
process: time from navigation to the first row painted (Element Timing), the longest main-thread
task while pages are appended, prepended and dropped (Long Tasks: only tasks of 50 ms or more
are reported, so "none" means every task was shorter), elements and JS heap after scrolling
5,000 rows against 500 (after a forced GC), the jump of the first row in view when a page is
inserted above, and where the named row lands after a reload at depth 2,000. Printed, never
asserted.

The wheel scroll (issue 16): a person's wheel, 120 px every 16 ms, down through 3,000 rows
(appends and drops) and back up to the top (prepends), in a 1280x800 window, at full CPU speed,
with the CPU slowed 4x (Lighthouse's mobile setting) and 6x (a low-end phone; ``--throttle``),
for the front end as it is and as it was at an earlier commit (``--before REV``, by default the
commit before issue 41's frame work: that commit's templates and static files served by today's
app, in the same run, interleaved). Per run: the longest main-thread task and the tasks of 50 ms
or more (Long Tasks observer), the gaps between animation frames (p50/p95/p99), and from a
Chromium trace the layout, style, HTML parsing and script time per swap.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

from devtools.chromium import chromium_executable

OBSERVE = """
window.bench = {firstRow: null, longest: 0, longTasks: 0, seen: new Set(), shifts: []};
new PerformanceObserver(list => {
  for (const e of list.getEntries())
    if (e.identifier === 'first-row') bench.firstRow = e.renderTime || e.loadTime;
}).observe({type: 'element', buffered: true});
new PerformanceObserver(list => {
  for (const e of list.getEntries()) {
    bench.longTasks++;
    bench.longest = Math.max(bench.longest, e.duration);
  }
}).observe({type: 'longtask', buffered: true});
document.addEventListener('DOMContentLoaded', () => {
  const rows = document.getElementById('rows');
  const note = () => rows.querySelectorAll('tr[data-id]').forEach(r => bench.seen.add(r.dataset.id));
  note();
  new MutationObserver(note).observe(rows, {childList: true});
  let before = null;
  // Measurements under way: a page's answer can come while the one before is still being
  // measured (two frames after it went in), and the walk must not scroll until both are done.
  bench.pending = 0;
  const firstInView = () => [...rows.querySelectorAll('tr[data-id]')]
    .find(r => r.getBoundingClientRect().bottom > 1);
  // The scroll window's own event: a page's answer is in, nothing of it written yet (it fetches
  // and inserts rows itself; htmx's beforeSwap no longer comes for them).
  document.addEventListener('orders:arriving', e => {
    if (!e.detail.up) return;
    const row = firstInView();
    before = row && [row, row.getBoundingClientRect().top];
    if (before) bench.pending++;
  });
  document.addEventListener('orders:loaded', () => {
    if (!before) return;
    const [row, top] = before;
    before = null;
    requestAnimationFrame(() => requestAnimationFrame(() => {
      bench.shifts.push(row.getBoundingClientRect().top - top);
      bench.pending--;
    }));
  });
});
"""


BUSY_DONE = "() => document.getElementById('orders').getAttribute('aria-busy') === 'false'"


ROOT = Path(__file__).resolve().parent.parent


def _serve(rows: int, tmp: Path, seed: bool = True, front_end: Path | None = None, **config: Any) -> Any:
    """The app on a SQLite file in `tmp` (seeded once); `config` overrides settings; `front_end`
    is another commit's templates/ and static/ (``_checkout_front_end``) served by today's code."""
    sys.path.insert(0, str(ROOT))
    from jinja2 import FileSystemLoader

    from orders.app import create_app
    from orders.data.db import make_engine, migrate
    from tests.live import LiveServer

    url = f"sqlite:///{tmp / 'browser.db'}"
    if seed:
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
    app = create_app({"DATABASE_URL": url, "SECRET_KEY": "b" * 48, "AUTO_PAGES": 1_000_000, **config})
    app.logger.disabled = True
    if front_end is not None:
        app.jinja_loader = FileSystemLoader(str(front_end / "templates"))  # type: ignore[assignment]  # Flask's way to swap
        app.static_folder = str(front_end / "static")
    if seed:
        result = app.test_cli_runner().invoke(args=["seed", "--rows", str(rows)])
        assert result.exit_code == 0, result.output
    return LiveServer(app)


# The front end before issue 41's frame work (item 1): the commit the work branched from.
BEFORE = "1674124"


def _checkout_front_end(rev: str, tmp: Path) -> Path | None:
    """templates/ and static/ of `rev`, unpacked under `tmp` (None, said on stderr, when this is
    not a git checkout that has `rev`)."""
    out = tmp / f"front-{rev}"
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "templates", "static"],
            check=True,
            capture_output=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        print(f"browser level: no front end at {rev!r} to compare with ({err})", file=sys.stderr)
        return None
    out.mkdir()
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True, timeout=60)
    return out


def _scroll_until(page: Page, seen: int, step: int) -> None:
    for _ in range(5000):
        if page.evaluate("bench.seen.size") >= seen:
            return
        page.mouse.wheel(0, step)
        page.wait_for_timeout(25)
    raise RuntimeError(f"never saw {seen} rows")


def _heap(page: Page) -> tuple[int, float]:
    cdp = page.context.new_cdp_session(page)
    cdp.send("HeapProfiler.collectGarbage")
    cdp.send("Performance.enable")
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    elements = page.evaluate("document.getElementsByTagName('*').length")
    return elements, metrics["JSHeapUsedSize"] / 1e6


# --- The wheel scroll ---------------------------------------------------------------------

WHEEL_OBSERVE = """
window.wheel = {recording: false, frames: [], tasks: [], swaps: 0, seen: new Set()};
new PerformanceObserver(list => {
  if (wheel.recording) for (const e of list.getEntries()) wheel.tasks.push(e.duration);
}).observe({type: 'longtask'});
requestAnimationFrame(function frame(t) {
  if (wheel.recording) wheel.frames.push(t);
  requestAnimationFrame(frame);
});
// One per page of rows inserted (the scroll window's event: htmx swaps no rows since issue 41).
document.addEventListener('orders:loaded', () => { if (wheel.recording) wheel.swaps++; });
document.addEventListener('DOMContentLoaded', () => {
  const rows = document.getElementById('rows');
  new MutationObserver(records => {
    for (const r of records)
      for (const n of r.addedNodes) {
        if (n.dataset && n.dataset.id) wheel.seen.add(n.dataset.id);
        else if (n.querySelectorAll)
          n.querySelectorAll('tr[data-id]').forEach(t => wheel.seen.add(t.dataset.id));
      }
  }).observe(rows, {childList: true});
});
"""
AT_TOP = "() => !document.getElementById('less') && scrollY === 0"
TRACE_CATEGORIES = ["devtools.timeline", "disabled-by-default-devtools.timeline", "toplevel"]
STEP_PX, STEP_S = 120, 0.016


def _wheel(page: Page, delta: int, done: str, max_steps: int) -> int:
    """Wheel `delta` px every 16 ms until `done` (checked every 10 steps) or max_steps."""
    start = time.perf_counter()
    for step in range(1, max_steps + 1):
        page.mouse.wheel(0, delta)
        if step % 10 == 0 and page.evaluate(done):
            return step
        pause = start + step * STEP_S - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    return max_steps


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


SCRIPT_EVENTS = ("FunctionCall", "EventDispatch", "EvaluateScript", "TimerFire", "FireAnimationFrame")


def _trace_times(trace: bytes) -> dict[str, float]:
    """Main-thread totals (ms) from a Chromium trace: layout, style, HTML parsing, script (the
    outermost function calls and event dispatches: their layout and style counted in), and
    every task."""
    events = json.loads(trace)
    events = events["traceEvents"] if isinstance(events, dict) else events
    mains = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"
    }
    busiest: dict[tuple[int, int], int] = {}
    for e in events:
        if (e.get("pid"), e.get("tid")) in mains:
            busiest[(e["pid"], e["tid"])] = busiest.get((e["pid"], e["tid"]), 0) + 1
    main = max(busiest, key=busiest.__getitem__) if busiest else None
    out = {
        "layout_ms": 0.0,
        "style_ms": 0.0,
        "parse_ms": 0.0,
        "script_ms": 0.0,
        "layouts": 0,
        "task_max_ms": 0.0,
        "tasks_over_50": 0,
    }
    script_end = 0.0  # the end of the outermost script event seen so far (µs)
    for e in sorted(
        (e for e in events if (e.get("pid"), e.get("tid")) == main and e.get("ph") == "X"),
        key=lambda e: e.get("ts", 0),
    ):
        ms = e.get("dur", 0) / 1000
        if e["name"] == "Layout":
            out["layout_ms"] += ms
            out["layouts"] += 1
        elif e["name"] == "UpdateLayoutTree":
            out["style_ms"] += ms
        elif e["name"] == "ParseHTML":
            out["parse_ms"] += ms
        elif e["name"] in SCRIPT_EVENTS:
            if e["ts"] >= script_end:
                out["script_ms"] += ms
                script_end = e["ts"] + e.get("dur", 0)
        elif e["name"] == "RunTask":
            out["task_max_ms"] = max(out["task_max_ms"], ms)
            out["tasks_over_50"] += ms >= 50
    return out


def wheel_page(browser: Any, url: str, rate: int) -> tuple[Any, Any, Any]:
    """The list at 1280x800, its first page in, the wheel observed, CPU slowed `rate`x: the
    context, the page and its CDP session (also bench/frame_profile.py's start)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_init_script(WHEEL_OBSERVE)
    page = context.new_page()
    page.goto(url + "/orders")
    page.wait_for_function(BUSY_DONE)
    cdp = context.new_cdp_session(page)
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": rate})
    return context, page, cdp


def wheel_scroll(browser: Any, url: str, rate: int, rows: int) -> dict[str, Any]:
    """One wheel scroll down through `rows` rows and back up to the top, CPU slowed `rate`x."""
    context, page, _cdp = wheel_page(browser, url, rate)  # the session keeps the throttling
    browser.start_tracing(page=page, categories=TRACE_CATEGORIES)
    page.evaluate("wheel.recording = true")
    began = time.perf_counter()
    steps = _wheel(page, STEP_PX, f"() => wheel.seen.size >= {rows}", 20_000)
    steps += _wheel(page, -STEP_PX, AT_TOP, 3 * steps)
    page.evaluate("wheel.recording = false")
    seconds = time.perf_counter() - began
    trace = _trace_times(browser.stop_tracing())
    got = page.evaluate(
        "({tasks: wheel.tasks, frames: wheel.frames, swaps: wheel.swaps, seen: wheel.seen.size})"
    )
    context.close()
    frames = got["frames"]
    gaps = [b - a for a, b in itertools.pairwise(frames)]
    swaps = max(got["swaps"], 1)
    return {
        "rate": rate,
        "rows": rows,
        "steps": steps,
        "seconds": seconds,
        "rows_seen": got["seen"],
        "swaps": got["swaps"],
        "longest_task_ms": max(got["tasks"], default=0.0),
        "tasks_50ms": len(got["tasks"]),
        "tasks_over_100ms": sum(t > 100 for t in got["tasks"]),
        "frame_gap_p50_ms": _pct(gaps, 0.50),
        "frame_gap_p95_ms": _pct(gaps, 0.95),
        "frame_gap_p99_ms": _pct(gaps, 0.99),
        "layout_ms_per_swap": trace["layout_ms"] / swaps,
        "style_ms_per_swap": trace["style_ms"] / swaps,
        "parse_ms_per_swap": trace["parse_ms"] / swaps,
        "script_ms_per_swap": trace["script_ms"] / swaps,
        "trace_longest_task_ms": trace["task_max_ms"],
        "trace_tasks_50ms": trace["tasks_over_50"],
    }


RATES = (1, 4, 6)  # CPU slowed: none, a mid phone (Lighthouse's mobile setting), a low-end phone


def measure_wheel(
    rows: int = 8000,
    scroll_rows: int = 3000,
    before: str | None = BEFORE,
    rates: tuple[int, ...] = RATES,
    window: int | None = None,
    repeat: int = 1,
) -> list[dict[str, Any]]:
    """The wheel scroll at each CPU rate, for the front end at each of `before`'s comma-separated
    revisions (None: not compared) and today's, interleaved; `window`: today's front end with
    that MAX_ROWS_IN_PAGE too."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-wheel-"))
    results: list[dict[str, Any]] = []
    try:
        with ExitStack() as stack:
            now = stack.enter_context(_serve(rows, tmp))
            default = now.app.config["MAX_ROWS_IN_PAGE"]
            fronts: dict[str, Any] = {}
            for rev in (before or "").split(","):
                old = _checkout_front_end(rev.strip(), tmp) if rev.strip() else None
                if old is not None:
                    fronts[f"before ({rev.strip()}), {default} rows"] = stack.enter_context(
                        _serve(rows, tmp, seed=False, front_end=old)
                    )
            fronts[f"now, {default} rows"] = now
            if window is not None and window != default:
                fronts[f"now, {window} rows"] = stack.enter_context(
                    _serve(rows, tmp, seed=False, MAX_ROWS_IN_PAGE=window)
                )
            p = stack.enter_context(sync_playwright())
            browser = _launch(p)
            # Interleaved (each front end at 1x, then each at 4x, ...): other work on the machine
            # comes and goes, and lands on all of them alike.
            for round_ in range(repeat):
                for rate in rates:
                    for name, server in fronts.items():
                        result = wheel_scroll(browser, server.url, rate, scroll_rows)
                        result["front_end"] = name
                        result["round"] = round_ + 1
                        results.append(result)
                        print(
                            f"browser level: {name} at {rate}x: frame gap p95 "
                            f"{result['frame_gap_p95_ms']:.1f} ms, "
                            f"longest task {result['longest_task_ms']:.0f} ms",
                            file=sys.stderr,
                        )
            browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def _launch(p: Any) -> Any:
    chromium = chromium_executable(headless=False)  # the full browser: what a phone draws
    if chromium:
        return p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
    return p.chromium.launch()


def measure(rows: int = 8000) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-browser-"))
    out: dict[str, Any] = {}
    try:
        with _serve(rows, tmp) as server, sync_playwright() as p:
            browser = _launch(p)
            context = browser.new_context(viewport={"width": 1200, "height": 800})
            context.add_init_script(OBSERVE)
            page = context.new_page()
            paints = []
            for _ in range(5):
                page.goto(server.url + "/orders")
                page.wait_for_function("() => bench.firstRow !== null")
                paints.append(page.evaluate("bench.firstRow"))
            out["first_row_painted_ms"] = statistics.median(paints)
            out["max_rows"] = server.app.config["MAX_ROWS_IN_PAGE"]
            page.goto(server.url + "/orders")
            _scroll_until(page, 500, 1500)
            out["elements_500"], out["heap_mb_500"] = _heap(page)
            _scroll_until(page, 2000, 2500)
            # The address follows the row in view once the scroll settles: wait for it.
            page.wait_for_function("() => location.hash.startsWith('#order-')")
            depth_url = page.evaluate("location.href")
            _scroll_until(page, 5000, 2500)
            out["elements_5000"], out["heap_mb_5000"] = _heap(page)
            # Back up a long way, a page at a time (the reader stops on the top sentinel; no gliding
            # wheel moves the rows during the measurement): pages inserted above, dropped below.
            # Scrolls only while nothing loads (checked in the same task): a page brought into
            # reach by the one before may be on its way, and the scroll would count as its jump.
            for _ in range(60):
                first = page.evaluate("() => document.querySelector('#rows > tr[data-id]').dataset.id")
                page.wait_for_function(
                    f"() => {{ if (bench.pending || !({BUSY_DONE})()) return false;"
                    " const l = document.getElementById('less'); if (l) l.scrollIntoView({block: 'start'});"
                    " return true; }",
                    polling="raf",
                )
                page.wait_for_function(
                    f"first => !bench.pending && ({BUSY_DONE})() && "
                    "document.querySelector('#rows > tr[data-id]').dataset.id !== first",
                    arg=first,
                    polling="raf",
                )
            out["longest_task_ms"] = page.evaluate("bench.longest")
            out["long_tasks"] = page.evaluate("bench.longTasks")
            shifts = page.evaluate("bench.shifts")
            if not shifts:  # the observer missed every page inserted above: a defect here, not a 0
                raise RuntimeError("no page inserted above was measured (OBSERVE saw none arrive)")
            out["prepends"] = len(shifts)
            out["prepend_jump_px_max"] = max(abs(s) for s in shifts)
            # Reload at depth 2,000: where does the named row land? (By way of a blank page: the
            # address may still be depth_url, and going to the same address with a fragment only
            # scrolls, it loads nothing.)
            page.goto("about:blank")
            page.goto(depth_url)
            row = depth_url.rsplit("#order-", 1)[1]
            page.wait_for_function("id => !!document.getElementById('order-' + id)", arg=row)
            page.wait_for_function(BUSY_DONE)
            page.wait_for_timeout(500)  # let the loads around it settle (a measurement, not a test)
            out["reload_depth_2000_jump_px"] = abs(
                page.evaluate("id => document.getElementById('order-' + id).getBoundingClientRect().top", row)
            )
            browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def report(result: dict[str, Any]) -> str:
    def ratio(a: str, b: str) -> str:
        return f"{result[a] / result[b]:.2f}x"

    longest = result["longest_task_ms"]
    lines = [
        f"| browser level (Chromium, SQLite, MAX_ROWS_IN_PAGE={result['max_rows']}) | value |",
        "|---|---|",
        f"| navigation to first row painted (median of 5) | {result['first_row_painted_ms']:.0f} ms |",
        "| longest main-thread task, append/prepend/drop | "
        f"{f'{longest:.0f} ms' if longest else 'none of 50 ms or more'} "
        f"({result['long_tasks']} long tasks) |",
        f"| elements after 500 / 5,000 rows | {result['elements_500']} / {result['elements_5000']} "
        f"({ratio('elements_5000', 'elements_500')}) |",
        f"| JS heap after 500 / 5,000 rows | {result['heap_mb_500']:.1f} / {result['heap_mb_5000']:.1f} MB "
        f"({ratio('heap_mb_5000', 'heap_mb_500')}) |",
        f"| first row in view moved by a page inserted above (max of {result['prepends']}) | "
        f"{result['prepend_jump_px_max']:.1f} px |",
        f"| named row's distance from the top after a reload at depth 2,000 | "
        f"{result['reload_depth_2000_jump_px']:.1f} px |",
    ]
    return "\n".join(lines)


GOALS = (
    "goal: no task over 50 ms at 1x and 4x, and the p95 frame gap at most one frame at 1x (16.7 ms), "
    "two at 4x (33.4 ms) and three at 6x (50 ms; a low-end phone: the figure is stated, no task "
    "goal). A gap counts in frames of 1/60 s, rounded: requestAnimationFrame's timestamps jitter by "
    "about 0.1 ms around them, so a gap of 16.8 ms is one frame, not a missed one"
)
FRAME_MS = 1000 / 60  # headless Chromium's frames: 60 a second
P95_GOAL_FRAMES = {1: 1, 4: 2, 6: 3}


def frames(gap_ms: float) -> int:
    """How many frames of 1/60 s a gap between animation frames spans (16.8 ms: one)."""
    return round(gap_ms / FRAME_MS)


def wheel_goal(result: dict[str, Any]) -> bool:
    rate = result["rate"]
    p95 = result["frame_gap_p95_ms"] or 0
    if frames(p95) > P95_GOAL_FRAMES.get(rate, 3):
        return False
    return rate > 4 or result["longest_task_ms"] <= 50


def wheel_report(results: list[dict[str, Any]]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    rows = f"{results[0]['rows']:,}" if results and "rows" in results[0] else "3,000"
    lines = [
        f"| wheel scroll, 1280x800, 120 px / 16 ms, {rows} rows down and back up | CPU | longest task "
        "| tasks >= 50 ms (> 100 ms) | frame gap p50 / p95 / p99 "
        "| per swap: layout + style, parse, script (swaps) | goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["rate"], r.get("round", 1))):
        lines.append(
            f"| {r['front_end']} | {r['rate']}x | {ms(r['longest_task_ms'])} ms "
            f"| {r['tasks_50ms']} ({r['tasks_over_100ms']}) "
            f"| {ms(r['frame_gap_p50_ms'])} / {ms(r['frame_gap_p95_ms'])} / {ms(r['frame_gap_p99_ms'])} ms "
            f"| {ms(r['layout_ms_per_swap'])} + {ms(r['style_ms_per_swap'])}, "
            f"{ms(r.get('parse_ms_per_swap'))}, {ms(r.get('script_ms_per_swap'))} ms ({r['swaps']}) "
            f"| {'PASS' if wheel_goal(r) else 'MISS'} |"
        )
    return "\n".join(lines) + "\n\n" + GOALS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.browser_level", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=8000)
    parser.add_argument("--scroll-rows", type=int, default=3000, help="rows the wheel goes down through")
    parser.add_argument("--only", choices=["wheel", "rest"], help="one part of the level only")
    parser.add_argument(
        "--before",
        default=BEFORE,
        help=f"the front ends to compare with, git revisions, comma-separated (default {BEFORE}, before "
        "issue 41's frame work; '' for none)",
    )
    parser.add_argument(
        "--throttle",
        default=",".join(map(str, RATES)),
        help="CPU slow-down rates for the wheel scroll, comma-separated (default %(default)s)",
    )
    parser.add_argument("--window", type=int, help="also today's front end with this MAX_ROWS_IN_PAGE")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the wheel scroll (spread)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--plot", type=Path, help="also plot the wheel scroll here (a .png)")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {}
    if args.only != "wheel":
        result.update(measure(args.rows))
        print(report(result))
    if args.only != "rest":
        rates = tuple(int(r) for r in args.throttle.split(",") if r.strip())
        result["wheel"] = measure_wheel(
            args.rows, args.scroll_rows, args.before or None, rates, args.window, args.repeat
        )
        print(wheel_report(result["wheel"]))
        if args.plot:
            from .plot import plot_wheel

            plot_wheel(result["wheel"], args.plot)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
