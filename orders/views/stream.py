"""GET /orders/stream: a live stream (server-sent events) that tells an open list "new orders,
the latest is N"; the list then asks /orders/new at once, which counts them as before (one home
for the count). docs/scroll.md, "New orders, pushed", has the design and its measured cost.

Every stream is bounded: at most STREAMS_PER_PROCESS open per process (one more: 503 with
Retry-After, and that list polls), each open at most STREAM_SECONDS (then the browser opens
another, sending the last event's id so nothing is told twice), a comment every
STREAM_HEARTBEAT_SECONDS when there is nothing to say, and a client gone noticed within
changes.TICK_S (its socket read), its place given back.

A stream waits for as long as it is open. It is held only where waiting costs no request
thread of the list: under gevent (gunicorn -k gevent, the stream server of deploy/haproxy.cfg
and gunicorn-streams.conf.py) or a server with a thread per connection (Werkzeug's, `make run`
and the tests). Anywhere else (the list's gunicorn with its WEB_THREADS) it is refused with 503
at once, and the list polls every NEW_ORDERS_POLL_SECONDS as it always did.
"""

from __future__ import annotations

import select
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response, current_app, request
from flask.typing import ResponseReturnValue

from orders.core.errors import ApiError
from orders.data.changes import TICK_S, Changes

bp = Blueprint("stream", __name__)

# What EventSource waits before it opens the stream again after a cut or STREAM_SECONDS (ms).
RECONNECT_MS = 1000
# A stream sends at most one event per this many seconds while orders keep coming: each event
# makes its list ask /orders/new once.
EVENT_GAP_S = 1.0
# The environ keys under which Werkzeug and gunicorn (threads, gevent) hand over the client socket.
SOCKET_KEYS = ("werkzeug.socket", "gunicorn.socket", "gunicorn.sock")


def changes() -> Changes:
    """The process's watcher (one per app), made on first use."""
    found: Changes | None = current_app.extensions.get("changes")
    if found is None:
        engine = current_app.extensions["engine"]
        sharded = bool(current_app.config.get("DATABASE_SHARD_URLS"))
        found = Changes(engine, counts=not sharded)
        found = current_app.extensions.setdefault("changes", found)
    return found


def close(app: Any) -> None:
    """End every open stream of `app` now (a server shutting down, a test's end)."""
    found: Changes | None = app.extensions.get("changes")
    if found is not None:
        found.close()


def waiting_costs_no_thread(environ: dict[str, Any]) -> bool:
    """Whether a stream held open here leaves the list's request threads alone."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("socket"):
        return True
    # Werkzeug's threaded server starts a thread per connection and has no pool to exhaust.
    return str(environ.get("SERVER_SOFTWARE", "")).startswith("Werkzeug/") and bool(
        environ.get("wsgi.multithread")
    )


@bp.get("/orders/stream")
def stream() -> ResponseReturnValue:
    cfg = current_app.config
    retry = {"Retry-After": str(cfg["NEW_ORDERS_POLL_SECONDS"])}
    if not cfg["STREAMS_PER_PROCESS"] or not waiting_costs_no_thread(request.environ):
        raise ApiError(
            "unavailable",
            "this server holds no live streams: the list asks for new orders instead",
            headers=retry,
        )
    watcher = changes()
    if not watcher.enter(cfg["STREAMS_PER_PROCESS"]):
        raise ApiError(
            "unavailable",
            f"this server holds as many live streams as it may ({cfg['STREAMS_PER_PROCESS']}): "
            "the list asks for new orders instead",
            headers=retry,
        )
    try:
        client = _client_gone_check(request.environ)
        told = request.headers.get("Last-Event-ID")
        events = _events(watcher, told, client, cfg["STREAM_SECONDS"], cfg["STREAM_HEARTBEAT_SECONDS"])
        response = Response(events, mimetype="text/event-stream")
    except BaseException:
        watcher.leave()
        raise
    # The server closes every response it was handed, read or not: the place is given back then
    # (a generator's own `finally` would not run for a response never started).
    response.call_on_close(watcher.leave)
    # Never stored, never buffered on the way (nginx honours the last one; haproxy streams).
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Accel-Buffering"] = "no"
    return response


def _events(
    watcher: Changes, told: str | None, client_gone: Any, lifetime_s: int, heartbeat_s: int
) -> Iterator[bytes]:
    """The stream's bytes: `retry`, then an `orders` event whenever the signature differs from
    the last one told (`told`: the Last-Event-ID of a stream opened again), else comments."""
    now = time.monotonic()
    deadline, last_write, last_event = now + lifetime_s, now, 0.0
    yield f"retry: {RECONNECT_MS}\n\n".encode()
    seen = -1
    while True:
        state = watcher.state() if seen == -1 else watcher.wait(seen, TICK_S)
        seen = state.version
        now = time.monotonic()
        if state.closed or now >= deadline or client_gone():
            return
        if state.token is not None and state.token != told:
            wait = last_event + EVENT_GAP_S - now
            if wait > 0:
                time.sleep(min(wait, EVENT_GAP_S))
                seen = -1  # read the state again after the gap, whatever it is by then
                continue
            # The first event (the orders as they are when the stream opens) starts no gap: an
            # order right after it is told at once.
            last_event = now if told is not None else 0.0
            told, last_write = state.token, now
            yield f"event: orders\nid: {state.token}\ndata: {state.latest or 0}\n\n".encode()
        elif now - last_write >= heartbeat_s:
            last_write = now
            yield b": keep-alive\n\n"


def _client_gone_check(environ: dict[str, Any]) -> Any:
    """A check, at most a poll() of no wait, of whether the client closed its end. Without the
    socket (another server), a gone client shows when a write fails (a heartbeat at the latest)."""
    sock = next((environ[key] for key in SOCKET_KEYS if environ.get(key) is not None), None)
    if sock is None:
        return lambda: False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)

    def gone() -> bool:
        try:
            if not poller.poll(0):
                return False
            # Readable: the end of the stream (b""), or bytes the client sent (it may, it is still there).
            return bool(sock.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True

    return gone
