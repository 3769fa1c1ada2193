"""The path every request takes, in the order it takes it: read this file top to bottom.

    client -> [0] the request id (the front's X-Request-ID) and the clock (orders/web/request_log.py)
           -> [1] WSGI: the client's address and scheme (trusted proxies), the Host lowercased
           -> [2] Flask: the Host checked (TRUSTED_HOSTS), the route matched (`<int:>`: ASCII digits)
           -> [3] before the view: the rate limit of the route's kind (orders/web/limits.py)
           -> [4] the view, as its route declares it (orders/web/routes.py): a list read runs
                  through the read policy (orders/web/read_routing.py: primary or replica, read
                  again where it can be); a write checks its bearer token (orders/web/auth.py)
                  and runs once more if a demoted primary refused it (orders/web/write_retry.py)
           -> [5] any exception becomes one code of ERRORS (orders/web/errors.py)
           -> [6] after the view: the node that read the page (Server-Timing)
           -> [6b] the answer counted (orders/web/metrics.py, /metrics) and logged with its id
           -> [7] teardown: the request's database session closed (orders/data/db.py)
           -> [8] WSGI, as the answer starts: security headers, Cache-Control

install() wires [0], [1], [3], [4], [5], [6] and [8] here, once, in that order; create_app() calls it after
the blueprints are registered (the read policy wraps their views). docs/life-of-a-request.md
follows a list read, a write and an export through it.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, Request
from flask.sessions import SecureCookieSessionInterface
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.routing import IntegerConverter

from orders.web import errors, limits, metrics, read_routing, request_log, write_retry

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


class AsciiIntConverter(IntegerConverter):
    """`<int:...>` for ASCII digits only, no leading zero: werkzeug's `\\d+` also matches
    Arabic-Indic or full-width digits (/orders/١٢ was order 12). One spelling per number."""

    regex = r"0|[1-9][0-9]{0,18}"


class NoSession(SecureCookieSessionInterface):
    """Flask's null session on every request: reading flask.session is empty, writing it fails.
    Nothing lives in Flask's cookie session (positions are in URLs, writes carry tokens): not
    opening it saves every request a signing serializer (a tenth of a bare route's time)."""

    def open_session(self, app: Flask, request_: Request) -> None:
        return None


class SecurityHeaders:
    """WSGI middleware, innermost: SECURITY_HEADERS on every answer that has not set its own, and
    DYNAMIC_CACHE_CONTROL on the views' answers (static files set theirs). Added to the header list
    as the answer starts, not through the response's Headers, which check every value they are
    given (str(), and a regex over the 200-character policy): that was 15 us of a page's 750 for
    five constants (docs/performance.md)."""

    def __init__(self, wsgi_app: Any, static_url_path: str) -> None:
        self.wsgi_app = wsgi_app
        self.static_prefix = static_url_path.rstrip("/") + "/"
        self.headers = tuple((name.lower(), (name, value)) for name, value in SECURITY_HEADERS.items())

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        dynamic = not environ.get("PATH_INFO", "").startswith(self.static_prefix)

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            present = {name.lower() for name, _value in headers}
            headers = headers + [header for name, header in self.headers if name not in present]
            if dynamic and "cache-control" not in present:
                headers.append(("Cache-Control", DYNAMIC_CACHE_CONTROL))
            return start_response(status, headers, exc_info)

        return self.wsgi_app(environ, start)


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


def converters(app: Flask) -> None:
    """[2] Before any blueprint adds a rule: every `<int:...>` is ASCII digits."""
    app.url_map.converters["int"] = AsciiIntConverter


def install(app: Flask) -> None:
    """Wire the request path into `app` (its blueprints already registered)."""
    # [8] and [1]: WSGI, innermost first (each wraps the one before it).
    app.wsgi_app = SecurityHeaders(app.wsgi_app, app.static_url_path or "/static")  # type: ignore[method-assign]  # as ProxyFix below
    if app.config["TRUSTED_PROXIES"]:
        # The client's address (rate limits, the loopback rule) and scheme as the proxies saw them.
        hops = app.config["TRUSTED_PROXIES"]
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)  # type: ignore[method-assign]  # Flask's documented way to wrap the WSGI app
    app.wsgi_app = LowercaseHost(app.wsgi_app)  # type: ignore[method-assign]  # as ProxyFix above
    # [0] The request id and the clock, before any other hook (a 429 is logged and timed too);
    # the log line (request_log) and the metrics' observation (metrics) after every other hook.
    request_log.install(app)
    metrics.install(app)
    # [2] No cookie session is opened: nothing lives in it.
    app.session_interface = NoSession()
    # [3] The rate limit: reads and writes have budgets of their own, routes marked @unlimited none.
    limits.init_app(app)
    # [4] List views, wrapped once by the read policy (primary, or replicas by WAL position);
    # write views, run once more when a demoted primary refused the write (25006).
    read_routing.install(app)
    write_retry.install(app)
    # [5] Exceptions to error answers.
    errors.init_app(app)
    # [6] read_routing's Server-Timing hook, when replicas are on (installed with it, above).
