"""The HTML list through the Flask test client: full pages, fragments, no-JS paging, errors."""

from __future__ import annotations

import re

import pytest

from app import create_app

from .conftest import SECRET
from .test_api import seed_ties

pytestmark = pytest.mark.usefixtures("app")
ROW_ID = re.compile(r'<tr data-id="(\d+)"')


def link(html: str, rel: str) -> str | None:
    match = re.search(rf'<a class="[^"]*" href="([^"]+)" rel="{rel}"', html) or re.search(
        rf'href="([^"]+)" rel="{rel}"', html
    )
    return match.group(1).replace("&amp;", "&") if match else None


def test_root_redirects_to_the_list(client):
    response = client.get("/")
    assert response.status_code == 302 and response.headers["Location"].endswith("/orders")


def test_full_page_has_rows_sentinel_and_footer(client, engine):
    seed_ties(engine, 50)
    html = client.get("/orders").get_data(as_text=True)
    assert len(ROW_ID.findall(html)) == 20
    assert 'id="more"' in html and 'hx-trigger="intersect once"' in html and 'hx-swap="outerHTML"' in html
    assert "<footer" in html
    assert 'aria-rowcount="-1"' in html and 'aria-rowindex="2"' in html


def test_fragment_is_rows_and_the_next_control_only(client, engine):
    seed_ties(engine, 50)
    page = client.get("/orders").get_data(as_text=True)
    response = client.get(link(page, "next"), headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert response.headers["Vary"] == "HX-Request"
    fragment = response.get_data(as_text=True)
    assert "<html" not in fragment and "<footer" not in fragment
    assert len(ROW_ID.findall(fragment)) == 20
    assert 'aria-rowindex="22"' in fragment
    last = client.get(link(fragment, "next"), headers={"HX-Request": "true"}).get_data(as_text=True)
    assert len(ROW_ID.findall(last)) == 10 and 'id="end-of-list"' in last


def test_after_auto_pages_the_sentinel_becomes_a_load_more_button(client, engine):
    seed_ties(engine, 200)
    url, kinds = "/orders", []
    for _ in range(8):
        html = client.get(url, headers={"HX-Request": "true"}).get_data(as_text=True)
        kinds.append("button" if "data-load-more" in html else "sentinel")
        url = link(html, "next")
    # Page 1 and five automatic loads, then a click, then automatic loads again.
    assert kinds == ["sentinel"] * 5 + ["button", "sentinel", "sentinel"]


def test_without_javascript_next_and_previous_links_walk_the_whole_list(client, engine):
    ids = seed_ties(engine, 95)
    seen, url, pages = [], "/orders", []
    while url:
        html = client.get(url).get_data(as_text=True)
        assert "<footer" in html
        pages.append(html)
        seen += [int(i) for i in ROW_ID.findall(html)]
        url = link(html, "next")
    assert len(seen) == len(set(seen)) == len(ids)
    back, url = [], link(pages[-1], "prev")
    while url:
        html = client.get(url).get_data(as_text=True)
        back = [int(i) for i in ROW_ID.findall(html)] + back
        url = link(html, "prev")
    assert back == seen[: len(back)] and len(back) == len(seen) - len(ROW_ID.findall(pages[-1]))


def test_bad_cursor_in_the_url_is_a_400_page_linking_to_the_top(client):
    response = client.get("/orders?after=tampered.cursor")
    assert response.status_code == 400
    html = response.get_data(as_text=True)
    assert "cursor" in html and 'href="/orders"' in html and "<footer" in html
    fragment = client.get("/orders?after=tampered.cursor", headers={"HX-Request": "true"})
    assert fragment.status_code == 400 and "<html" not in fragment.get_data(as_text=True)
    assert client.get("/orders?page=0").status_code == 400
    assert client.get("/orders?sort=nope").status_code == 400


def test_changing_sort_rejects_the_old_sorts_cursor(client, engine):
    seed_ties(engine, 50)
    next_url = link(client.get("/orders").get_data(as_text=True), "next")
    response = client.get(next_url + "&sort=amount")
    assert response.status_code == 400
    assert "sort" in response.get_data(as_text=True)


def test_new_orders_banner_counts_rows_above_the_first_row(client, engine):
    seed_ties(engine, 30)
    html = client.get("/orders").get_data(as_text=True)
    poll = re.search(r'hx-get="(/orders/new[^"]+)"', html).group(1).replace("&amp;", "&")
    assert client.get(poll).get_data(as_text=True).strip() == ""
    for n in range(3):
        client.post("/api/orders", json={"customer": f"late {n}", "amount": "1.00"})
    banner = client.get(poll).get_data(as_text=True)
    assert "3 new orders" in banner and 'href="/orders"' in banner
    # Counting below a position means nothing here: said, not silently answered with 0.
    refused = client.get(poll.replace("before=", "after="))
    assert refused.status_code == 400 and "give before" in refused.get_data(as_text=True)


def test_order_page_and_missing_order(client, engine):
    (order_id, *_) = seed_ties(engine, 1)
    assert f"Order #{order_id}" in client.get(f"/orders/{order_id}").get_data(as_text=True)
    assert client.get("/orders/999999999").status_code == 404
    assert client.get(f"/orders/{2**70}").status_code == 404


def test_csv_export_streams_every_row(client, engine):
    ids = seed_ties(engine, 2500)
    response = client.get("/orders/export.csv")
    assert response.status_code == 200 and response.mimetype == "text/csv"
    lines = response.get_data(as_text=True).splitlines()
    assert lines[0] == "id,customer,amount,status,created_at"
    assert sorted(int(line.split(",")[0]) for line in lines[1:]) == sorted(ids)
    assert client.get("/orders/export.csv?after=bad").status_code == 400


def test_database_down_is_503_with_retry_after(tmp_path):
    # A real connection attempt to a port where nothing listens: the database "went away".
    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": SECRET,
            "DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:1/none",
        }
    )
    client = app.test_client()
    for url in ("/healthz", "/api/orders"):
        response = client.get(url)
        assert response.status_code == 503
        assert response.json["error"]["code"] == "unavailable"
        assert response.headers["Retry-After"]
        assert "psycopg" not in response.get_data(as_text=True)
    page = client.get("/orders")
    assert page.status_code == 503 and "SELECT" not in page.get_data(as_text=True)
    fragment = client.get("/orders", headers={"HX-Request": "true"})
    assert fragment.status_code == 503


def test_production_refuses_to_start_without_a_real_secret(monkeypatch):
    monkeypatch.setenv("APP_ENV", "production")
    monkeypatch.delenv("SECRET_KEY", raising=False)
    with pytest.raises(RuntimeError, match="SECRET_KEY"):
        create_app()
    monkeypatch.setenv("SECRET_KEY", "short")
    with pytest.raises(RuntimeError, match="SECRET_KEY"):
        create_app()
