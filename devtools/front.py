"""The production front as docs/operations.md starts it: haproxy with deploy/haproxy.cfg before
gunicorn, configured by FRONT_BIND, APP_SERVER and APP_MAXCONN (haproxy reads them itself).

    with front("127.0.0.1:8001", maxconn=4, log_path=...) as base: ...  # base: http://127.0.0.1:PORT
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from .gunicorn import free_port, stop_process

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "deploy" / "haproxy.cfg"


class FrontUnavailable(RuntimeError):
    """No haproxy here (scripts/ensure-haproxy installs Debian's package as root)."""


def haproxy_command() -> list[str]:
    binary = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if binary is None:
        raise FrontUnavailable("no haproxy (scripts/ensure-haproxy installs Debian's package as root)")
    # -db: in the foreground, so the process we hold is haproxy itself (the documented command
    # without it daemonizes nothing either: the recipe has no `daemon`).
    return [binary, "-db", "-f", str(RECIPE)]


@contextmanager
def front(app_server: str, *, maxconn: int, log_path: Path) -> Iterator[str]:
    """haproxy on a free loopback port in front of `app_server` (host:port); yields its base URL
    once it accepts connections. Stops exactly the process it started."""
    port = free_port()
    env = {
        **os.environ,
        "FRONT_BIND": f"127.0.0.1:{port}",
        "APP_SERVER": app_server,
        "APP_MAXCONN": str(maxconn),
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
