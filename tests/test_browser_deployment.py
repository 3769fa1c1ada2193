"""QA against a deployment, end to end, as docs/testing.md tells a QA engineer: `make run`'s server
from a clean copy of the checkout (the tracked files only, no instance/ or test-results/), seeded
small (SEED_ROWS: 300k rows take 22 s alone and more beside the suite's other workers), and
`make test-browser` aimed at it with BASE_URL. Every browser test it runs either passes there or
skips with its reason in one line; none fails, none stalls (BROWSER_TEST_TIMEOUT), and the run
ends with pytest's summary line. (The skip bound is the default `make run`'s:
docs/deployment-run.json, from the whole run.)

One share of the browser tests a run, not all: each module's 1st, 4th, 7th, ... test, or its 2nd,
5th, ..., or its 3rd, 6th, ... (`--share K/3`, tests/conftest.py), K from the module order's seed,
so that consecutive runs go round the three and each test's deployment path is run every few
runs. The whole set ran here for 379 s of a worker and 320 CPU s of its processes, the largest
item of `make test` by far (a sixth of its CPU), each test a second time in Chromium against
SQLite, which the local run covers already; a share keeps the end-to-end path (make run's
start, the settings door, the writes through the API, every module's fixtures against a
deployment) for a third of it. The seed replays the share (`--module-order=random:SEED`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from devtools.gunicorn import free_port

from .conftest import module_seed

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(900),  # past BOUND_S and the make run it starts first
    pytest.mark.skipif(bool(os.environ.get("BASE_URL")), reason="NEEDS no BASE_URL: starts its own make run"),
]

ROOT = Path(__file__).resolve().parents[1]
SEED_ROWS = 3000  # enough for every deployment test (the go-to test reads the 300 newest)
# How long the whole `make test-browser` against the deployment may take here: a bound on the
# wait, not the promise. Alone on this 2-core machine it takes about 4 minutes (the issue's
# promise is 5; docs/deployment-run.json records the standalone run); inside `make test` it
# shares the cores with three other workers and took 300 s and more.
BOUND_S = 780
SHARES = 3


def clean_copy(to: Path) -> None:
    """The tracked files as they are now (uncommitted edits included), modification times kept so
    that make sees the shared .venv's stamps as newer than requirements*.txt."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    (to / ".venv").symlink_to((ROOT / ".venv").resolve())


def wait_healthy(url: str, server: subprocess.Popen[bytes], bound_s: float) -> None:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        assert server.poll() is None, f"make run exited with {server.returncode}"
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"make run's server did not answer /healthz within {bound_s:.0f} s")


def stop(server: subprocess.Popen[bytes]) -> None:
    """make, flask and its reloader-less server are one process group: end it, bounded."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)


def test_make_test_browser_against_make_runs_server(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    seed = module_seed(request.config)
    share = f"{(seed or 0) % SHARES + 1}/{SHARES}"
    checkout = tmp_path / "checkout"
    clean_copy(checkout)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # QA's command as docs/testing.md writes it: not this run's own pytest arguments.
    outer = ("BASE_URL", "API_TOKEN", "PYTEST_ADDOPTS", "PYTEST_ARGS")
    env = {k: v for k, v in os.environ.items() if k not in outer}
    log = (tmp_path / "make-run.log").open("wb")
    server = subprocess.Popen(
        ["make", "run", f"PORT={port}"],
        cwd=checkout,
        env={**env, "SEED_ROWS": str(SEED_ROWS), "PORT": str(port)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_healthy(url, server, bound_s=120)
        started = time.monotonic()
        run = subprocess.run(
            ["make", "test-browser", f"PYTEST_ARGS=--share={share}"],
            cwd=checkout,
            env={**env, "BASE_URL": url},
            capture_output=True,
            text=True,
            timeout=BOUND_S,
        )
        took = time.monotonic() - started
    finally:
        stop(server)
        log.close()
    output = run.stdout + run.stderr
    summary = [line for line in output.splitlines() if re.match(r"^=+ .* in [\d.]+s", line)]
    print(f"make test-browser, share {share}, against {url} (make run, {SEED_ROWS} rows): {took:.0f} s")
    print("\n".join(line for line in output.splitlines() if line.startswith("SKIPPED")))
    print(summary[-1] if summary else "(no summary)")
    assert summary, f"no summary line; the run's end:\n{output[-3000:]}"
    assert run.returncode == 0 and " failed" not in summary[-1], output[-6000:]
    assert " passed" in summary[-1], summary[-1]
