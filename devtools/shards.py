"""A throwaway sharded topology on loopback: one coordinator and N shard servers, each its own
PostgreSQL cluster (initdb/pg_ctl), for `make cluster-shards`, tests/test_shards.py and
bench/shard_level.py.

The coordinator holds the partitioned `orders` (no rows) with one postgres_fdw foreign partition
per shard; `flask init-db` (orders/data/shards.py) sets that up, given DATABASE_URL (the coordinator)
and DATABASE_SHARD_URLS (the shards). This module only starts and stops servers: every server is
stopped by pg_ctl on its own data directory, also when start-up fails halfway.

PostgreSQL refuses to run as root, so as root the servers run as the `postgres` user, in a
temporary directory that user owns. One initdb is run; the other servers copy its data directory.

`ha_topology` makes every shard a Patroni cluster instead (devtools/patroni.py: synchronous mode,
strict), all of them in one etcd, each under its own scope; each shard's URL lists its nodes with
`target_session_attrs=read-write`, which the coordinator's foreign server passes to libpq.

`python -m devtools.shards --shards 3 [--nodes 2]` starts the whole thing (servers, init-db,
seed, app servers, haproxy, Prometheus with the shipped alert rules: shard_cluster), prints the
URLs and stops everything on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, text

from .gunicorn import ROOT, free_port
from .patroni import ClusterUnavailable, Databases, Etcd, _user, databases, postgres_bindir
from .prometheus import Intervals, Prometheus, Targets, patroni_targets, prometheus_binary
from .prometheus import prometheus as start_prometheus

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
    # add-shard moves rows by logical replication (orders/data/shards.py).
    "wal_level": "logical",
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
    spare: list[Server] = field(default_factory=list)

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


def require_servers() -> Path:
    """PostgreSQL's binaries with postgres_fdw, and (as root) a postgres user to run them: their
    directory, or ClusterUnavailable saying what is missing, before anything is started."""
    bindir = postgres_bindir()
    require_postgres_fdw(bindir)
    _user()
    return bindir


@contextmanager
def topology(shards: int, *, spare: int = 0, directory: Path | None = None) -> Iterator[Topology]:
    """A coordinator and `shards` shard servers, each with an empty `orders` database, and
    `spare` more servers like them (Topology.spare) that are not shards yet (add-shard); all
    stopped (and the directory removed) on exit."""
    if shards < 1:
        raise ValueError("at least one shard")
    bindir = require_servers()
    with ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="shards-")))
        directory.mkdir(parents=True, exist_ok=True)
        _chown(directory)
        servers = [Server("coordinator", directory, bindir)]
        servers += [Server(f"shard{i + 1}", directory, bindir) for i in range(shards + spare)]
        servers[0].initdb()
        for server in servers[1:]:
            server.copy_from(servers[0])
        for server in servers:
            stack.callback(_stop_quietly, server)
            server.start()
            server.create_database()
        yield Topology(servers[0], servers[1 : shards + 1], servers[shards + 1 :])


@dataclass
class HaTopology:
    """Shards that are each a Patroni cluster, and a coordinator that is one server or a Patroni
    cluster too, all in one etcd."""

    coordinator: Server | Databases
    clusters: list[Databases]
    etcd: Etcd
    spare: list[Databases] = field(default_factory=list)  # clusters ready to be added

    @property
    def url(self) -> str:
        """DATABASE_URL: the coordinator (its nodes in one multi-host URL when it is a cluster)."""
        if isinstance(self.coordinator, Databases):
            return self.coordinator.primary_url
        return self.coordinator.url()

    @property
    def shard_urls(self) -> str:
        """Each shard's nodes in one libpq multi-host URL, writable node wanted."""
        return ",".join(cluster.primary_url for cluster in self.clusters)

    @property
    def environment(self) -> dict[str, str]:
        return {"DATABASE_URL": self.url, "DATABASE_SHARD_URLS": self.shard_urls}


@contextmanager
def ha_topology(
    shards: int,
    *,
    nodes: int = 2,
    coordinator_nodes: int = 1,
    spare: int = 0,
    directory: Path | None = None,
) -> Iterator[HaTopology]:
    """`shards` Patroni clusters of `nodes` nodes each (synchronous mode, one etcd, scope
    `orders-shardN`), each healthy with an empty migrated `orders`, and a coordinator with an
    empty `orders` database: one server, or with `coordinator_nodes` > 1 a Patroni cluster of its
    own (scope `orders-coordinator`), and `spare` more clusters like the shards, for add-shard
    (HaTopology.spare). All stopped (and the directory removed) on exit."""
    if shards < 1 or nodes < 1 or coordinator_nodes < 1:
        raise ValueError("at least one shard of one node, and a coordinator")
    bindir = require_servers()
    with ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="shards-ha-")))
        directory.mkdir(parents=True, exist_ok=True)
        _chown(directory)
        directory.chmod(0o700)
        etcd = Etcd(directory)
        stack.callback(etcd.stop)
        etcd.start()

        def home(name: str) -> Path:
            path = directory / name
            path.mkdir()
            _chown(path)
            return path

        coordinator: Server | Databases
        if coordinator_nodes > 1:
            coordinator = stack.enter_context(
                databases(
                    coordinator_nodes,
                    home("coordinator"),
                    etcd=etcd,
                    scope="orders-coordinator",
                    migrated=False,
                )
            )
        else:
            coordinator = Server("coordinator", directory, bindir)
            coordinator.initdb()
            stack.callback(_stop_quietly, coordinator)
            coordinator.start()
            coordinator.create_database()
        clusters = [
            stack.enter_context(
                databases(
                    nodes,
                    home(f"shard{i + 1}"),
                    etcd=etcd,
                    scope=f"orders-shard{i + 1}",
                    parameters={"wal_level": SERVER_SETTINGS["wal_level"]},
                )
            )
            for i in range(shards + spare)
        ]
        yield HaTopology(coordinator, clusters[:shards], etcd, clusters[shards:])


def _stop_quietly(server: Server) -> None:
    with suppress(Exception):
        server.stop("immediate")


@dataclass
class ShardCluster:
    """What `make cluster-shards` runs: the servers, app servers, haproxy and (asked) Prometheus."""

    url: str  # haproxy
    topology: Topology | HaTopology
    app_servers: list[str]  # base URLs
    haproxy_metrics: str  # host:port of haproxy's Prometheus exporter (/metrics)
    prometheus: Prometheus | None = None


@contextmanager
def shard_cluster(
    shards: int,
    *,
    nodes: int,
    rows: int,
    log_dir: Path,
    app_servers: int = 2,
    workers: int = 2,
    threads: int = 2,
    env: dict[str, str] | None = None,
    prometheus: Intervals | None = None,
) -> Iterator[ShardCluster]:
    """A coordinator and `shards` shards (with `nodes` > 1 each, and the coordinator, a Patroni
    cluster of `nodes`), init-db and `rows` demo orders, `app_servers` gunicorns, haproxy in front
    (its exporter on a port of its own) and, with `prometheus` (its intervals), a Prometheus
    scraping every app server, haproxy and every Patroni node. Everything stopped on exit."""
    from .cluster import haproxy, haproxy_binary
    from .gunicorn import gunicorn

    haproxy_binary()  # fail before starting anything
    if prometheus is not None:
        prometheus_binary()
    with ExitStack() as stack:
        top: Topology | HaTopology
        if nodes > 1:
            top = stack.enter_context(ha_topology(shards, nodes=nodes, coordinator_nodes=nodes))
        else:
            top = stack.enter_context(topology(shards))
        environment = {
            **top.environment,
            "SECRET_KEY": os.environ.get("SECRET_KEY", "shards-" + os.urandom(24).hex()),
            "TRUSTED_PROXIES": "1",
            **(env or {}),
        }
        flask = [sys.executable, "-m", "flask", "--app", "app"]
        for command in (["init-db"], ["seed", "--rows", str(rows)]):
            subprocess.run(
                [*flask, *command], cwd=ROOT, env={**os.environ, **environment}, check=True, timeout=3600
            )
        servers = [
            stack.enter_context(
                gunicorn(
                    top.url,
                    log_path=log_dir / f"app{i + 1}.log",
                    workers=workers,
                    threads=threads,
                    env=environment,
                )
            )
            for i in range(app_servers)
        ]
        bases = [base for base, _ in servers]
        metrics_port = free_port()
        url = stack.enter_context(haproxy(bases, log_dir / "haproxy.log", metrics_port=metrics_port))
        running = ShardCluster(url, top, bases, f"127.0.0.1:{metrics_port}")
        if prometheus is not None:
            patroni: list[Databases] = []
            if isinstance(top, HaTopology):
                coordinator = [top.coordinator] if isinstance(top.coordinator, Databases) else []
                patroni = [*coordinator, *top.clusters]
            targets = Targets(
                orders=[base.removeprefix("http://") for base in bases],
                haproxy=[running.haproxy_metrics],
                patroni=patroni_targets(patroni),
            )
            running.prometheus = stack.enter_context(
                start_prometheus(targets, log_dir / "prometheus", intervals=prometheus)
            )
        yield running


def main() -> None:
    from .cluster import monitoring, print_prometheus, wait_for_ctrl_c

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="nodes per shard, and of the coordinator: more than 1 makes each a Patroni cluster",
    )
    parser.add_argument("--rows", type=int, default=300_000, help="demo orders to seed")
    parser.add_argument("--app-servers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per app server")
    args = parser.parse_args()
    os.chdir(ROOT)
    log_dir = ROOT / "instance" / "shards"
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"starting a coordinator and {args.shards} shards of {args.nodes} node(s)...", flush=True)
    with shard_cluster(
        args.shards,
        nodes=args.nodes,
        rows=args.rows,
        log_dir=log_dir,
        app_servers=args.app_servers,
        workers=args.workers,
        prometheus=monitoring(),
    ) as running:
        top = running.topology
        print(f"\n  orders list:   {running.url}/orders")
        print(f"  JSON API:      {running.url}/api/orders")
        print(f"  coordinator:   {top.url}")
        for i, shard_url in enumerate(top.shard_urls.split(",")):
            print(f"  shard {i + 1}:       {shard_url}")
        print(f"  haproxy:       http://{running.haproxy_metrics}/metrics (its Prometheus exporter)")
        print_prometheus(running.prometheus, width=15)
        home = top.coordinator.directory if isinstance(top, Topology) else top.etcd.directory
        print(f"  logs:          {log_dir} (servers': {home})")
        wait_for_ctrl_c()
    print("stopped.")


if __name__ == "__main__":
    main()
