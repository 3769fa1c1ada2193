"""The tests' own server closes every response, also one whose client reset the connection, and
lets no request reach the app once its test has ended.

A browser that closes a page while a fragment is on the wire resets the connection. Werkzeug 3.1
then skips the response's close() (its drain of the socket raises first), so the request counted
as answered forever and a fresh machine's run failed a browser test's teardown after 25 s
(tests/live.py, _Handler). Here a raw socket does what the browser did, deterministically: it
sends one byte past its request, so the server's drain blocks reading, then resets.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

from flask import Flask, Response

from .live import LiveServer

BOUND_S = 10  # far beyond the milliseconds this takes; a close never made never comes


def _app(closed: threading.Event) -> Flask:
    app = Flask(__name__)
    # What LiveServer reads to bound its wait for requests still being answered.
    app.config.update(DATABASE_POOL_TIMEOUT_S=1, DATABASE_READ_TIMEOUT_MS=1000)

    @app.get("/stream")
    def stream() -> Response:
        def rows() -> Iterator[str]:
            try:
                yield "a,b\r\n" * 100
            finally:
                closed.set()  # where a streamed export gives its connection back

        return Response(rows(), mimetype="text/csv")

    return app


def test_a_response_whose_client_reset_the_connection_is_closed():
    closed = threading.Event()
    with LiveServer(_app(closed)) as server:
        port = int(server.url.rsplit(":", 1)[1])
        client = socket.create_connection(("127.0.0.1", port), timeout=BOUND_S)
        client.sendall(b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nx")
        received = b""
        while b"0\r\n\r\n" not in received:  # the whole chunked body: the server now drains
            received += client.recv(65536)
        assert received.startswith(b"HTTP/1.1 200")
        # SO_LINGER with a zero timeout: close() sends RST instead of FIN, as a closed tab does.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        assert closed.wait(BOUND_S), "the response was never closed after the client reset"
        assert server._requests.wait_idle(BOUND_S), server._requests.report()


def test_a_request_after_the_test_never_reaches_the_app():
    """A connection the server accepted as the test ended can bring its request after the wait for
    requests under way: it must not check out a connection from the pool the fixture is about to
    dispose of (dispose() makes a new pool, which would keep that connection for the garbage
    collector: "connection deleted while still open", a fresh machine's CI failure)."""
    calls: list[str] = []
    app = _app(threading.Event())
    app.before_request(lambda: calls.append("reached"))
    app.get("/ok")(lambda: "ok")
    with LiveServer(app) as server:
        handlers = threading.active_count()
        late = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=BOUND_S)
        late.sendall(b"GET /ok HTTP/1.1\r\n")  # the request line; the rest after the test
        deadline = time.monotonic() + BOUND_S
        while threading.active_count() == handlers:  # accepted: a handler thread reads the headers
            assert time.monotonic() < deadline, "the server never accepted the connection"
            time.sleep(0.01)
    late.sendall(b"Host: 127.0.0.1\r\n\r\n")
    answer = b""
    while chunk := late.recv(65536):
        answer += chunk
    late.close()
    assert answer.startswith(b"HTTP/1.1 503"), answer[:80]
    assert calls == [], "a request that came after the test reached the app"
    assert server._requests.refused == 1
