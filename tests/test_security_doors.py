"""The doors: who may write, how often anyone may ask, what production refuses to start with,
which Host is served, and what caches may keep. On SQLite: none of it depends on the engine."""

from __future__ import annotations

import hmac
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

import orders.web.auth
from orders.app import create_app
from orders.core.secret_key import secret_key_problem
from orders.core.settings import SettingsError
from orders.web.request_path import DYNAMIC_CACHE_CONTROL, SECURITY_HEADERS

from . import fixtures
from .fixtures import API_TOKEN, AUTH, CHUNKED_POST, CLIENT_LIMITS, chunked_bodies, migrated
from .live import LiveServer

ORDER = {"customer": "Ana", "amount": "12.30"}


@pytest.fixture(scope="module")
def db_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('doors') / 'doors.db'}"
    migrated(url)
    return url


@pytest.fixture
def new_app(db_file: str) -> Iterator:
    made: list[Flask] = []

    def make(**config: object) -> Flask:
        app = fixtures.make_app(db_file, **config)
        made.append(app)
        return app

    yield make
    for app in made:
        app.extensions["engine"].dispose()


# --- Writes need a token ---------------------------------------------------------------------


def test_writes_need_a_valid_bearer_token(new_app) -> None:
    client = new_app(API_TOKENS=f"other-token, {API_TOKEN}", **CLIENT_LIMITS).test_client()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {API_TOKEN}"}):
        for response in (
            client.post("/api/orders", json=ORDER, headers=headers),
            client.delete("/api/orders/1", headers=headers),
        ):
            assert response.status_code == 401, headers
            assert response.json["error"]["code"] == "unauthorized"
            assert response.headers["WWW-Authenticate"].startswith('Bearer realm="orders"')
    created = client.post("/api/orders", json=ORDER, headers=AUTH)
    assert created.status_code == 201
    lowercase = {"Authorization": f"bearer {API_TOKEN}"}  # the scheme is case-insensitive (RFC 6750)
    assert client.delete(f"/api/orders/{created.json['id']}", headers=lowercase).status_code == 204
    # The second configured token works as well; reads never need one.
    assert (
        client.post("/api/orders", json=ORDER, headers={"Authorization": "Bearer other-token"}).status_code
        == 201
    )
    assert client.get("/api/orders").status_code == 200


def test_tokens_are_compared_in_constant_time(new_app, monkeypatch) -> None:
    """Every configured token is compared with hmac.compare_digest, even after a match."""
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(orders.web.auth.hmac, "compare_digest", spy)
    client = new_app(API_TOKENS=f"{API_TOKEN},second,third", **CLIENT_LIMITS).test_client()
    assert client.post("/api/orders", json=ORDER, headers=AUTH).status_code == 201
    assert [b for _, b in calls] == [API_TOKEN.encode(), b"second", b"third"]


def test_without_tokens_writes_are_open_to_loopback_only(new_app) -> None:
    client = new_app(**CLIENT_LIMITS).test_client()  # API_TOKENS unset: development
    assert client.post("/api/orders", json=ORDER).status_code == 201  # the test client is 127.0.0.1
    assert client.post("/api/orders", json=ORDER, environ_base={"REMOTE_ADDR": "::1"}).status_code == 201
    for remote in ("192.168.1.20", "10.0.0.1", "2001:db8::1"):
        response = client.post("/api/orders", json=ORDER, environ_base={"REMOTE_ADDR": remote})
        assert response.status_code == 401, remote
        assert "loopback" in response.json["error"]["message"]
        response = client.delete("/api/orders/1", environ_base={"REMOTE_ADDR": remote})
        assert response.status_code == 401, remote


def test_behind_trusted_proxies_the_forwarded_address_counts(new_app) -> None:
    """A proxy on this machine makes every client look like loopback: with TRUSTED_PROXIES the
    address the proxy forwards is the client's (writes and limits); without it the header is
    the client's own words and is ignored."""
    proxied = new_app(TRUSTED_PROXIES=1, RATELIMIT_READS="2 per minute").test_client()
    remote = {"X-Forwarded-For": "203.0.113.5"}
    assert proxied.post("/api/orders", json=ORDER, headers=remote).status_code == 401
    assert (
        proxied.post("/api/orders", json=ORDER, headers={"X-Forwarded-For": "127.0.0.1"}).status_code == 201
    )
    assert [proxied.get("/api/orders", headers=remote).status_code for _ in range(3)] == [200, 200, 429]
    assert proxied.get("/api/orders", headers={"X-Forwarded-For": "203.0.113.6"}).status_code == 200
    direct = new_app().test_client()
    spoofed = {"X-Forwarded-For": "127.0.0.1"}
    response = direct.post(
        "/api/orders", json=ORDER, headers=spoofed, environ_base={"REMOTE_ADDR": "192.0.2.1"}
    )
    assert response.status_code == 401


# --- Production refuses to start without what it needs -----------------------------------------

PRODUCTION = {
    "APP_ENV": "production",
    "RATELIMIT_STORAGE_URI": "redis://127.0.0.1:6379",
    "WEB_CONCURRENCY": 1,
    "API_TOKENS": API_TOKEN,
    "TRUSTED_HOSTS": ["orders.example"],
}


@pytest.mark.parametrize(
    "key",
    [
        " " * 32,
        "a" * 64,
        "ab" * 20,
        "changeme" * 4,
        "0123456789abcdef" * 2,
        "short",
    ],
)
def test_production_refuses_a_secret_key_that_is_not_random(new_app, key: str) -> None:
    assert secret_key_problem(key)
    with pytest.raises(SettingsError, match="SECRET_KEY"):
        new_app(**{**PRODUCTION, "SECRET_KEY": key})


def test_production_accepts_generated_keys(new_app) -> None:
    import secrets

    for key in [secrets.token_hex(16) for _ in range(200)] + [secrets.token_urlsafe(32) for _ in range(200)]:
        assert secret_key_problem(key) is None, key
    assert new_app(**{**PRODUCTION, "SECRET_KEY": secrets.token_urlsafe(48)}).config["PRODUCTION"]


def test_production_refuses_to_start_without_tokens_or_hosts(new_app) -> None:
    with pytest.raises(SettingsError, match="API_TOKENS"):
        new_app(**{**PRODUCTION, "API_TOKENS": ""})
    with pytest.raises(SettingsError, match="API_TOKENS"):
        new_app(**{**PRODUCTION, "API_TOKENS": " , "})
    with pytest.raises(SettingsError, match="TRUSTED_HOSTS"):
        new_app(**{**PRODUCTION, "TRUSTED_HOSTS": None})


def test_production_from_the_environment(monkeypatch) -> None:
    """The variables an operator sets, read as create_app() reads them under gunicorn."""
    import secrets

    monkeypatch.setenv("APP_ENV", "production")
    monkeypatch.setenv("DATABASE_URL", "sqlite://")
    monkeypatch.setenv("SECRET_KEY", secrets.token_urlsafe(48))
    monkeypatch.setenv("TRUSTED_HOSTS", "orders.example, .orders.example")
    monkeypatch.delenv("API_TOKENS", raising=False)
    with pytest.raises(SettingsError, match="API_TOKENS"):
        create_app()
    monkeypatch.setenv("WEB_CONCURRENCY", "1")  # memory:// rate limits are refused with several
    monkeypatch.setenv("API_TOKENS", "one-token-of-16-chars, two-token-of-16-chars")
    app = create_app()
    assert app.config["API_TOKENS"] == ("one-token-of-16-chars", "two-token-of-16-chars")
    assert app.config["TRUSTED_HOSTS"] == ["orders.example", ".orders.example"]
    client = app.test_client()
    assert client.get("/openapi.json", headers={"Host": "orders.example"}).status_code == 200
    assert client.get("/openapi.json", headers={"Host": "api.orders.example"}).status_code == 200
    assert client.get("/openapi.json", headers={"Host": "evil.example"}).status_code == 400
    app.extensions["engine"].dispose()


# --- Rate limits --------------------------------------------------------------------------------


def test_writes_have_a_tighter_limit_than_reads(new_app) -> None:
    app = new_app(API_TOKENS=API_TOKEN, RATELIMIT_READS="8 per minute", RATELIMIT_WRITES="3 per minute")
    client = app.test_client()
    for _ in range(3):
        assert client.post("/api/orders", json=ORDER, headers=AUTH).status_code == 201
    limited = client.post("/api/orders", json=ORDER, headers=AUTH)
    assert limited.status_code == 429
    assert limited.json["error"]["code"] == "rate_limited"
    assert "writes" in limited.json["error"]["message"]
    assert 1 <= int(limited.headers["Retry-After"]) <= 61  # the window, rounded up to whole seconds
    assert client.delete("/api/orders/1", headers=AUTH).status_code == 429  # one budget for all writes
    # Reads have their own budget, shared by every page and API route.
    answers = [client.get(path).status_code for path in ["/api/orders", "/orders", "/orders/new"] * 3]
    assert answers == [200] * 8 + [429]
    page = client.get("/orders")
    assert page.status_code == 429 and page.mimetype == "text/html" and int(page.headers["Retry-After"]) >= 1
    fragment = client.get("/orders", headers={"HX-Request": "true"})
    assert fragment.status_code == 429 and "<html" not in fragment.get_data(as_text=True)
    # Health checks (load balancers) and static files are not limited.
    assert client.get("/healthz").status_code == 200
    static = client.get("/static/app.css")
    assert static.status_code == 200
    static.close()


def test_limits_are_per_client(new_app) -> None:
    client = new_app(RATELIMIT_READS="2 per minute").test_client()
    for _ in range(2):
        assert client.get("/api/orders").status_code == 200
    assert client.get("/api/orders").status_code == 429
    other = {"REMOTE_ADDR": "127.0.0.2"}
    assert client.get("/api/orders", environ_base=other).status_code == 200


def test_limits_are_read_per_request(new_app) -> None:
    app = new_app(RATELIMIT_READS="1 per minute")
    client = app.test_client()
    assert client.get("/api/orders").status_code == 200
    assert client.get("/api/orders").status_code == 429
    app.config["RATELIMIT_READS"] = "100 per minute"
    assert client.get("/api/orders").status_code == 200


# --- Answers to requests that are not what they should be -----------------------------------------


def test_405_says_which_methods_are_allowed(new_app) -> None:
    client = new_app().test_client()
    response = client.put("/api/orders")
    assert response.status_code == 405 and response.json["error"]["code"] == "method_not_allowed"
    assert set(response.headers["Allow"].replace(" ", "").split(",")) >= {"GET", "POST"}
    page = client.post("/orders")
    assert page.status_code == 405 and "GET" in page.headers["Allow"]


def test_untrusted_hosts_are_refused_not_copied_into_redirects(new_app) -> None:
    client = new_app().test_client()
    redirect = client.get("/orders//1", headers={"Host": "localhost:5000"})
    assert redirect.status_code in (301, 308) and "evil" not in redirect.headers["Location"]
    for path in ("/orders//1", "/orders", "/api/orders", "/"):
        response = client.get(path, headers={"Host": "evil.example"})
        assert response.status_code == 400, path
        assert "Location" not in response.headers
        assert "evil.example" not in response.get_data(as_text=True)
    assert client.get("/api/orders", headers={"Host": "evil.example"}).json["error"]["code"] == "bad_request"


def test_every_answer_carries_each_security_header_once(new_app) -> None:
    """Pages, fragments, the API, errors of both kinds, a wrong method, the export's stream and
    static files: orders/web/request_path.py adds them as the answer starts, whatever made it."""
    client = new_app().test_client()
    answers = {
        "page": client.get("/orders"),
        "fragment": client.get("/orders", headers={"HX-Request": "true"}),
        "api": client.get("/api/orders"),
        "api 404": client.get("/api/orders/999"),
        "page 404": client.get("/nothing-here"),
        "bad cursor": client.get("/api/orders", query_string={"after": "x"}),
        "wrong method": client.delete("/orders"),
        "export": client.get("/orders/export.csv"),
        "static": client.get("/static/app.css"),
    }
    statuses = {name: answer.status_code for name, answer in answers.items()}
    assert statuses == {**statuses, "api 404": 404, "page 404": 404, "bad cursor": 400, "wrong method": 405}
    for name, answer in answers.items():
        for header, value in SECURITY_HEADERS.items():
            assert answer.headers.getlist(header) == [value], (name, header)
        assert len(answer.headers.getlist("Cache-Control")) == 1, name
        answer.close()


def test_dynamic_answers_are_private_static_files_are_not_touched(new_app) -> None:
    client = new_app().test_client()
    for path in (
        "/orders",
        "/api/orders",
        "/healthz",
        "/orders/export.csv",
        "/api/orders/999",
        "/openapi.json",
    ):
        assert client.get(path).headers["Cache-Control"] == DYNAMIC_CACHE_CONTROL, path
    fragment = client.get("/orders", headers={"HX-Request": "true"})
    assert fragment.headers["Cache-Control"] == DYNAMIC_CACHE_CONTROL
    static = client.get("/static/app.css")
    assert "private" not in static.headers.get("Cache-Control", "")  # send_file's own, untouched
    static.close()


def _raw(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


@pytest.mark.parametrize("case", list(chunked_bodies()))
def test_chunked_bodies_malformed_400_too_long_413(new_app, case: str) -> None:
    body, status = chunked_bodies()[case]
    app = new_app(API_TOKENS=API_TOKEN, **CLIENT_LIMITS)
    with LiveServer(app) as server:
        answer = _raw(server.url, CHUNKED_POST + body)
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:300]


def test_make_run_says_writes_are_loopback_only() -> None:
    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    run = makefile.split("\nrun:")[1].split("\n\n")[0]
    assert "API_TOKENS is not set" in run and "loopback" in run
