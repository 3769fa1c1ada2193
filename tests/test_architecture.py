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
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# --- The cursor's one path (docs/life-of-a-request.md) ----------------------------------------

VIEWS_AND_SERVICES = ("orders/views/", "orders/finding/", "orders/writing/", "orders/exports/")
# What a request's `g` and a session's `info` may carry, and why; none of it is a cursor, a
# position or the WAL position a page is read at: those live in the list request.
G_ATTRIBUTES = {
    "db_session": "the request's session (orders/data/db.py)",
    "stale_checkout": "a pooled connection found dead by its first statement (orders/data/db.py)",
    "read_route": "the node a read went to (orders/web/read_routing.py), for logs and metrics",
    "request_started": "the request log's clock (orders/web/request_log.py)",
    "request_id": "the request log's id (orders/web/request_log.py)",
}
INFO_KEYS = {
    "read_bind": "the node a read session is bound to (orders/data/replicas/session.py)",
    "page_rows": "the rows a page showed, for the request log (orders/web/request_log.py)",
    "fresh": "a pooled connection just made, needing no ping (orders/data/db.py; the pool's own record)",
}


def _g_and_info(path: Path) -> tuple[set[str], set[str]]:
    """The attributes of flask.g and the keys of any `.info` mapping that `path` names."""
    attributes, keys = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "g":
            if node.attr in ("get", "pop", "setdefault"):
                continue  # the name is the call's argument, below
            attributes.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            owner, first = node.func.value, node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            if (
                isinstance(owner, ast.Name)
                and owner.id == "g"
                and node.func.attr in ("get", "pop", "setdefault")
            ):
                attributes.add(first.value)
            elif isinstance(owner, ast.Attribute) and owner.attr == "info":
                keys.add(first.value)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "info"
            and isinstance(node.slice, ast.Constant)
        ):
            keys.add(str(node.slice.value))
    return attributes, keys


@pytest.mark.parametrize("path", app_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_cursor_travels_through_g_or_session_info(path: Path) -> None:
    attributes, keys = _g_and_info(path)
    unknown_g = sorted(attributes - set(G_ATTRIBUTES))
    unknown_info = sorted(keys - set(INFO_KEYS))
    assert not unknown_g, f"{path.name} keeps {unknown_g} in flask.g: pass it in the list request"
    assert not unknown_info, (
        f"{path.name} keeps {unknown_info} in a session's info: pass it in the list request"
    )
    if str(path.relative_to(ROOT)).startswith(VIEWS_AND_SERVICES):
        assert not attributes, (
            f"a view or service reads flask.g ({sorted(attributes)}): take it as an argument"
        )
        assert keys <= {"page_rows"}, f"a view or service reads session.info {sorted(keys)}"


def test_the_channel_check_sees_a_cursor_in_g_and_in_info(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from flask import g\n"
        "def f(session, position):\n"
        "    g.cursor_positions = {'x': position}\n"
        "    session.info['cursor_meta'] = {}\n"
        "    return session.info.get('cursor_positions'), g.get('cursor_meta')\n"
    )
    attributes, keys = _g_and_info(planted)
    assert attributes == {"cursor_positions", "cursor_meta"}
    assert keys == {"cursor_meta", "cursor_positions"}


def _imports(path: Path, package: str) -> set[str]:
    """The modules of `package` that `path` imports, anywhere in it (TYPE_CHECKING and
    function-level imports too), relative imports resolved."""
    me = module_name(path)
    base = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{parent}.{node.module}" if node.module else parent
            else:
                module = node.module or ""
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                is_module = (ROOT / Path(*candidate.split("."))).with_suffix(".py").exists()
                found.add(candidate if is_module else module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {m for m in found if (m == package or m.startswith(package + ".")) and m != me}


@pytest.mark.parametrize("package", ["orders", "pagination"])
def test_no_modules_import_each_other(package: str) -> None:
    """No cycle of imports, of two modules or more: each module reads only what is below it."""
    paths = sorted((ROOT / package).rglob("*.py"))
    graph = {module_name(p): _imports(p, package) - {package} for p in paths}
    cycles = []

    def visit(module: str, trail: list[str]) -> None:
        for dep in sorted(graph.get(module, ())):
            if dep in trail:
                cycles.append(" -> ".join([*trail[trail.index(dep) :], dep]))
            elif len(trail) < 12:
                visit(dep, [*trail, dep])

    for module in graph:
        visit(module, [module])
    assert not cycles, f"modules that import each other: {sorted(set(cycles))[:5]}"


# --- Every file a comment or a doc names exists ----------------------------------------------

# Files named on purpose that are not in the tree: what a test or a recipe writes elsewhere, and
# examples of a command line.
NOT_IN_THE_TREE = {
    "example.py": "written by tests/test_library_install.py into a fresh venv",
    "walk.py": "written by tests/test_library_install.py into a fresh venv",
    "readme_example.py": "written by tests/test_library_readme.py",
    "proxy.cfg": "haproxy's configuration a cluster recipe writes (devtools/patroni.py)",
    "tests/test_a.py": "docs/testing.md: an example of a command line",
    "tests/test_b.py": "docs/testing.md: an example of a command line",
    "html.js": "a CSS selector (the js class on <html>), not a file",
}
_NAMED_FILE = re.compile(r"(?<![\w./@:-])((?:[\w-]+/)*[\w-]+\.(?:py|js|css|html|md|cfg|yml|yaml|toml|sh))\b")


def _tracked() -> list[str]:
    import subprocess

    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return listed.stdout.split()


def _prose(path: Path) -> str:
    """What a reader reads as prose in `path`: Python's comments and docstrings, JS and CSS
    comments, Markdown outside code blocks."""
    text = path.read_text(errors="replace")
    if path.suffix == ".py":
        import io
        import tokenize

        parts = [
            t.string
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type == tokenize.COMMENT
        ]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                parts.append(ast.get_docstring(node) or "")
        return "\n".join(parts)
    if path.suffix in (".js", ".css"):
        return "\n".join(re.findall(r"/\*.*?\*/|//[^\n]*", text, flags=re.S))
    if path.suffix == ".md":
        return re.sub(r"```.*?```", "", text, flags=re.S)
    return ""


def named_files(text: str) -> set[str]:
    return set(_NAMED_FILE.findall(text))


def test_every_file_a_comment_or_doc_names_exists() -> None:
    tracked = _tracked()
    paths = set(tracked) | {str(Path(t).parent) for t in tracked}
    basenames = {Path(t).name for t in tracked}
    gone: dict[str, list[str]] = {}
    for source in tracked:
        if source.startswith("bench/results/") or not source.endswith((".py", ".js", ".css", ".md")):
            continue
        for name in named_files(_prose(ROOT / source)):
            exists = (
                name in basenames
                if "/" not in name
                else any(p == name or p.endswith("/" + name) for p in paths)
            )
            if not exists and name not in NOT_IN_THE_TREE:
                gone.setdefault(source, []).append(name)
    assert not gone, f"comments and docs name files that do not exist: {gone}"


def test_the_named_file_check_sees_a_stale_name() -> None:
    gone = "orders/finding/" + "positions.py"  # spelled apart: the path check reads this file
    assert named_files(f"# app.js shows a Retry row ({gone} seek_form)") == {"app.js", gone}
    assert "response.json" not in named_files("response.json() and the JSON body")


def test_the_long_modules_conftest_hands_out_first_exist() -> None:
    """conftest's LONG_MODULES orders the workers' units by name: a name left after a module was
    renamed or removed would silently put it back among the short ones."""
    from .conftest import LONG_MODULES

    assert not {name for name in LONG_MODULES if not (ROOT / "tests" / name).is_file()}


def test_a_patroni_lanes_modules_run_whole() -> None:
    """A lane's modules each run their tests one after another (conftest's _LaneModulesWhole): a
    test of another module between two of a module's stops and starts its cluster again. In this
    order (seed 1) pytest's own reordering put test_failover's browser test between test_cluster's.
    Collected only, without the plugins and assertion rewriting it does not need: 1 CPU s, not 2.4."""
    lanes = [
        "test_failover.py",
        "test_cluster.py",
        "test_replica_unavailable.py",
        "test_prometheus_cluster.py",
    ]
    listed = _collected("--module-order=random:1", *(f"tests/{name}" for name in lanes))
    modules = [line.split("::")[0] for line in listed]
    runs = [module for i, module in enumerate(modules) if i == 0 or modules[i - 1] != module]
    assert len(modules) > len(lanes) and sorted(runs) == sorted(set(modules)), runs


def _collected(*args: str) -> list[str]:
    """The node ids pytest collects with `args`, in one process, without the plugins and assertion
    rewriting a collection does not need."""
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "--assert=plain", "-p", "no:schemathesis", "-p", "no:anyio", "-p", "no:hypothesispytest", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},  # one process, as listed
    ).stdout  # fmt: skip
    return [line for line in listed.splitlines() if "::" in line]


def test_the_shares_of_the_browser_tests_hold_each_once() -> None:
    """`--share K/N` (tests/test_browser_deployment.py runs one share a run): every browser test is
    in exactly one of the N shares, each share holds some of every module, and a test that is not
    a browser test is in every share."""
    modules = ["tests/test_browser_layout.py", "tests/test_browser_push.py", "tests/test_architecture.py"]
    whole = _collected("--browser", "chromium", *modules)
    shares = [_collected("--browser", "chromium", f"--share={k}/3", *modules) for k in (1, 2, 3)]
    browser = [node for node in whole if node.startswith("tests/test_browser")]
    assert sorted(node for share in shares for node in share if node in browser) == sorted(browser)
    others = [node for node in whole if node not in browser]
    for share in shares:
        assert {node.split("::")[0] for node in share} == set(modules), share
        assert [node for node in share if node not in browser] == others


# --- The library's one door, and modules a reader can hold ----------------------------------

# What the library publishes: the package (its __all__) and the async entry points. Every other
# module of pagination/ is its own business, free to change without a caller noticing.
PUBLIC_LIBRARY_MODULES = {"pagination", "pagination.asyncio"}
# Tests of the library's own machinery that reach behind the door, and why.
BEHIND_THE_DOOR = {
    "tests/test_library_shapes.py": "counts the plan cache's entries (planning.PLANS): no public name",
}
MAX_MODULE_LINES = 450


def _outside_the_library() -> list[Path]:
    return [ROOT / p for p in _tracked() if p.endswith(".py") and not p.startswith("pagination/")]


def private_library_imports(path: Path) -> set[str]:
    """The modules of pagination/ other than its public ones that `path` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name.split(".")[0] != "pagination" or name in PUBLIC_LIBRARY_MODULES:
                continue
            # `from pagination import Page` names a public object, `from pagination import values` a module.
            if (ROOT / Path(*name.split("."))).with_suffix(".py").exists():
                found.add(name)
    return found


def test_nothing_outside_the_library_imports_its_private_modules() -> None:
    reaching = {}
    for path in _outside_the_library():
        relative = str(path.relative_to(ROOT))
        found = private_library_imports(path)
        if found and relative not in BEHIND_THE_DOOR:
            reaching[relative] = sorted(found)
    assert not reaching, f"import pagination's public names (pagination.__all__) instead: {reaching}"
    assert all((ROOT / p).exists() for p in BEHIND_THE_DOOR), "BEHIND_THE_DOOR names a file that is gone"


def test_the_door_check_sees_a_private_import(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import pagination.statement\n"
        "from pagination import Page, values\n"
        "from pagination.values import to_cursor\n"
        "from pagination.asyncio import paginate\n"
    )
    assert private_library_imports(planted) == {"pagination.statement", "pagination.values"}


@pytest.mark.parametrize("folder", ["orders/finding", "pagination"])
def test_no_module_of_finding_or_the_library_is_longer_than_a_reader_holds(folder: str) -> None:
    lengths = {p.name: len(p.read_text().splitlines()) for p in sorted((ROOT / folder).glob("*.py"))}
    long = {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES}
    assert lengths and not long, f"split at a seam (at most {MAX_MODULE_LINES} lines): {long}"


# --- One word per meaning (the glossary: pagination/__init__.py) -----------------------------

# Names a word of the glossary replaced, and the word now used.
RETIRED_NAMES = {
    "keyset": "sort (the library's object; its class keeps the name Keyset)",
    "KEYSETS": "LIBRARY_SORTS",
    "sealer": "codec",
    "stamp": "meta (what is sealed into a cursor; the app's is the LSN)",
    "jump": "goto",
}
# WAL locations are LSNs where replicas are chosen; "position" is a decoded cursor only.
LSN_HOMES = [APP / "data" / "replicas", APP / "web" / "read_routing.py"]


def identifiers(text: str) -> set[str]:
    """Every name Python code defines or uses: variables, attributes, arguments, functions,
    classes, keywords and imported names."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
        elif isinstance(node, ast.alias):
            found |= {part for part in (node.asname or node.name).split(".")}
    return found


def test_the_code_uses_the_glossarys_words() -> None:
    paths = [*app_modules(), *sorted((ROOT / "pagination").glob("*.py"))]
    found = {}
    for path in paths:
        retired = sorted(identifiers(path.read_text()) & set(RETIRED_NAMES))
        if retired:
            found[str(path.relative_to(ROOT))] = {name: RETIRED_NAMES[name] for name in retired}
    for template in sorted((ROOT / "templates").glob("*.html")):
        retired = sorted(set(re.findall(r"\.(\w+)", template.read_text())) & set(RETIRED_NAMES))
        if retired:
            found[str(template.relative_to(ROOT))] = {name: RETIRED_NAMES[name] for name in retired}
    assert not found, f"names the glossary retired (use the word after each): {found}"


def wal_positions(text: str) -> list[str]:
    """Lines that call a WAL location a position (a list request's decoded `.position` aside)."""
    return [
        line.strip()
        for line in text.splitlines()
        if re.search(r"(?<![.\w])positions?\b", re.sub(r"\blisting\.position\b", "", line), re.I)
    ]


def test_wal_locations_are_lsns_where_replicas_are_chosen() -> None:
    found = {}
    for home in LSN_HOMES:
        for path in sorted(home.rglob("*.py")) if home.is_dir() else [home]:
            lines = wal_positions(path.read_text())
            if lines:
                found[str(path.relative_to(ROOT))] = lines[:3]
    assert not found, f"a WAL location is an LSN here: {found}"


def test_the_word_checks_see_a_retired_name() -> None:
    planted = "def f(keyset, listing):\n    return listing.sealer, stamp\n"
    assert identifiers(planted) & set(RETIRED_NAMES) == {"keyset", "sealer", "stamp"}
    assert wal_positions("x = listing.position\n# the replica's position\n") == ["# the replica's position"]


@pytest.mark.parametrize(
    "module",
    sorted(module_name(p) for folder in ("bench", "devtools") for p in (ROOT / folder).glob("*.py")),
)
def test_every_bench_and_devtools_module_imports(module: str) -> None:
    """The tools the suite does not run whole (make bench, the devtools commands) still import:
    a module the app split (the list request's, into request.py and reader.py) broke `make bench`
    unseen."""
    importlib.import_module(module)


def test_paginates_statement_visits_each_module_once() -> None:
    """The walk of `paginate`'s statement (the modules of the library's calls that receive it, in
    order, a run of calls in one module counted once) goes forward: paging, planning (the shape),
    refusals (every refusal in one call), uniqueness, statement (the Plan), never back to a module
    it left. It went planning, refusals, uniqueness, planning, refusals before."""
    from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, select

    from pagination import CursorCodec, Keyset, paginate

    walked = Table("walked", MetaData(), Column("id", Integer, primary_key=True), Column("name", String(20)))
    engine = create_engine("sqlite://")
    walked.metadata.create_all(engine)
    stmt = select(walked)
    visits: list[str] = []

    def visit(frame: Any, event: str, _arg: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if (
            event == "call"
            and module.startswith("pagination")
            and any(v is stmt for v in frame.f_locals.values())
        ):
            visits.append(module.removeprefix("pagination."))

    with engine.connect() as connection:
        sys.setprofile(visit)
        try:
            sort = Keyset("name", walked.c.name, walked.c.id)  # a new sort: no plan remembered
            paginate(connection, stmt, sort, limit=5, codec=CursorCodec("w" * 40))
        finally:
            sys.setprofile(None)
    engine.dispose()
    stays = [m for i, m in enumerate(visits) if i == 0 or visits[i - 1] != m]
    assert stays == ["paging", "planning", "refusals", "uniqueness", "statement"], stays
