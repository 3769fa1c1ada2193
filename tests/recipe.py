"""The documented production recipe, started for a test: PostgreSQL (a throwaway database on the
test server, or a cluster of the test's own), a Redis of the test's own for the rate limits,
gunicorn with APP_ENV=production through gunicorn.conf.py, and haproxy with deploy/haproxy.cfg.

    with production(tmp, url, redis_url, workers=1, threads=4) as stack: stack.front, stack.app
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

from devtools.front import FrontUnavailable, export_slots, front
from devtools.gunicorn import gunicorn
from devtools.pgserver import ServerUnavailable
from devtools.throwaway import redis_server

from .databases import unavailable
from .fixtures import API_TOKEN

PRODUCTION_ENV = {
    "APP_ENV": "production",
    "SECRET_KEY": "recipe-" + "k3J9x2Qm7Lp4Vz8Rt1Wc6Yb5Nd0Hf" * 2,
    "API_TOKENS": API_TOKEN,
    "TRUSTED_HOSTS": "127.0.0.1",
    "TRUSTED_PROXIES": "1",
    "RATELIMIT_READS": "100000 per minute",
    "RATELIMIT_WRITES": "100000 per minute",
}
LIST_TIMEOUT = 20  # seconds: a list request that has not answered by then failed


@dataclass
class Stack:
    app: str  # gunicorn's base URL
    front: str  # haproxy's base URL
    slots: int  # gunicorn's threads (workers x threads)
    exports: int  # of which the front gives exports
    gunicorn_log: Path
    front_log: Path


@contextlib.contextmanager
def own_redis(*, unix_socket: bool = False) -> Iterator[tuple[str, object]]:
    try:
        with redis_server(unix_socket=unix_socket) as server:
            yield server
    except ServerUnavailable as err:
        unavailable("a Redis of the test's own", str(err))


@contextlib.contextmanager
def production(
    tmp: Path, url: str, redis_url: str, *, workers: int, threads: int, env: dict[str, str] | None = None
) -> Iterator[Stack]:
    settings = {**PRODUCTION_ENV, "RATELIMIT_STORAGE_URI": redis_url, "WEB_CONCURRENCY": str(workers)}
    settings.update(env or {})
    slots = workers * threads
    glog, flog = tmp / "gunicorn.log", tmp / "haproxy.log"
    with gunicorn(url, log_path=glog, workers=workers, threads=threads, env=settings) as (base, _):
        try:
            with front(base.removeprefix("http://"), maxconn=slots, log_path=flog) as through:
                yield Stack(base, through, slots, export_slots(slots), glog, flog)
        except FrontUnavailable as err:
            unavailable("haproxy", str(err))


def address(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").split(":")
    return host, int(port)


def list_latencies(
    base: str,
    seconds: float,
    path: str = "/api/orders?limit=20",
    *,
    timeout: float = LIST_TIMEOUT,
    pause: float = 0.05,
) -> list[tuple[str, float]]:
    """Ask for the list again and again for `seconds`: (status or error, latency) each time."""
    answers = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            status = str(requests.get(f"{base}{path}", timeout=timeout).status_code)
        except requests.RequestException as err:
            status = type(err).__name__
        answers.append((status, time.monotonic() - started))
        time.sleep(pause)
    return answers


def p50_ms(answers: list[tuple[str, float]]) -> float:
    return statistics.median(latency for _, latency in answers) * 1000


@contextlib.contextmanager
def trickling(sockets: list[tuple[socket.socket, bytes]], every: float) -> Iterator[None]:
    """Send each socket's bytes one at a time, one round every `every` seconds, until the block
    ends; then close them all."""
    stop = threading.Event()

    def trickle() -> None:
        position = 0
        while not stop.wait(every):
            for sock, rest in sockets:
                if position < len(rest):
                    with contextlib.suppress(OSError):
                        sock.send(rest[position : position + 1])
            position += 1

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        for sock, _ in sockets:
            sock.close()
