"""A replica-routed page decodes its cursor once: orders/finding/request.py decodes it into the list request,
which read routing asks for the WAL position in its meta and the page pages from.

DATABASE_REPLICA_URLS names the primary itself: it leads, so it takes no replica reads, but every
list read still goes through the router's hook, which is what decodes the cursor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .databases import throwaway_database
from .fixtures import make_app, migrated
from .helpers import seed


def test_a_routed_page_decodes_its_cursor_once(tmp_path: Path) -> None:
    with throwaway_database("postgresql", tmp_path, "decode") as url:
        app = make_app(migrated(url), DATABASE_REPLICA_URLS=url)
        assert "router" in app.extensions, "the replica hook is not installed"
        try:
            pages_decode_once(app)
        finally:
            app.extensions["router"].dispose()
            app.extensions["engine"].dispose()


def pages_decode_once(app: Any) -> None:
    seed(app.extensions["engine"], 30)
    client = app.test_client()
    cursor = client.get("/api/orders?limit=5").get_json()["next_cursor"]
    codec = app.extensions["cursor_codec"]
    decoded: list[str] = []
    decode = codec.decode

    def counting(text: str) -> Any:  # a spy: the real decode, counted
        decoded.append(text)
        return decode(text)

    codec.decode = counting
    page = client.get(f"/api/orders?limit=5&after={cursor}")
    assert page.status_code == 200, page.get_data(as_text=True)
    assert len(page.get_json()["items"]) == 5
    assert decoded == [cursor]
