"""Where a wheel scroll's main-thread time goes (``python -m bench.frame_profile``).

The wheel scroll of the browser level (``bench.browser_level.wheel_scroll``: 120 px every 16 ms,
1280x800) through ``--rows`` rows down and back up, with the CPU slowed ``--rate`` times and a
Chromium trace of the renderer's main thread. Printed per front end (today's, and
``--before REV``'s templates and static files served by today's app, interleaved):

- the self time of each trace event (Layout, UpdateLayoutTree, ParseHTML, Paint, Commit, ...),
  per page inserted;
- the tasks by what started them (a load's answer, a timer, an animation frame, an event, the
  frame's rendering update), with their count, total, longest, and the layout, style, parsing
  and script inside them;
- the script by the outermost function called (file:line name).

Used to decide the design of docs/scroll.md's "Frames at a phone's speed"; it measures, never
asserts.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

from .browser_level import (
    AT_TOP,
    STEP_PX,
    _checkout_front_end,
    _launch,
    _serve,
    _wheel,
    wheel_page,
)

CATEGORIES = [
    "devtools.timeline",
    "disabled-by-default-devtools.timeline",
    "disabled-by-default-devtools.timeline.frame",
    "toplevel",
    "blink",
    "cc",
    "v8",
]
SCRIPT = {"FunctionCall", "EventDispatch", "EvaluateScript", "TimerFire", "FireAnimationFrame", "V8.Execute"}
KIND_FIELDS = (
    "count",
    "total_ms",
    "max_ms",
    "over_50",
    "over_33",
    "layout_ms",
    "style_ms",
    "parse_ms",
    "paint_ms",
)
# Outermost events, by group, for the CPU summary (a group's events nested in another's count there).
CPU_GROUPS = {
    "FunctionCall": "script (incl. forced layout)",
    "EventDispatch": "script (incl. forced layout)",
    "TimerFire": "script (incl. forced layout)",
    "FireAnimationFrame": "script (incl. forced layout)",
    "V8.Execute": "script (incl. forced layout)",
    "v8.callFunction": "script (incl. forced layout)",
    "ParseHTML": "parse",
    "Layout": "layout",
    "UpdateLayoutTree": "style",
    "PrePaint": "paint: prepaint, paint, layerize",
    "LocalFrameView::RunPaintLifecyclePhase": "paint: prepaint, paint, layerize",
    "Commit": "commit",
    "ProxyMain::BeginMainFrame::commit": "commit",
    "HitTest": "hit test",
    "IntersectionObserverController::computeIntersections": "intersection observers",
}
RENDERING = {
    "BeginMainThreadFrame",
    "UpdateLifecycle",
    "Animation",
    "PrePaint",
    "Paint",
    "Layerize",
    "Commit",
}
# What a task's first timeline child says it was for.
KINDS = {
    "XHRReadyStateChange": "xhr",
    "XHRLoad": "xhr",
    "TimerFire": "timer",
    "FireAnimationFrame": "animation frame",
    "FireIdleCallback": "idle callback",
    "ParseHTML": "parse",
    "EvaluateScript": "script",
    "v8.run": "script",
}


def _main_thread(events: list[dict[str, Any]]) -> tuple[int, int] | None:
    mains = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"
    }
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if key in mains:
            counts[key] += 1  # type: ignore[index]  # a trace's ints
    return max(counts, key=counts.__getitem__) if counts else None


def _tree(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The main thread's complete events as a forest (children nested by time), each with `self`."""
    roots: list[dict[str, Any]] = []
    stack: list[dict[str, Any]] = []
    for e in sorted(events, key=lambda e: (e["ts"], -e.get("dur", 0))):
        node = {
            "name": e["name"],
            "ts": e["ts"],
            "end": e["ts"] + e.get("dur", 0),
            "cpu": e.get("tdur", e.get("dur", 0)),
            "args": e.get("args", {}),
            "kids": [],
        }
        while stack and stack[-1]["end"] <= node["ts"]:
            stack.pop()
        (stack[-1]["kids"] if stack else roots).append(node)
        stack.append(node)
    return roots


def _self(node: dict[str, Any]) -> float:
    return float((node["end"] - node["ts"]) - sum(k["end"] - k["ts"] for k in node["kids"]))


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for k in node["kids"]:
        yield from _walk(k)


def _kind(task: dict[str, Any]) -> str:
    names = [n["name"] for n in _walk(task)]
    for name in names[1:]:
        if name in KINDS:
            return str(KINDS[name])
        if name == "EventDispatch":
            for n in _walk(task):
                if n["name"] == "EventDispatch":
                    return "event " + str(n["args"].get("data", {}).get("type"))
        if name in RENDERING:
            return "rendering update"
        if name == "FunctionCall":
            call = next(n for n in _walk(task) if n["name"] == "FunctionCall")
            return "call " + _where(call["args"].get("data", {}))
    return "other: " + (names[1] if len(names) > 1 else task["name"])


def _where(data: dict[str, Any]) -> str:
    url = str(data.get("url", "")).rsplit("/", 1)[-1]
    return f"{url}:{data.get('lineNumber', '?')} {data.get('functionName') or '(anonymous)'}"


def _invalidations(events: list[dict[str, Any]]) -> dict[str, int]:
    """Invalidation tracking events (with --invalidations) by kind, reason and node."""
    out: dict[str, int] = defaultdict(int)
    for e in events:
        if "InvalidationTracking" not in e.get("name", ""):
            continue
        data = e.get("args", {}).get("data", {})
        reason = (
            data.get("reason")
            or (data.get("invalidationSet", {}) and "set")
            or data.get("changedAttribute", "")
        )
        node = str(data.get("nodeName", ""))[:40]
        out[f"{e['name'].replace('InvalidationTracking', '')} | {reason} | {node}"] += 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:25])


def analyse(trace: bytes, swaps: int) -> dict[str, Any]:
    raw = json.loads(trace)
    events = raw["traceEvents"] if isinstance(raw, dict) else raw
    main = _main_thread(events)
    invalidations = _invalidations(events)
    mine = [e for e in events if (e.get("pid"), e.get("tid")) == main and e.get("ph") == "X" and "ts" in e]
    forest = _tree(mine)
    self_ms: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    kinds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    calls: dict[str, float] = defaultdict(float)
    tasks = [r for r in forest if r["name"] in ("RunTask", "ThreadControllerImpl::RunTask")]
    for root in forest:
        for n in _walk(root):
            self_ms[n["name"]] += _self(n) / 1000
            counts[n["name"]] += 1
    # CPU time (the thread's clock: what the work took, whatever else ran on the machine; the
    # CPU throttle's pauses are not in it either): the outermost event of each group.
    cpu: dict[str, float] = defaultdict(float)
    for task in tasks:
        cpu["all tasks"] += task["cpu"] / 1000
        todo = [task]
        while todo:
            n = todo.pop()
            group = CPU_GROUPS.get(n["name"])
            if group:
                cpu[group] += n["cpu"] / 1000
                continue
            todo.extend(n["kids"])
    for task in tasks:
        ms = (task["end"] - task["ts"]) / 1000
        k = kinds[_kind(task)]
        k["count"] += 1
        k["total_ms"] += ms
        k["max_ms"] = max(k["max_ms"], ms)
        k["over_50"] += ms >= 50
        k["over_33"] += ms >= 33.4
        for n in _walk(task):
            if n["name"] == "Layout":
                k["layout_ms"] += (n["end"] - n["ts"]) / 1000
            elif n["name"] == "UpdateLayoutTree":
                k["style_ms"] += (n["end"] - n["ts"]) / 1000
            elif n["name"] == "ParseHTML":
                k["parse_ms"] += _self(n) / 1000
            elif n["name"] in ("Paint", "PrePaint", "Layerize", "Commit"):
                k["paint_ms"] += (n["end"] - n["ts"]) / 1000
        # the outermost script events: attributed to their function
        todo = [task]
        while todo:
            n = todo.pop()
            if n["name"] == "FunctionCall":
                calls[_where(n["args"].get("data", {}))] += (n["end"] - n["ts"]) / 1000
                continue
            if n["name"] == "EventDispatch":
                calls["event " + str(n["args"].get("data", {}).get("type"))] += 0  # shown by its calls
            todo.extend(n["kids"])
    per = max(swaps, 1)
    return {
        "swaps": swaps,
        "self_ms_per_swap": {k: v / per for k, v in sorted(self_ms.items(), key=lambda kv: -kv[1])[:40]},
        "counts": dict(counts),
        "kinds": {
            k: {**dict.fromkeys(KIND_FIELDS, 0.0), **v}
            for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]["total_ms"])
        },
        "invalidations": invalidations,
        "cpu_ms_per_swap": {k: v / per for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])},
        "calls_ms_per_swap": {k: v / per for k, v in sorted(calls.items(), key=lambda kv: -kv[1])[:25] if v},
    }


def profile(
    browser: Any, url: str, rate: int, rows: int, keep: Path | None, invalidations: bool = False
) -> dict[str, Any]:
    context, page, _cdp = wheel_page(browser, url, rate)  # the session keeps the throttling
    categories = CATEGORIES + (
        ["disabled-by-default-devtools.timeline.invalidationTracking"] if invalidations else []
    )
    browser.start_tracing(page=page, categories=categories)
    page.evaluate("wheel.recording = true")
    began = time.perf_counter()
    steps = _wheel(page, STEP_PX, f"() => wheel.seen.size >= {rows}", 20_000)
    _wheel(page, -STEP_PX, AT_TOP, 3 * steps)
    page.evaluate("wheel.recording = false")
    seconds = time.perf_counter() - began
    trace = browser.stop_tracing()
    got = page.evaluate("({frames: wheel.frames, swaps: wheel.swaps, tasks: wheel.tasks})")
    context.close()
    if keep:
        keep.write_bytes(trace)
    gaps = sorted(b - a for a, b in zip(got["frames"], got["frames"][1:], strict=False))
    out = analyse(trace, got["swaps"])
    out.update(
        rate=rate,
        seconds=seconds,
        frames=len(got["frames"]),
        p95=gaps[round(0.95 * (len(gaps) - 1))] if gaps else None,
        long_tasks=len(got["tasks"]),
        longest=max(got["tasks"], default=0),
    )
    return out


def show(name: str, r: dict[str, Any]) -> str:
    lines = [
        f"== {name} at {r['rate']}x: {r['swaps']} pages in {r['seconds']:.1f} s, {r['frames']} frames, "
        f"frame gap p95 {r['p95']:.1f} ms, long tasks {r['long_tasks']} (longest {r['longest']:.0f} ms)",
        "  CPU per page inserted (thread time, ms): "
        + ", ".join(f"{k} {v:.1f}" for k, v in r.get("cpu_ms_per_swap", {}).items()),
        "  self time per page inserted (ms):",
    ]
    lines += [f"    {k:48} {v:8.2f}  ({r['counts'][k]})" for k, v in list(r["self_ms_per_swap"].items())[:22]]
    lines.append(
        "  tasks by kind: count, total ms, max, >=33 ms, >=50 ms | layout, style, parse, paint ms (incl.)"
    )
    for k, v in list(r["kinds"].items())[:14]:
        lines.append(
            f"    {k[:48]:48} {v['count']:5.0f} {v['total_ms']:8.0f} {v['max_ms']:6.0f} {v['over_33']:4.0f} "
            f"{v['over_50']:4.0f} | {v['layout_ms']:6.0f} {v['style_ms']:6.0f} {v['parse_ms']:5.0f} "
            f"{v['paint_ms']:6.0f}"
        )
    lines.append("  script by outermost function, ms per page:")
    lines += [f"    {k[:70]:70} {v:7.2f}" for k, v in r["calls_ms_per_swap"].items()]
    if r["invalidations"]:
        lines.append("  invalidations (kind | reason | node): count")
        lines += [f"    {k[:90]:90} {v:6d}" for k, v in r["invalidations"].items()]
    return "\n".join(lines)


def _slug(name: str) -> str:
    return re.sub(r"\W+", "-", name).strip("-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.frame_profile", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=600, help="rows the wheel goes down through")
    parser.add_argument("--seed-rows", type=int, default=3000)
    parser.add_argument("--rate", type=int, default=4)
    parser.add_argument("--before", default="", help="also these git revisions' front ends (comma-separated)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--window", type=int, help="also today's front end with this MAX_ROWS_IN_PAGE")
    parser.add_argument(
        "--invalidations", action="store_true", help="also what invalidated style, layout, paint"
    )
    parser.add_argument("--keep", type=Path, help="a directory for the raw traces")
    parser.add_argument(
        "--analyse", type=Path, nargs="*", help="only analyse these kept traces (swaps unknown: 1)"
    )
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    if args.analyse:
        for path in args.analyse:
            r = analyse(path.read_bytes(), 1)
            r.update(rate=0, seconds=0.0, frames=0, p95=0.0, long_tasks=0, longest=0.0)
            print(show(path.name, r))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    try:
        with ExitStack() as stack:
            now = stack.enter_context(_serve(args.seed_rows, tmp))
            fronts = {}
            for rev in filter(None, (r.strip() for r in args.before.split(","))):
                old = _checkout_front_end(rev, tmp)
                if old is not None:
                    fronts[f"before ({rev})"] = stack.enter_context(
                        _serve(args.seed_rows, tmp, seed=False, front_end=old)
                    )
            fronts["now"] = now
            if args.window is not None:
                fronts[f"now, window {args.window}"] = stack.enter_context(
                    _serve(args.seed_rows, tmp, seed=False, MAX_ROWS_IN_PAGE=args.window)
                )
            p = stack.enter_context(sync_playwright())
            browser = _launch(p)
            for round_ in range(args.repeat):
                for name, server in fronts.items():
                    keep = args.keep / f"{_slug(name)}-{args.rate}x-{round_}.json" if args.keep else None
                    if keep:
                        keep.parent.mkdir(parents=True, exist_ok=True)
                    print(
                        show(
                            name, profile(browser, server.url, args.rate, args.rows, keep, args.invalidations)
                        ),
                        flush=True,
                    )
            browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
