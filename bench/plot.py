"""latency.png: median time per page against depth, one line per engine and method (log scales)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import formatting as fmt

COLORS = {
    "sqlite": "tab:green",
    "postgresql": "tab:blue",
    "mysql": "tab:orange",
    "postgresql-3M": "tab:purple",
}
STYLES = {
    "offset": ("--", "s"),
    "keyset": ("-", "o"),
    "paginate": ("-", "o"),
    "sqlakeyset": (":", "^"),
}


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, 2, figsize=(14, 6), sharey=False)
    panels = [
        (
            axes[0],
            results["db_level"],
            ("offset", "keyset", "sqlakeyset"),
            "client_ms",
            "Database: the next 20 rows, client round trip (raw DBAPI)",
        ),
        (
            axes[1],
            results["py_level"],
            ("offset", "paginate", "sqlakeyset"),
            "ms",
            "Python: one page through the ORM session",
        ),
    ]
    for ax, rows, methods, field, title in panels:
        for engine in fmt.engines(rows):
            color = COLORS.get(engine, "tab:gray")
            for method in methods:
                points = sorted(
                    (r["depth"], r[field]["median"])
                    for r in rows
                    if r["engine"] == engine and r["method"] == method
                )
                if not points:
                    continue
                style, marker = STYLES[method]
                ax.plot(
                    *zip(*points, strict=True),
                    linestyle=style,
                    marker=marker,
                    color=color,
                    linewidth=1.6,
                    markersize=5,
                )
        depths = sorted({r["depth"] for r in rows})
        nonzero = [d for d in depths if d > 0]
        ax.set_xscale("symlog", linthresh=min(nonzero) if nonzero else 1)
        # Ticks at the measured positions only: symlog's own ticks crowd 0 and 10^2 together.
        ax.set_xticks(depths, [fmt.short(d) for d in depths], fontsize=8)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_yscale("log")
        ax.set_xlabel("position in the list (rows skipped; symlog scale)")
        ax.set_ylabel("median ms (log)")
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.12)
    engines = fmt.engines(results["db_level"]) or fmt.engines(results["py_level"])
    engine_handles = [
        Line2D([], [], color=COLORS.get(e, "tab:gray"), linewidth=3, label=fmt.engine_name(e))
        for e in engines
    ]
    method_handles = [
        Line2D([], [], color="black", linestyle=STYLES[m][0], marker=STYLES[m][1], label=label)
        for m, label in (
            ("offset", "LIMIT 20 OFFSET n"),
            ("keyset", "ours (keyset / paginate())"),
            ("sqlakeyset", "sqlakeyset"),
        )
    ]
    # Legends below the plots, where they cover no line: colour = engine, line style = method.
    fig.legend(handles=engine_handles + method_handles, loc="lower center", ncol=7, fontsize=9, frameon=False)
    fig.suptitle(f"Keyset vs OFFSET pagination ({results['mode']} run, sort newest, 20 rows per page)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_wheel(results: list[dict[str, Any]], path: Path) -> None:
    """wheel.png: the browser level's wheel scroll, frame-gap p50/p95/p99 and the longest task
    per front end and CPU rate, against the 33.4 ms (two frames) line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (gaps, tasks) = plt.subplots(1, 2, figsize=(14, 5))
    labels = [f"{r['front_end']}\n{r['rate']}x CPU" for r in results]
    xs = range(len(results))
    width = 0.27
    for offset, key, name in (
        (-width, "frame_gap_p50_ms", "p50"),
        (0, "frame_gap_p95_ms", "p95"),
        (width, "frame_gap_p99_ms", "p99"),
    ):
        gaps.bar([x + offset for x in xs], [r[key] or 0 for r in results], width, label=name)
    gaps.axhline(33.4, color="black", linestyle="--", linewidth=1, label="33.4 ms (goal for p95 at 4x)")
    gaps.set_title("Gaps between animation frames during the wheel scroll")
    gaps.set_ylabel("ms")
    tasks.bar(list(xs), [r["longest_task_ms"] for r in results], 0.5, color="tab:red")
    tasks.axhline(50, color="black", linestyle="--", linewidth=1, label="50 ms (a long task)")
    tasks.set_title("Longest main-thread task")
    for axis in (gaps, tasks):
        axis.set_xticks(list(xs), labels, fontsize=7)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
