"""What the address costs while the reader scrolls (``python -m bench.address_cost``).

During a scroll the scroll window names the row in view in the address at most every 200 ms
(static/js/scroll-window.js `rememberPlace`): `history.replaceState` with the page's URL and the
row as the fragment, then the "orders:place" event its listeners answer (the rail's place, the
find bar's position text). The frame profile charges that timer 9 ms a page inserted at 4x
(docs/performance.md); this says which part is which, in Chromium, on the list as a wheel
leaves it (a seeded SQLite app served in process, 1280x800, 200 rows in the page), at 1x and
4x, in ms a call (the median of ROUNDS rounds of CALLS calls):

- `replaceState` with a new query and fragment (what a scroll does), and with the fragment only;
- the same with the rows' links taken out (does Chromium's cost follow the links?);
- the "orders:place" event with the row in view, its listeners' work.

Printed, never asserted.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from .browser_level import BUSY_DONE, _launch, _serve

CALLS = 60
ROUNDS = 5
RATES = (1, 4)

TIME_CALLS = """([what, calls]) => {
  const row = window.ordersList.firstVisibleRow();
  const path = location.pathname, url = path + location.search, t0 = performance.now();
  for (let i = 0; i < calls; i++) {
    if (what === 'query') history.replaceState(history.state, '', path + '?after=X' + i + '#order-' + i);
    else if (what === 'fragment') history.replaceState(history.state, '', url + '#order-' + i);
    else document.dispatchEvent(new CustomEvent('orders:place', {detail: {row, url}}));
  }
  return (performance.now() - t0) / calls;
}"""


def measure(rows: int) -> dict[str, dict[int, float]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-address-"))
    out: dict[str, dict[int, float]] = {}
    try:
        with _serve(rows, tmp) as server, sync_playwright() as p:
            browser = _launch(p)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(server.url + "/orders")
            page.wait_for_function(BUSY_DONE)
            page.mouse.move(640, 400)
            while page.evaluate("document.querySelectorAll('#rows > tr[data-id]').length") < 200:
                page.mouse.wheel(0, 2000)
                page.wait_for_timeout(100)
            page.wait_for_function(BUSY_DONE)
            cdp = page.context.new_cdp_session(page)

            def timed(what: str) -> None:
                for rate in RATES:
                    cdp.send("Emulation.setCPUThrottlingRate", {"rate": rate})
                    runs = [page.evaluate(TIME_CALLS, [what.split(",")[0], CALLS]) for _ in range(ROUNDS)]
                    out.setdefault(what, {})[rate] = statistics.median(runs)
                cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})

            timed("query")
            timed("fragment")
            timed("orders:place")
            links = page.evaluate("document.links.length")
            page.evaluate("document.querySelectorAll('#rows a').forEach(a => a.removeAttribute('href'))")
            timed("query,without the rows' links")
            out["links"] = {0: links, 1: page.evaluate("document.links.length")}
            browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def report(result: dict[str, dict[int, float]]) -> str:
    names = {
        "query": "`replaceState`, new query and fragment",
        "fragment": "`replaceState`, new fragment only",
        "query,without the rows' links": "`replaceState`, new query and fragment, the rows' links taken out",
        "orders:place": '"orders:place" dispatched (its listeners)',
    }
    head = "| per call, median of rounds | " + " | ".join(f"{r}x" for r in RATES) + " |"
    lines = [head, "|---|" + "---|" * len(RATES)]
    for key, name in names.items():
        lines.append(f"| {name} | " + " | ".join(f"{result[key][r]:.3f} ms" for r in RATES) + " |")
    links = result["links"]
    tail = f"Links in the document: {links[0]:.0f}, then {links[1]:.0f} without the rows'."
    return "\n".join(lines) + "\n\n" + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.address_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=3000)
    args = parser.parse_args(argv)
    print(report(measure(args.rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
