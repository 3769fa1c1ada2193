"""Browser level: what the reader's Chromium does with the list (``python -m bench.browser_level``).

Measured through Playwright and the Chrome DevTools Protocol on a seeded SQLite app served in
process: time from navigation to the first row painted (Element Timing), the longest main-thread
task while pages are appended, prepended and dropped (Long Tasks: only tasks of 50 ms or more
are reported, so "none" means every task was shorter), elements and JS heap after scrolling
5,000 rows against 500 (after a forced GC), the jump of the first row in view when a page is
inserted above, and where the named row lands after a reload at depth 2,000. Printed, never
asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

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
  bench.measuring = false;
  const firstInView = () => [...rows.querySelectorAll('tr[data-id]')]
    .find(r => r.getBoundingClientRect().bottom > 1);
  document.addEventListener('htmx:beforeSwap', e => {
    if (!e.detail.target.matches('#less')) return;
    const row = firstInView();
    before = row && [row, row.getBoundingClientRect().top];
    bench.measuring = !!before;
  });
  document.addEventListener('htmx:afterSwap', () => {
    if (!before) return;
    const [row, top] = before;
    before = null;
    requestAnimationFrame(() => requestAnimationFrame(() => {
      bench.shifts.push(row.getBoundingClientRect().top - top);
      bench.measuring = false;
    }));
  });
});
"""


BUSY_DONE = "() => document.getElementById('orders').getAttribute('aria-busy') === 'false'"


def _serve(rows: int, tmp: Path) -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from orders.app import create_app
    from orders.db import make_engine, migrate
    from tests.live import LiveServer

    url = f"sqlite:///{tmp / 'browser.db'}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    app = create_app({"DATABASE_URL": url, "SECRET_KEY": "b" * 48, "AUTO_PAGES": 1_000_000})
    app.logger.disabled = True
    result = app.test_cli_runner().invoke(args=["seed", "--rows", str(rows)])
    assert result.exit_code == 0, result.output
    return LiveServer(app)


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


def measure(rows: int = 8000) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-browser-"))
    out: dict[str, Any] = {}
    try:
        with _serve(rows, tmp) as server, sync_playwright() as p:
            chromium = shutil.which("chromium")
            browser = (
                p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                if chromium
                else p.chromium.launch()
            )
            context = browser.new_context(viewport={"width": 1200, "height": 800})
            context.add_init_script(OBSERVE)
            page = context.new_page()
            paints = []
            for _ in range(5):
                page.goto(server.url + "/orders")
                page.wait_for_function("() => bench.firstRow !== null")
                paints.append(page.evaluate("bench.firstRow"))
            out["first_row_painted_ms"] = statistics.median(paints)
            page.goto(server.url + "/orders")
            _scroll_until(page, 500, 1500)
            out["elements_500"], out["heap_mb_500"] = _heap(page)
            _scroll_until(page, 2000, 2500)
            depth_url = page.evaluate("location.href")
            _scroll_until(page, 5000, 2500)
            out["elements_5000"], out["heap_mb_5000"] = _heap(page)
            # Back up a long way, a page at a time (the reader stops on the top sentinel; no gliding
            # wheel moves the rows during the measurement): pages inserted above, dropped below.
            for _ in range(60):
                first = page.evaluate("() => document.querySelector('#rows > tr[data-id]').dataset.id")
                page.evaluate("() => document.getElementById('less').scrollIntoView({block: 'start'})")
                page.wait_for_function(
                    "first => !bench.measuring && "
                    "document.querySelector('#rows > tr[data-id]').dataset.id !== first",
                    arg=first,
                )
            out["longest_task_ms"] = page.evaluate("bench.longest")
            out["long_tasks"] = page.evaluate("bench.longTasks")
            shifts = page.evaluate("bench.shifts")
            out["prepends"] = len(shifts)
            out["prepend_jump_px_max"] = max((abs(s) for s in shifts), default=None)
            # Reload at depth 2,000: where does the named row land?
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
        "| browser level (Chromium, SQLite, MAX_ROWS_IN_PAGE=600) | value |",
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.browser_level", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=8000)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    result = measure(args.rows)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
