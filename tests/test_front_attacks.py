"""The production recipe against slow and hostile clients (issue 30), for real on loopback:
PostgreSQL, a Redis of the test's own, gunicorn with APP_ENV=production (1 worker x 4 threads, so
4 app slots, 1 of them for exports) and haproxy with deploy/haproxy.cfg (tests/recipe.py).

- Slow large bodies: more attackers than app slots each send a POST whose body is just under the
  limit (`Content-Length: 16300`, or chunked `3deb`), the rest a byte every 2 s, without a token,
  with a made-up one and with a real one. The front answers 401 at once without a token and
  holds the others' bodies itself (408 after 10 s): no attacker's request reaches gunicorn
  (haproxy's log shows `<NOSRV>` for every POST), and the list answers every time.
- Slow export readers: twelve clients read /orders/export.csv at 1 KB every 100 ms. Exports have
  their own slots at the front, so they wait for each other, never take the list's.
- The front's own 503 (no app server) is the app's JSON `unavailable` with Retry-After.

The list's p50 latency quiet and under each attack is printed (pytest -s), with the ratio; the
test asserts what the broken recipe failed (every list request answered 200), not a time.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from devtools.front import FrontUnavailable, front
from devtools.gunicorn import free_port, gunicorn
from orders.core.errors import ERRORS
from orders.data.db import make_engine, migrate

from .databases import throwaway_database, unavailable
from .fixtures import API_TOKEN
from .helpers import seed_orders_only
from .logs import wait_for_line, whole_lines
from .recipe import Stack, address, list_latencies, own_redis, p50_ms, production, trickling

WORKERS, THREADS = 1, 4
ROWS = 100_000  # about 7 MB of CSV: far more than every buffer between the app and a reader
ATTACKERS = 12  # more than the app's 4 slots
QUIET_S, ATTACK_S = 4, 7  # the attack is measured before the front's 10 s body timeout


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("attacks")
    with throwaway_database("postgresql", tmp, "attacks") as url, own_redis() as (redis_url, _):
        engine = make_engine(url)
        migrate(engine)
        seed_orders_only(engine, ROWS)  # listed and exported; every search here is refused before it
        engine.dispose()
        with production(tmp, url, redis_url, workers=WORKERS, threads=THREADS) as running:
            yield running


def _posts_reaching_a_server(stack: Stack) -> list[str]:
    lines = whole_lines(stack.front_log)
    return [line for line in lines if '"POST /api/orders' in line and "<NOSRV>" not in line]


def slow_bodies(base: str) -> list[tuple[socket.socket, bytes]]:
    """ATTACKERS POSTs, each with a body just under the limit sent at once but for its last
    bytes: by Content-Length or chunked; without a token, with a made-up one, with a real one."""
    head = b"POST /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    tokens = [b"", b"Authorization: Bearer made-up\r\n", f"Authorization: Bearer {API_TOKEN}\r\n".encode()]
    sockets = []
    for i in range(ATTACKERS):
        sock = socket.create_connection(address(base), timeout=5)
        token = tokens[i % len(tokens)]
        if i % 2:
            sock.sendall(head + token + b"Content-Length: 16300\r\n\r\n" + b"x" * 15_800)
        else:
            sock.sendall(head + token + b"Transfer-Encoding: chunked\r\n\r\n3deb\r\n" + b"x" * 15_851)
        sockets.append((sock, b"x" * 1000))
    return sockets


def test_slow_large_bodies_never_hold_an_app_slot(stack: Stack) -> None:
    quiet = list_latencies(stack.front, QUIET_S)
    with trickling(slow_bodies(stack.front), every=2):
        attacked = list_latencies(stack.front, ATTACK_S)
    ratio = p50_ms(attacked) / p50_ms(quiet)
    print(
        f"\nlist p50 quiet {p50_ms(quiet):.1f} ms; under {ATTACKERS} slow bodies ({stack.slots} app slots): "
        f"{p50_ms(attacked):.1f} ms ({ratio:.2f}x), max {max(t for _, t in attacked) * 1000:.0f} ms, "
        f"{len(attacked)} requests"
    )
    assert attacked and all(status == "200" for status, _ in attacked), attacked
    time.sleep(1)  # haproxy logs a request when it ends: the unauthenticated ones ended at once
    assert _posts_reaching_a_server(stack) == [], "an attacker's body reached gunicorn"
    logged = "\n".join(whole_lines(stack.front_log))
    assert re.search(r" 401 .*POST /api/orders", logged), "no write without a token was refused at once"


def test_a_write_without_a_token_is_refused_before_its_body(stack: Stack) -> None:
    with socket.create_connection(address(stack.front), timeout=5) as sock:
        sock.sendall(b"POST /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 16300\r\n\r\n")
        started = time.monotonic()
        answer = sock.recv(4096)
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert b"www-authenticate: Bearer" in answer.lower().replace(b"bearer", b"Bearer")
    assert b'"code":"unauthorized"' in answer
    print(f"\n401 without a token, before any body: {elapsed * 1000:.1f} ms")
    created = requests.post(
        f"{stack.front}/api/orders",
        json={"customer": "Ana", "amount": "1.00"},
        headers={"Authorization": f"Bearer {API_TOKEN}"},
        timeout=10,
    )
    assert created.status_code == 201, created.text


def slow_reader(base: str, stop: threading.Event, received: list[int]) -> None:
    """GET the export and read 1 KB every 100 ms until `stop`."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    try:
        sock.connect(address(base))
        sock.sendall(b"GET /orders/export.csv HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        total = 0
        while not stop.wait(0.1):
            data = sock.recv(1024)
            if not data:
                break
            total += len(data)
        received.append(total)
    except OSError:
        received.append(-1)
    finally:
        sock.close()


def test_slow_export_readers_never_take_the_lists_slots(stack: Stack) -> None:
    quiet = list_latencies(stack.front, QUIET_S)
    stop = threading.Event()
    received: list[int] = []
    readers = [
        threading.Thread(target=slow_reader, args=(stack.front, stop, received)) for _ in range(ATTACKERS)
    ]
    for reader in readers:
        reader.start()
    time.sleep(1)  # every reader has asked
    attacked = list_latencies(stack.front, ATTACK_S)
    stop.set()
    for reader in readers:
        reader.join(40)
    ratio = p50_ms(attacked) / p50_ms(quiet)
    print(
        f"\nlist p50 quiet {p50_ms(quiet):.1f} ms; under {ATTACKERS} slow export readers "
        f"({stack.slots} app slots, {stack.exports} for exports): {p50_ms(attacked):.1f} ms ({ratio:.2f}x), "
        f"max {max(t for _, t in attacked) * 1000:.0f} ms; bytes read by the readers: {sorted(received)}"
    )
    assert attacked and all(status == "200" for status, _ in attacked), attacked
    assert max(received) > 0, "no reader was served: the attack is no attack"


# Every spelling of the export's and the stream's paths that the app serves as them (gunicorn
# decodes percent-escapes, werkzeug takes a doubled slash), as a client may send it.
SPELLINGS = {
    "exports": (
        "/orders/export.csv",
        "/orders/export%2Ecsv",
        "/orders/%65xport.csv",
        "//orders/export.csv",
        "/orders%2Fexport.csv",
    ),
    "streams": ("/orders/stream", "/orders/%73tream", "//orders//stream"),
}


def test_every_spelling_of_an_export_or_a_stream_takes_their_slots_not_the_lists(stack: Stack) -> None:
    """The front routes by the path as the app reads it: by the raw path, /orders/export%2Ecsv
    was the export served from the list's slots, and slow readers of it took them all."""
    for backend, paths in SPELLINGS.items():
        for path in paths:
            with socket.create_connection(address(stack.front), timeout=10) as sock:
                sock.sendall(f"HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
                head = sock.recv(4096).decode(errors="replace")
            # The export answers; a stream server is not part of this stack (the app refuses a
            # stream with its 503): which slots took the request is the log's to say.
            assert head.startswith("HTTP/1.1 200" if backend == "exports" else "HTTP/1.1 "), (
                path,
                head[:200],
            )
            line = wait_for_line(stack.front_log, f'"HEAD {path} HTTP/1.1"')
            assert f" {backend}/" in line, (path, line)


def test_the_fronts_own_503_is_the_apps_json_with_retry_after(tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # no app server listens there
    try:
        with front(nobody, maxconn=4, log_path=tmp_path / "haproxy.log") as through:
            for path in ("/api/orders", "/orders", "/orders/export.csv"):
                response = requests.get(f"{through}{path}", timeout=30)
                assert response.status_code == 503, (path, response.text[:200])
                assert response.headers["Content-Type"] == "application/json"
                assert int(response.headers["Retry-After"]) > 0
                assert response.json()["error"]["code"] == "unavailable"
    except FrontUnavailable as err:
        unavailable("haproxy", str(err))


# --- Issue 39: bodies on every method, the front's own refusals, one control socket each ------

SLOW_READS = 40  # GET and OPTIONS with a body (and a method the recipe names nowhere), no token
CANARY_S = 8  # the neighbour's reading, shorter than the front's 10 s body timeout


def slow_read_bodies(base: str) -> list[tuple[socket.socket, bytes]]:
    """SLOW_READS requests announcing a 16,000-byte body and sending it a byte at a time: GET and
    OPTIONS of the list (the issue's probe), and REPORT, a method neither `read` nor `write`."""
    methods = (b"GET", b"OPTIONS", b"REPORT")
    sockets = []
    for i in range(SLOW_READS):
        sock = socket.create_connection(address(base), timeout=5)
        method = methods[i % len(methods)]
        sock.sendall(
            method + b" /api/orders?slow_body=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 16000\r\n\r\n"
        )
        sockets.append((sock, b"x" * 1000))
    return sockets


def test_slow_bodies_on_reads_never_hold_an_app_slot(stack: Stack) -> None:
    """A neighbour reading every 100 ms while 40 clients trickle bodies on GET, OPTIONS and
    REPORT: before issue 39 the front waited only for writes' bodies, and the neighbour got a
    dozen answers in 30 s, waited 15 s and got 503s."""
    quiet = list_latencies(stack.front, 2, pause=0.1)
    with trickling(slow_read_bodies(stack.front), every=1):
        time.sleep(0.5)  # every attacker has sent its head
        attacked = list_latencies(stack.front, CANARY_S, pause=0.1)
    latencies = [t for _, t in attacked]
    print(
        f"\ncanary p50 quiet {p50_ms(quiet):.1f} ms; under {SLOW_READS} slow bodies on reads "
        f"({stack.slots} app slots): p50 {p50_ms(attacked):.1f} ms, max {max(latencies) * 1000:.0f} ms, "
        f"{len(attacked)} answers in {CANARY_S} s, statuses {sorted({s for s, _ in attacked})}"
    )
    assert attacked and all(status == "200" for status, _ in attacked), attacked
    time.sleep(1)
    lines = whole_lines(stack.front_log)
    # The front logs a query's names, not its values (deploy/haproxy.cfg, log-format): the
    # attackers' parameter is a name of their own.
    reached = [line for line in lines if "/api/orders?slow_body=* " in line and "<NOSRV>" not in line]
    assert any("/api/orders?slow_body=* " in line for line in lines), "no attacker was logged at all"
    assert reached == [], f"a slow body reached gunicorn: {reached[:3]}"


# --- Issue 58: slow bodies over HTTP/2 cleartext --------------------------------------------------

H2_CONNECTIONS, H2_STREAMS = 4, 8  # the probe's: 8 streams on a connection, a data byte a second
# Past the front's 10 s body wait: haproxy 2.6 held the h2 bodies that long, then passed them on.
H2_CANARY_S = 14
H2_REQUESTS = [
    [(":method", "GET"), (":path", "/api/orders?limit=1")],
    [(":method", "OPTIONS"), (":path", "/api/orders?limit=1")],
    [(":method", "POST"), (":path", "/api/orders"), ("authorization", "Bearer made-up")],
]


def h2_slow_bodies(base: str, stop: threading.Event, first_answers: list[bytes]) -> None:
    """H2_CONNECTIONS connections with the HTTP/2 preface (prior knowledge, no upgrade), each
    opening H2_STREAMS requests with no content-length and the stream left open, then one data
    byte a second on every stream until `stop`. The first bytes each connection received are
    appended to `first_answers` (b"": closed without a word)."""
    from h2.config import H2Configuration
    from h2.connection import H2Connection

    opened = []
    for _ in range(H2_CONNECTIONS):
        sock = socket.create_connection(address(base), timeout=5)
        connection = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        connection.initiate_connection()
        streams = []
        for i in range(H2_STREAMS):
            stream_id = connection.get_next_available_stream_id()
            pseudo = [(":scheme", "http"), (":authority", "127.0.0.1")]  # before any other field
            head = sorted([*H2_REQUESTS[i % len(H2_REQUESTS)], *pseudo], key=lambda field: field[0][0] != ":")
            connection.send_headers(stream_id, head, end_stream=False)
            streams.append(stream_id)
        sock.sendall(connection.data_to_send())
        opened.append((sock, connection, streams))
    for sock, _, _ in opened:
        try:
            sock.settimeout(2)
            first_answers.append(sock.recv(65536))
        except OSError:
            first_answers.append(b"")
    try:
        while not stop.wait(1):
            for sock, connection, streams in opened:
                with contextlib.suppress(Exception):  # a connection the front closed
                    for stream_id in streams:
                        connection.send_data(stream_id, b"x")
                    sock.sendall(connection.data_to_send())
    finally:
        for sock, _, _ in opened:
            sock.close()


def test_slow_bodies_over_http2_never_hold_an_app_slot(stack: Stack) -> None:
    """haproxy took the HTTP/2 preface on the plain front unasked, and `wait-for-body` did not
    hold h2 bodies: the probe's canary got 10 answers in 25 s, worst 15 s, and a 503. The front
    speaks HTTP/1.1 only (`proto h1` on its bind): an h2 preface is a request it cannot read."""
    quiet = list_latencies(stack.front, 2, pause=0.1)
    stop, first_answers = threading.Event(), []
    attacker = threading.Thread(target=h2_slow_bodies, args=(stack.front, stop, first_answers), daemon=True)
    attacker.start()
    try:
        time.sleep(1)  # every connection has sent its streams' heads
        attacked = list_latencies(stack.front, H2_CANARY_S, pause=0.1)
    finally:
        stop.set()
        attacker.join(10)
    latencies = [t for _, t in attacked]
    print(
        f"\ncanary p50 quiet {p50_ms(quiet):.1f} ms; under {H2_CONNECTIONS} h2 connections x {H2_STREAMS} "
        f"slow streams ({stack.slots} app slots): p50 {p50_ms(attacked):.1f} ms, max "
        f"{max(latencies) * 1000:.0f} ms, {len(attacked)} answers in {H2_CANARY_S} s, statuses "
        f"{sorted({s for s, _ in attacked})}"
    )
    assert attacked and all(status == "200" for status, _ in attacked), attacked
    # No h2 frame came back (a SETTINGS frame starts with its length and type 4): the front
    # refused the preface as HTTP/1.1 it cannot read, or closed.
    assert len(first_answers) == H2_CONNECTIONS
    for answer in first_answers:
        assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer[:40]


def test_a_read_with_a_body_is_the_apps_json_400(stack: Stack) -> None:
    for method in ("GET", "OPTIONS"):
        response = requests.request(method, f"{stack.front}/api/orders", data=b"{}", timeout=10)
        assert response.status_code == 400, (method, response.text[:200])
        assert response.json()["error"]["code"] == "bad_request"
    assert requests.get(f"{stack.front}/api/orders?limit=1", timeout=10).status_code == 200


def _raw(base: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as is; (status, headers, body) of the answer, read until the server closes
    or the body's length is in."""
    with socket.create_connection(address(base), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length and (chunk := sock.recv(65536)):
            body += chunk
    return int(lines[0].split()[1]), headers, body


def _extra_headers(count: int, size: int = 10) -> bytes:
    return b"".join(b"X-Extra-%d: %s\r\n" % (i, b"v" * size) for i in range(count))


@pytest.mark.parametrize(
    ("what", "request_bytes", "code"),
    [
        # Over the front's 100: JSON (gunicorn answered its HTML 431 from 100 on, with the
        # front's X-Forwarded-For).
        (
            "101 headers",
            b"GET /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\n" + _extra_headers(100),
            "bad_request",
        ),
        # More than haproxy parsed (tune.http.maxhdr was 101): its own HTML 400, now JSON.
        (
            "150 headers",
            b"GET /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\n" + _extra_headers(150),
            "bad_request",
        ),
        (
            "a 9,000-byte header",
            b"GET /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\n" + _extra_headers(1, 9000),
            "bad_request",
        ),
        # A long search is the request's fault, not a cursor's (it was `invalid_cursor`).
        (
            "a 10,000-character q",
            b"GET /api/orders?q=" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            "bad_request",
        ),
        (
            "a 10,000-character cursor",
            b"GET /api/orders?after=" + b"A" * 10_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            "invalid_cursor",
        ),
        # Not UTF-8: werkzeug read it as U+FFFD and searched for that (200, no rows).
        ("%FF in q", b"GET /api/orders?q=%FF HTTP/1.1\r\nHost: 127.0.0.1\r\n", "invalid_parameter"),
    ],
)
def test_the_fronts_and_gunicorns_refusals_are_the_apps_json(
    stack: Stack, what: str, request_bytes: bytes, code: str
) -> None:
    status, headers, body = _raw(stack.front, request_bytes + b"Connection: close\r\n\r\n")
    assert headers.get("content-type", "").startswith("application/json"), (what, status, body[:200])
    assert json.loads(body)["error"]["code"] == code, (what, body[:200])
    assert status == ERRORS[code].status, (what, status)


def test_a_hundred_headers_are_the_apps_answer_not_gunicorns_431(stack: Stack) -> None:
    request = b"GET /api/orders?limit=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n" + _extra_headers(99)
    status, _, body = _raw(stack.front, request + b"Connection: close\r\n\r\n")
    assert status == 200, body[:200]
    assert len(json.loads(body)["items"]) == 1


def test_each_gunicorn_instance_has_a_control_socket_of_its_own(tmp_path: Path) -> None:
    """gunicorn's default control socket is one per user: the second instance took it over, and
    `gunicornc` reached whichever started last. Each is now named after its listen address."""
    url = f"sqlite:///{tmp_path / 'sockets.db'}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    runtime = tmp_path / "run"
    runtime.mkdir()
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    with (
        gunicorn(url, log_path=tmp_path / "a.log", workers=1, env=env) as (first, _),
        gunicorn(url, log_path=tmp_path / "b.log", workers=1, env=env) as (second, _),
    ):
        deadline = time.monotonic() + 10  # the master opens it after its workers start
        while len(list(runtime.glob("*.ctl"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        sockets = sorted(path.name for path in runtime.glob("*.ctl"))
    ports = sorted(base.rsplit(":", 1)[1] for base in (first, second))
    assert sockets == sorted(f"gunicorn-127.0.0.1-{port}.ctl" for port in ports), sockets


# --- Issue 39: every refusal of the front's and gunicorn's own is the app's JSON --------------

HOST = b"Host: 127.0.0.1\r\n"
TOKEN = b"Authorization: Bearer made-up\r\n"


class BuiltInHtml(AssertionError):
    """The answer is haproxy's own HTML page: what haproxy 2.6's HTTP parser sends whatever the
    recipe says (its refusals bypass errorfile and http-error: haproxy issue 3032, fixed in 3.2)."""


HAPROXY_26_PARSER = pytest.mark.xfail(
    strict=True,
    raises=BuiltInHtml,
    reason="haproxy 2.6 answers its HTTP parser's refusals with its built-in HTML; errorfile and "
    "http-error do not apply to them (haproxy issue 3032, fixed in 3.2): docs/security.md",
)


def _answer(base: str, request: bytes, wait: float = 10) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as is and read the answer until the server closes or its length is in:
    (status, headers with lower-case names, body); status 0 if nothing came back (bounded)."""
    data = b""
    with socket.create_connection(address(base), timeout=wait) as sock:
        sock.sendall(request)
        try:
            while chunk := sock.recv(65536):
                data += chunk
                head, found, body = data.partition(b"\r\n\r\n")
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                if found and length and len(body) >= int(length.group(1)):
                    break
        except (TimeoutError, ConnectionResetError):
            pass
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else 0
    return status, headers, body


def assert_the_apps_json(what: str, answer: tuple[int, dict[str, str], bytes], code: str) -> None:
    status, headers, body = answer
    if b"<html><body><h1>" in body and "application/json" not in headers.get("content-type", ""):
        raise BuiltInHtml(f"{what}: haproxy's own {status}: {body[:80]!r}")
    assert headers.get("content-type", "").startswith("application/json"), (what, status, body[:200])
    assert json.loads(body)["error"]["code"] == code, (what, body[:200])
    assert status == ERRORS[code].status, (what, status)


# Requests haproxy 2.6's parser refuses before any rule of the recipe runs: each was its
# built-in HTML in the issue 39 probe. The test fails (BuiltInHtml: an expected failure) until a
# haproxy that applies the recipe's answers to them; any other answer fails it for real.
PARSER_REFUSALS = [
    ("a request line that is no request line", b"GARBAGE\r\n"),
    ("HTTP/0.9 (no version)", b"GET /api/orders\r\n"),
    ("a control character in the URL", b"GET /api/\x01orders HTTP/1.1\r\n" + HOST),
    ("a space in the URL", b"GET /api/ord ers HTTP/1.1\r\n" + HOST),
    ("a header name with a space", b"GET /api/orders HTTP/1.1\r\n" + HOST + b"Bad Name: x\r\n"),
    ("a header line without a colon", b"GET /api/orders HTTP/1.1\r\n" + HOST + b"NoColon\r\n"),
    ("a space before a header's colon", b"GET /api/orders HTTP/1.1\r\n" + HOST + b"X-A : x\r\n"),
    ("two Host headers", b"GET /api/orders HTTP/1.1\r\n" + HOST + b"Host: other\r\n"),
    ("an absolute URL naming another host", b"GET http://evil/api/orders HTTP/1.1\r\n" + HOST),
    (
        "more header fields than haproxy parses (1,100)",
        b"GET /api/orders HTTP/1.1\r\n" + HOST + b"".join(b"X-%d: v\r\n" % i for i in range(1100)),
    ),
    (
        "a 40,000-byte URL (over haproxy's buffer)",
        b"GET /api/orders?q=" + b"a" * 40_000 + b" HTTP/1.1\r\n" + HOST,
    ),
    ("a 40,000-byte header", b"GET /api/orders HTTP/1.1\r\n" + HOST + b"X-A: " + b"v" * 40_000 + b"\r\n"),
    ("Content-Length: abc", b"POST /api/orders HTTP/1.1\r\n" + HOST + TOKEN + b"Content-Length: abc\r\n"),
    ("Content-Length: -1", b"POST /api/orders HTTP/1.1\r\n" + HOST + TOKEN + b"Content-Length: -1\r\n"),
    (
        "two different Content-Lengths",
        b"POST /api/orders HTTP/1.1\r\n" + HOST + TOKEN + b"Content-Length: 2\r\nContent-Length: 3\r\n",
    ),
    (
        "Transfer-Encoding: gzip",
        b"POST /api/orders HTTP/1.1\r\n" + HOST + TOKEN + b"Transfer-Encoding: gzip\r\n",
    ),
    (
        "Transfer-Encoding: chunked, gzip",
        b"POST /api/orders HTTP/1.1\r\n" + HOST + TOKEN + b"Transfer-Encoding: chunked, gzip\r\n",
    ),
    (
        # haproxy's answer is its HTML 422 here.
        "Transfer-Encoding: gzip, chunked",
        b"POST /api/orders HTTP/1.1\r\n" + HOST + TOKEN + b"Transfer-Encoding: gzip, chunked\r\n",
    ),
]
CHUNKED_POST = b"POST /api/orders HTTP/1.1\r\n" + HOST + TOKEN + b"Transfer-Encoding: chunked\r\n"
BAD_CHUNKS = [
    ("a chunk size that is not hexadecimal", b"zz\r\nab\r\n0\r\n\r\n"),
    ("a chunk longer than its size", b"2\r\nabcd\r\n0\r\n\r\n"),
    ("a chunk size over 64 bits", b"ffffffffffffffffff\r\nab\r\n0\r\n\r\n"),
]


@HAPROXY_26_PARSER
@pytest.mark.parametrize(("what", "head"), PARSER_REFUSALS, ids=[what for what, _ in PARSER_REFUSALS])
def test_the_fronts_parser_refusals_are_the_apps_json(stack: Stack, what: str, head: bytes) -> None:
    assert_the_apps_json(what, _answer(stack.front, head + b"Connection: close\r\n\r\n"), "bad_request")


@HAPROXY_26_PARSER
@pytest.mark.parametrize(("what", "body"), BAD_CHUNKS, ids=[what for what, _ in BAD_CHUNKS])
def test_a_malformed_chunked_body_at_the_front_is_the_apps_json(stack: Stack, what: str, body: bytes) -> None:
    assert_the_apps_json(what, _answer(stack.front, CHUNKED_POST + b"\r\n" + body), "bad_request")


# What the front passes on and gunicorn refuses itself (gunicorn's HTML 400 and 417 before).
GUNICORN_REFUSES = [
    ("a NUL in a header value", b"GET /api/orders HTTP/1.1\r\n" + HOST + b"X-A: a\x00b\r\n", b""),
    (
        "a control character in a header value",
        b"GET /api/orders HTTP/1.1\r\n" + HOST + b"X-A: a\x01b\r\n",
        b"",
    ),
    ("a lower-case method", b"get /api/orders HTTP/1.1\r\n" + HOST, b""),
    (
        "an Expect gunicorn does not take",
        b"POST /api/orders HTTP/1.1\r\n" + HOST + TOKEN + b"Expect: 200-ok\r\nContent-Length: 2\r\n",
        b"{}",
    ),
]


@pytest.mark.parametrize(("what", "head", "body"), GUNICORN_REFUSES, ids=[w for w, _, _ in GUNICORN_REFUSES])
def test_gunicorns_refusals_through_the_front_are_the_apps_json(
    stack: Stack, what: str, head: bytes, body: bytes
) -> None:
    answer = _answer(stack.front, head + b"Connection: close\r\n\r\n" + body)
    assert_the_apps_json(what, answer, "bad_request")
    assert answer[1].get("x-request-id"), "the front names gunicorn's answer too"


# gunicorn reached without the front (development, or a misrouted client): its own refusals,
# 400, 414 and 431 pages before, are the app's JSON 400 as the front gives for the same request.
GUNICORN_ALONE = [
    ("a request line that is no request line", b"GARBAGE\r\n"),
    (
        "a URL over gunicorn's 8190 bytes (its 414)",
        b"GET /api/orders?q=" + b"a" * 9000 + b" HTTP/1.1\r\n" + HOST,
    ),
    (
        "more than 128 header fields (its 431)",
        b"GET /api/orders HTTP/1.1\r\n" + HOST + b"".join(b"X-%d: v\r\n" % i for i in range(200)),
    ),
    (
        "a header over 8190 bytes (its 431)",
        b"GET /api/orders HTTP/1.1\r\n" + HOST + b"X-A: " + b"v" * 9000 + b"\r\n",
    ),
    ("an obsolete folded header", b"GET /api/orders HTTP/1.1\r\n" + HOST + b"X-A: a\r\n  b\r\n"),
    (
        "Transfer-Encoding: gzip (its 501)",
        b"POST /api/orders HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: gzip\r\n",
    ),
]


@pytest.mark.parametrize(("what", "head"), GUNICORN_ALONE, ids=[what for what, _ in GUNICORN_ALONE])
def test_gunicorns_own_refusals_are_the_apps_json(stack: Stack, what: str, head: bytes) -> None:
    assert_the_apps_json(what, _answer(stack.app, head + b"Connection: close\r\n\r\n"), "bad_request")


@pytest.fixture(scope="module")
def timed_out(stack: Stack) -> dict[str, tuple[int, dict[str, str], bytes]]:
    """A head and a body that never finish, sent at once: the front's answers after its 10 s."""
    requests_ = {
        "head": b"GET /api/orders HTTP/1.1\r\n" + HOST,
        "body": b"POST /api/orders HTTP/1.1\r\n" + HOST + TOKEN + b"Content-Length: 10\r\n\r\nab",
        "chunked body": CHUNKED_POST + b"\r\n2\r\nab",
    }
    answers: dict[str, tuple[int, dict[str, str], bytes]] = {}

    def ask(name: str) -> None:
        answers[name] = _answer(stack.front, requests_[name], wait=20)

    threads = [threading.Thread(target=ask, args=(name,)) for name in requests_]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return answers


@pytest.mark.parametrize("what", ["body", "chunked body"])
def test_a_body_not_in_within_10_s_is_the_apps_json_408(timed_out, what: str) -> None:
    assert_the_apps_json(what, timed_out[what], "request_timeout")


@HAPROXY_26_PARSER
def test_a_head_not_in_within_10_s_is_the_apps_json_408(timed_out) -> None:
    assert_the_apps_json("head", timed_out["head"], "request_timeout")


def test_an_app_server_that_answers_garbage_is_the_apps_503(tmp_path: Path) -> None:
    """haproxy's 502 (an app server that closed without an answer, or answered garbage) and 504
    (none within `timeout server`) are the app's 503 `unavailable` with Retry-After."""
    listener = socket.create_server(("127.0.0.1", free_port()))
    stop = threading.Event()

    def garbage() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                conn.recv(65536)
                conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")

    thread = threading.Thread(target=garbage, daemon=True)
    thread.start()
    host, port = listener.getsockname()
    try:
        with front(f"{host}:{port}", maxconn=2, log_path=tmp_path / "front.log") as base:
            answer = _answer(base, b"GET /api/orders HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n")
            # The front's 502, logged when its stream ends (after the client has the answer):
            # read before the front is stopped, which could otherwise come first.
            wait_for_line(tmp_path / "front.log", " 502 ")
    except FrontUnavailable as err:
        unavailable("haproxy", str(err))
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    assert_the_apps_json("an app server answering garbage", answer, "unavailable")
    assert int(answer[1]["retry-after"]) > 0


def test_the_error_files_are_generated_from_the_apps_tables() -> None:
    from devtools.front import RECIPE, error_files

    for name, content in error_files().items():
        assert (RECIPE.parent / name).read_bytes() == content, (
            f"run: python -m devtools.front --write ({name})"
        )
