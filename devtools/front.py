"""The production front as docs/operations.md starts it: haproxy with deploy/haproxy.cfg before
gunicorn, configured by FRONT_BIND, APP_SERVER, APP_MAXCONN and EXPORT_MAXCONN (haproxy reads
them itself); and the recipe's generated lines, the front's own answers, made from the app's
error table (`python -m devtools.front --write`).

    with front("127.0.0.1:8001", maxconn=4, log_path=...) as base: ...  # base: http://127.0.0.1:PORT
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from .gunicorn import free_port, stop_process

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "deploy" / "haproxy.cfg"


BEGIN, END = "    # generated: begin (python -m devtools.front --write)\n", "    # generated: end\n"
# The longest URL the front passes on: gunicorn's request line is at most 8190 bytes
# (limit_request_line in gunicorn.conf.py), and no cursor is near this long.
MAX_URL = 8000
# A URL over MAX_URL whose after= or before= is at least this long is a cursor's fault.
MAX_CURSOR = 4000
# At most this many header fields, and this many bytes of them in all, pass the front: below
# gunicorn's limit_request_fields and limit_request_field_size (gunicorn.conf.py), so gunicorn
# never refuses a head the front let through (its refusals are HTML).
MAX_HEADERS = 100
MAX_HEAD = 8000


def _answer(code: str, message: str, condition: str, extra: str = "") -> str:
    """An `http-request return` of the app's JSON error `code` (status and headers from ERRORS)."""
    from orders.core.errors import ERRORS

    body = json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":"))
    quoted = body.replace("\\", "\\\\").replace('"', '\\"')
    return (
        f"    http-request return status {ERRORS[code].status} content-type application/json "
        f'string "{quoted}"{extra} if {condition}\n'
    )


def _body(code: str, message: str) -> str:
    """The app's JSON error, quoted for a haproxy string."""
    body = json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":"))
    return body.replace("\\", "\\\\").replace('"', '\\"')


# A whole HTTP response (haproxy's errorfile), relative to the recipe's directory (`default-path
# config`): the app's 503 for the front's 502 and 504.
UNAVAILABLE_FILE = "errors/unavailable.http"


def error_files() -> dict[str, bytes]:
    """The error files the recipe names, by path relative to deploy/, from the app's tables."""
    from orders.core.errors import ERRORS, RETRY_AFTER_SECONDS

    kind = ERRORS["unavailable"]
    body = json.dumps(
        {"error": {"code": "unavailable", "message": "no app server answered; retry in a few seconds"}},
        separators=(",", ":"),
    ).encode()
    head = (
        f"HTTP/1.1 {kind.status} Service Unavailable\r\n"
        "Content-Type: application/json\r\n"
        f"Retry-After: {RETRY_AFTER_SECONDS}\r\n"
        "Cache-Control: no-cache\r\n"
        "Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return {UNAVAILABLE_FILE: head.encode() + body}


def generated_rules() -> str:
    """The recipe's lines between the markers: every answer the front gives itself, in the app's
    JSON error format (orders/core/errors.py) with its headers, and the body limit of orders/core/settings.py.
    Order matters: the token's presence is checked before any body is waited for."""
    from orders.core.errors import ERRORS, RETRY_AFTER_SECONDS
    from orders.core.settings import MAX_BODY_BYTES

    assert ERRORS["unauthorized"].headers == ("WWW-Authenticate",)
    assert ERRORS["unavailable"].headers == ("Retry-After",)
    limit = MAX_BODY_BYTES
    too_large = f"the body is larger than {limit} bytes"
    malformed = json.dumps(
        {"error": {"code": "bad_request", "message": "the request cannot be read"}}, separators=(",", ":")
    ).replace('"', '\\"')
    unavailable = json.dumps(
        {"error": {"code": "unavailable", "message": "no app server is free; retry in a few seconds"}},
        separators=(",", ":"),
    ).replace('"', '\\"')
    timeout = _body("request_timeout", "the body did not arrive within 10 s")
    internal = _body("internal_error", "the front failed to pass the request on")
    assert ERRORS["request_timeout"].status == 408 and ERRORS["internal_error"].status == 500
    return "".join(
        [
            "    # Bodies announced larger than the app takes: refused before a byte of them is read.\n",
            _answer("payload_too_large", too_large, f"{{ req.hdr_val(content-length) gt {limit} }}"),
            "    # A write without a bearer token is refused before its body is waited for: without a\n",
            "    # token nobody can make the front hold a body (which token is valid, the app decides).\n",
            _answer(
                "unauthorized",
                "writes need an Authorization: Bearer <token> header",
                "write !bearer",
                ' hdr WWW-Authenticate "Bearer"',
            ),
            "    # gunicorn's request line is at most 8190 bytes, its header lines 8190 and their count\n",
            "    # is bounded too (gunicorn.conf.py sets its limits above these): a longer URL, head or\n",
            "    # more headers get the app's JSON error here, never gunicorn's HTML 414 or 431. A long\n",
            "    # cursor is the cursor's error; anything else too long is the request's.\n",
            _answer(
                "invalid_cursor",
                f"the URL is longer than {MAX_URL} bytes: no cursor is that long",
                f"{{ url,length gt {MAX_URL} }} {{ url_param(after),length gt {MAX_CURSOR} }} || "
                f"{{ url,length gt {MAX_URL} }} {{ url_param(before),length gt {MAX_CURSOR} }}",
            ),
            _answer(
                "bad_request",
                f"the URL is longer than {MAX_URL} bytes",
                f"{{ url,length gt {MAX_URL} }}",
            ),
            _answer(
                "bad_request",
                f"the request has more than {MAX_HEADERS} header fields",
                f"{{ req.hdr_cnt gt {MAX_HEADERS} }}",
            ),
            _answer(
                "bad_request",
                f"the request's header fields are longer than {MAX_HEAD} bytes in all",
                f"{{ req.hdrs,length gt {MAX_HEAD} }}",
            ),
            "    # A read takes no body: one announced (a length above 0, or chunked) is refused at once,\n",
            "    # so nobody can trickle a GET's or OPTIONS's body into a server slot (issue 39).\n",
            _answer(
                "bad_request",
                "GET, HEAD and OPTIONS requests take no body",
                "read { req.hdr_val(content-length) gt 0 } || read { req.hdr(transfer-encoding) -m found }",
            ),
            "    # The whole body of every other request, whatever its method, before a server is chosen\n",
            "    # (it fits one buffer: tune.bufsize), or 408 after 10 s: a slow body is held here, never\n",
            "    # by a gunicorn thread. Without a body it waits for nothing.\n",
            "    http-request wait-for-body time 10s\n",
            "    # A chunked body announces no length: counted once it is in.\n",
            _answer("payload_too_large", too_large, f"{{ req.body_size gt {limit} }}"),
            "    # The front's own answers, each the app's JSON error. haproxy 2.6 applies these to what\n",
            "    # its rules and queues answer, not to its HTTP parser's refusals (a malformed head or\n",
            "    # chunk, a head not in within `timeout http-request`): those stay its built-in HTML\n",
            "    # (haproxy issue 3032, fixed in 3.2; docs/security.md lists them).\n",
            f'    http-error status 400 content-type application/json string "{malformed}"\n',
            "    # A body not in within wait-for-body's 10 s.\n",
            f'    http-error status 408 content-type application/json string "{timeout}"\n',
            "    # haproxy's own failure (a header it could not add).\n",
            f'    http-error status 500 content-type application/json string "{internal}"\n',
            "    # No gunicorn thread free within `timeout queue`.\n",
            f"    http-error status {ERRORS['unavailable'].status} content-type application/json "
            f'hdr Retry-After {RETRY_AFTER_SECONDS} string "{unavailable}"\n',
            "    # An app server that closed without an answer or answered garbage (502), or said nothing\n",
            "    # within `timeout server` (504): the app's 503 `unavailable` with Retry-After, a whole\n",
            "    # response in a file (generated too) so that its status is the app's.\n",
            f"    http-error status 502 errorfile {UNAVAILABLE_FILE}\n",
            f"    http-error status 504 errorfile {UNAVAILABLE_FILE}\n",
        ]
    )


def written_rules(text: str) -> str:
    """The lines between the markers of the recipe's `text`."""
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def write_rules() -> None:
    text = RECIPE.read_text()
    head, tail = text.split(BEGIN, 1)[0], text.split(END, 1)[1]
    RECIPE.write_text(f"{head}{BEGIN}{generated_rules()}{END}{tail}")
    for name, content in error_files().items():
        (RECIPE.parent / name).parent.mkdir(exist_ok=True)
        (RECIPE.parent / name).write_bytes(content)


class FrontUnavailable(RuntimeError):
    """No haproxy here (scripts/ensure-haproxy installs Debian's package as root)."""


def haproxy_command() -> list[str]:
    binary = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if binary is None:
        raise FrontUnavailable("no haproxy (scripts/ensure-haproxy installs Debian's package as root)")
    # -db: in the foreground, so the process we hold is haproxy itself (the documented command
    # without it daemonizes nothing either: the recipe has no `daemon`).
    return [binary, "-db", "-f", str(RECIPE)]


def export_slots(maxconn: int) -> int:
    """How many of gunicorn's `maxconn` threads the front gives exports: a quarter, at least one."""
    return max(1, maxconn // 4)


@contextmanager
def front(app_server: str, *, maxconn: int, log_path: Path, exports: int | None = None) -> Iterator[str]:
    """haproxy on a free loopback port in front of `app_server` (host:port) whose gunicorn has
    `maxconn` threads, `exports` of them (default export_slots) for CSV exports; yields its base
    URL once it accepts connections. Stops exactly the process it started."""
    port = free_port()
    exports = export_slots(maxconn) if exports is None else exports
    assert 0 < exports < maxconn, "the list needs threads of its own, and exports at least one"
    env = {
        **os.environ,
        "FRONT_BIND": f"127.0.0.1:{port}",
        # haproxy's Prometheus exporter, on a port of its own (two fronts never share one).
        "METRICS_BIND": f"127.0.0.1:{free_port()}",
        "APP_SERVER": app_server,
        "APP_MAXCONN": str(maxconn - exports),
        "EXPORT_MAXCONN": str(exports),
    }
    with log_path.open("w") as log:
        process = subprocess.Popen(haproxy_command(), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"haproxy did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process, timeout=10)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_rules()
    else:
        print(generated_rules(), end="")
