"""The app's architecture as a newcomer reads it, kept true.

- docs/design.md's map names every module of orders/ at its path, and names nothing that is gone;
- imports run one way: views, then the request path (web/), then the services (finding/,
  writing/, exports/), then data access (data/), then core/, then the pagination library; no
  view module imports another;
- docs/life-of-a-request.md names only modules and functions that exist;
- every `orders/...` path the docs, the README and the code's own comments mention exists.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "orders"
# Top to bottom: a module may import its own layer's modules and any layer below, never above.
LAYERS = [
    ["orders.app", "orders.cli"],
    ["orders.views"],
    ["orders.web"],
    ["orders.finding", "orders.writing", "orders.exports"],
    ["orders.data"],
    ["orders.core"],
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def app_modules() -> list[Path]:
    return sorted(APP.rglob("*.py"))


def layer(module: str) -> int:
    for depth, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return depth
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS and to docs/design.md")


def imported(path: Path) -> set[str]:
    """The orders.* modules `path` imports, anywhere in it (function-level imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("orders"):
                for alias in node.names:
                    candidate = f"{node.module}.{alias.name}"
                    is_module = (ROOT / Path(*candidate.split("."))).with_suffix(".py").exists() or (
                        ROOT / Path(*candidate.split("."))
                    ).is_dir()
                    found.add(candidate if is_module else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("orders")}
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: a relative import; write orders.… in full (one spelling)")
    return found


def test_the_map_names_every_module_at_its_path() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    block = design.split("## Where things live", 1)[1].split("```", 2)[1]
    named: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = re.match(r"( *)(\S+)", line)
        if not match or not line.strip():
            continue
        indent, name = len(match.group(1)), match.group(2)
        if not (name.endswith(".py") or name.endswith("/")):
            continue  # a continuation line of a description
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "".join(p for _, p in stack) + name
        named.add(path)
        if name.endswith("/"):
            stack.append((indent, name))
    modules = {str(p.relative_to(ROOT)) for p in app_modules() if p.name != "__init__.py"}
    packages = {str(p.parent.relative_to(ROOT)) + "/" for p in app_modules() if p.name == "__init__.py"}
    missing = sorted((modules | packages) - named)
    assert not missing, f"docs/design.md's map does not name: {missing}"
    gone = sorted(p for p in named if p.startswith("orders/") and not (ROOT / p).exists())
    assert not gone, f"docs/design.md's map names what does not exist: {gone}"


@pytest.mark.parametrize("path", app_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_one_way(path: Path) -> None:
    me = module_name(path)
    upward = sorted(dep for dep in imported(path) if layer(dep) < layer(me))
    assert not upward, f"{me} imports from a layer above it: {upward}"
    if me.startswith("orders.views."):
        siblings = sorted(d for d in imported(path) if d.startswith("orders.views.") and d != me)
        assert not siblings, f"{me} imports another view module: {siblings}"


def test_the_life_of_a_request_names_only_what_exists() -> None:
    text = (ROOT / "docs" / "life-of-a-request.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`orders/" in line]
    assert len(rows) >= 20, "the page lost its tables"
    checked = 0
    for row in rows:
        # Each `orders/<package>/<module>.py` is followed by the names it holds, up to the next module.
        for module_path, names in re.findall(r"`(orders/[\w/]+\.py)`((?:[^`]|`(?!orders/)[^`]*`)*)", row):
            module = importlib.import_module(module_path.removesuffix(".py").replace("/", "."))
            for name in re.findall(r"`([A-Za-z_][\w.]*)`", names):
                if name.endswith(".html") or name.startswith("pagination."):
                    continue  # a template, or the library's own
                if name.isupper() and not hasattr(module, name):
                    continue  # a setting's name (TRUSTED_HOSTS, API_TOKENS)
                target: object = module
                for part in name.split("."):
                    assert hasattr(target, part), f"{module_path} has no {name} ({row[:60]}…)"
                    target = getattr(target, part)
                checked += 1
    assert checked >= 30


def mentioned_paths(text: str) -> set[str]:
    return set(re.findall(r"\borders/[\w/]+\.py\b", text))


def test_every_mentioned_app_path_exists() -> None:
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *app_modules()]
    sources += [*sorted((ROOT / "tests").glob("*.py")), ROOT / "gunicorn.conf.py", ROOT / "Makefile"]
    gone = {}
    for source in sources:
        missing = sorted(p for p in mentioned_paths(source.read_text()) if not (ROOT / p).exists())
        if missing:
            gone[str(source.relative_to(ROOT))] = missing
    assert not gone, f"paths that do not exist: {gone}"
