"""gunicorn settings for production: `python serve.py` (serve.py: it checks every setting gunicorn
reads first, then runs gunicorn with this file; options given on its command line or in
GUNICORN_CMD_ARGS win, checked by the same rules).

Why threads (gthread) and not the default sync workers: a sync worker serves one request at a
time and is killed when one request takes longer than `timeout`, so a CSV export downloaded at
300 KB/s was cut off mid-row after 30 s, and two slow downloads took both workers and made
/healthz wait. A gthread worker serves `threads` requests at once and its `timeout` watches the
worker's own loop, not how long a request takes: a slow download occupies one thread for as
long as the client needs, and the other threads (and workers) go on serving. The export reads
each batch in a transaction of its own (orders/exports/stream.py), so a download in progress holds no
database connection between batches: threads can outnumber the connection pool.

Sizing: `workers` x `threads` is how many requests run at once, slow downloads included. In
production gunicorn runs behind the front in deploy/haproxy.cfg (docs/operations.md): a thread
waits for a slow client's headers or body, so a few slowloris connections would hold them all.
"""

import inspect
import json
import logging
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
from http import HTTPStatus
from pathlib import Path
from typing import Any

import gunicorn.glogging
import gunicorn.util

from orders.core.errors import ERRORS, RETRY_AFTER_SECONDS
from orders.core.settings import PRODUCTION, SENDFILE_YES, default_workers, load_or_exit
from serve import PRODUCTION_START, started_here

# The same checked table as the app (a bad value: one line on stderr, exit status 2, before any
# worker starts).
_settings = load_or_exit()
# gunicorn started straight reads WEB_CONCURRENCY, GUNICORN_CMD_ARGS and more before this file:
# production starts through serve.py, which checks them first (`gunicorn ...` straight still
# serves development).
if _settings["APP_ENV"] == PRODUCTION and not started_here():
    print(
        f"Error: {PRODUCTION_START}, which checks every setting gunicorn reads before gunicorn "
        "does (docs/operations.md)",
        file=sys.stderr,
    )
    raise SystemExit(2)
bind = _settings["BIND"]
# gunicorn's own, checked by the table and set here (a name in lower case is the table's too).
forwarded_allow_ips = ",".join(_settings["FORWARDED_ALLOW_IPS"])
if _settings["SENDFILE"] is not None and _settings["SENDFILE"] not in SENDFILE_YES:
    sendfile = False  # gunicorn's "off" (None: on, its default)
workers = _settings["WEB_CONCURRENCY"] or default_workers(multiprocessing.cpu_count())
worker_class = "gthread"
threads = _settings["WEB_THREADS"]
# A worker whose main loop stops answering for this long is restarted (a real hang). With
# gthread this does not limit how long a download may take. It must exceed 2 s per thread: the
# main loop closes each finished connection itself, lingering up to 2 s while the client reads
# the response's end (gunicorn's close_graceful), so as many slow downloads ending together as
# there are threads hold it for up to 2 s each (measured: three ending at once killed a worker
# whose timeout was 3 s; tests/test_security_downloads.py).
timeout = max(30, 2 * threads + 10)
graceful_timeout = 30
# An idle kept-alive connection is closed after this. A client that follows a 503's Retry-After
# on its open connection sends right when a keepalive of exactly Retry-After closes it, and gets
# no answer at all (measured: 11 of 160 such requests reset; a shard failover test's reader once).
# Longer than Retry-After, that client finds its connection open; an idle one costs a poller entry.
keepalive = RETRY_AFTER_SECONDS + 5
# Request lines and headers are bounded. Behind the front (deploy/haproxy.cfg) the front's limits
# are lower (a URL of 8000 bytes, 100 header fields, 8000 bytes of them: devtools/front.py), so it
# refuses first in the app's JSON and gunicorn never answers its own HTML 414 or 431 to what the
# front let through: 128 fields leaves room for the headers the front adds (X-Forwarded-For).
# The request line at gunicorn's maximum (8190): a long cursor reaches the app and gets its JSON
# `invalid_cursor`.
limit_request_line = 8190
limit_request_fields = 128
limit_request_field_size = 8190


# gunicorn's own refusals (a request it cannot parse, a request line over 8190 bytes, too many
# header fields, an Expect it does not know, a transfer coding it does not take) were its HTML
# pages with statuses the app never gives (414, 417, 431, 501): here they are the app's JSON error,
# 400 `bad_request` (as the front answers the same requests), and its own failure is the app's 500
# `internal_error`. The front passes some of them on (a NUL in a header value, an Expect).
def json_error(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn.util.write_error's replacement (gunicorn has no hook for its error answers)."""
    code = "internal_error" if status_int == 500 else "bad_request"
    kind = ERRORS[code]
    said = f"{reason}: {mesg}" if mesg else reason
    message = (
        "the server failed" if code == "internal_error" else f"the request cannot be read ({said[:200]})"
    )
    body = json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":")).encode()
    phrase = HTTPStatus(kind.status).phrase
    head = (
        f"HTTP/1.1 {kind.status} {phrase}\r\nConnection: close\r\nContent-Type: application/json\r\n"
        f"Cache-Control: no-cache\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    gunicorn.util.write_nonblock(sock, head.encode("latin-1") + body)


# Loudly, at start, if a new gunicorn release moved what is replaced here.
if list(inspect.signature(gunicorn.util.write_error).parameters) != ["sock", "status_int", "reason", "mesg"]:
    raise RuntimeError("gunicorn.util.write_error changed: revisit gunicorn.conf.py json_error")
gunicorn.util.write_error = json_error


# Metrics (orders/web/metrics.py): every worker writes its values into files in one directory
# and /metrics, answered by any worker, adds them up (prometheus-client's multiprocess mode). Set
# here, in the master, before any worker imports prometheus_client. Emptied at start: files of a
# previous run's workers would be counted again.
def metrics_directory(given: str) -> str:
    """`given`, made if missing, emptied of a previous run's files and written to once: or one
    line and exit status 2 (a file, or /proc/nope, was a traceback in the master or in every
    worker's first request)."""
    try:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        from orders.core.settings import masked

        why = err.strerror or type(err).__name__
        print(
            f"Error: METRICS_DIR={masked(given)!r} is not valid: it must be a directory the server can "
            f"make and write in ({why})",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    return given


if _settings["METRICS"] == "on":
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_directory(
        _settings["METRICS_DIR"] or tempfile.mkdtemp(prefix="orders-metrics-")
    )


def child_exit(_server: Any, worker: Any) -> None:
    """A worker gone: its live gauges (pool in use, Redis fallback) no longer count."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]  # prometheus-client's


def on_exit(_server: Any) -> None:
    """The temporary metrics directory made above goes with the server."""
    if _settings["METRICS"] == "on" and not _settings["METRICS_DIR"]:
        shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)


# The app's loggers whose lines an operator must see in gunicorn's error log: "orders": the
# app's own lines, one per request (orders/web/request_log.py), its errors, each
# with the request id, and "orders.limits": the switch to in-memory counting when Redis fails and
# the return, one line per process and switch (orders/web/limits.py).
LOGGED = {"orders": logging.INFO}


def control_socket_for(configured: str, default: str, binds: list[str]) -> str:
    """One control socket per instance: gunicorn's default path is one per user
    (~/.gunicorn/gunicorn.ctl), so with two instances on a host `gunicornc` reached whichever
    started last. Unless one is configured, it is named after the instance's first listen
    address (two instances cannot share one): gunicorn-127.0.0.1-8001.ctl beside the default."""
    if configured != default or not binds:
        return configured
    name = re.sub(r"[^A-Za-z0-9.]+", "-", binds[0]).strip("-")
    return os.path.join(os.path.dirname(default), f"gunicorn-{name}.ctl")


class Logger(gunicorn.glogging.Logger):  # type: ignore[misc]  # gunicorn has no types
    """gunicorn's logger, its lines in LOG_FORMAT (JSON lines by default, with the request id)
    from the first: gunicorn makes one before its first line ("Starting gunicorn") and again
    at each reload (`kill -HUP`), whose lines were gunicorn's plain text when the format was set
    in a hook instead."""

    def setup(self, cfg: Any) -> None:
        from orders.web.request_log import json_logs

        super().setup(cfg)
        json_logs(self.error_log.handlers, _settings["LOG_FORMAT"])
        json_logs(self.access_log.handlers, _settings["LOG_FORMAT"])


logger_class = Logger


def on_starting(server: Any) -> None:
    """Before the master opens its control socket (after its workers start): its own path."""
    default = server.cfg.settings["control_socket"].default
    server.cfg.set("control_socket", control_socket_for(server.cfg.control_socket, default, server.cfg.bind))


def post_worker_init(_worker: Any) -> None:
    """An export cut off by the database: the app's one line with the cursor, not a traceback.
    And the lines of LOGGED, through gunicorn's own error log handlers (Logger's: JSON lines)."""
    from orders.exports.stream import QuietInterruptedExports

    error_log = logging.getLogger("gunicorn.error")
    error_log.addFilter(QuietInterruptedExports())
    for name, level in LOGGED.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.propagate = False
        for handler in error_log.handlers:
            logger.addHandler(handler)
