"""The app served for real on a free port in a background thread (browser and HTTP tests), or a
running deployment named by BASE_URL (QA)."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pytest
from flask import Flask
from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wsgi import ClosingIterator

from orders.views import stream

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment
    from playwright.sync_api import Page


class _InFlight:
    """The WSGI app, counting the requests it is answering until their responses are closed;
    once closed, answering 503 without reaching the app."""

    def __init__(self, app: WSGIApplication):
        self.app = app
        self.busy: dict[int, tuple[str, float]] = {}  # thread id: (request, monotonic start)
        self.responses: dict[int, ClosingIterator] = {}  # thread id: its response, until closed
        self.changed = threading.Condition()
        self.closed = False
        self.refused = 0  # requests that came after close(): answered 503, the app untouched

    def close(self) -> None:
        """No request reaches the app from now on. Under the same lock as a request's start:
        a request either counts as busy before this (the caller waits for it) or is refused."""
        with self.changed:
            self.closed = True

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        thread = threading.get_ident()
        what = f"{environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO')}?{environ.get('QUERY_STRING', '')}"
        with self.changed:
            if self.closed:
                self.refused += 1
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [b"the test that started this server has ended\n"]
            self.busy[thread] = (what[:160], time.monotonic())
        try:
            response = ClosingIterator(self.app(environ, start_response), [lambda: self._done(thread)])
        except BaseException:
            self._done(thread)
            raise
        with self.changed:
            self.responses[thread] = response
        return response

    def finish(self) -> None:
        """Close this thread's response if the server did not (see _Handler)."""
        with self.changed:
            response = self.responses.get(threading.get_ident())
        if response is not None:
            response.close()

    def _done(self, thread: int) -> None:
        with self.changed:
            self.busy.pop(thread, None)
            self.responses.pop(thread, None)
            self.changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: not self.busy, timeout)

    def report(self) -> str:
        """Each request still being answered: what, for how long, and where its thread is now."""
        frames = sys._current_frames()
        now = time.monotonic()
        lines = []
        for thread, (what, started) in list(self.busy.items()):
            lines.append(f"{what} for {now - started:.1f} s, at:")
            frame = frames.get(thread)
            lines += traceback.format_stack(frame)[-12:] if frame else ["(thread gone)"]
        return "\n".join(lines)


class _Handler(WSGIRequestHandler):
    """Werkzeug's handler, closing the response also when the client reset the connection.

    Werkzeug 3.1 drains the socket before it closes the response, in the same `finally`: when the
    browser resets the connection (a page closed while its fragment was being written), the read
    raises ConnectionResetError and the response's close() is never called. The request then
    counts as answered forever (a test's teardown waited 25 s for two such requests on a fresh
    machine), and a streamed response would keep its database connection until the garbage
    collector ran. Gunicorn, which production uses, closes in every case; so does this.
    """

    server: Any

    def run_wsgi(self) -> None:
        try:
            super().run_wsgi()
        finally:
            self.server.app.finish()


class LiveServer:
    """A threaded Werkzeug server on 127.0.0.1, port chosen by the OS."""

    def __init__(self, app: Flask):
        self.app = app
        self._requests = _InFlight(app)
        self._server = make_server("127.0.0.1", 0, self._requests, threaded=True, request_handler=_Handler)
        self.url = f"http://127.0.0.1:{self._server.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LiveServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)
        # A request still being answered (a fragment the browser asked for as the test ended)
        # holds a pooled connection: the fixture disposes of the engine next, and a connection
        # checked in after that was left for the garbage collector ("connection deleted while
        # still open", a browser test's error under load). Wait for them, bounded.
        # shutdown() only stops accepting: a connection accepted before it, or kept alive by a
        # page still open (the new-orders poll), can still bring a request, which would check
        # out a connection from the pool dispose() makes anew and leave it there for the
        # garbage collector (a fresh machine's CI failed a later browser test on it). So the
        # door closes first: from here on a request gets a 503 and never reaches the app.
        self._requests.close()
        # Live streams (orders/views/stream.py) would stay open up to STREAM_SECONDS while a page
        # is still open: they end now, as a server shutting down ends them.
        stream.close(self.app)
        # Only the listening socket is closed: server_close() would also join the threads of
        # kept-alive connections, which end when the browser closes them, not before.
        # Bounded by the longest a request may legitimately take: the pool's wait, then the
        # read timeout on the database's answer (orders/core/settings.py), and a margin.
        config = self.app.config
        bound = config["DATABASE_POOL_TIMEOUT_S"] + config["DATABASE_READ_TIMEOUT_MS"] / 1000 + 5
        idle = self._requests.wait_idle(timeout=bound)
        self._server.socket.close()
        assert idle, f"requests still being answered {bound:.0f} s after the test:\n{self._requests.report()}"


# --- A running deployment instead (QA): BASE_URL=http://host:port make test-browser -------------

# Read at import, because it decides how the browser tests are parametrized: against a deployment
# they run once, not once per local database engine.
REMOTE_URL = os.environ.get("BASE_URL", "").rstrip("/") or None

# The engines a local browser test runs on. Every engine sends the same bytes for the same orders
# (tests/test_matrix.py proves it, answer by answer), and the browser sees nothing else, so what a
# browser test checks of the front end it checks on SQLite alone. Where the point is rows moving
# under the reader while others write on a real server, a test runs on PostgreSQL too:
# `@ROWS_MOVING`. Against a deployment, once.
BROWSER_ENGINES = ["sqlite"]
ROWS_MOVING: Any = (
    pytest.mark.parametrize("live_db_url", ["sqlite", "postgresql"], indirect=True)
    if not REMOTE_URL
    else lambda test: test
)


_WRITES: dict[str, bool] = {}  # per deployment: whether it took this run's writes


class RemoteTarget:
    """A deployment the tests did not start: no app object, no database handle, its own data.

    Tests that need to write (create or delete orders) go through the JSON API with
    `API_TOKEN` (a token from the deployment's API_TOKENS) and are skipped, loudly, when the
    target refuses writes. Tests that need the app configured their way are skipped likewise.
    """

    app = None

    def __init__(self, url: str):
        self.url = url
        self.token = os.environ.get("API_TOKEN", "")
        self._writes: bool | None = None
        self._settings: dict[str, Any] | None = None
        self.created: list[int] = []  # this test's orders, deleted by clean_up

    def settings(self) -> dict[str, Any]:
        """The deployment's reader settings (PAGE_SIZE, AUTO_PAGES, ...: orders/views/health.py
        /healthz/settings), read once: what a test would set locally, it reads here."""
        if self._settings is None:
            status, body = self._request("GET", "/healthz/settings")
            assert status == 200 and isinstance(body, dict), f"{self.url}/healthz/settings: {status}"
            self._settings = body
        return self._settings

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            return err.code, None

    def require_writes(self, why: str) -> None:
        """Skip (loudly) unless the deployment accepts this run's writes (asked once a run: its
        writes are rate-limited, RATELIMIT_WRITES)."""
        if self._writes is None:
            self._writes = _WRITES.get(self.url)
        if self._writes is None:
            status, body = self._request("POST", "/api/orders", {"customer": "QA probe", "amount": "0.01"})
            self._writes = _WRITES[self.url] = status == 201
            if self._writes:
                self._request("DELETE", f"/api/orders/{body['id']}")
        if not self._writes:
            pytest.skip(f"WRITES REFUSED by {self.url} (set API_TOKEN to one of its API_TOKENS): {why}")

    def create(self, customer: str, amount: str = "1.00", **fields: str) -> int:
        """An order through the API (fields: status, created_at), deleted by clean_up."""
        body = {"customer": customer, "amount": amount, **fields}
        status, body = self._request("POST", "/api/orders", body)
        assert status == 201, status
        self.created.append(int(body["id"]))
        return int(body["id"])

    def clean_up(self) -> None:
        """Deletes the orders this test created."""
        for order_id in self.created:
            self.delete(order_id)
        self.created.clear()

    def delete(self, order_id: int) -> None:
        status, _ = self._request("DELETE", f"/api/orders/{order_id}")
        assert status in (204, 404), status


@pytest.fixture(name="live")
def remote_live() -> RemoteTarget:
    assert REMOTE_URL
    return RemoteTarget(REMOTE_URL)


@pytest.fixture(name="live_db_url", scope="session")
def no_local_database() -> None:
    """Against a deployment no throwaway database is made (and tests run once, not per engine)."""
    return None


def setting(target: Any, name: str) -> Any:
    """A reader setting as the target runs it: a local app's config, or what the deployment
    exposes read-only (RemoteTarget.settings)."""
    app = getattr(target, "app", None)
    return app.config[name] if app is not None else target.settings()[name]


def local_only(target: Any, why: str) -> None:
    """Skip, loudly, a test that needs its own database or app configuration."""
    if getattr(target, "app", None) is None:
        pytest.skip(f"LOCAL ONLY against {target.url}: {why}")


# --- What the browser tests read off the screen ---------------------------------------------

ROWS = "#rows > tr[data-id]"
# The share of the viewport stuck at the top: the find bar's visible part and, on tables, the
# column headers (tests/test_browser_phone.py, tests/test_browser_landscape.py).
COVERED = """() => {
  const bar = document.getElementById('find-bar').getBoundingClientRect();
  const head = document.querySelector('#orders thead th');
  const headBottom = head && head.getClientRects().length ? head.getBoundingClientRect().bottom : 0;
  return Math.max(bar.bottom, headBottom, 0) / innerHeight;
}"""


def engine_of(live: Any) -> Any:
    """The engine of a local live server's app. A deployment has none to hand: a test reaching
    for it there is skipped, saying so (it reads or writes the database itself)."""
    if getattr(live, "app", None) is None:
        pytest.skip(f"LOCAL ONLY against {live.url}: reads or writes the database directly")
    return live.app.extensions["engine"]


# Settings a test asking for many asks for "no limit" by: a deployment with as many or more gives
# the same reader (AUTO_PAGES: the loads before a "Load more" button asks).
AT_LEAST = {"AUTO_PAGES": 1000}


def given(live: Any, orders: int, **config: Any) -> list[int] | None:
    """Locally: the app configured so and `orders` orders seeded (their ids). Against a
    deployment: its own orders as they are, and its settings (/healthz/settings) must be these,
    else the test is skipped naming the setting it needs."""
    from .helpers import seed

    if getattr(live, "app", None) is not None:
        live.app.config.update(config)
        return seed(live.app.extensions["engine"], orders) if orders else []
    has = live.settings()
    for name, wanted in config.items():
        if name not in has:
            pytest.skip(f"NEEDS {name}={wanted}: {live.url} does not expose {name} at /healthz/settings")
        if name == "NEW_ORDERS_POLL_SECONDS" and has.get("STREAMS_PER_PROCESS", 0) > 0:
            continue  # locally a short poll brings new orders at once; a deployment's stream does
        if has[name] != wanted and not (name in AT_LEAST and has[name] >= wanted >= AT_LEAST[name]):
            pytest.skip(f"NEEDS {name}={wanted} ({live.url} runs {name}={has[name]})")
    return None


def add_new_orders(live: Any, customers: list[str]) -> list[int]:
    """Orders newer than every other, one per customer, in this order (the last the newest):
    locally in the database, on a deployment through its API (deleted after the test)."""
    import datetime as dt
    from decimal import Decimal

    from .helpers import add_orders

    if getattr(live, "app", None) is not None:
        now = dt.datetime.now(dt.UTC)
        rows = [
            (now + dt.timedelta(minutes=m + 1), c, Decimal("1.00"), "paid") for m, c in enumerate(customers)
        ]
        return add_orders(live.app.extensions["engine"], rows)
    live.require_writes("adds new orders")
    return [live.create(customer) for customer in customers]


def add_orders_to(live: Any, rows: list[tuple[Any, str, Any, str]]) -> list[int]:
    """These orders (created_at, customer, amount, status), their ids: locally in the database,
    on a deployment through its API (deleted after the test)."""
    import datetime as dt

    from .helpers import add_orders

    if getattr(live, "app", None) is not None:
        return add_orders(live.app.extensions["engine"], rows)
    live.require_writes("writes orders of its own")
    # The API takes no time in the future: an order meant newer than all is made now, the newest.
    now = dt.datetime.now(dt.UTC)
    past = [{"created_at": t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")} if t < now else {} for t, *_ in rows]
    return [live.create(c, str(a), status=s, **when) for (_, c, a, s), when in zip(rows, past, strict=True)]


def newest_ids(live: Any, count: int) -> list[int]:
    """The ids of the `count` newest orders, through the JSON API's own walk (any deployment)."""
    return [int(row["id"]) for row in api_rows(live.url, count)]


def api_json(live: Any, path: str, **query: str) -> dict[str, Any]:
    """The JSON answer of the live server's `path` with `query`."""
    import urllib.parse

    with urllib.request.urlopen(f"{live.url}{path}?{urllib.parse.urlencode(query)}", timeout=10) as r:
        return dict(json.load(r))


def api_first(live: Any, **query: str) -> dict[str, Any]:
    """The first order of the JSON API's list as `query` asks (sort, status, q, to, after)."""
    return dict(api_json(live, "/api/orders", **query, limit="1")["items"][0])


def api_rows(base: str, count: int, **query: str) -> list[dict[str, Any]]:
    """The first `count` orders, newest first (or as `query` sorts), through the JSON API."""
    import urllib.parse

    rows: list[dict[str, Any]] = []
    query = {**query, "limit": "100"}
    while len(rows) < count:
        with urllib.request.urlopen(f"{base}/api/orders?{urllib.parse.urlencode(query)}", timeout=10) as r:
            body = json.load(r)
        rows += body["items"]
        if not body["next_cursor"]:
            break
        query["after"] = body["next_cursor"]
    return rows[:count]


def screen_rows(page: Page) -> list[tuple[str, int]]:
    """(created_at, id) of every row on screen, in screen order."""
    return [
        (created, int(row_id))
        for row_id, created in page.eval_on_selector_all(
            ROWS, "rows => rows.map(r => [r.dataset.id, r.querySelector('time').getAttribute('datetime')])"
        )
    ]


# The top of the list area: the rows' scroll-margin-top, below what the sticky find bar and the
# column headers cover (static/js/dom.js listTop); rows "on top" sit right below them.
INSET = "(parseFloat(getComputedStyle(document.querySelector('#rows > tr') || document.body)"
INSET += ".scrollMarginTop) || 0)"
# Is this row's top at the top of the list area (within 2 px)? And which row is first in view?
ON_TOP = (
    "id => { const r = document.getElementById('order-' + id);"
    f" return r && Math.abs(r.getBoundingClientRect().top - {INSET}) <= 2; }}"
)
# None while no row is in view: polled in requestAnimationFrame, it can run between a resize's
# layout and the scroll window's correction of it (in the same frame, before anything is painted),
# when the rows may all lie above the list area; it threw there once, ending the wait.
FIRST_IN_VIEW = (
    "() => [...document.querySelectorAll('#rows > tr[data-id]')]"
    f".find(r => r.getBoundingClientRect().bottom > {INSET} + 1)?.dataset.id ?? null"
)


def scroll_until(page: Page, rows: int) -> None:
    """Wheel down until `rows` rows are in the document, pressing "Load more" when it asks."""
    load_more = page.locator("#more").get_by_role("button", name="Load more orders")
    for _ in range(300):
        if page.locator(ROWS).count() >= rows:
            return
        if load_more.count() and load_more.is_visible():
            load_more.click()
        page.mouse.wheel(0, 1200)
        page.wait_for_timeout(30)  # lets the intersection observer see the new position
    raise AssertionError(f"never reached {rows} rows")


SETTLED_MS = 400


def put_on_top(page: Page, order_id: str) -> None:
    """Scrolls so that the row is the first in view, and waits for the address bar to follow."""
    from .browsers import expect

    # Again on every frame until it has held for SETTLED_MS: a wheel event the test sent earlier
    # can still be queued (Playwright's wheel does not wait for the scroll) or gliding, and would
    # carry the view on after one frame that held (seen in CI under load: 20 rows further).
    page.evaluate("window.__heldSince = null")
    page.wait_for_function(
        "([id, settled]) => { const r = document.getElementById('order-' + id);"
        f" if (Math.abs(r.getBoundingClientRect().top - {INSET}) > 1) {{"
        " r.scrollIntoView({block: 'start'}); window.__heldSince = null; return false; }"
        " window.__heldSince = window.__heldSince || performance.now();"
        " return performance.now() - window.__heldSince >= settled; }",
        arg=[order_id, SETTLED_MS],
        polling="raf",
    )
    expect(page).to_have_url(re.compile(rf"/orders\?.*#order-{order_id}$"))


def settled(page: Page) -> None:
    """Waits until no load of rows has run for SETTLED_MS: the position the page shows then is one
    nothing is about to change (a sentinel that came into reach starts its load within a frame or
    two, and a load above moves scrollY by the rows it inserts, not the rows on screen)."""
    page.evaluate("window.__idleSince = null")
    page.wait_for_function(
        "settled => { if (window.ordersList.busy()) { window.__idleSince = null; return false; }"
        " window.__idleSince = window.__idleSince || performance.now();"
        " return performance.now() - window.__idleSince >= settled; }",
        arg=SETTLED_MS,
        polling="raf",
    )


STILL_MS = 250


def scroll_still(page: Page, ms: int = STILL_MS) -> None:
    """Waits until scrollY has not changed for `ms`: Playwright's wheel returns before the scroll
    it asks for has happened, and wheels sent back to back queue; a position read at once can be
    read mid-scroll and the rest of the scroll land after it (bounded, as any wait_for_function)."""
    page.evaluate("window.__stillY = null")
    page.wait_for_function(
        "ms => { if (scrollY !== window.__stillY) { window.__stillY = scrollY;"
        " window.__stillSince = performance.now(); return false; }"
        " return performance.now() - window.__stillSince >= ms; }",
        arg=ms,
        polling="raf",
    )


def expect_on_top(page: Page, order_id: str) -> None:
    page.wait_for_function(ON_TOP, arg=order_id, timeout=10_000)


# Top and Home: the page's own top (the site's header in view), this row the list's first.
AT_PAGE_TOP = "id => scrollY === 0 && document.querySelector('#rows > tr[data-id]')?.dataset.id === id"


def expect_at_page_top(page: Page, order_id: str) -> None:
    page.wait_for_function(AT_PAGE_TOP, arg=order_id, timeout=10_000)
