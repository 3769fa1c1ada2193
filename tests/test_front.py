"""Slow clients cannot take the server behind the production front (deploy/haproxy.cfg).

gunicorn runs as the README says (gunicorn.conf.py, gthread), deliberately small: 1 worker x 4
threads. haproxy runs the recipe as docs/operations.md starts it (devtools/front.py). Then, on
loopback:

- the control: a few connections sending their headers a byte at a time straight at gunicorn
  hold all of its threads, and the list stops answering (this is what the front is for, and
  shows the attack is real);
- through the front, SLOW_HEADERS such connections and SLOW_BODIES slow request bodies from a
  token holder at once: the list keeps answering, every time;
- the front's own limits answer as the app would: a body announced over 16 KiB is 413 with the
  JSON error, a request head that takes longer than `timeout http-request` is 408.

Times are printed (pytest -s), never asserted; each list request has a generous timeout.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import statistics
import time
from collections.abc import Iterator

import pytest
import requests
from sqlalchemy.orm import Session

from devtools.front import RECIPE, FrontUnavailable, front, generated_rules, written_rules
from devtools.gunicorn import gunicorn
from orders.core.errors import ERRORS, RETRY_AFTER_SECONDS
from orders.core.settings import MAX_BODY_BYTES
from orders.data.db import make_engine
from orders.data.seed import seed_orders

from .databases import unavailable
from .fixtures import API_TOKEN, migrated
from .recipe import list_latencies, trickling

WORKERS, THREADS = 1, 4
SLOW_HEADERS = 300
SLOW_BODIES = 20
ATTACK_SECONDS = 6  # shorter than the recipe's `timeout http-request 10s`
LIST_TIMEOUT = 10  # seconds: a list request that has not answered by then failed


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(gunicorn's base URL, the front's base URL)."""
    tmp = tmp_path_factory.mktemp("front")
    url = migrated(f"sqlite:///{tmp / 'front.db'}")
    engine = make_engine(url)
    with Session(engine) as session:
        seed_orders(session, 500)
    engine.dispose()
    env = {
        "API_TOKENS": API_TOKEN,
        "RATELIMIT_READS": "100000 per minute",
        "RATELIMIT_WRITES": "100000 per minute",
        "TRUSTED_PROXIES": "1",
    }
    with gunicorn(url, log_path=tmp / "gunicorn.log", workers=WORKERS, threads=THREADS, env=env) as (base, _):
        try:
            with front(
                base.removeprefix("http://"), maxconn=WORKERS * THREADS, log_path=tmp / "haproxy.log"
            ) as f:
                yield base, f
        except FrontUnavailable as err:
            unavailable("haproxy", str(err))


def _address(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").split(":")
    return host, int(port)


@contextlib.contextmanager
def slow_clients(base: str, heads: int, bodies: int = 0) -> Iterator[None]:
    """`heads` connections sending a request head a byte at a time, `bodies` POSTs sending a
    body a byte at a time, kept trickling by one thread until the block ends."""
    address = _address(base)
    socks: list[tuple[socket.socket, bytes]] = []
    for _ in range(heads):
        sock = socket.create_connection(address, timeout=5)
        sock.sendall(b"GET /orders HTTP/1.1\r\n")
        socks.append((sock, b"Host: 127.0.0.1\r\nX-Slow: " + b"a" * 200 + b"\r\n\r\n"))
    for _ in range(bodies):
        sock = socket.create_connection(address, timeout=5)
        sock.sendall(
            b"POST /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + API_TOKEN.encode() + b"\r\nContent-Length: 200\r\n\r\n"
        )
        socks.append((sock, b'{"customer": "' + b"s" * 170 + b'", "amount": "1.00"}'))
    with trickling(socks, every=0.25):
        yield


def list_answers(
    base: str, seconds: float, per_request_timeout: float = LIST_TIMEOUT
) -> list[tuple[str, float]]:
    """The HTML list asked again and again for `seconds`: (status or error, latency) each time."""
    return list_latencies(base, seconds, "/orders", timeout=per_request_timeout, pause=0.2)


def test_control_slow_headers_straight_at_gunicorn_stop_the_list(served: tuple[str, str]) -> None:
    base, _ = served
    assert requests.get(f"{base}/orders", timeout=LIST_TIMEOUT).status_code == 200
    with slow_clients(base, heads=2 * WORKERS * THREADS):
        time.sleep(0.5)  # let gunicorn hand each connection to a thread
        answers = list_answers(base, 3, per_request_timeout=2)
    print(f"\nstraight at gunicorn under {2 * WORKERS * THREADS} slow heads: {answers}")
    assert all(status != "200" for status, _ in answers), (
        "gunicorn alone was not held: the attack is no attack"
    )


def test_the_list_answers_through_the_front_under_slowloris_and_slow_bodies(served: tuple[str, str]) -> None:
    base, through = served
    # gunicorn has its threads back (the control's connections are closed).
    deadline = time.monotonic() + 30
    while requests.get(f"{base}/healthz", timeout=LIST_TIMEOUT).status_code != 200:
        assert time.monotonic() < deadline
    quiet = list_answers(through, 1)
    with slow_clients(through, heads=SLOW_HEADERS, bodies=SLOW_BODIES):
        answers = list_answers(through, ATTACK_SECONDS)
    latencies = [latency for _, latency in answers]
    print(
        f"\nthrough the front: quiet p50 {statistics.median(t for _, t in quiet) * 1000:.1f} ms; under "
        f"{SLOW_HEADERS} slow heads + {SLOW_BODIES} slow bodies: {len(answers)} requests, p50 "
        f"{statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms"
    )
    assert answers and all(status == "200" for status, _ in answers), answers


def test_the_front_refuses_big_bodies_in_the_apps_json(served: tuple[str, str]) -> None:
    _, through = served
    response = requests.post(
        f"{through}/api/orders",
        data=b"x" * 20_000,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_TOKEN}"},
        timeout=LIST_TIMEOUT,
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    created = requests.post(
        f"{through}/api/orders",
        json={"customer": "Ana", "amount": "1.00"},
        headers={"Authorization": f"Bearer {API_TOKEN}"},
        timeout=LIST_TIMEOUT,
    )
    assert created.status_code == 201


def test_a_request_head_that_never_ends_gets_408_from_the_front(served: tuple[str, str]) -> None:
    _, through = served
    with socket.create_connection(_address(through), timeout=30) as sock:
        sock.sendall(b"GET /orders HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


def test_long_cursors_get_the_json_invalid_cursor_with_and_without_the_front(served: tuple[str, str]) -> None:
    base, through = served
    for url, length in ((base, 6_000), (through, 6_000), (through, 10_000)):
        response = requests.get(f"{url}/api/orders", params={"after": "A" * length}, timeout=LIST_TIMEOUT)
        assert response.status_code == 400, (url, length, response.text[:200])
        assert response.json()["error"]["code"] == "invalid_cursor"


@pytest.mark.parametrize("hop", ["gunicorn", "front"])
def test_a_client_following_retry_after_finds_its_connection_open(served: tuple[str, str], hop: str) -> None:
    """A client told to retry after RETRY_AFTER_SECONDS that waits that long on its kept-alive
    connection must still find it open: a server that closes idle connections at exactly that
    moment crosses the retry, and the client gets no answer at all (requests raises; browsers
    retry silently). Both hops keep an idle connection longer than Retry-After."""
    base = served[0] if hop == "gunicorn" else served[1]
    host, port = _address(base)
    connection = http.client.HTTPConnection(host, port, timeout=LIST_TIMEOUT)
    try:
        connection.request("GET", "/healthz")
        assert connection.getresponse().read() and connection.sock is not None
        first = connection.sock
        time.sleep(RETRY_AFTER_SECONDS + 1.5)  # gunicorn reaps idle connections once a second
        connection.request("GET", "/healthz")
        assert connection.getresponse().status == 200
        assert connection.sock is first, "the client had to open another connection"
    finally:
        connection.close()


def test_the_recipe_names_what_it_reads() -> None:
    recipe = RECIPE.read_text()
    needs = ("timeout http-request", "wait-for-body", "${APP_MAXCONN}", "${EXPORT_MAXCONN}", "${FRONT_BIND}")
    for needed in needs:
        assert needed in recipe


def test_the_fronts_own_answers_are_generated_from_the_apps_tables() -> None:
    """Every answer the front gives itself is made from orders/core/errors.py (codes, statuses,
    Retry-After) and orders/core/settings.py (the body limit): `python -m devtools.front --write`."""
    assert written_rules(RECIPE.read_text()) == generated_rules(), "run: python -m devtools.front --write"
    rules = generated_rules()
    assert f"gt {MAX_BODY_BYTES} }}" in rules and "16384" not in RECIPE.read_text().replace(rules, "")
    for code, kind in ERRORS.items():
        if f'\\"code\\":\\"{code}\\"' in rules:
            assert f"status {kind.status} " in rules, code


def test_the_body_limit_is_stated_once_in_every_doc() -> None:
    """The docs say the limit in KiB; each mention is the one value of orders/core/settings.py."""
    root = RECIPE.parent.parent
    for path in [root / "README.md", *(root / "docs").glob("*.md")]:
        for said in re.findall(r"(\d+) KiB", path.read_text()):
            assert int(said) == MAX_BODY_BYTES // 1024, (path.name, said)
