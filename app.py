"""The orders app: create_app() wires configuration, database, views, errors and CLI commands."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from flask import Flask

from orders import api, cli, db, errors, openapi, replicas, web
from pagination import CursorCodec

MIN_SECRET_LENGTH = 32
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


def _dev_secret(instance: Path) -> str:
    """A random key kept in instance/, so cursors survive restarts on a developer's machine."""
    path = instance / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return path.read_text().strip()


def _config_from_env() -> dict[str, Any]:
    config: dict[str, Any] = {}
    for name in ("DATABASE_URL", "SECRET_KEY", "DATABASE_REPLICA_URLS"):
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
        "NEW_ORDERS_POLL_SECONDS",
        "STATEMENT_TIMEOUT_MS",
        "REPLICA_MAX_LAG_MS",
    ):
        if os.environ.get(name):
            config[name] = int(os.environ[name])
    config["PRODUCTION"] = os.environ.get("APP_ENV") == "production"
    return config


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    app = Flask(__name__, instance_relative_config=True)
    Path(app.instance_path).mkdir(parents=True, exist_ok=True)
    app.config.from_mapping(
        DATABASE_URL=f"sqlite:///{Path(app.instance_path) / 'orders.db'}",
        PAGE_SIZE=20,
        AUTO_PAGES=5,
        NEW_ORDERS_POLL_SECONDS=15,
        STATEMENT_TIMEOUT_MS=5000,
        DATABASE_REPLICA_URLS="",  # PostgreSQL standbys for list reads (orders/replicas.py)
        REPLICA_MAX_LAG_MS=1000,  # how stale a first page read on a replica may be
        MAX_CONTENT_LENGTH=16 * 1024,  # an order is a few hundred bytes; larger bodies get 413
        PRODUCTION=False,
    )
    app.config.update(_config_from_env() if test_config is None else test_config)
    if not app.config.get("SECRET_KEY"):
        if app.config["PRODUCTION"]:
            raise RuntimeError("APP_ENV=production needs SECRET_KEY (at least 32 random characters)")
        app.config["SECRET_KEY"] = _dev_secret(Path(app.instance_path))
    if app.config["PRODUCTION"] and len(app.config["SECRET_KEY"]) < MIN_SECRET_LENGTH:
        raise RuntimeError(f"SECRET_KEY must be at least {MIN_SECRET_LENGTH} characters in production")
    # Older keys open cursors, never seal them: a rolling key rotation loses no reader's place.
    app.extensions["cursor_codec"] = CursorCodec(
        app.config["SECRET_KEY"], fallbacks=list(app.config.get("SECRET_KEY_FALLBACKS") or [])
    )

    db.init_app(app)
    replicas.init_app(app)
    errors.init_app(app)
    cli.init_app(app)
    app.register_blueprint(web.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(openapi.bp)

    @app.after_request
    def _security_headers(response):  # type: ignore[no-untyped-def]
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    return app
