"""What the tests configure the app with, in one place: the app and its database as a test makes
them, the secret, the write token, the rate limits the suites run under (limits stay on in every
test; these are sized for each kind of load), and raw chunked bodies.

Plain functions and constants, imported by test modules (never from conftest): conftest.py holds
only pytest fixtures, and takes SECRET from here too.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from jinja2.bccache import Bucket, BytecodeCache
from sqlalchemy import Engine, delete
from sqlalchemy.orm import Session

from orders.app import create_app
from orders.data.db import make_engine, migrate
from orders.data.models import Order

from .hunt import examples

SECRET = "test-secret-that-is-long-enough-for-production-0123456789"


def migrated(url: str) -> str:
    """Bring the (new, empty) database at `url` to the newest migration; return `url`."""
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    return url


def clear(engine: Engine) -> None:
    """Delete every order (tests share one database per engine and session)."""
    with Session(engine) as session:
        session.execute(delete(Order))
        session.commit()


class _CompiledTemplates(BytecodeCache):
    """Each app compiles its templates on first use (one app per process in production), and a
    test process makes an app per test: 50 ms of Jinja's parser and compiler each time, most of
    a make_app and its first request. Compiled once per test process instead, in memory. Jinja
    keys a template by its name and checks its source's checksum, so an edited template is
    compiled again; every app makes its environment the same way (create_app), so the code is
    the same for all."""

    def __init__(self) -> None:
        self.code: dict[str, tuple[str, bytes]] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        checksum, code = self.code.get(bucket.key, ("", b""))
        if checksum == bucket.checksum:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: Bucket) -> None:
        self.code[bucket.key] = (bucket.checksum, bucket.bytecode_to_string())


_COMPILED = _CompiledTemplates()


def make_app(url: str, **config: Any) -> Flask:
    """The app as a test makes it: TESTING, this database, the test secret, and `config`."""
    app = create_app({"TESTING": True, "DATABASE_URL": url, "SECRET_KEY": SECRET, **config})
    app.jinja_env.bytecode_cache = _COMPILED
    return app


API_TOKEN = "test-token-2f9c41d7b8e6a0d3c5f7e9b1a2c4d6e8"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
# An in-process test client sends thousands of requests a minute from one address: the limits it
# runs under are the production mechanism with budgets sized for that load (and for HUNT times it
# when hunting: tests/hunt.py).
CLIENT_LIMITS = {
    "RATELIMIT_READS": f"{examples(20_000)} per minute",
    "RATELIMIT_WRITES": f"{examples(5_000)} per minute",
}


def with_token(app: Flask, **config: Any) -> Flask:
    """Require API_TOKEN for writes on `app` (read per request, so a running app changes too)."""
    app.config.update(API_TOKENS=(API_TOKEN,), **CLIENT_LIMITS, **config)
    return app


def authorized_client(app: Flask) -> Any:
    """A test client that sends the bearer token with every request."""
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = AUTH["Authorization"]
    return client


# Chunked request bodies sent raw (no Content-Length): the same cases for every server.
CHUNKED_POST = (
    b"POST /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Authorization: Bearer " + API_TOKEN.encode() + b"\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)


def chunked_bodies() -> dict[str, tuple[bytes, int]]:
    """Raw chunked bodies and the status each must get (test_security_doors sends them to
    werkzeug's server, test_security_downloads to gunicorn)."""
    order = b'{"customer": "Ana", "amount": "1.00"}'
    over = b"".join(b"400\r\n" + b"x" * 1024 + b"\r\n" for _ in range(20)) + b"0\r\n\r\n"
    return {
        "valid": (b"%x\r\n" % len(order) + order + b"\r\n0\r\n\r\n", 201),
        "bad chunk size": (b"zz\r\nabc\r\n0\r\n\r\n", 400),
        "over 16 KiB": (over, 413),
    }
