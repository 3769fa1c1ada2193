"""The app's commands run as forked children of a process that has already imported the libraries.

    forked.run([sys.executable, "-m", "flask", "--app", "app", "init-db"], env=..., cwd=ROOT,
               capture_output=True, text=True, timeout=60)      # subprocess.run's arguments
    forked.Popen([sys.executable, "-m", "flask", ...], env=..., cwd=ROOT, stdout=subprocess.PIPE)

Why: most of a command's CPU is its start, not its work. A refused setting costs a cold
`python -m flask --app app init-db` about 0.7 CPU seconds, 0.45 of them importing Flask,
SQLAlchemy, Alembic and the app's packages, and tests/test_settings.py started 120 of them
(99 of the suite's CPU seconds; docs/testing.md, "Where the time goes"). Here one server per test
process (each xdist worker) imports them once (PRELOAD) and forks a child per command: the child
sets the environment wholesale, the directory, sys.argv and sys.path[0] as `python -m MODULE` or
`python SCRIPT` would, takes the caller's pipes (or files) as its standard input, output and
error, runs the same entry point (runpy: the flask package as __main__, serve.py), and exits as the
interpreter would (SystemExit's code, a traceback and status 1 for an uncaught exception,
non-daemon threads joined, atexit run, output flushed). A forked child is a real process: its
own pid, signals (SIGINT, SIGTERM), pipes with backpressure, an exit status (the server reaps it
and sends the status back; death by a signal is -N, as subprocess says).

What a fork could hide, and what stops it: a module that reads a setting from the environment
when imported would keep the server's value in every child, so a refused value could pass.
The server starts with every setting of the table, FLASK_* and GUNICORN_CMD_ARGS removed from its
environment, and while it imports PRELOAD it records every name looked up in os.environ: a
setting's name among them, or anything the imports print, and the server refuses to start (every
forked test fails with the module named). gunicorn is not preloaded for that reason (gunicorn.config
reads WEB_CONCURRENCY when imported); serve.py imports it in the child. And
tests/test_settings.py runs refused values both ways and checks the line is the same.

What stays cold (`subprocess.run([sys.executable, ...])`), so the real wiring from a fresh
interpreter stays proven: per kind of command at least one, `flask --app app` (the settings'
both-ways test, test_seed's `make run`), serve.py --check-config and serve.py from another
directory, gunicorn started straight, the SIGINT to an export in progress.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import locale
import os
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
# What the commands import before their work (orders.app pulls in Flask, SQLAlchemy, Jinja,
# Werkzeug, the limits; orders.cli Alembic and tqdm; flask's command line), and the drivers an
# engine loads. Not the top-level `app` module
# (`flask --app app` imports it in the child) and not gunicorn.config (see above).
PRELOAD = (
    "orders.app",
    "orders.cli",
    "flask.cli",
    "alembic.command",
    "alembic.config",
    "alembic.runtime.migration",
    "alembic.script",
    "mako.template",
    "sqlalchemy.dialects.sqlite.pysqlite",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.mysql.pymysql",
    "psycopg",
    "pymysql",
    "multiprocessing.synchronize",
)
_MESSAGE = 1 << 20  # the largest request (an environment) the server takes
_STATUS = 64


def watched(name: str) -> bool:
    """Whether `name` is something a command reads from the environment to decide whether to
    start: a setting of the table (in any case), FLASK_*, GUNICORN_CMD_ARGS."""
    from orders.core.settings import BY_NAME

    upper = name.upper()
    return upper in BY_NAME or upper.startswith("FLASK_") or upper == "GUNICORN_CMD_ARGS"


# --- The server (a process of its own, started by _Server) ----------------------------------------


@contextmanager
def _recording(names: set[str]) -> Iterator[None]:
    """Every name looked up in os.environ (get, [], in, getenv) while inside, into `names`."""
    environ_class: Any = type(os.environ)
    original = environ_class.__getitem__

    def getitem(self: Any, key: Any) -> Any:
        names.add(key.decode(errors="replace") if isinstance(key, bytes) else str(key))
        return original(self, key)

    environ_class.__getitem__ = getitem
    try:
        yield
    finally:
        environ_class.__getitem__ = original


def _preload() -> str | None:
    """Import PRELOAD; None, or why forking from here could hide a setting."""
    for module in PRELOAD:
        names: set[str] = set()
        with _recording(names):
            __import__(module)
        read = sorted(name for name in names if watched(name))
        if read:
            return f"importing {module} read {', '.join(read)} from the environment"
    return None


def serve(fd: int) -> None:
    """The server's loop: each request on the socket `fd` (a command, and four descriptors:
    stdin, stdout, stderr and a pipe for the exit status) forks a child; each child reaped has
    its status written to its pipe."""
    sock = socket.socket(fileno=fd)
    why = _preload()
    sys.stdout.flush()
    sys.stderr.flush()
    sock.send(json.dumps({"ready": why is None, "why": why}).encode())
    if why:
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    statuses: dict[int, int] = {}
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        selector.register(wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj is sock:
                    message, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 4)
                    if not message:  # the test process closed its end: done
                        return
                    request = json.loads(message)
                    pid = os.fork()
                    if pid == 0:
                        _child(request, fds, [fd, wake_r, wake_w, *statuses.values()])
                    for received in fds[:3]:
                        os.close(received)
                    statuses[pid] = fds[3]
                    sock.send(json.dumps({"pid": pid}).encode())
                else:
                    while True:
                        try:
                            if not os.read(wake_r, 512):
                                break
                        except BlockingIOError:
                            break
                    while statuses:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                        if pid == 0:
                            break
                        status_w = statuses.pop(pid)
                        os.write(status_w, str(os.waitstatus_to_exitcode(status)).encode())
                        os.close(status_w)


def _child(request: dict[str, Any], fds: list[int], inherited: list[int]) -> None:
    """In the forked child: become the command, run it, exit as the interpreter would. Never returns."""
    code = 70
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in [*inherited, fds[3]]:
            os.close(fd)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=fd == 2 or os.isatty(fd))
        code = _run_command(request["args"])
    except BaseException:  # the child's own set-up failed: say so on its stderr
        with contextlib.suppress(Exception):
            os.write(2, f"tests/forked.py: the child failed:\n{traceback.format_exc()}".encode())
    finally:
        os._exit(code)


def _run_command(args: list[str]) -> int:
    """`python ARGS` in this process (`-m MODULE ...` or `SCRIPT ...`): its exit status."""
    interrupted = False
    try:
        if args[0] == "-m":
            sys.path[0] = os.getcwd()
            sys.argv = [args[1], *args[2:]]  # runpy sets argv[0] to the module's file, as -m does
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(args[0])
            sys.path[0] = os.path.dirname(script)
            sys.argv = list(args)
            runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exit:
        code = _exit_status(exit.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code, interrupted = 1, True
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    # What the interpreter does on its way out: wait for threads, run atexit, flush.
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except Exception:
        code = 120
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    if interrupted:  # an uncaught KeyboardInterrupt ends Python by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


# --- The test process's side --------------------------------------------------------------------


class ServerError(RuntimeError):
    pass


class _Server:
    """The fork server of this test process, started on first use, stopped at exit."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.lock = threading.Lock()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = mine
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop)
        environment = {k: v for k, v in os.environ.items() if not watched(k)}
        self.process = subprocess.Popen(
            # os._exit: nothing of the server's is worth finalizing (its children are gone or theirs)
            [sys.executable, "-c", f"import os, tests.forked as f; f.serve({theirs.fileno()}); os._exit(0)"],
            cwd=ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        self.sock.settimeout(120)
        try:
            hello = json.loads(self.sock.recv(_MESSAGE) or b"{}")
        except (OSError, ValueError) as err:
            self.stop()
            raise ServerError(f"the fork server did not start: {err}; {self.output()}") from None
        printed = self.output()
        if not hello.get("ready") or printed:
            self.stop()
            raise ServerError(
                f"the fork server refuses: {hello.get('why') or 'it printed while importing'}; a forked "
                f"child could not see the child's own value (tests/forked.py). {printed}"
            )
        self.sock.settimeout(None)
        atexit.register(self.stop)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def start(self, args: Sequence[str], env: Mapping[str, str], cwd: str, fds: list[int]) -> int:
        request = json.dumps({"args": list(args), "env": dict(env), "cwd": cwd}).encode()
        with self.lock:
            socket.send_fds(self.sock, [request], fds)
            reply = self.sock.recv(_MESSAGE)
        if not reply:
            raise ServerError(f"the fork server ended: {self.output()}")
        return int(json.loads(reply)["pid"])

    def stop(self) -> None:
        self.sock.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


_server: _Server | None = None


def _the_server() -> _Server:
    global _server
    if _server is None or _server.owner != os.getpid():
        _server = _Server()
    return _server


def _python_args(args: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The arguments after the interpreter: `-m MODULE ...` or `SCRIPT ...`, as a cold start takes."""
    words = [os.fspath(a) for a in args]
    if not words or words[0] != sys.executable or len(words) < 2:
        raise ValueError(
            f"forked runs [sys.executable, '-m', MODULE, ...] or [sys.executable, SCRIPT, ...]: {words}"
        )
    if words[1].startswith("-") and (words[1] != "-m" or len(words) < 3):
        raise ValueError(f"forked runs `-m MODULE` or a script, no other interpreter option: {words}")
    return words[1:]


class Popen:
    """subprocess.Popen's part the tests use, for a forked child: pid, stdout/stderr (PIPE),
    poll, wait, communicate, send_signal, terminate, kill, returncode; a context manager that
    kills a child still running when the block is left by an exception."""

    def __init__(
        self,
        args: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str],
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        text: bool = False,
    ) -> None:
        self.args = list(args)
        self.text = text
        self.returncode: int | None = None
        self.stdout: IO[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        self._read: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        command = _python_args(args)
        theirs: list[int] = []
        close: list[int] = []  # ours to close once the server has its copies
        self._status = -1  # the pipe the server writes the exit status to

        def given(choice: int | IO[Any] | None, default: int, name: str) -> int:
            """The descriptor the child gets for `choice` (subprocess's: None, DEVNULL, PIPE,
            STDOUT, a descriptor or a file)."""
            if choice is None:
                return default
            if choice == subprocess.STDOUT and name == "stderr":
                return theirs[1]
            if choice in (subprocess.DEVNULL, subprocess.PIPE):
                if choice == subprocess.PIPE and name == "stdin":
                    raise ValueError("forked does not take stdin=PIPE")
                r, w = os.pipe() if choice == subprocess.PIPE else (None, os.open(os.devnull, os.O_RDWR))
                if r is not None:
                    setattr(self, name, open(r, "rb", buffering=0))  # noqa: SIM115  (closed at EOF)
                close.append(w)
                return w
            return choice if isinstance(choice, int) else choice.fileno()

        try:
            for choice, default, name in ((stdin, 0, "stdin"), (stdout, 1, "stdout"), (stderr, 2, "stderr")):
                theirs.append(given(choice, default, name))
            status_r, status_w = os.pipe()
            close.append(status_w)
            self._status = status_r
            self.pid = _the_server().start(command, env, os.fspath(cwd), [*theirs, status_w])
        except BaseException:
            for pipe in (self.stdout, self.stderr):
                if pipe:
                    pipe.close()
            if self._status >= 0:
                os.close(self._status)
            raise
        finally:
            for fd in close:
                os.close(fd)

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self._status], [], [], 0)
            if ready:
                self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ready, _, _ = select.select([self._status], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._collect()
        assert self.returncode is not None
        return self.returncode

    def _collect(self) -> None:
        data = b""
        while chunk := os.read(self._status, _STATUS):
            data += chunk
        os.close(self._status)
        if not data:
            self.returncode = -1
            raise ServerError(f"the fork server ended before pid {self.pid} did: {_the_server().output()}")
        self.returncode = int(data)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr (the pipes) to their end and wait: (out, err), as text if
        text=True. TimeoutExpired leaves what was read for the next call, as Popen does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pipes = {"stdout": self.stdout, "stderr": self.stderr}
        open_pipes = {name: pipe for name, pipe in pipes.items() if pipe is not None and not pipe.closed}
        with selectors.DefaultSelector() as selector:
            for name, pipe in open_pipes.items():
                selector.register(pipe, selectors.EVENT_READ, name)
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        self._read[key.data].append(chunk)
                    else:
                        selector.unregister(key.fileobj)
                        open_pipes[key.data].close()
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self._output("stdout"), self._output("stderr")

    def _output(self, name: str) -> Any:
        if getattr(self, name) is None:
            return None
        data = b"".join(self._read[name])
        if not self.text:
            return data
        return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")

    def __enter__(self) -> Popen:
        return self

    def __exit__(self, kind: type[BaseException] | None, _value: object, _tb: TracebackType | None) -> None:
        if kind is not None and self.poll() is None:
            self.kill()
        for pipe in (self.stdout, self.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()
        self.wait()


def _refuse(what: str) -> int:
    raise ValueError(f"forked does not take {what}")


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    capture_output: bool = False,
    text: bool = False,
    timeout: float | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
) -> subprocess.CompletedProcess[Any]:
    """subprocess.run for a forked child: on a timeout the child is killed and TimeoutExpired
    raised (the test fails saying which command)."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    with Popen(args, env=env, cwd=cwd, stdout=stdout, stderr=stderr, text=text) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
    assert process.returncode is not None
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)
