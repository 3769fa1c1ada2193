"""Shared fixtures: a migrated throwaway database per engine, sessions, the Flask app, Chromium."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from orders.db import make_engine, migrate
from pagination import CursorCodec

from .databases import ENGINES, throwaway_database, unavailable
from .fixtures import SECRET, clear, make_app  # one definition each; test modules import them from .fixtures


@pytest.fixture(scope="session", params=ENGINES)
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated, empty database on each engine (tests using it run once per engine)."""
    with throwaway_database(request.param, tmp_path_factory.mktemp("db")) as url:
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
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


# --- Chromium for pytest-playwright -------------------------------------------------------


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    """Debian's Chromium (Playwright's own download is unreachable here), else Playwright's."""
    args = dict(browser_type_launch_args)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        args["executable_path"] = chromium
    elif not list(Path.home().glob(".cache/ms-playwright/chromium-*")):
        unavailable("Chromium", "install Debian's 'chromium' package (make test does it as root)")
    args["args"] = [
        *args.get("args", []),
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    return args


# --- The Flask app on each engine ----------------------------------------------------------


@pytest.fixture
def app(db_url: str, engine: Engine):  # type: ignore[no-untyped-def]
    clear(engine)
    app = make_app(db_url, PAGE_SIZE=20)
    yield app
    # Every request must give its connection back (a leak would also block DROP DATABASE).
    assert app.extensions["engine"].pool.checkedout() == 0, "a request leaked a database connection"
    app.extensions["engine"].dispose()


@pytest.fixture
def client(app):  # type: ignore[no-untyped-def]
    return app.test_client()


# --- A live server for the browser: SQLite (the default) and PostgreSQL --------------------


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def live_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with throwaway_database(request.param, tmp_path_factory.mktemp("live"), "live") as url:
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
        yield url


@pytest.fixture
def live(live_db_url: str):  # type: ignore[no-untyped-def]
    """A running app on an empty database; tests may change app.config (read per request)."""
    from .live import LiveServer

    app = make_app(live_db_url)
    clear(app.extensions["engine"])
    with LiveServer(app) as server:
        yield server
    app.extensions["engine"].dispose()
