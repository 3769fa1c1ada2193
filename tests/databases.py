"""Throwaway databases on each engine: created uniquely per test run, dropped at the end.

PostgreSQL and MariaDB come from TEST_POSTGRES_URL / TEST_MYSQL_URL, else the servers on
127.0.0.1. Where no server answers the tests skip loudly, except under CI=true, where a
missing engine fails the run (a skipped engine must never pass for a tested one).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from devtools.databases import create_database, drop_database

ENGINES = ["sqlite", "postgresql", "mysql"]
SERVER_URLS = {
    "postgresql": os.environ.get(
        "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    ),
    "mysql": os.environ.get("TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/mysql"),
}
IN_CI = os.environ.get("CI", "").lower() == "true"


def unavailable(what: str, why: str) -> None:
    message = f"{what} is not available: {why}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: every engine and the browser must really run)", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {message}")


@contextmanager
def throwaway_database(kind: str, tmp_dir: Path, label: str = "t") -> Iterator[str]:
    """Yield the URL of a new, empty database of `kind`; drop it afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_dir / f'{label}-{uuid.uuid4().hex[:8]}.db'}"
        return
    server = SERVER_URLS[kind]
    name = f"keyset_{label}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        url = create_database(server, name)
    except Exception as err:
        shown = make_url(server).render_as_string(hide_password=True)
        unavailable(kind, f"{shown}: {str(err).splitlines()[0]}")
    try:
        yield url
    finally:
        drop_database(server, name)
