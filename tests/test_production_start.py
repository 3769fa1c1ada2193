"""The production processes started exactly as docs/operations.md writes them (its "production"
block): the list's gunicorn and the stream server through serve.py with APP_ENV=production, and
haproxy with deploy/haproxy.cfg, on PostgreSQL and a Redis of the test's own.

The block's lines run as written; only what is the deployment's own is the test's: the listen
addresses (each one in the block mapped to a free loopback port, the same port wherever it
appears) and /etc/orders/env's values (a throwaway database, the Redis, a secret and a token).

- Each process starts and serves through the front: the list's API, readiness and liveness, and a
  live stream from the stream server (which refused APP_ENV=production started so: issue 58).
- Every line both gunicorns write is one JSON object, from the first ("Starting gunicorn" was
  plain text) to the master's lines after `kill -HUP` (plain text again after a reload).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import pytest
import requests

from devtools.front import FrontUnavailable, haproxy_command
from devtools.gunicorn import free_port, stop_process
from orders.data.db import make_engine, migrate

from .databases import throwaway_database, unavailable
from .fixtures import API_TOKEN
from .logs import log_tail, whole_lines
from .recipe import PRODUCTION_ENV, own_redis

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "operations.md"
BEGIN, END = "<!-- production: begin -->", "<!-- production: end -->"
ADDRESS = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}:\d+\b")


def documented_commands() -> list[tuple[dict[str, str], list[str]]]:
    """The block's commands: (the variables set on the line, the command and its arguments).
    Comments and the line that reads /etc/orders/env are the deployment's, not commands."""
    block = DOC.read_text().split(BEGIN, 1)[1].split(END, 1)[0]
    commands = []
    for line in block.splitlines():
        line = line.strip()
        if not line or line.startswith(("```", "#", "set -a")):
            continue
        words = shlex.split(line)
        env = {}
        while "=" in words[0] and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        commands.append((env, words))
    return commands


def _ours(text: str, ports: dict[str, str]) -> str:
    """`text` with each documented listen address replaced by its free loopback one."""
    return ADDRESS.sub(lambda found: ports.setdefault(found.group(), f"127.0.0.1:{free_port()}"), text)


@contextmanager
def started(env_file: dict[str, str], tmp: Path) -> Iterator[tuple[dict[str, str], list[Path]]]:
    """Every documented process, in order; yields (the documented address -> ours, the log of
    each process) once the front answers readiness. Stops exactly the processes it started."""
    ports: dict[str, str] = {}
    logs = []
    with ExitStack() as stack:
        for i, (assigned, words) in enumerate(documented_commands()):
            env = {k: v for k, v in os.environ.items() if k.upper() not in PRODUCTION_ENV}
            env.pop("GUNICORN_CMD_ARGS", None)
            env.update(env_file)
            env.update({name: _ours(value, ports) for name, value in assigned.items()})
            if words[0] == "python":
                argv = [sys.executable, *(_ours(word, ports) for word in words[1:])]
            elif words[0] == "haproxy":
                argv = [haproxy_command()[0], *words[1:]]
                env["METRICS_BIND"] = f"127.0.0.1:{free_port()}"  # the documented default's port is shared
            else:
                raise AssertionError(f"docs/operations.md starts {words[0]!r}, which this test does not know")
            log = tmp / f"process-{i}-{words[0]}.log"
            logs.append(log)
            with log.open("w") as out:
                process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
            stack.callback(stop_process, process)
            stack.callback(_check_alive, process, log)
        front = "http://" + ports["0.0.0.0:8000"]
        deadline = time.monotonic() + 60
        while True:
            with suppress(requests.RequestException):
                if requests.get(f"{front}/healthz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "\n".join(log_tail(path) for path in logs)
            time.sleep(0.2)
        yield ports, logs


def _check_alive(process: subprocess.Popen[bytes], log: Path) -> None:
    assert process.poll() is None, f"exited with {process.returncode}: {log_tail(log)}"


def json_lines(log: Path) -> list[dict[str, object]]:
    """Every line of `log`, each of which must be one JSON object."""
    lines = [line for line in whole_lines(log) if line.strip()]
    assert lines, f"{log.name} is empty"
    objects = []
    for number, line in enumerate(lines, 1):
        try:
            found = json.loads(line)
        except ValueError:
            raise AssertionError(f"{log.name} line {number} is not JSON: {line[:300]}") from None
        assert isinstance(found, dict), line
        objects.append(found)
    return objects


def test_the_documented_production_processes_start_serve_and_log_json(tmp_path: Path) -> None:
    with throwaway_database("postgresql", tmp_path, "production") as url, own_redis() as (redis_url, _):
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
        env_file = {
            "DATABASE_URL": url,
            "RATELIMIT_STORAGE_URI": redis_url,
            "SECRET_KEY": PRODUCTION_ENV["SECRET_KEY"],
            "API_TOKENS": API_TOKEN,
            "TRUSTED_HOSTS": "127.0.0.1",
        }
        try:
            with started(env_file, tmp_path) as (ports, logs):
                front = "http://" + ports["0.0.0.0:8000"]
                app_log, stream_log = logs[0], logs[1]
                assert requests.get(f"{front}/api/orders?limit=1", timeout=10).status_code == 200
                assert requests.get(f"{front}/healthz", timeout=10).json() == {"status": "ok"}
                assert requests.get(f"{front}/healthz/live", timeout=10).json() == {"status": "ok"}
                with requests.get(f"{front}/orders/stream", timeout=10, stream=True) as live:
                    assert live.status_code == 200, live.text[:300]
                    assert live.headers["Content-Type"].startswith("text/event-stream")
                    assert next(live.iter_lines()).startswith(b"retry:")
                first = json_lines(app_log)[0]
                assert str(first["message"]).startswith("Starting gunicorn"), first
                assert str(json_lines(stream_log)[0]["message"]).startswith("Starting gunicorn")
                # A reload: gunicorn makes its logger again, and its master's lines stayed JSON.
                master = _master_pid(app_log)
                before = len(json_lines(app_log))
                os.kill(master, signal.SIGHUP)
                deadline = time.monotonic() + 30
                while not any("Hang up" in str(line["message"]) for line in json_lines(app_log)[before:]):
                    assert time.monotonic() < deadline, log_tail(app_log)
                    time.sleep(0.2)
                while (
                    sum("Booting worker" in str(line["message"]) for line in json_lines(app_log)[before:]) < 2
                ):
                    assert time.monotonic() < deadline, log_tail(app_log)
                    time.sleep(0.2)
                assert requests.get(f"{front}/api/orders?limit=1", timeout=10).status_code == 200
            for log in (app_log, stream_log):
                json_lines(log)  # to the last line, the shutdown's
        except FrontUnavailable as err:
            unavailable("haproxy", str(err))


def _master_pid(log: Path) -> int:
    for line in json_lines(log):
        if str(line["message"]).startswith("Starting gunicorn"):
            return int(str(line["pid"]))
    raise AssertionError("no master line")


@pytest.mark.parametrize("number", range(3))
def test_the_documented_block_is_three_processes(number: int) -> None:
    """What the test above runs: the list's gunicorn, the stream server, the front, each with
    APP_ENV=production where gunicorn runs."""
    env, words = documented_commands()[number]
    assert len(documented_commands()) == 3
    if words[0] == "python":
        assert words[1] == "serve.py" and env["APP_ENV"] == "production", (env, words)
    else:
        assert words[:3] == ["haproxy", "-f", "deploy/haproxy.cfg"], words
