"""What the tests configure the app with, in one place: the write token and the rate limits the
suites run under (limits stay on in every test; these are sized for each kind of load)."""

from __future__ import annotations

from typing import Any

from flask import Flask

API_TOKEN = "test-token-2f9c41d7b8e6a0d3c5f7e9b1a2c4d6e8"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
# An in-process test client sends thousands of requests a minute from one address: the limits it
# runs under are the production mechanism with budgets sized for that load.
CLIENT_LIMITS = {"RATELIMIT_READS": "20000 per minute", "RATELIMIT_WRITES": "5000 per minute"}


def with_token(app: Flask, **config: Any) -> Flask:
    """Require API_TOKEN for writes on `app` (read per request, so a running app changes too)."""
    app.config.update(API_TOKENS=(API_TOKEN,), **CLIENT_LIMITS, **config)
    return app


def authorized_client(app: Flask) -> Any:
    """A test client that sends the bearer token with every request."""
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = AUTH["Authorization"]
    return client
