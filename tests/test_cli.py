"""The flask commands behave like tools: a failure is one line on stderr and a non-zero exit, the
traceback only when asked for; the seed is not bound by the web's statement timeout.

The commands are forked children of a process that imported the app once (tests/forked.py);
`flask(..., cold=True)` starts a fresh interpreter (the traceback FLASK_DEBUG asks for here,
test_seed's `make run`)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from devtools.gunicorn import free_port
from orders.data.db import make_engine
from orders.data.models import Order

from . import forked
from .databases import POSTGRESQL, SERVER_URLS, throwaway_database
from .fixtures import SECRET

ROOT = Path(__file__).resolve().parent.parent


def flask(url: str, *args: str, cold: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    """`flask --app app ARGS` on `url`: forked (tests/forked.py), or from a fresh interpreter."""
    environment = {k: v for k, v in os.environ.items() if k not in ("APP_ENV", "FLASK_DEBUG")}
    environment.update(DATABASE_URL=url, SECRET_KEY=SECRET, **env)
    command = [sys.executable, "-m", "flask", "--app", "app", *args]
    if cold:
        return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    return forked.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)


def one_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _postgres_server() -> str:
    return SERVER_URLS["postgresql"].rsplit("/", 1)[0]


@pytest.mark.parametrize("command", [["init-db"], ["seed", "--rows", "10"], ["export"], ["fold-rail"]])
def test_a_database_that_refuses_is_one_line(command: list[str]) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/orders"  # nothing listens there
    line = one_line(flask(url, *command), "cannot use", "127.0.0.1")
    assert "refused" in line.lower() or "connect" in line.lower()


def test_an_unknown_database_is_one_line_and_traceback_on_request() -> None:
    url = f"{_postgres_server()}/no_such_database_{os.getpid()}"
    one_line(flask(url, "init-db"), "no_such_database")
    shown = flask(url, "init-db", "--traceback")
    assert shown.returncode != 0 and "Traceback" in shown.stderr
    assert "Traceback" in flask(url, "init-db", cold=True, FLASK_DEBUG="1").stderr


def test_a_database_from_a_newer_version_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    assert flask(url, "init-db").returncode == 0
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    engine.dispose()
    one_line(flask(url, "init-db"), "migrations", "9999_from_the_future")


def test_a_file_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'orders.db'}"
    assert flask(url, "init-db").returncode == 0
    one_line(flask(url, "export", "--output", str(tmp_path / "missing" / "out.csv")), "out.csv")


def test_a_bad_option_is_a_usage_error_without_traceback(tmp_path: Path) -> None:
    result = flask(f"sqlite:///{tmp_path / 'o.db'}", "seed", "--rows", "many")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Invalid value for '--rows'" in result.stderr


@pytest.mark.parametrize("kind", POSTGRESQL)
def test_the_seed_is_not_bound_by_the_web_statement_timeout(kind: str, tmp_path: Path) -> None:
    """20,000 rows (the bulk path: their indexes built after) take far longer than the web's
    smallest timeout, 10 ms, on PostgreSQL; that timeout must not apply. (With the CLI's engine
    given the web's timeout, this failed: "canceling statement due to statement timeout".)"""
    with throwaway_database(kind, tmp_path, "seed") as url:
        assert flask(url, "init-db").returncode == 0
        result = flask(url, "seed", "--rows", "20000", STATEMENT_TIMEOUT_MS="10")
        assert result.returncode == 0, result.stderr
        engine = make_engine(url)
        with Session(engine) as session:
            assert session.scalar(select(func.count()).select_from(Order)) == 20_000
        engine.dispose()


def test_fold_rail_says_what_it_folded_and_again_finds_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    assert flask(url, "init-db").returncode == 0
    engine = make_engine(url)
    with Session(engine) as session:  # three orders written one by one: their buckets' stripes
        for n in range(3):
            when = dt.datetime(2026, 12, 1, n, tzinfo=dt.UTC)
            session.add(Order(customer=f"Ana {n}", amount=Decimal("12.50"), status="paid", created_at=when))
            session.commit()
    engine.dispose()
    first = flask(url, "fold-rail")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "amount 3 rows folded, day 3 rows folded, initial 3 rows folded"
    again = flask(url, "fold-rail")
    assert again.stdout.strip() == "amount 0 rows folded, day 0 rows folded, initial 0 rows folded"
    engine = make_engine(url)
    with Session(engine) as session:
        when = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
        session.add(Order(customer="Bia", amount=Decimal("3.00"), status="paid", created_at=when))
        session.commit()
    engine.dispose()
    one = flask(url, "fold-rail")
    assert one.stdout.strip() == "amount 1 row folded, day 1 row folded, initial 1 row folded"
