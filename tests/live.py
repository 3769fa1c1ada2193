"""The app served for real on a free port in a background thread (browser and HTTP tests), or a
running deployment named by BASE_URL (QA)."""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest
from flask import Flask
from werkzeug.serving import make_server

if TYPE_CHECKING:
    from playwright.sync_api import Page


class LiveServer:
    """A threaded Werkzeug server on 127.0.0.1, port chosen by the OS."""

    def __init__(self, app: Flask):
        self.app = app
        self._server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LiveServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)


# --- A running deployment instead (QA): BASE_URL=http://host:port make test-browser -------------

# Read at import, because it decides how the browser tests are parametrized: against a deployment
# they run once, not once per local database engine.
REMOTE_URL = os.environ.get("BASE_URL", "").rstrip("/") or None


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
        """Skip (loudly) unless the deployment accepts this run's writes."""
        if self._writes is None:
            status, body = self._request("POST", "/api/orders", {"customer": "QA probe", "amount": "0.01"})
            self._writes = status == 201
            if self._writes:
                self._request("DELETE", f"/api/orders/{body['id']}")
        if not self._writes:
            pytest.skip(f"WRITES REFUSED by {self.url} (set API_TOKEN to one of its API_TOKENS): {why}")

    def create(self, customer: str, amount: str = "1.00") -> int:
        status, body = self._request("POST", "/api/orders", {"customer": customer, "amount": amount})
        assert status == 201, status
        return int(body["id"])

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


def local_only(target: Any, why: str) -> None:
    """Skip, loudly, a test that needs its own database or app configuration."""
    if getattr(target, "app", None) is None:
        pytest.skip(f"LOCAL ONLY against {target.url}: {why}")


# --- What the browser tests read off the screen ---------------------------------------------

ROWS = "#rows > tr[data-id]"


def engine_of(live: Any) -> Any:
    """The engine of a local live server's app (remote targets have none)."""
    return live.app.extensions["engine"]


def screen_rows(page: Page) -> list[tuple[str, int]]:
    """(created_at, id) of every row on screen, in screen order."""
    return [
        (created, int(row_id))
        for row_id, created in page.eval_on_selector_all(
            ROWS, "rows => rows.map(r => [r.dataset.id, r.querySelector('time').getAttribute('datetime')])"
        )
    ]


# The top of the list area: the root's scroll-padding-top, which the sticky find bar sets to its
# own height plus the column headers' (static/controls.js); rows "on top" sit right below them.
INSET = "(parseFloat(getComputedStyle(document.documentElement).scrollPaddingTop) || 0)"
# Is this row's top at the top of the list area (within 2 px)? And which row is first in view?
ON_TOP = (
    "id => { const r = document.getElementById('order-' + id);"
    f" return r && Math.abs(r.getBoundingClientRect().top - {INSET}) <= 2; }}"
)
FIRST_IN_VIEW = (
    "() => [...document.querySelectorAll('#rows > tr[data-id]')]"
    f".find(r => r.getBoundingClientRect().bottom > {INSET} + 1).dataset.id"
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


def put_on_top(page: Page, order_id: str) -> None:
    """Scrolls so that the row is the first in view, and waits for the address bar to follow."""
    from playwright.sync_api import expect

    # Again on every frame until it holds: a wheel scroll still gliding would carry it on.
    page.wait_for_function(
        "id => { const r = document.getElementById('order-' + id); r.scrollIntoView({block: 'start'});"
        f" return Math.abs(r.getBoundingClientRect().top - {INSET}) <= 1; }}",
        arg=order_id,
        polling="raf",
    )
    expect(page).to_have_url(re.compile(rf"/orders\?.*#order-{order_id}$"))


def expect_on_top(page: Page, order_id: str) -> None:
    page.wait_for_function(ON_TOP, arg=order_id, timeout=10_000)
