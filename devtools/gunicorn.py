"""The app under gunicorn on a free loopback port, for load: the benchmark and the soak."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _healthy(base: str) -> bool:
    with suppress(OSError), urllib.request.urlopen(f"{base}/healthz", timeout=2) as response:
        return bool(response.status == 200)
    return False


@contextmanager
def gunicorn(
    database_url: str,
    *,
    log_path: Path,
    workers: int,
    threads: int = 1,
    env: dict[str, str] | None = None,
    app: str = "app:create_app()",
) -> Iterator[tuple[str, psutil.Process]]:
    """Serve `app` (a gunicorn app spec) on `database_url`; yield (base URL, master process) once
    /healthz answers and every worker is up. Stops exactly the processes started here, also on
    failure: the master by SIGTERM (killed after 15 s), then any worker left, by its id."""
    port = free_port()
    environment = {**os.environ, "DATABASE_URL": database_url, **(env or {})}
    environment.pop("APP_ENV", None)
    command = [
        sys.executable, "-m", "gunicorn",
        "--workers", str(workers), "--threads", str(threads),
        "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "5",
        app,
    ]  # fmt: skip
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _healthy(base):
            if process.poll() is not None:
                raise RuntimeError(
                    f"gunicorn exited with {process.returncode}: {log_path.read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not answer /healthz within 30 s")
            time.sleep(0.1)
        master = psutil.Process(process.pid)
        # Workers boot one by one: wait until all of them are there.
        while len(master.children()) < workers and time.monotonic() < deadline:
            time.sleep(0.05)
        yield base, master
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL after `timeout`; children (gunicorn workers) are ended by their ids."""
    # Remember the workers first: if the master has to be killed, they are ended by their ids.
    workers = []
    with suppress(psutil.NoSuchProcess):
        workers = psutil.Process(process.pid).children(recursive=True)
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for worker in workers:
        with suppress(psutil.NoSuchProcess):
            worker.kill()
