"""The live stream of new orders (orders/views/stream.py, orders/data/changes.py) and its bounds,
over real HTTP: Werkzeug's threaded server on each engine, and the production recipe (the list's
gunicorn refuses streams, the gevent stream server holds them: deploy/gunicorn-streams.conf.py).

Every read has a socket timeout, so a stream that says nothing fails the test instead of holding
it; nothing here asserts how fast (bench/stream_cost.py measures that).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal

from flask import Flask
from sqlalchemy import Engine

from orders.data.changes import TICK_S, Changes
from orders.views.stream import changes

from .fixtures import clear
from .helpers import BASE, add_orders
from .live import LiveServer


@contextmanager
def stream(url: str, headers: dict[str, str] | None = None) -> Iterator[http.client.HTTPResponse]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=15)
    response = None
    try:
        conn.request("GET", "/orders/stream", headers={"Accept": "text/event-stream", **(headers or {})})
        response = conn.getresponse()
        yield response
    finally:
        if response is not None:
            response.close()  # the socket stays open while its response holds it
        conn.close()


def next_message(response: http.client.HTTPResponse) -> dict[str, str]:
    """The next event or comment: its fields ({"comment": ...} for a comment), up to its blank line."""
    fields: dict[str, str] = {}
    while True:
        line = response.readline().decode()
        assert line, f"the stream ended: {fields}"
        line = line.rstrip("\n")
        if not line:
            if fields:
                return fields
            continue
        name, _, value = line.partition(":")
        fields[name or "comment"] = value.strip()


def post_order(url: str) -> int:
    body = json.dumps({"customer": "Streamed Customer", "amount": "4.20"}).encode()
    request = urllib.request.Request(
        url + "/api/orders", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=15) as response:
        return int(json.loads(response.read())["id"])


def open_streams(app: Flask) -> int:
    with app.app_context():
        return changes().open_streams


def test_a_stream_tells_each_new_order_and_beats_when_idle(app: Flask) -> None:
    app.config["STREAM_HEARTBEAT_SECONDS"] = 1
    with LiveServer(app) as server, stream(server.url) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers["Cache-Control"] == "no-store"
        assert next_message(response) == {"retry": "1000"}
        first = next_message(response)  # the orders as they are: the page asks once on opening
        assert first["event"] == "orders" and first["data"] == "0"
        order_id = post_order(server.url)
        told = next_message(response)
        while "comment" in told:  # a heartbeat may come first
            told = next_message(response)
        assert told["event"] == "orders" and told["data"] == str(order_id)
        assert told["id"] != first["id"]
        # Nothing new: a comment, so no proxy closes it as idle.
        assert next_message(response) == {"comment": "keep-alive"}
        assert open_streams(app) == 1


def test_a_stream_opened_again_with_its_last_id_tells_nothing_twice(app: Flask) -> None:
    app.config["STREAM_HEARTBEAT_SECONDS"] = 1
    with LiveServer(app) as server:
        with stream(server.url) as response:
            next_message(response)
            last = next_message(response)["id"]
        with stream(server.url, {"Last-Event-ID": last}) as response:
            assert next_message(response) == {"retry": "1000"}
            assert next_message(response) == {"comment": "keep-alive"}


def test_a_stream_ends_at_its_lifetime_and_gives_its_place_back(app: Flask) -> None:
    app.config.update(STREAM_SECONDS=1, STREAM_HEARTBEAT_SECONDS=1)
    with LiveServer(app) as server, stream(server.url) as response:
        assert response.status == 200
        response.read()  # to its end (the socket timeout bounds it)
    # The server closed the response: its place is given back before the next request is served.
    assert open_streams(app) == 0


def test_a_full_process_refuses_with_retry_after_and_frees_a_closed_place(app: Flask) -> None:
    app.config.update(STREAMS_PER_PROCESS=1, NEW_ORDERS_POLL_SECONDS=7)
    with LiveServer(app) as server:
        with stream(server.url) as held:
            assert held.status == 200
            next_message(held)
            with stream(server.url) as refused:
                assert refused.status == 503
                assert refused.headers["Retry-After"] == "7"
                assert "as many live streams as it may (1)" in refused.read().decode()
        # The client closed it: the server notices (the socket read at its next look) and frees it.
        for _ in range(100):
            if not open_streams(app):
                break
            time.sleep(0.1)
        with stream(server.url) as again:
            assert again.status == 200


def test_a_server_whose_threads_serve_the_list_holds_no_stream(app: Flask) -> None:
    """gunicorn's gthread worker (the list's): a stream would hold one of its WEB_THREADS."""
    client = app.test_client()
    environ = {"SERVER_SOFTWARE": "gunicorn/27.0.1", "wsgi.multithread": True}
    response = client.get("/orders/stream", environ_overrides=environ)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == str(app.config["NEW_ORDERS_POLL_SECONDS"])
    assert "holds no live streams" in response.get_data(as_text=True)
    assert "changes" not in app.extensions  # no watcher started for it


def wait_for_version(watcher: Changes, above: int) -> int:
    """The watcher's version once it passes `above` (bounded: 100 ticks)."""
    for _ in range(100):
        state = watcher.wait(above, TICK_S)
        if state.version > above:
            return state.version
    raise AssertionError(f"the watcher's version stayed at {above}")


def test_a_coordinator_of_shards_is_watched_by_max_id_alone(db_url: str, engine: Engine) -> None:
    """DATABASE_SHARD_URLS: no order_counts on the coordinator, no NOTIFY from the shards there;
    the watcher polls max(id) (orders/views/stream.py changes())."""
    clear(engine)
    watcher = Changes(engine, counts=False)
    assert watcher.enter(1)
    try:
        first = wait_for_version(watcher, 0)
        (new_id,) = add_orders(engine, [(BASE, "Sharded Customer", Decimal("1.00"), "paid")])
        wait_for_version(watcher, first)
        assert watcher.state().latest == new_id
    finally:
        watcher.leave()
        watcher.close()
