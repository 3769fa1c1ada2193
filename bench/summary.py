"""What git keeps of a benchmark run: the figures the docs are generated from, one record a line.

A full run's raw results (every pass, every plan, the SQL, the profiles) go to
bench/results/raw/results.json, which git ignores: they are history, and the next run replaces
them. bench/results/summary.json keeps what bench.readme renders docs/performance.md from, and
write() checks that the summary renders the page exactly as the raw results do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Bulky and read by no generated page: per-pass samples, plans, statements, profiles.
DROPPED = {"profile", "sql", "parameters", "plan", "keys", "plans"}


def compact(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: compact(v)
            for k, v in value.items()
            if k not in DROPPED and not (k == "passes" and isinstance(v, list))
        }
    if isinstance(value, list):
        return [compact(v) for v in value]
    return value


def dumps(summary: dict[str, Any]) -> str:
    """JSON with each top-level key on its own line, and each record of a list on its own line:
    a diff of two runs reads record by record."""
    lines = []
    for i, (key, value) in enumerate(summary.items()):
        comma = "," if i < len(summary) - 1 else ""
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            records = ",\n".join("  " + json.dumps(v, default=str) for v in value)
            lines.append(f"{json.dumps(key)}: [\n{records}\n ]{comma}")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, default=str)}{comma}")
    return "{\n " + "\n ".join(lines) + "\n}\n"


def write(results: dict[str, Any], path: Path) -> None:
    from bench import readme  # imported here: readme reads the summary this module writes

    summary = compact(results)
    assert readme.summary(summary) == readme.summary(results), "the summary lost what the docs read"
    path.write_text(dumps(summary))
    assert json.loads(path.read_text()) == json.loads(json.dumps(summary, default=str))
