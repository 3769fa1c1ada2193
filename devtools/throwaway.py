"""Hangs on demand: `frozen()` SIGSTOPs processes of our own (a throwaway PostgreSQL of
devtools/pgserver.py, all of `postgres_processes(server)`; a Redis of `redis_server()`) and
SIGCONTs them after. A frozen server keeps its connections open and its kernel keeps
acknowledging packets while nothing answers: a hang, not a refusal. Never the machine's servers.
Callers raise their own "unavailable" (tests/databases.py) on `ServerUnavailable`.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from .gunicorn import free_port
from .pgserver import Server, ServerUnavailable


def postgres_processes(server: Server) -> list[psutil.Process]:
    """A throwaway server's postmaster (first line of postmaster.pid) and every process it started."""
    pid = int((server.data / "postmaster.pid").read_text().split()[0])
    postmaster = psutil.Process(pid)
    return [postmaster, *postmaster.children(recursive=True)]


@contextlib.contextmanager
def frozen(processes: list[psutil.Process]) -> Iterator[None]:
    """SIGSTOP these processes (by their ids) for the block, SIGCONT them after, whatever happens."""
    stopped = []
    try:
        for process in processes:
            process.send_signal(signal.SIGSTOP)
            stopped.append(process)
        yield
    finally:
        for process in stopped:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def redis_server(*, unix_socket: bool = False) -> Iterator[tuple[str, psutil.Process]]:
    """(redis://127.0.0.1:PORT, its process): a Redis of our own, nothing kept on disk. With
    `unix_socket`, it listens on a socket in its directory too, and the URI names that socket
    as the app takes it (redis+unix:///path)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerUnavailable("no redis-server (apt-get install redis-server)")
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="throwaway-redis-"))
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", str(workdir)]  # fmt: skip
    if unix_socket:
        command += ["--unixsocket", str(workdir / "redis.sock"), "--unixsocketperm", "700"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise ServerUnavailable(f"redis-server did not start on port {port}")
            time.sleep(0.05)
        while unix_socket and not (workdir / "redis.sock").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise ServerUnavailable("redis-server made no unix socket")
            time.sleep(0.05)
        uri = f"redis+unix://{workdir / 'redis.sock'}" if unix_socket else f"redis://127.0.0.1:{port}"
        yield uri, psutil.Process(process.pid)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(process.pid).send_signal(signal.SIGCONT)  # a frozen one cannot end
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)
