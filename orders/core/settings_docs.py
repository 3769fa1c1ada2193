"""The settings' documentation, generated from SETTINGS: docs/configuration.md's whole table and the
README's short one (`python -m orders.core.settings_docs --write`; tests/test_settings.py checks
both are current)."""

from __future__ import annotations

import sys
from pathlib import Path

from orders.core.settings import SETTINGS, Setting

ROOT = Path(__file__).resolve().parents[2]


def _default(s: Setting) -> str:
    if isinstance(s.default, tuple):
        return f"`{','.join(s.default)}`" if s.default else "(none)"
    return "(see meaning)" if s.default is None else f"`{s.default}`"


def markdown_table() -> str:
    """docs/configuration.md's table, made from SETTINGS (tests/test_settings.py compares)."""
    lines = ["| setting | default | rule | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        lines.append(f"| `{s.name}` | {_default(s)} | {s.kind.rule} | {s.meaning} |")
    return "\n".join(lines) + "\n"


def readme_table() -> str:
    """README.md's short table: the settings most deployments set (those with a `readme`)."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for s in SETTINGS:
        if s.readme:
            default = s.readme_default or ("unset" if s.default == () else _default(s))
            lines.append(f"| `{s.name}` | {default} | {s.readme} |")
    return "\n".join(lines) + "\n"


DOC = "docs/configuration.md"
README = "README.md"
BEGIN, END = (
    "<!-- settings: begin (python -m orders.core.settings_docs --write) -->",
    "<!-- settings: end -->",
)
# Each generated table: the file it lives in and what makes it.
TABLES = {DOC: markdown_table, README: readme_table}


def documented(text: str) -> str:
    """The table as it stands between the markers of `text` (docs/configuration.md, README.md)."""
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip() + "\n"


def write() -> None:
    """Regenerate every table in place, between its markers."""
    for name, make in TABLES.items():
        path = ROOT / name
        text = path.read_text()
        head, tail = text.split(BEGIN, 1)[0], text.split(END, 1)[1]
        path.write_text(f"{head}{BEGIN}\n{make()}{END}{tail}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        print(markdown_table(), end="")
