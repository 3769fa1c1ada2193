"""The small edges a probe found (issue 22, point 5): each a 4xx in the project's error format, or
accepted as the spec says. One test each; the first request of each was a 500 or a wrong answer."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from flask import Flask

from .fixtures import API_TOKEN, make_app, migrated
from .live import LiveServer


@pytest.fixture
def app(tmp_path) -> Iterator[Flask]:
    app = make_app(migrated(f"sqlite:///{tmp_path / 'edges.db'}"), API_TOKENS=(API_TOKEN,))
    yield app
    app.extensions["engine"].dispose()


@pytest.mark.parametrize("query", ["to=9999-12-31&tz=1", "to=9999-12-31T23:59&tz=840", "to=0001-01-01&tz=-1"])
def test_go_to_at_the_calendars_ends_says_nothing_is_there_not_a_500(app: Flask, query: str) -> None:
    """Past every order or before every order (here an empty list): the go-to is refused in words
    and nothing moves (issue 37), on the page and in the API alike; never a 500."""
    for path in ("/orders", "/api/orders"):
        response = app.test_client().get(f"{path}?{query}")
        assert response.status_code == 400, response.get_data()[:200]
        assert "nothing moved" in response.get_data(as_text=True)
        assert "Location" not in response.headers


def test_host_names_are_case_insensitive(app: Flask) -> None:
    client = app.test_client()
    for host in ("LOCALHOST", "LocalHost:5000", "127.0.0.1"):
        assert client.get("/api/orders", headers={"Host": host}).status_code == 200, host
    refused = client.get("/api/orders", headers={"Host": "EVIL.example"})
    assert refused.status_code == 400 and refused.json["error"]["code"] == "bad_request"


def test_a_date_after_9999_in_utc_is_in_the_future_not_before_1970(app: Flask) -> None:
    response = app.test_client().post(
        "/api/orders",
        json={"customer": "Ana", "amount": "1.00", "created_at": "9999-12-31T23:59:59-01:00"},
        headers={"Authorization": f"Bearer {API_TOKEN}"},
    )
    assert response.status_code == 422
    assert response.json["error"]["errors"]["created_at"].startswith("must not be in the future")


def test_order_pages_vary_with_the_headers_their_back_link_reads(app: Flask) -> None:
    client = app.test_client()
    created = client.post(
        "/api/orders",
        json={"customer": "Ana", "amount": "1.00"},
        headers={"Authorization": f"Bearer {API_TOKEN}"},
    )
    for path in (f"/orders/{created.json['id']}", "/orders/999999"):  # the page, and the "gone" page
        vary = {v.strip().lower() for v in client.get(path).headers["Vary"].split(",")}
        assert {"hx-current-url", "referer", "hx-request"} <= vary, (path, vary)


def _chunked_post(url: str, body: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    head = (
        b"POST /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer "
        + API_TOKEN.encode()
        + b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_chunked_body_of_exactly_16_kib_is_taken_like_one_with_content_length(app: Flask) -> None:
    limit = 16 * 1024
    order = b'{"customer": "Ana", "amount": "1.00"}'
    exact = order[:-1] + b" " * (limit - len(order)) + b"}"  # valid JSON padded to the limit
    assert len(exact) == limit
    with LiveServer(app) as server:
        assert _chunked_post(server.url, exact).startswith(b"HTTP/1.1 201"), "exactly the limit"
        over = _chunked_post(server.url, exact + b" ")
        assert over.startswith(b"HTTP/1.1 413") and b"payload_too_large" in over, over[:300]
    with_length = app.test_client().post(
        "/api/orders",
        data=exact,
        content_type="application/json",
        headers={"Authorization": f"Bearer {API_TOKEN}"},
    )
    assert with_length.status_code == 201
