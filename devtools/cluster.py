"""A throwaway scale-out cluster on loopback: PostgreSQL primary + streaming standbys, gunicorn app
servers, haproxy in front. Used by `make cluster`, tests/test_cluster.py and bench/cluster_level.py.

`python -m devtools.cluster` starts it all, seeds demo orders, prints the URL and stops everything on
Ctrl-C. Every process started here is stopped by its own id, also when start-up fails halfway.

PostgreSQL's initdb and pg_ctl refuse to run as root, so when we are root they run as the `postgres`
user (runuser) in a temporary directory that user owns.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, text

from .databases import create_database
from .gunicorn import ROOT, free_port, gunicorn, stop_process

DATABASE = "orders"
HAPROXY = "/usr/sbin/haproxy"


class ClusterUnavailable(RuntimeError):
    """What the cluster needs is not on this machine (binaries, root for runuser, haproxy)."""


def postgres_bindir() -> Path:
    """The newest installed PostgreSQL server binaries (Debian: /usr/lib/postgresql/N/bin)."""
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if all((candidate / tool).exists() for tool in ("initdb", "pg_ctl", "pg_basebackup")):
            return candidate
    raise ClusterUnavailable("no /usr/lib/postgresql/*/bin with initdb, pg_ctl and pg_basebackup")


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or (HAPROXY if Path(HAPROXY).exists() else None)
    if found is None:
        raise ClusterUnavailable("no haproxy (scripts/ensure-haproxy installs Debian's package as root)")
    return found


def _as_postgres() -> list[str]:
    if os.geteuid() != 0:
        return []  # already an ordinary user: pg_ctl runs as us
    if not shutil.which("runuser"):
        raise ClusterUnavailable("running as root without runuser: cannot run pg_ctl as postgres")
    return ["runuser", "-u", "postgres", "--"]


@dataclass
class Node:
    """One PostgreSQL server (primary or standby) in its own directory on its own port."""

    name: str
    bindir: Path
    directory: Path
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.directory / self.name

    @property
    def log(self) -> Path:
        return self.directory / f"{self.name}.log"

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> None:
        command = [*_as_postgres(), str(self.bindir / tool), *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{self.name}: {tool} failed: {result.stdout}{result.stderr}{tail}")

    def init_primary(self) -> None:
        # initdb -A trust also trusts replication connections from 127.0.0.1 (its pg_hba.conf
        # has `host replication all 127.0.0.1/32 trust`), which pg_basebackup needs.
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "-E", "UTF8", "--no-locale", "--no-sync")  # fmt: skip

    def init_standby(self, primary: Node) -> None:
        # -R writes standby.signal and primary_conninfo; -X stream copies the WAL written meanwhile.
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                  "-D", str(self.data), "-R", "-X", "stream", "-c", "fast", "--no-sync")  # fmt: skip

    def start(self) -> None:
        # fsync off: throwaway data. synchronous_commit stays on (the default): a commit is
        # visible only once its WAL is written, so pg_current_wal_lsn() read afterwards covers it.
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=100"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options,
                  "-w", "-t", "60", "start")  # fmt: skip

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def sql(self, statement: str, database: str = DATABASE) -> object:
        """Run one statement in autocommit and return the first column of its first row (or None)."""
        engine = create_engine(
            self.url(database), isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5}
        )
        try:
            with engine.connect() as conn:
                result = conn.execute(text(statement))
                return result.scalar() if result.returns_rows else None
        finally:
            engine.dispose()

    # --- standbys only -------------------------------------------------------------------

    def pause_replay(self) -> None:
        self.sql("SELECT pg_wal_replay_pause()")
        # Pausing is asynchronous: wait until the startup process has really stopped replaying.
        deadline = time.monotonic() + 10
        while self.sql("SELECT pg_get_wal_replay_pause_state()") != "paused":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: replay did not pause")
            time.sleep(0.02)

    def resume_replay(self) -> None:
        self.sql("SELECT pg_wal_replay_resume()")

    def replay_lsn(self) -> str:
        return str(self.sql("SELECT pg_last_wal_replay_lsn()"))

    def wait_for_replay(self, lsn: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not self.sql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not replay {lsn} within {timeout} s")
            time.sleep(0.02)


@dataclass
class Databases:
    """A primary and its standbys; `replica_urls` is what DATABASE_REPLICA_URLS holds."""

    primary: Node
    standbys: list[Node]

    @property
    def replica_urls(self) -> str:
        return ",".join(node.url() for node in self.standbys)

    def primary_lsn(self) -> str:
        return str(self.primary.sql("SELECT pg_current_wal_lsn()"))

    def wait_for_standbys(self, timeout: float = 30) -> None:
        """Until every running, unpaused standby has replayed what the primary has written."""
        lsn = self.primary_lsn()
        for node in self.standbys:
            node.wait_for_replay(lsn, timeout)


@contextmanager
def databases(standbys: int = 2, directory: Path | None = None) -> Iterator[Databases]:
    """A primary with the database `orders` (migrated, empty) and `standbys` streaming standbys."""
    bindir = postgres_bindir()
    _as_postgres()
    owned = directory is None
    workdir = Path(tempfile.mkdtemp(prefix="cluster-pg-")) if directory is None else directory
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres", "postgres")
    primary = Node("primary", bindir, workdir)
    nodes = [primary]
    try:
        primary.init_primary()
        primary.start()
        create_database(primary.url("postgres"), DATABASE)
        from orders.db import make_engine, migrate

        engine = make_engine(primary.url())
        try:
            migrate(engine)
        finally:
            engine.dispose()
        replicas = []
        for index in range(standbys):
            node = Node(f"standby{index + 1}", bindir, workdir)
            nodes.append(node)
            node.init_standby(primary)
            node.start()
            replicas.append(node)
        cluster = Databases(primary, replicas)
        cluster.wait_for_standbys()
        yield cluster
    finally:
        for node in reversed(nodes):
            if node.running():
                with suppress(RuntimeError, subprocess.TimeoutExpired):
                    node.stop()
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)


# --- haproxy -------------------------------------------------------------------------------

HAPROXY_CONFIG = """\
# Written by devtools/cluster.py for a throwaway cluster on loopback.
global
    maxconn 512

defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    # A request that could not be sent to an app server goes to another one.
    option redispatch
    retries 2

frontend orders
    bind 127.0.0.1:{port}
    # The client's address, for an app that trusts this one hop (werkzeug's ProxyFix).
    option forwardfor
    default_backend app_servers

backend app_servers
    balance roundrobin
    # /healthz/nodes answers while the app process serves requests; it does not ask the
    # databases, so a database outage does not take every app server out (readers then get the
    # app's own 503 `unavailable` with Retry-After, not haproxy's page).
    option httpchk GET /healthz/nodes
    default-server inter 1s fall 2 rise 1
{servers}
"""


@contextmanager
def haproxy(backends: Sequence[str], log_path: Path) -> Iterator[str]:
    """haproxy on a free loopback port, balancing round robin over `backends` (base URLs)."""
    binary = haproxy_binary()
    port = free_port()
    servers = "\n".join(
        f"    server app{i + 1} {url.removeprefix('http://')} check" for i, url in enumerate(backends)
    )
    config = log_path.with_suffix(".cfg")
    config.write_text(HAPROXY_CONFIG.format(port=port, servers=servers))
    with log_path.open("w") as log:
        # -db: stay in the foreground, so the process we hold is haproxy itself.
        process = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_through(base, process, log_path, len(backends))
        yield base
    finally:
        stop_process(process, timeout=10)


def _wait_through(base: str, process: subprocess.Popen[bytes], log_path: Path, backends: int) -> None:
    """Until haproxy answers and has seen every backend up (one request per backend succeeds)."""
    import urllib.request

    deadline = time.monotonic() + 30
    answered = 0
    while answered < backends * 2:
        if process.poll() is not None:
            raise RuntimeError(f"haproxy exited with {process.returncode}: {log_path.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError("haproxy did not pass requests to the app servers within 30 s")
        try:
            with urllib.request.urlopen(f"{base}/healthz/nodes", timeout=2) as response:
                answered += response.status == 200
        except OSError:
            answered = 0
            time.sleep(0.1)


# --- the whole thing ------------------------------------------------------------------------


@dataclass
class Cluster:
    url: str  # haproxy
    databases: Databases
    app_servers: list[str]


@contextmanager
def cluster(
    *,
    app_servers: int = 2,
    standbys: int = 2,
    workers: int = 2,
    threads: int = 2,
    env: dict[str, str] | None = None,
    log_dir: Path | None = None,
    seed_rows: int = 0,
) -> Iterator[Cluster]:
    """Primary + standbys, `app_servers` gunicorns reading from the standbys, haproxy in front."""
    haproxy_binary()  # fail before starting anything
    with ExitStack() as stack:
        logs = log_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cluster-logs-")))
        dbs = stack.enter_context(databases(standbys))
        if seed_rows:
            seed(dbs, seed_rows)
        environment = {
            "DATABASE_REPLICA_URLS": dbs.replica_urls,
            # haproxy is one hop and adds X-Forwarded-For: rate limits count each client.
            "TRUSTED_PROXIES": "1",
            "SECRET_KEY": os.environ.get("SECRET_KEY", "cluster-" + os.urandom(24).hex()),
            **(env or {}),
        }
        bases = []
        for index in range(app_servers):
            base, _ = stack.enter_context(
                gunicorn(
                    dbs.primary.url(),
                    log_path=logs / f"app{index + 1}.log",
                    workers=workers,
                    threads=threads,
                    env=environment,
                )
            )
            bases.append(base)
        url = stack.enter_context(haproxy(bases, logs / "haproxy.log"))
        yield Cluster(url, dbs, bases)


def seed(dbs: Databases, rows: int) -> None:
    from sqlalchemy.orm import Session

    from orders.db import make_engine
    from orders.seed import seed_orders

    engine = make_engine(dbs.primary.url())
    try:
        with Session(engine) as session:
            seed_orders(session, rows)
    finally:
        engine.dispose()
    dbs.wait_for_standbys()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000, help="demo orders to seed")
    parser.add_argument("--app-servers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per app server")
    args = parser.parse_args()
    os.chdir(ROOT)
    log_dir = ROOT / "instance" / "cluster"
    log_dir.mkdir(parents=True, exist_ok=True)
    print("starting PostgreSQL primary + 2 standbys, app servers and haproxy...", flush=True)
    with cluster(
        app_servers=args.app_servers, workers=args.workers, log_dir=log_dir, seed_rows=args.rows
    ) as running:
        dbs = running.databases
        print(f"\n  orders list:  {running.url}/orders")
        print(f"  JSON API:     {running.url}/api/orders")
        print(f"  routing:      {running.url}/healthz/nodes")
        print(f"  primary:      {dbs.primary.url()}")
        for node in dbs.standbys:
            print(f"  {node.name}:     {node.url()}")
        for index, base in enumerate(running.app_servers):
            print(f"  app{index + 1}:         {base}")
        print(f"  logs:         {log_dir}")
        print("\nCtrl-C stops everything.", flush=True)
        with suppress(KeyboardInterrupt):
            # Ctrl-C and kill both stop it all (a shell without job control starts background
            # commands with SIGINT ignored, so set it explicitly).
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            while True:
                time.sleep(3600)
    print("stopped.")


if __name__ == "__main__":
    main()
