"""Shared fixtures: a migrated throwaway database per engine, sessions, the Flask app, Chromium."""

from __future__ import annotations

import functools
import gc
import json
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from orders.data.db import make_engine
from pagination import CursorCodec

# One Patroni cluster per module that asks for it (tests/test_cluster.py, tests/test_failover.py):
# `cluster`, its leader's engine `primary`, and freshly seeded `orders` on every node.
from . import browsers, webkit
from .cluster_support import PATRONI_LANE_A, PATRONI_LANE_B, cluster, orders, primary  # noqa: F401
from .databases import APP_ENGINES, ENGINES, SERVERS, migrated_database
from .fixtures import SECRET, clear, make_app  # one definition each; test modules import them from .fixtures
from .live import BROWSER_ENGINES, REMOTE_URL, LiveServer, RemoteTarget

# --- Module order: the file order, or shuffled with a seed that is printed --------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--module-order",
        default="file",
        help="file (the default), random (a new seed each run) or random:SEED (that order again): "
        "the order the test modules run in; a module's own tests keep theirs",
    )
    parser.addoption(
        "--quick",
        action="store_true",
        help="make test-quick: only the tests that need no browser, no database server and no "
        "cluster (SQLite and unit tests; see QUICK_LEAVES_OUT)",
    )
    parser.addoption(
        "--share",
        default="1/1",
        help="K/N: of each browser module's tests (in file order), the 1st, (N+1)th, ... counted "
        "from the Kth: one of N shares, as tests/test_browser_deployment.py runs them",
    )


# --quick (make test-quick, a developer's loop on every change) leaves out, beyond every test
# marked browser or slow, every test on a database server (an engine id among its parameters) and
# the Patroni lanes, these modules: each starts servers or clusters of its own even on SQLite
# (gunicorn, haproxy, Redis, replicas, shards), or spends most of a minute on one thing.
QUICK_LEAVES_OUT = {
    "test_cluster.py",  # three PostgreSQL nodes, gunicorn and haproxy
    "test_front.py",  # the shipped front (haproxy) and gunicorn
    "test_front_attacks.py",
    "test_hangs.py",  # frozen servers of its own
    "test_health.py",  # a PostgreSQL cluster and a Redis of its own, taken away
    # The documented production processes: gunicorn twice, haproxy, PostgreSQL and Redis.
    "test_production_start.py::test_the_documented_production_processes_start_serve_and_log_json",
    "test_replica_decode.py",  # replicas
    "test_replica_diverged.py",
    "test_replica_restarted.py",
    "test_replica_unavailable.py",
    "test_security_downloads.py",  # gunicorn under slow clients
    "test_security_redis.py",  # a Redis server
    "test_shard_urls.py",  # shard servers
    "test_soak.py",  # gunicorn for a soak
    "test_stream_server.py",  # gunicorn (gevent) and haproxy for live streams
    "test_synchronous_commit.py",  # a synchronous cluster
    "test_openapi.py",  # schemathesis: minutes of generated requests
    "test_library_install.py",  # a fresh venv
    # Hypothesis walks of many generated tables: minutes on SQLite alone.
    "test_library_generated.py",
    "test_library_statements.py",
    "test_pagination_properties.py",
    "test_fuzz.py",
    # Sharded topologies: PostgreSQL servers of their own (initdb, postgres_fdw), half a minute each.
    "test_shards.py",
    "test_shard_add.py",
    # 300,000 orders seeded as `make run` seeds them: most of a minute on one thing.
    "test_seed.py::test_make_run_seed_timed",
}
# --quick runs one case of each of these, the full suite every case: each case starts a Python
# process of its own (the app's CLI or gunicorn refusing a value, about a second each, 122 cases:
# two minutes of the quick loop's time), and one case already runs that command's whole path.
QUICK_RUNS_ONE_CASE = {
    "test_settings.py::test_a_bad_value_stops_every_command_with_one_line",
    "test_settings.py::test_every_setting_gunicorn_reads_is_refused_in_one_line_with_status_2",
    "test_settings.py::test_a_value_that_cannot_work_is_refused_at_start_in_one_line",
    "test_settings.py::test_a_refusal_never_prints_a_credential",
    "test_settings.py::test_development_warns_about_a_misspelling_and_goes_on",
}


def _quick_leaves_out(item: pytest.Item, cases_seen: set[str]) -> bool:
    if item.get_closest_marker("browser") or item.get_closest_marker("slow"):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    if any(isinstance(value, str) and value in SERVERS for value in params.values()):
        return True
    module = Path(str(item.path))
    function = f"{module.name}::{getattr(item, 'originalname', item.name)}"
    if function in QUICK_RUNS_ONE_CASE:
        if function in cases_seen:
            return True
        cases_seen.add(function)
    return module.name in QUICK_LEAVES_OUT or function in QUICK_LEAVES_OUT or bool(_patroni_lane(module))


_SEED = pytest.StashKey[int]()


def module_seed(config: pytest.Config) -> int | None:
    choice = str(config.getoption("--module-order"))
    if choice == "file":
        return None
    kind, _, seed = choice.partition(":")
    if kind != "random" or (seed and not seed.isdigit()):
        raise pytest.UsageError(f"--module-order={choice}: file, random or random:SEED")
    # Drawn once per run (the header prints it, the shuffle uses it), kept in the config's stash.
    # Under pytest-xdist the controller draws it and hands it to every worker: xdist requires
    # each worker to collect the same order.
    if _SEED not in config.stash:
        given = getattr(config, "workerinput", {}).get("module_seed")
        config.stash[_SEED] = int(given or seed or random.SystemRandom().randrange(10**6))
    return config.stash[_SEED]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, in the controller, per worker: the module order's seed (see module_seed)."""
    seed = module_seed(node.config)
    if seed is not None:
        node.workerinput["module_seed"] = seed


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = module_seed(config)
    return (
        None if seed is None else f"module order: random, seed {seed} (again: --module-order=random:{seed})"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Shuffle whole modules, before pytest groups the tests by their parametrized fixtures (so
    each engine's database is still set up once): a module that passes only after another one
    left something behind fails in some order, and the seed replays that order."""
    if config.getoption("--quick"):
        cases_seen: set[str] = set()
        _deselect(config, items, [item for item in items if _quick_leaves_out(item, cases_seen)])
    _in_its_engines(config, items)
    if REMOTE_URL:
        _once_against_a_deployment(config, items)
    _in_the_share(config, items)
    seed = module_seed(config)
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    if seed is None:
        return
    order = list(modules)
    random.Random(seed).shuffle(order)
    if hasattr(config, "workerinput"):
        # Under pytest-xdist the controller hands the units out in the order the workers
        # collected them (ByModule below keeps it): the longest first, as last they would leave
        # the other workers idle while they run: the Patroni lanes (about 240 and 300 s each), then
        # the browser modules' halves (up to 190 s), then LONG_MODULES. Within each kind the
        # drawn order stands.
        order.sort(key=lambda name: _unit_kind(config.rootpath / name))
    items[:] = [item for name in order for item in modules[name]]


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_LaneModulesWhole(), "lane-modules-whole")
    config.addinivalue_line("markers", "engines(*names): the engines beyond Chromium a browser test runs in")
    # Every browser test is collected in each engine (pytest-playwright's browser_name), and
    # _in_its_engines keeps those its `engines` mark names; `--browser NAME` narrows the run.
    if not config.option.browser:
        config.option.browser = list(browsers.ENGINES)


def _in_its_engines(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselects a browser test's run in an engine it is not marked for (tests/browsers.py), and
    its runs on PostgreSQL (ROWS_MOVING) but in Chromium: what differs between databases is the
    server's, the same bytes to every browser (tests/live.py BROWSER_ENGINES)."""
    left_out = [
        item
        for item in items
        if browsers.engine_of(item) not in (None, *browsers.engines_of(item))
        or (
            browsers.engine_of(item) not in (None, "chromium")
            and _engine_of(item.nodeid) not in ("", "sqlite")
        )
    ]
    _deselect(config, items, left_out)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The browser tests' outcomes per engine, the run's last line but one. Against a deployment,
    also written to test-results/deployment-run.json, whence docs/testing.md's figures come
    (tests/deployment_run.py)."""
    if REMOTE_URL and not hasattr(terminalreporter.config, "workerinput"):
        from . import deployment_run

        started = getattr(terminalreporter, "_session_start", None)
        seconds = time.time() - (started.time if started is not None else time.time())
        engines = list(terminalreporter.config.option.browser)
        share = str(terminalreporter.config.getoption("--share"))
        run = deployment_run.record(terminalreporter.stats, seconds, REMOTE_URL, engines, share)
        deployment_run.RESULTS.parent.mkdir(exist_ok=True)
        deployment_run.RESULTS.write_text(json.dumps(run, indent=2, ensure_ascii=False) + "\n")
    counts: dict[str, dict[str, int]] = {}
    for outcome in ("passed", "failed", "skipped", "xfailed", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", "call") != "call" and outcome == "passed":
                continue
            engine = _browser_of(report.nodeid) if "browser" in getattr(report, "keywords", {}) else ""
            if engine:
                counts.setdefault(engine, {}).setdefault(outcome, 0)
                counts[engine][outcome] += 1
    if counts:
        terminalreporter.write_line(
            "browser tests per engine: "
            + "; ".join(
                f"{engine} " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts[engine].items()))
                for engine in browsers.ENGINES
                if engine in counts
            )
        )


class _LaneModulesWhole:
    """pytest's own reordering (`reorder_items`, after the shuffle above) pulls the tests that share
    a session-scoped parameter together across modules: a Patroni lane's browser tests
    (`[chromium]`) came out of their modules, and each time another module's test came between
    two of a module's, its module-scoped cluster was stopped and started again (test_failover's
    three nodes, two app servers and haproxy, twice a run; lane A alone, one worker: 109.5 CPU s
    and 173 s before, 99.1 and 151 s after). A lane's modules share no session-scoped fixture
    that is costly to switch, so each one's tests go back together, where its first test was."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        lanes: dict[str, list[pytest.Item]] = {}
        for item in items:
            module = item.nodeid.split("::")[0]
            if _patroni_lane(config.rootpath / module):
                lanes.setdefault(module, []).append(item)
        placed: list[pytest.Item] = []
        for item in items:
            module = item.nodeid.split("::")[0]
            if module not in lanes:
                placed.append(item)
            elif item is lanes[module][0]:
                placed.extend(lanes[module])
        items[:] = placed


def _once_against_a_deployment(config: pytest.Config, items: list[pytest.Item]) -> None:
    """BASE_URL (QA): every browser test runs against the deployment, its `live` the deployment's
    (tests/live.py RemoteTarget); what a test needs that the deployment does not give skips it
    there, naming the need (tests/live.py given, engine_of). A test parametrized by local database
    engine runs once: the deployment has one database, whatever the parameter says."""
    seen: set[str] = set()
    left_out = []
    for item in items:
        if not item.get_closest_marker("browser"):
            continue
        if item.nodeid.startswith("tests/test_browser_deployment.py"):
            left_out.append(item)  # it starts a server and runs this very run at it: not a test of one
            continue
        name, _, params = item.nodeid.partition("[")
        once = name + "-".join(part for part in params.split("-") if part.rstrip("]") not in ENGINES)
        if once in seen:
            left_out.append(item)
        seen.add(once)
    _deselect(config, items, left_out)


def _deselect(config: pytest.Config, items: list[pytest.Item], left_out: list[pytest.Item]) -> None:
    """Takes `left_out` from the run, reported as deselected."""
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        dropped = {id(item) for item in left_out}
        items[:] = [item for item in items if id(item) not in dropped]


def share_of(option: str) -> tuple[int, int]:
    """`--share K/N` as (K, N), 1 <= K <= N."""
    k, _, n = option.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise pytest.UsageError(f"--share={option}: K/N with 1 <= K <= N, such as 2/3")
    return int(k), int(n)


def _in_the_share(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--share K/N`: of each browser module's tests (in file order), the Kth, the (K+N)th, ...;
    the other tests (no browser) all. Every test is in exactly one of the N shares."""
    k, n = share_of(str(config.getoption("--share")))
    if n == 1:
        return
    seen: dict[str, int] = {}
    left_out = []
    for item in items:
        if not item.get_closest_marker("browser"):
            continue
        module = item.nodeid.split("::")[0]
        index = seen[module] = seen.get(module, -1) + 1
        if index % n != k - 1:
            left_out.append(item)
    _deselect(config, items, left_out)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist (make test's TEST_WORKERS): each module runs whole on one worker, so its
    module-scoped fixtures (a database, a cluster) are built once, and the modules that build
    Patroni clusters run one after another in their lane (PATRONI_LANE_A, PATRONI_LANE_B):
    one worker per lane. xdist's own `--dist loadgroup` would read
    the marks, but it renames node ids through an attribute pytest 9 no longer has, so the groups
    are made here, whatever `--dist` says."""
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]  # xdist ships no types

    class ByModule(LoadScopeScheduling):  # type: ignore[misc]  # an untyped base (above)
        def __init__(self, config: pytest.Config, log: Any) -> None:
            # xdist's default (--loadscope-reorder) hands out the units with the most tests
            # first, which undid the module shuffle: the workers collected the drawn order, and
            # that is the order they get.
            config.option.loadscopereorder = False
            super().__init__(config, log)

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            lane = _patroni_lane(config.rootpath / module)
            if lane:
                return lane
            if not _BROWSER_MODULE.fullmatch(module):
                return module
            if REMOTE_URL:
                # Against a deployment every test is a unit of its own: there is no local server
                # or database to build per module, and whole, tests/test_browser_reach.py (its
                # walks at a person's pace, about 170 s) was the last 110 s of a 275 s run.
                return nodeid
            # Per database engine and per browser: each browser's share on a worker of its own.
            browser = next(
                (e for e in browsers.ENGINES if nodeid.endswith(f"{e}]") or f"-{e}-" in nodeid), ""
            )
            return f"{module}::{_engine_of(nodeid)}::{browser}"

    return ByModule(config, log)


# A browser module (make test-browser's tests/test_browser*.py) is split by engine: its SQLite and
# its PostgreSQL tests may run on two workers at once. Each worker has its own live database and
# server (live_db_url, session scope) and Chromium, and no browser module holds a module-scoped
# fixture that is not per engine; they are the largest units after the Patroni lanes (each
# engine's half of tests/test_browser_reach.py about 4 minutes), so whole they bound the run.
_BROWSER_MODULE = re.compile(r"tests/test_browser\w*\.py")


def _engine_of(nodeid: str) -> str:
    """The engine id among a test's parameters ("" for none), read off its node id."""
    params = nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""
    return next((part for part in params.split("-") if part in ENGINES), "")


def _browser_of(nodeid: str) -> str:
    """The browser engine among a test's parameters ("" for none), read off its node id."""
    params = nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""
    return next((part for part in params.split("-") if part in browsers.ENGINES), "")


@functools.cache
def _patroni_lane(module: Path) -> str:
    """The Patroni lane a module runs in ("" for none). The controller sees node ids, not marks:
    a Patroni module says so where it starts (`pytestmark = PATRONI_LANE_A` or
    `PATRONI_LANE_B`, tests/cluster_support.py), and that line is what is read here."""
    for line in module.read_text().splitlines():
        if line.startswith("pytestmark"):
            for name, mark in _PATRONI_LANES.items():
                if name in line:
                    return str(mark.args[0])  # the lane is the mark's xdist group
    return ""


_PATRONI_LANES = {"PATRONI_LANE_A": PATRONI_LANE_A, "PATRONI_LANE_B": PATRONI_LANE_B}


# The other modules that take a worker a minute or more (a census run, 4 workers, quiet but for
# its first minutes: test_library_statements 111 s, test_hangs 95, test_library_soundness 94,
# test_seed 94, test_fuzz 81, test_openapi 74, test_plans 72, test_matrix 60, test_export_cli 57,
# test_library_generated 54): handed out last, one of them ran alone for the run's last minute
# (test_matrix, 48 s after the third worker had run out of work). And the modules that mostly
# wait (slow clients, timeouts): test_front_attacks 74 s, test_security_downloads 47,
# test_front 38; one of them last kept a worker busy 12 to 42 s after the others were done.
LONG_MODULES = {
    "test_front_attacks.py",
    "test_security_downloads.py",
    "test_front.py",
    "test_library_statements.py",
    "test_hangs.py",
    "test_library_soundness.py",
    "test_seed.py",
    "test_fuzz.py",
    "test_openapi.py",
    "test_plans.py",
    "test_matrix.py",
    "test_export_cli.py",
    "test_library_generated.py",
}


def _unit_kind(module: Path) -> int:
    """0 for a Patroni lane's module, 1 for a browser module, 2 for another long one, 3 for the
    rest: the order the workers are handed them in (longest units first)."""
    if _patroni_lane(module):
        return 0
    if _BROWSER_MODULE.fullmatch(f"tests/{module.name}"):
        return 1
    return 2 if module.name in LONG_MODULES else 3


@pytest.fixture(scope="module", autouse=True)
def _garbage_of_the_module() -> Iterator[None]:
    """A connection or a process a module left for the garbage collector is reported (an
    unraisable ResourceWarning, an error here) in that module, not in whichever ran next."""
    yield
    gc.collect()


@pytest.fixture(scope="session", params=APP_ENGINES)
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated, empty database on each engine (tests using it run once per engine)."""
    with migrated_database(request.param, tmp_path_factory.mktemp("db")) as url:
        yield url


@pytest.fixture(scope="session")
def engine(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    clear(engine)
    with Session(engine) as session:
        yield session


@pytest.fixture(scope="session")
def codec() -> CursorCodec:
    return CursorCodec(SECRET)


# --- The browsers for pytest-playwright (tests/browsers.py) ---------------------------------------


@pytest.fixture(scope="session")
def browser_type_launch_args(
    browser_type_launch_args: dict[str, Any], browser_name: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Debian's build of the engine (Chromium's headless shell unless --headed; Firefox ESR in
    Playwright's WebDriver BiDi mode); Playwright's own download is unreachable here."""
    return browsers.launch_args(browser_name, browser_type_launch_args, tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="session")
def webkit_driver() -> Iterator[webkit.Driver]:
    """WebKitGTK's WebDriver under Xvfb, one per worker (tests/webkit.py)."""
    browsers.require_webkit()
    driver = webkit.Driver()
    yield driver
    driver.close()


@pytest.fixture
def page(request: pytest.FixtureRequest, browser_name: str) -> Iterator[Any]:
    """pytest-playwright's page in Chromium and Firefox; in WebKit the adapter's (tests/webkit.py)."""
    if browser_name == "webkit":
        with request.getfixturevalue("webkit_driver").page() as page:
            yield page
        return
    yield request.getfixturevalue("context").new_page()


# --- The Flask app on each engine ----------------------------------------------------------


@pytest.fixture
def app(db_url: str, engine: Engine) -> Iterator[Flask]:
    clear(engine)
    app = make_app(db_url, PAGE_SIZE=20)
    yield app
    # Every request must give its connection back (a leak would also block DROP DATABASE).
    assert app.extensions["engine"].pool.checkedout() == 0, "a request leaked a database connection"
    app.extensions["engine"].dispose()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


# --- A live server for the browser: SQLite (and PostgreSQL where rows move: live.ROWS_MOVING) ----


@pytest.fixture(scope="session", params=BROWSER_ENGINES)
def live_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if REMOTE_URL:  # a deployment's own database: none made here
        yield ""
        return
    with migrated_database(request.param, tmp_path_factory.mktemp("live"), "live") as url:
        yield url


@pytest.fixture
def live(live_db_url: str) -> Iterator[LiveServer | RemoteTarget]:
    """A running app on an empty database; tests may change app.config (read per request).
    Against a deployment (BASE_URL), the deployment as it is."""
    if REMOTE_URL:
        target = RemoteTarget(REMOTE_URL)
        yield target
        target.clean_up()  # what the test wrote through the API
        return
    app = make_app(live_db_url)
    try:
        clear(app.extensions["engine"])
        with LiveServer(app) as server:
            yield server
    finally:  # also when a request outlived the test (LiveServer's error): nothing for the GC
        app.extensions["engine"].dispose()
