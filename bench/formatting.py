"""Small formatting helpers shared by the report, the targets and the plot."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def ms(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def num(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def x(value: float | None) -> str:
    return "–" if value is None else (f"{value:,.0f}x" if value >= 100 else f"{value:.2f}x")


def table(header: list[str], rows: Iterable[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def index(rows: list[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    return {(r["engine"], r["depth"], r["method"]): r for r in rows}


def engines(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        seen.setdefault(row["engine"], None)
    return list(seen)


def depths(rows: list[dict[str, Any]], engine: str) -> list[int]:
    return sorted({r["depth"] for r in rows if r["engine"] == engine})


def short(depth: int) -> str:
    """0, 100, 1k, 25k, 2.5M: tick labels."""
    if depth >= 1_000_000:
        return f"{depth / 1_000_000:g}M"
    if depth >= 1000:
        return f"{depth / 1000:g}k"
    return str(depth)


def kind(label: str) -> str:
    return label.split("-")[0]


def engine_name(label: str) -> str:
    return label.replace("mysql", "mariadb")
