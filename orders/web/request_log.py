"""The request id, and one log line per request that carries it.

The front names each request (deploy/haproxy.cfg: `unique-id-format`, sent as X-Request-ID). The
app takes that id when it is well formed (else makes one: a server reached directly), returns it
in the answer's X-Request-ID header, shows it on the error page, and writes it in the request's
log line and in every line logged while the request runs (an error's traceback included), so an
operator finds the one request a user quotes.

LOG_FORMAT=json (the default) makes gunicorn's error log JSON lines (gunicorn.conf.py calls
json_logs()): `{"time", "level", "logger", "message", "request_id", ...}`; the request's line
adds method, path, route, kind, status, duration_ms, rows, engine, node, depth and sort.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, current_app, g, has_request_context, request

from orders.finding.sorts import DEFAULT_SORT
from orders.web import htmx
from orders.web.routes import read_kind

HEADER = "X-Request-ID"
# What an id from the front (or a client reaching a server directly) may look like: haproxy's
# format is hex and dashes; anything else (too long, spaces, quotes, newlines: a forged log line)
# is replaced by an id of our own.
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:-]{1,64}")

log = logging.getLogger("orders.request")


def install(app: Flask) -> None:
    """[0] of the request path: the clock and the id first (a 429 is logged with its id too);
    the line last, after every other after_request hook has shaped the answer."""
    app.before_request_funcs.setdefault(None, []).insert(0, _start)
    app.after_request(_finish)


def _start() -> None:
    g.request_started = time.perf_counter()
    given = request.headers.get(HEADER, "")
    g.request_id = given if _WELL_FORMED.fullmatch(given) else uuid.uuid4().hex


def elapsed() -> float:
    """Seconds since the request's first hook ran."""
    started: float = g.get("request_started", time.perf_counter())
    return time.perf_counter() - started


def request_id() -> str | None:
    return g.get("request_id") if has_request_context() else None


def _finish(response: Response) -> Response:
    rid = g.get("request_id")
    if rid is not None:
        response.headers[HEADER] = rid
    if log.isEnabledFor(logging.INFO):
        log.info(
            "%s %s %d",
            request.method,
            request.path,
            response.status_code,
            extra={"fields": _fields(response)},
        )
    return response


# What a request is, as its log line and the metrics (orders/web/metrics.py) label it.
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def request_kind() -> str:
    """page, fragment, api, export, write or other: the label every request is counted under."""
    if request.method in _WRITES:
        return "write"
    view = current_app.view_functions.get(request.endpoint or "")
    kind = read_kind(view)
    if kind == "stream":
        return "export"
    if request.path.startswith("/api/"):
        return "api"
    if kind == "page":
        return "fragment" if htmx.wants_fragment() else "page"
    return "other"


def depth_of() -> str:
    """first: no cursor (the top of a list, or a jump); deep: a page after or before a cursor."""
    return "deep" if "after" in request.args or "before" in request.args else "first"


def _fields(response: Response) -> dict[str, Any]:
    session = g.get("db_session")
    route = g.get("read_route")
    engine = current_app.extensions.get("engine")
    kind = request_kind()
    fields: dict[str, Any] = {
        "method": request.method,
        "path": request.path,
        "route": request.endpoint,
        "kind": kind,
        "status": response.status_code,
        "duration_ms": round(elapsed() * 1000, 3),
        "engine": engine.dialect.name if engine is not None else None,
        "node": route.node.name if route is not None else "primary",
    }
    rows = session.info.get("page_rows") if session is not None else None
    if rows is not None:
        fields["rows"] = rows
    if kind in ("page", "fragment", "api"):
        fields["depth"] = depth_of()
        fields["sort"] = request.args.get("sort", DEFAULT_SORT)[:40]
    return fields


class RequestIdFilter(logging.Filter):
    """Every line logged inside a request carries its id (record.request_id)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id()
        return True


class JsonLines(logging.Formatter):
    """One JSON object per line: what log shippers (Loki, Elasticsearch, journald's JSON) read."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None)
        if rid is not None:
            line["request_id"] = rid
        line.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def json_logs(handlers: list[logging.Handler], log_format: str) -> None:
    """gunicorn's error log handlers: the request id on every line, and JSON lines when asked."""
    for handler in handlers:
        handler.addFilter(RequestIdFilter())
        if log_format == "json":
            handler.setFormatter(JsonLines())
