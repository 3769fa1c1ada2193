"""The app under gunicorn on a free loopback port, for load: the benchmark and the soak."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


# Ports come from below the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range),
# which it uses for port 0 and for every outgoing connection's own end, so a port handed out here
# is not taken by the kernel before its server binds it. The range is cut into one slice per
# pytest-xdist worker (PYTEST_XDIST_WORKER, "gw0", "gw1", ...) so two test processes never pick the
# same port; inside a process each is handed out once per pass over the slice (a cluster asks for
# several before any is bound: a node's PostgreSQL once got another node's REST port).
_LOWEST_PORT = 10000
_SLICES = 8


def _ephemeral_start() -> int:
    with suppress(OSError, ValueError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32768


def _my_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % _SLICES if worker.isdigit() else 0
    size = (_ephemeral_start() - _LOWEST_PORT) // _SLICES
    return range(_LOWEST_PORT + index * size, _LOWEST_PORT + (index + 1) * size)


_SLICE = _my_slice()
_next = _SLICE.start + os.getpid() % len(_SLICE)  # two runs side by side start apart
_LOCK = threading.Lock()


def free_port() -> int:
    """A loopback port nothing listens on now, from this process's slice, handed out once per
    pass over it."""
    global _next
    with _LOCK:
        for _ in range(len(_SLICE)):
            port = _next
            _next = _SLICE.start + (_next - _SLICE.start + 1) % len(_SLICE)
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise OSError(f"no free loopback port in {_SLICE.start}-{_SLICE.stop - 1}")


def _healthy(base: str, path: str = "/healthz") -> bool:
    with suppress(OSError), urllib.request.urlopen(f"{base}{path}", timeout=2) as response:
        return bool(response.status == 200)
    return False


@contextmanager
def gunicorn(
    database_url: str,
    *,
    log_path: Path,
    workers: int,
    threads: int | None = 1,
    env: dict[str, str] | None = None,
    app: str = "app:create_app()",
    ready_path: str = "/healthz",
    worker_class: str | None = None,
    config: str | None = None,
) -> Iterator[tuple[str, psutil.Process]]:
    """Serve `app` (a gunicorn app spec) on `database_url` through serve.py, the production start
    (every setting checked first); yield (base URL, master process) once
    `ready_path` (/healthz) answers and every worker is up; `threads` None leaves the config's
    (gunicorn.conf.py: WEB_THREADS, a deployment's default); `worker_class` overrides
    gunicorn.conf.py's; `config` is read instead of gunicorn.conf.py (the stream server's,
    deploy/gunicorn-streams.conf.py). Stops exactly the processes started here, also on failure:
    the master by SIGTERM (killed after 15 s), then any worker left, by its id."""
    port = free_port()
    # The caller's APP_ENV only (the production recipe's tests pass one), never the shell's.
    inherited = {k: v for k, v in os.environ.items() if k != "APP_ENV"}
    environment = {**inherited, "DATABASE_URL": database_url, **(env or {})}
    command = [
        sys.executable, str(ROOT / "serve.py"),
        "--workers", str(workers),
        *(["--threads", str(threads)] if threads is not None else []),
        "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "5",
        *(["--worker-class", worker_class] if worker_class else []),
        *(["--config", config] if config else []),
        app,
    ]  # fmt: skip
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = wait_until_answering(process, base, ready_path, log_path, "gunicorn")
        master = psutil.Process(process.pid)
        # Workers boot one by one: wait until all of them are there.
        while len(master.children()) < workers and time.monotonic() < deadline:
            time.sleep(0.05)
        yield base, master
    finally:
        stop_process(process)


def wait_until_answering(
    process: subprocess.Popen[bytes], base: str, path: str, log_path: Path, name: str, bound_s: float = 30
) -> float:
    """Wait until `base + path` answers 200 (bounded); a server that exits or does not answer in
    time is an error quoting its log's end. Returns the deadline, for what waits after it."""
    deadline = time.monotonic() + bound_s
    while not _healthy(base, path):
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}: {log_path.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not answer {path} within {bound_s:.0f} s")
        time.sleep(0.1)
    return deadline


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
