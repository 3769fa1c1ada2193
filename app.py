"""The orders app: create_app() wires configuration, database, views, errors and CLI commands."""

from __future__ import annotations

import math
import os
import secrets
from collections import Counter
from pathlib import Path
from typing import Any

from flask import Flask, request
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.routing import IntegerConverter

from orders import api, cli, db, errors, limits, openapi, replicas, web
from orders.auth import parse_tokens
from pagination import CursorCodec

MIN_SECRET_LENGTH = 32
MIN_SECRET_DISTINCT = 8
MIN_SECRET_BITS = 64
SECURITY_HEADERS = {
    # Only our own scripts and styles: htmx is vendored and configured to inject no inline style.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
# Every answer the views make changes by the second (new orders, deletes) and may be a fragment
# or a page at one URL: no shared cache may keep it, and the browser asks again each time it
# needs it. (Not no-store: Back and forward may still show what the reader saw.) Static files
# set their own Cache-Control (send_file), which this leaves alone.
DYNAMIC_CACHE_CONTROL = "private, no-cache"
# Hosts served when TRUSTED_HOSTS is not configured (development): the loopback names.
DEV_TRUSTED_HOSTS = ["localhost", "127.0.0.1"]


class AsciiIntConverter(IntegerConverter):
    """`<int:...>` for ASCII digits only, no leading zero: werkzeug's `\\d+` also matches
    Arabic-Indic or full-width digits (/orders/١٢ was order 12). One spelling per number."""

    regex = r"0|[1-9][0-9]{0,18}"


def _dev_secret(instance: Path) -> str:
    """A random key kept in instance/, so cursors survive restarts on a developer's machine."""
    path = instance / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return path.read_text().strip()


def secret_key_problem(key: str) -> str | None:
    """Why `key` is not fit for production, or None. A heuristic that catches placeholders
    ("changeme" four times, 32 spaces, a repeated pattern), not every weak key."""
    if len(key) < MIN_SECRET_LENGTH:
        return f"SECRET_KEY must be at least {MIN_SECRET_LENGTH} characters in production"
    counts = Counter(key)
    # The key's own character frequencies bound what it can hold: 32 spaces carry 0 bits.
    bits = -sum(n * math.log2(n / len(key)) for n in counts.values())
    repeats = any(key == (key[:p] * (len(key) // p + 1))[: len(key)] for p in range(1, len(key) // 2 + 1))
    if len(counts) < MIN_SECRET_DISTINCT or bits < MIN_SECRET_BITS or repeats:
        return (
            "SECRET_KEY does not look random (too few distinct characters, or a repeated pattern); "
            "make one with: python -c 'import secrets; print(secrets.token_urlsafe(48))'"
        )
    return None


def _config_from_env() -> dict[str, Any]:
    config: dict[str, Any] = {}
    for name in (
        "DATABASE_URL",
        "SECRET_KEY",
        "DATABASE_REPLICA_URLS",
        "API_TOKENS",
        "RATELIMIT_READS",
        "RATELIMIT_WRITES",
        "RATELIMIT_STORAGE_URI",
    ):
        if os.environ.get(name):
            config[name] = os.environ[name]
    if os.environ.get("SECRET_KEY_FALLBACKS"):
        # Flask 3.1's name; a list there, comma-separated here.
        config["SECRET_KEY_FALLBACKS"] = [
            key.strip() for key in os.environ["SECRET_KEY_FALLBACKS"].split(",") if key.strip()
        ]
    for name in (
        "PAGE_SIZE",
        "AUTO_PAGES",
        "MAX_ROWS_IN_PAGE",
        "NEW_ORDERS_POLL_SECONDS",
        "STATEMENT_TIMEOUT_MS",
        "REPLICA_MAX_LAG_MS",
        "CREATED_AT_MAX_SKEW_SECONDS",
        "TRUSTED_PROXIES",
    ):
        if os.environ.get(name):
            config[name] = int(os.environ[name])
    if os.environ.get("TRUSTED_HOSTS"):
        config["TRUSTED_HOSTS"] = [h.strip() for h in os.environ["TRUSTED_HOSTS"].split(",") if h.strip()]
    config["PRODUCTION"] = os.environ.get("APP_ENV") == "production"
    return config


def _check_production(config: Any) -> None:
    """APP_ENV=production starts only with what production needs; each message says what to set."""
    problem = secret_key_problem(config["SECRET_KEY"])
    if problem:
        raise RuntimeError(problem)
    if not config["API_TOKENS"]:
        raise RuntimeError(
            "APP_ENV=production needs API_TOKENS (comma-separated bearer tokens for POST/DELETE); "
            "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    if not config.get("TRUSTED_HOSTS"):
        raise RuntimeError("APP_ENV=production needs TRUSTED_HOSTS (comma-separated host names served)")


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    app = Flask(__name__, instance_relative_config=True)
    Path(app.instance_path).mkdir(parents=True, exist_ok=True)
    app.config.from_mapping(
        DATABASE_URL=f"sqlite:///{Path(app.instance_path) / 'orders.db'}",
        PAGE_SIZE=20,
        AUTO_PAGES=5,
        MAX_ROWS_IN_PAGE=600,  # rows app.js keeps in the document while scrolling (0: never drop)
        NEW_ORDERS_POLL_SECONDS=15,
        STATEMENT_TIMEOUT_MS=5000,
        DATABASE_REPLICA_URLS="",  # PostgreSQL standbys for list reads (orders/replicas.py)
        REPLICA_MAX_LAG_MS=1000,  # how stale a first page read on a replica may be
        MAX_CONTENT_LENGTH=16 * 1024,  # an order is a few hundred bytes; larger bodies get 413
        # How far into the future a client may date an order (clock skew), see api.validate_order.
        CREATED_AT_MAX_SKEW_SECONDS=5,
        API_TOKENS="",
        # How many reverse proxies stand in front (each appends to X-Forwarded-For); 0: none,
        # and the header is ignored, since any client can send it.
        TRUSTED_PROXIES=0,
        PRODUCTION=False,
    )
    app.config.update(_config_from_env() if test_config is None else test_config)
    app.config["API_TOKENS"] = parse_tokens(app.config["API_TOKENS"])
    if not app.config.get("SECRET_KEY"):
        if app.config["PRODUCTION"]:
            raise RuntimeError("APP_ENV=production needs SECRET_KEY (at least 32 random characters)")
        app.config["SECRET_KEY"] = _dev_secret(Path(app.instance_path))
    if app.config["PRODUCTION"]:
        _check_production(app.config)
    elif app.config.get("TRUSTED_HOSTS") is None:
        app.config["TRUSTED_HOSTS"] = DEV_TRUSTED_HOSTS
    # Older keys open cursors, never seal them: a rolling key rotation loses no reader's place.
    app.extensions["cursor_codec"] = CursorCodec(
        app.config["SECRET_KEY"], fallbacks=list(app.config.get("SECRET_KEY_FALLBACKS") or [])
    )
    # Before any blueprint adds a rule: every `<int:...>` is ASCII digits.
    app.url_map.converters["int"] = AsciiIntConverter

    if app.config["TRUSTED_PROXIES"]:
        # The client's address (rate limits, the loopback rule) and scheme as the proxies saw them.
        hops = int(app.config["TRUSTED_PROXIES"])
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)  # type: ignore[method-assign]

    db.init_app(app)
    errors.init_app(app)
    limits.init_app(app)
    cli.init_app(app)
    app.register_blueprint(web.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(openapi.bp)
    # After the blueprints: it wraps the list views (a replica lost mid-page is retried elsewhere).
    replicas.init_app(app)

    @app.after_request
    def _security_headers(response):  # type: ignore[no-untyped-def]
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if request.endpoint != "static":
            response.headers.setdefault("Cache-Control", DYNAMIC_CACHE_CONTROL)
        return response

    return app
