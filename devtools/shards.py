"""A throwaway sharded topology on loopback: one coordinator and N shard servers, each its own
PostgreSQL cluster (initdb/pg_ctl), for `make cluster-shards`, tests/test_shards.py and
bench/shard_level.py.

The coordinator holds the partitioned `orders` (no rows) with one postgres_fdw foreign partition
per shard; `flask init-db` (orders/shards.py) sets that up, given DATABASE_URL (the coordinator)
and DATABASE_SHARD_URLS (the shards). This module only starts and stops servers: every server is
stopped by pg_ctl on its own data directory, also when start-up fails halfway.

PostgreSQL refuses to run as root, so as root the servers run as the `postgres` user, in a
temporary directory that user owns. One initdb is run; the other servers copy its data directory.

`python -m devtools.shards --shards 3` starts the whole thing (servers, init-db, seed, app
servers, haproxy), prints the URLs and stops everything on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, text

from .gunicorn import ROOT, free_port
from .patroni import ClusterUnavailable, _user, postgres_bindir

DATABASE = "orders"
# Throwaway servers: no fsync, small buffers (five servers share a small machine), and
# pg_stat_statements so a benchmark can count what each shard was asked for.
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "64MB",
    "max_connections": "60",
    "shared_preload_libraries": "'pg_stat_statements'",
    "log_min_messages": "warning",
}


def require_postgres_fdw(bindir: Path) -> None:
    """postgres_fdw is contrib; Debian ships it in postgresql-15 itself."""
    version = bindir.parent.name
    control = Path(f"/usr/share/postgresql/{version}/extension/postgres_fdw.control")
    if not control.exists():
        raise ClusterUnavailable(f"no postgres_fdw for PostgreSQL {version} ({control} is missing)")


@dataclass
class Server:
    """One PostgreSQL cluster on its own port and data directory, run by pg_ctl."""

    name: str
    directory: Path
    bindir: Path
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.directory / self.name

    @property
    def log(self) -> Path:
        return self.directory / f"{self.name}.log"

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **_user(),
        )
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed for {self.name}: {result.stderr.strip()[-1500:]}")

    def initdb(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync",
                  "--no-instructions", "-E", "UTF8", "--locale=C.UTF-8")  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# devtools/shards.py: a throwaway server\n")
            for name, value in SERVER_SETTINGS.items():
                conf.write(f"{name} = {value}\n")

    def copy_from(self, other: Server) -> None:
        shutil.copytree(other.data, self.data, symlinks=True)
        _chown(self.data)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "-o", f"-p {self.port} -k {self.directory}", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def create_database(self, name: str = DATABASE) -> None:
        engine = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                if conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}) is None:
                    conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()


def _chown(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "postgres:postgres", str(path)], check=True)


@dataclass
class Topology:
    coordinator: Server
    shards: list[Server]

    @property
    def url(self) -> str:
        """DATABASE_URL: the coordinator."""
        return self.coordinator.url()

    @property
    def shard_urls(self) -> str:
        """DATABASE_SHARD_URLS: the shards, comma-separated, in partition order."""
        return ",".join(shard.url() for shard in self.shards)

    @property
    def environment(self) -> dict[str, str]:
        return {"DATABASE_URL": self.url, "DATABASE_SHARD_URLS": self.shard_urls}


@contextmanager
def topology(shards: int, *, directory: Path | None = None) -> Iterator[Topology]:
    """A coordinator and `shards` shard servers, each with an empty `orders` database; stopped
    (and the directory removed) on exit."""
    if shards < 1:
        raise ValueError("at least one shard")
    bindir = postgres_bindir()
    require_postgres_fdw(bindir)
    _user()  # as root: refuse early without a postgres user
    with ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="shards-")))
        directory.mkdir(parents=True, exist_ok=True)
        _chown(directory)
        servers = [Server("coordinator", directory, bindir)]
        servers += [Server(f"shard{i + 1}", directory, bindir) for i in range(shards)]
        servers[0].initdb()
        for server in servers[1:]:
            server.copy_from(servers[0])
        for server in servers:
            stack.callback(_stop_quietly, server)
            server.start()
            server.create_database()
        yield Topology(servers[0], servers[1:])


def _stop_quietly(server: Server) -> None:
    with suppress(Exception):
        server.stop("immediate")


def main() -> None:
    from .cluster import haproxy, wait_for_ctrl_c
    from .gunicorn import gunicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--rows", type=int, default=300_000, help="demo orders to seed")
    parser.add_argument("--app-servers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per app server")
    args = parser.parse_args()
    os.chdir(ROOT)
    log_dir = ROOT / "instance" / "shards"
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"starting a coordinator and {args.shards} shard servers...", flush=True)
    with ExitStack() as stack:
        top = stack.enter_context(topology(args.shards))
        environment = {
            **top.environment,
            "SECRET_KEY": os.environ.get("SECRET_KEY", "shards-" + os.urandom(24).hex()),
            "TRUSTED_PROXIES": "1",
        }
        flask = [str(ROOT / ".venv" / "bin" / "flask"), "--app", "app"]
        for command in (["init-db"], ["seed", "--rows", str(args.rows)]):
            subprocess.run([*flask, *command], cwd=ROOT, env={**os.environ, **environment}, check=True)
        servers = [
            stack.enter_context(
                gunicorn(
                    top.url,
                    log_path=log_dir / f"app{i + 1}.log",
                    workers=args.workers,
                    threads=2,
                    env=environment,
                )
            )
            for i in range(args.app_servers)
        ]
        url = stack.enter_context(haproxy([base for base, _ in servers], log_dir / "haproxy.log"))
        print(f"\n  orders list:   {url}/orders")
        print(f"  JSON API:      {url}/api/orders")
        print(f"  coordinator:   {top.url}")
        for i, shard in enumerate(top.shards):
            print(f"  shard {i + 1}:       {shard.url()}")
        print(f"  logs:          {log_dir} (servers': {top.coordinator.directory})")
        wait_for_ctrl_c()
    print("stopped.")


if __name__ == "__main__":
    main()
