"""create_app(): the settings (checked), database, views, errors and CLI commands, wired once.

`flask --app app` and gunicorn's `app:create_app()` reach this through the thin app.py at the
repository's root; tests and tools call it with a mapping of settings instead of the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Flask, Response, request
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.routing import IntegerConverter

from pagination import CursorCodec

from . import api, cli, db, errors, limits, openapi, replicas, settings, web
from .secret_key import dev_secret

ROOT = Path(__file__).resolve().parent.parent
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
DEV_TRUSTED_HOSTS = ("localhost", "127.0.0.1")
# An order is a few hundred bytes; larger bodies get 413 (chunked ones too).
MAX_CONTENT_LENGTH = 16 * 1024


class AsciiIntConverter(IntegerConverter):
    """`<int:...>` for ASCII digits only, no leading zero: werkzeug's `\\d+` also matches
    Arabic-Indic or full-width digits (/orders/١٢ was order 12). One spelling per number."""

    regex = r"0|[1-9][0-9]{0,18}"


class LowercaseHost:
    """WSGI middleware: the Host header lowercased, so `Host: LOCALHOST` is the trusted localhost
    (werkzeug compares TRUSTED_HOSTS case-sensitively)."""

    def __init__(self, wsgi_app: Any) -> None:
        self.wsgi_app = wsgi_app

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        for key in ("HTTP_HOST", "HTTP_X_FORWARDED_HOST"):
            if key in environ:
                environ[key] = environ[key].lower()
        return self.wsgi_app(environ, start_response)


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """The app, configured from the environment, or from `test_config` alone when given.
    Raises settings.SettingsError (one line naming the setting) on a bad value."""
    app = Flask(
        __name__,
        instance_path=str(ROOT / "instance"),
        template_folder=str(ROOT / "templates"),
        static_folder=str(ROOT / "static"),
    )
    given = settings.from_environment() if test_config is None else dict(test_config)
    config = settings.resolve(given)
    Path(app.instance_path).mkdir(parents=True, exist_ok=True)
    if config["DATABASE_URL"] is None:
        config["DATABASE_URL"] = f"sqlite:///{Path(app.instance_path) / 'orders.db'}"
    if not config.get("SECRET_KEY"):
        config["SECRET_KEY"] = dev_secret(Path(app.instance_path))
    if config["TRUSTED_HOSTS"] is None:
        config["TRUSTED_HOSTS"] = DEV_TRUSTED_HOSTS
    # Host names are case-insensitive (RFC 9110, 7.2): compared lowercase (LowercaseHost below).
    config["TRUSTED_HOSTS"] = [host.lower() for host in config["TRUSTED_HOSTS"]]
    config["SECRET_KEY_FALLBACKS"] = list(config["SECRET_KEY_FALLBACKS"])
    config["PRODUCTION"] = config["APP_ENV"] == settings.PRODUCTION
    config["MAX_CONTENT_LENGTH"] = MAX_CONTENT_LENGTH
    app.config.update(config)
    # Older keys open cursors, never seal them: a rolling key rotation loses no reader's place.
    app.extensions["cursor_codec"] = CursorCodec(
        app.config["SECRET_KEY"], fallbacks=app.config["SECRET_KEY_FALLBACKS"]
    )
    # Before any blueprint adds a rule: every `<int:...>` is ASCII digits.
    app.url_map.converters["int"] = AsciiIntConverter

    if app.config["TRUSTED_PROXIES"]:
        # The client's address (rate limits, the loopback rule) and scheme as the proxies saw them.
        hops = app.config["TRUSTED_PROXIES"]
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)  # type: ignore[method-assign]  # Flask's documented way to wrap the WSGI app

    app.wsgi_app = LowercaseHost(app.wsgi_app)  # type: ignore[method-assign]  # as ProxyFix above
    db.init_app(app)
    errors.init_app(app)
    limits.init_app(app)
    cli.init_app(app)
    app.register_blueprint(web.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(openapi.bp)
    # After the blueprints: it wraps the list views (a replica lost mid-page is retried elsewhere).
    replicas.init_app(app)
    # Without replicas, list views check out unpinged and retry a dead connection themselves.
    db.retry_stale_reads(app)

    @app.after_request
    def _security_headers(response: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if request.endpoint != "static":
            response.headers.setdefault("Cache-Control", DYNAMIC_CACHE_CONTROL)
        return response

    return app
