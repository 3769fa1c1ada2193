"""The figures docs/testing.md gives for `make test-browser` against a deployment, generated.

A run with BASE_URL writes its outcome to test-results/deployment-run.json (tests/conftest.py,
at the end of the run): the counts, pytest's seconds and each skip's reason. Then

    .venv/bin/python -m tests.deployment_run

keeps it as docs/deployment-run.json and writes docs/testing.md's block from it;
tests/test_docs.py checks the block says what the kept record says, so no figure is typed by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "test-results" / "deployment-run.json"
RECORD = ROOT / "docs" / "deployment-run.json"
DOC = ROOT / "docs" / "testing.md"
BEGIN = "<!-- deployment-run: written by `python -m tests.deployment_run`, not by hand -->"
END = "<!-- /deployment-run -->"
OUTCOMES = ("passed", "skipped", "failed", "xfailed", "error")


def record(
    stats: dict[str, list[Any]], seconds: float, url: str, engines: list[str], share: str
) -> dict[str, Any]:
    """A run's outcome from pytest's terminal stats (call phase; a skip or error in any phase),
    with the deployment's reader settings (/healthz/settings) it ran against and which share of
    the tests it ran (`--share`: "1/1", all of them)."""
    with urllib.request.urlopen(f"{url}/healthz/settings", timeout=10) as answer:
        settings = json.load(answer)
    counts = dict.fromkeys(OUTCOMES, 0)
    reasons: dict[str, int] = {}
    for outcome in OUTCOMES:
        for report in stats.get(outcome, []):
            if "browser" not in getattr(report, "keywords", {}):
                continue
            if outcome == "passed" and report.when != "call":
                continue
            counts[outcome] += 1
            if outcome == "skipped" and isinstance(report.longrepr, tuple):
                reason = str(report.longrepr[2]).removeprefix("Skipped: ").replace(url, "BASE_URL")
                reasons[reason] = reasons.get(reason, 0) + 1
    return {
        "date": dt.date.today().isoformat(),
        "engines": engines,
        "share": share,
        "settings": settings,
        "counts": counts,
        "total": sum(counts.values()),
        "pytest_seconds": round(seconds),
        "skips": [{"count": n, "reason": r} for r, n in sorted(reasons.items())],
    }


def render(run: dict[str, Any]) -> str:
    counts = run["counts"]
    share = counts["skipped"] / run["total"] if run["total"] else 0
    said = ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o] or o in ("passed", "failed"))
    settings = ", ".join(f"`{k}={v}`" for k, v in sorted(run["settings"].items()))
    lines = [
        BEGIN,
        *textwrap.wrap(
            f"Measured {run['date']} in {' and '.join(run['engines'])} against a deployment running "
            f"{settings}: {said} of {run['total']} browser tests ({share:.1%} skipped), pytest "
            f"{run['pytest_seconds']} s. The skips, each naming what it needs:",
            100,
        ),
        "",
        *[f"- {s['count']} × {s['reason']}" for s in run["skips"]],
        END,
    ]
    return "\n".join(lines)


def block(markdown: str) -> str:
    found = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), markdown, re.S)
    assert found, f"docs/testing.md has no {BEGIN} ... {END} block"
    return found.group(0)


def main() -> int:
    run = json.loads(RESULTS.read_text())
    if run.get("share", "1/1") != "1/1":
        print(f"{RESULTS} is of a run of share {run['share']}, not of every test: not kept", file=sys.stderr)
        return 1
    RECORD.write_text(json.dumps(run, indent=2, ensure_ascii=False) + "\n")
    text = DOC.read_text()
    DOC.write_text(text.replace(block(text), render(run)))
    print(render(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
