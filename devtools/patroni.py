"""Three PostgreSQL nodes under Patroni, with etcd as its store, on loopback: the database part of
`make cluster`, the cluster tests and bench/cluster_level.py.

Patroni (Debian's `patroni`) elects the leader in etcd (Debian's `etcd-server`), keeps one
synchronous standby (`synchronous_mode`), promotes it when the leader's PostgreSQL dies, rewinds
the old leader with pg_rewind and starts it as a replica. Every process started here (etcd, one
Patroni per node; Patroni starts and stops its own PostgreSQL) is stopped by its own id, also when
start-up fails halfway.

PostgreSQL refuses to run as root, so as root Patroni runs as the `postgres` user, in a temporary
directory that user owns.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import create_engine, text

from .databases import create_database
from .gunicorn import free_port, stop_process

DATABASE = "orders"
SCOPE = "orders"
# How long the leader key lives without a renewal (a whole node dead: failover after at most this),
# how often each Patroni wakes up, and how long it retries etcd and PostgreSQL before giving up.
# Patroni's defaults are 30/10/10; these suit three nodes on one machine (loop_wait + 2 *
# retry_timeout <= ttl, as Patroni asks).
TTL, LOOP_WAIT, RETRY_TIMEOUT = 10, 1, 3


class ClusterUnavailable(RuntimeError):
    """What the cluster needs is not on this machine (binaries, root for another user, haproxy)."""


def postgres_bindir() -> Path:
    """The newest installed PostgreSQL server binaries (Debian: /usr/lib/postgresql/N/bin)."""
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if all((candidate / tool).exists() for tool in ("initdb", "pg_ctl", "pg_rewind")):
            return candidate
    raise ClusterUnavailable("no /usr/lib/postgresql/*/bin with initdb, pg_ctl and pg_rewind")


def binary(name: str) -> str:
    found = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/bin") / name, Path("/usr/sbin") / name) if p.exists()), None
    )
    if found is None:
        raise ClusterUnavailable(
            f"no {name} (scripts/ensure-patroni installs Debian's patroni and etcd-server as root)"
        )
    return found


def _user() -> dict[str, Any]:
    """Popen arguments that run a server as `postgres` when we are root (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam("postgres")
    except KeyError as err:
        raise ClusterUnavailable("running as root without a postgres user") from err
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


def _environment(home: Path) -> dict[str, str]:
    # Debian's patroni runs on the system Python: nothing of our virtualenv may leak into it.
    return {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8", "HOME": str(home)}


def _get(url: str, timeout: float = 2) -> tuple[int, Any]:
    """(status, JSON body or None) of a GET; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        with suppress(ValueError):
            return err.code, json.loads(err.read() or b"null")
        return err.code, None
    except (OSError, ValueError):
        return 0, None


@dataclass
class Etcd:
    directory: Path
    client_port: int = field(default_factory=free_port)
    peer_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://{self.endpoint}"
        command = [
            binary("etcd"), "--name", "etcd1", "--data-dir", str(self.directory / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"etcd1={peer}", "--enable-v2=true",
            "--unsafe-no-fsync",  # throwaway: never on a real host
        ]  # fmt: skip
        with (self.directory / "etcd.log").open("w") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=_environment(self.directory), **_user()
            )
        deadline = time.monotonic() + 30
        while _get(f"{client}/health")[0] != 200:
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.directory / "etcd.log").read_text()[-2000:]
                raise RuntimeError(f"etcd did not start: {tail}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, timeout=10)


@dataclass
class Node:
    """One PostgreSQL server under its own Patroni, on its own ports and directory."""

    name: str
    directory: Path
    etcd: str
    bindir: Path
    synchronous: bool = True
    # Patroni's synchronous_mode_strict (see below).
    strict: bool = True
    # The cluster's name in etcd (its keys live under /service/<scope>/): several clusters, e.g.
    # one per shard (devtools/shards.py), share one etcd with a scope each.
    scope: str = SCOPE
    # PostgreSQL parameters the cluster is bootstrapped with besides the ones below (shards:
    # wal_level = logical, for add-shard's logical replication).
    parameters: dict[str, Any] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    rest_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    others: list[Node] = field(default_factory=list, repr=False)  # the cluster's other nodes

    @property
    def data(self) -> Path:
        return self.directory / self.name

    @property
    def config(self) -> Path:
        return self.directory / f"{self.name}.yml"

    @property
    def log(self) -> Path:
        return self.directory / f"{self.name}.log"

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def write_config(self) -> None:
        local = {"listen": f"127.0.0.1:{self.rest_port}", "connect_address": f"127.0.0.1:{self.rest_port}"}
        config = {
            "scope": self.scope,
            "name": self.name,
            "log": {"level": "INFO"},
            "restapi": local,
            "etcd3": {"hosts": self.etcd},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    # A commit is acknowledged once the synchronous standby has it; only that
                    # standby may be promoted, so no acknowledged commit is lost to a failover.
                    "synchronous_mode": self.synchronous,
                    # Strict: with no synchronous standby healthy (frozen, its member key
                    # expired), commits wait instead of going on unreplicated. Without it,
                    # Patroni empties synchronous_standby_names and PostgreSQL releases every
                    # waiting commit, acknowledged though the standby never had it (seen in
                    # tests/test_failover.py when the synchronous standby changed under writes).
                    "synchronous_mode_strict": self.synchronous and self.strict,
                    # A crashed leader fails over at once instead of restarting in place
                    # (Patroni's default waits up to 300 s for the old leader to recover).
                    "primary_start_timeout": 0,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_log_hints": "on",
                            "max_connections": 100,
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "hot_standby": "on",
                            "wal_keep_size": "128MB",
                            **self.parameters,
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, "no-locale", "no-sync"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.port}",
                "connect_address": f"127.0.0.1:{self.port}",
                "data_dir": str(self.data),
                "bin_dir": str(self.bindir),
                "pgpass": str(self.directory / f"{self.name}.pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                    "rewind": {"username": "postgres"},
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
                "parameters": {
                    "unix_socket_directories": str(self.directory),
                    # Throwaway data on one machine: a killed process loses nothing the kernel
                    # has, and only processes are killed here. Real hosts keep it on.
                    # (full_page_writes stays on: pg_rewind refuses a source without it.)
                    "fsync": "off",
                },
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }
        # JSON is YAML.
        self.config.write_text(json.dumps(config, indent=2))
        if os.geteuid() == 0:
            shutil.chown(self.config, "postgres", "postgres")

    def start(self) -> None:
        """Start this node's Patroni (which starts, bootstraps or clones its PostgreSQL)."""
        if self.process is not None and self.process.poll() is None:
            return
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [binary("patroni"), str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_environment(self.directory),
                cwd=self.directory,
                **_user(),
            )

    def postmaster_pid(self) -> int | None:
        with suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        return None

    def kill_postmaster(self, *, wait_for_backends: bool = False) -> int:
        """kill -9 this node's PostgreSQL (its Patroni goes on): a crashed database server.

        Its backends live on until each notices the postmaster is gone, which on a loaded machine
        takes a moment: a pooled connection may still answer meanwhile. With `wait_for_backends`,
        return only once every process the postmaster had started has exited (within 30 s)."""
        pid = self.postmaster_pid()
        if pid is None:
            raise RuntimeError(f"{self.name}: no postmaster.pid")
        try:
            backends = psutil.Process(pid).children(recursive=True) if wait_for_backends else []
        except psutil.NoSuchProcess:
            backends = []
        os.kill(pid, signal.SIGKILL)
        _gone, alive = psutil.wait_procs(backends, timeout=30)
        if alive:
            raise RuntimeError(f"{self.name}: backends still running 30 s after the postmaster was killed")
        return pid

    def kill(self) -> None:
        """kill -9 Patroni and PostgreSQL: the whole node gone (its leader key expires after TTL)."""
        pid = self.postmaster_pid()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if pid is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._wait_postmaster_gone(pid)

    def stop(self) -> None:
        """Patroni stops its PostgreSQL (fast shutdown) and exits; killed if it takes too long."""
        pid = self.postmaster_pid()
        if self.process is not None:
            stop_process(self.process, timeout=30)
        if pid is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._wait_postmaster_gone(pid)

    def _wait_postmaster_gone(self, pid: int | None) -> None:
        # Its Patroni killed, the postmaster is an orphan: it may stay a zombie nobody reaps.
        deadline = time.monotonic() + 10
        while pid is not None and time.monotonic() < deadline:
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    return
            except psutil.NoSuchProcess:
                return
            time.sleep(0.05)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def writable(self) -> bool:
        """PostgreSQL here is out of recovery (Patroni reports a leader an instant before)."""
        with suppress(Exception):
            return self.sql("SELECT NOT pg_is_in_recovery()", "postgres") is True
        return False

    def status(self) -> dict[str, Any]:
        """Patroni's view of this node (GET /patroni), {} when its REST API does not answer."""
        return _get(f"{self.rest}/patroni")[1] or {}

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

    # --- replicas only -------------------------------------------------------------------

    def maintenance(self, on: bool) -> None:
        """Patroni's maintenance mode for the whole cluster (`patronictl pause`), through this
        node's REST API, waiting until this node's Patroni has seen it. While it is on, Patroni
        neither fails over nor resumes a replay paused on purpose (it resumes paused replay on
        every loop otherwise: PostgreSQL 14+ pauses replay on its own when a parameter change
        needs a restart)."""
        body = json.dumps({"pause": True if on else None}).encode()
        request = urllib.request.Request(
            f"{self.rest}/config", data=body, method="PATCH", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5):
            pass
        deadline = time.monotonic() + 30
        while bool(self.status().get("pause")) != on:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: Patroni did not switch maintenance mode {on}")
            time.sleep(0.1)

    def pause_replay(self) -> None:
        """Stop replaying WAL (the node keeps receiving it): a replica that lags on demand. The
        cluster stays in maintenance mode until no node is paused (see resume_replay)."""
        self.maintenance(True)
        self.sql("SELECT pg_wal_replay_pause()")
        # Pausing is asynchronous: wait until the startup process has really stopped replaying.
        deadline = time.monotonic() + 10
        while self.sql("SELECT pg_get_wal_replay_pause_state()") != "paused":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: replay did not pause")
            time.sleep(0.02)

    def resume_replay(self) -> None:
        if not self.status().get("pause"):
            return  # nothing was paused on purpose: Patroni keeps replay running
        with suppress(Exception):  # a node that is the leader now has nothing to resume
            self.sql("SELECT pg_wal_replay_resume()")
        for other in self.others:
            with suppress(Exception):
                if other.sql("SELECT pg_is_in_recovery() AND pg_is_wal_replay_paused()"):
                    return  # another node is still paused on purpose
        self.maintenance(False)

    def replay_lsn(self) -> str:
        return str(self.sql("SELECT pg_last_wal_replay_lsn()"))


@dataclass
class Databases:
    """The Patroni cluster: etcd and its nodes. Which node leads changes over time; ask."""

    etcd: Etcd
    nodes: list[Node]

    @property
    def primary_url(self) -> str:
        """DATABASE_URL: libpq tries every node and keeps the one that accepts writes."""
        hosts = "&".join(f"host=127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgresql+psycopg://postgres@/{DATABASE}?{hosts}&target_session_attrs=read-write"

    @property
    def replica_urls(self) -> str:
        """DATABASE_REPLICA_URLS: every node. The app reads only from those in recovery, so the
        leader's entry is out of rotation until it is a replica again (after a failover)."""
        return ",".join(node.url() for node in self.nodes)

    def router_name(self, node: Node) -> str:
        """The name the app gives `node` in Server-Timing and /healthz/nodes."""
        return f"replica{self.nodes.index(node) + 1}"

    def members(self) -> list[dict[str, Any]]:
        """GET /cluster from the first node that answers: name, role, state, lag of each."""
        for node in self.nodes:
            status, body = _get(f"{node.rest}/cluster")
            if status == 200 and body:
                return list(body.get("members", []))
        return []

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def leader(self) -> Node | None:
        """The node whose Patroni says it is the writable primary (GET /primary answers 200)."""
        for node in self.nodes:
            if _get(f"{node.rest}/primary", timeout=1)[0] == 200:
                return node
        return None

    def sync_standby(self) -> Node | None:
        for member in self.members():
            if member.get("role") == "sync_standby":
                return self.node(member["name"])
        return None

    @property
    def primary(self) -> Node:
        """The current leader (waits for one, up to 60 s)."""
        return self.wait_for_leader()

    @property
    def standbys(self) -> list[Node]:
        leader = self.primary
        return [node for node in self.nodes if node is not leader]

    def wait_for_leader(self, timeout: float = 60, other_than: Node | None = None) -> Node:
        deadline = time.monotonic() + timeout
        while True:
            leader = self.leader()
            if leader is not None and leader is not other_than and leader.writable():
                return leader
            if time.monotonic() > deadline:
                raise RuntimeError(f"no leader within {timeout} s: {self.members()}")
            time.sleep(0.1)

    def wait_healthy(self, timeout: float = 90) -> Node:
        """Until there is a leader, every running node streams from it and (in synchronous mode)
        one of them is the synchronous standby; returns the leader."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.leader()
            members = {m["name"]: m for m in self.members()}
            expected = [node.name for node in self.nodes if node.running()]
            ready = leader is not None and all(
                members.get(name, {}).get("state") in ("running", "streaming") for name in expected
            )
            if ready and leader is not None:
                replicas = [n for n in expected if n != leader.name]
                # Streaming from the leader, as the leader sees it: a former leader Patroni has
                # started as a replica but not yet rewound is "running" and answers /replica,
                # on a timeline of its own, holding none of the leader's new writes.
                streaming = set(replicas) <= self.streaming_from(leader)
                synced = (
                    not self.nodes[0].synchronous
                    or not replicas
                    or any(members[n].get("role") == "sync_standby" for n in replicas)
                )
                if streaming and synced:
                    return leader
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster not healthy within {timeout} s: {members}")
            time.sleep(0.2)

    def primary_lsn(self) -> str:
        return str(self.primary.sql("SELECT pg_current_wal_lsn()"))

    def streaming_from(self, leader: Node, lsn: str | None = None) -> set[str]:
        """The standbys streaming from `leader` (pg_stat_replication, by the application_name
        Patroni gives them: the member's name), with `lsn` replayed if given."""
        replayed = f"AND replay_lsn >= '{lsn}'::pg_lsn" if lsn else ""
        with suppress(Exception):
            names = leader.sql(
                "SELECT coalesce(array_agg(application_name), '{}') FROM pg_stat_replication"
                f" WHERE state = 'streaming' {replayed}",
                "postgres",  # the app's database may not be made yet
            )
            if isinstance(names, list):  # array_agg: a list
                return {str(name) for name in names}
        return set()

    def wait_for_standbys(self, timeout: float = 30) -> None:
        """Until every running standby has replayed what the leader has written, as the leader
        sees it. (A standby's own pg_last_wal_replay_lsn() is no proof: a former leader not yet
        rewound can be past the new leader's position on its own timeline, without its writes.)"""
        leader = self.primary
        lsn = str(leader.sql("SELECT pg_current_wal_lsn()"))
        deadline = time.monotonic() + timeout
        while True:
            expected = {node.name for node in self.nodes if node is not leader and node.running()}
            missing = expected - self.streaming_from(leader, lsn)
            if not missing:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sorted(missing)} did not replay {lsn} within {timeout} s")
            time.sleep(0.02)

    def patronictl(self, *args: str, timeout: float = 60) -> str:
        command = [binary("patronictl"), "-c", str(self.nodes[0].config), *args]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False,
            env=_environment(self.nodes[0].directory),
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"patronictl {' '.join(args)} failed: {result.stdout}{result.stderr}")
        return result.stdout

    def switchover(self, candidate: Node | None = None) -> Node:
        """A planned switchover (patronictl) to `candidate`, by default the synchronous standby
        (in synchronous mode Patroni promotes no other node); waits until it leads."""
        leader = self.primary
        candidate = candidate or self.sync_standby()
        if candidate is None:
            raise RuntimeError(f"no synchronous standby to switch over to: {self.members()}")
        scope = self.nodes[0].scope
        output = self.patronictl(
            "switchover", scope, "--leader", leader.name, "--candidate", candidate.name, "--force"
        )
        if "Successfully switched over" not in output:
            raise RuntimeError(f"patronictl switchover: {output}")
        return self.wait_for_leader(other_than=leader)


@contextmanager
def databases(
    nodes: int = 3,
    directory: Path | None = None,
    *,
    synchronous: bool = True,
    strict: bool = True,
    etcd: Etcd | None = None,
    scope: str = SCOPE,
    migrated: bool = True,
    parameters: dict[str, Any] | None = None,
) -> Iterator[Databases]:
    """etcd and `nodes` Patroni nodes, healthy, with the database `orders` migrated and empty.

    Given `etcd` (already running, stopped by its owner), the cluster uses it under its own
    `scope` instead of starting one: several clusters side by side (devtools/shards.py). Without
    `migrated`, `orders` is left an empty database (a shards' coordinator: init-db builds it).
    `parameters`: more PostgreSQL parameters for every node."""
    bindir = postgres_bindir()
    for name in ("etcd", "patroni", "patronictl"):
        binary(name)
    _user()
    with ExitStack() as stack:
        if directory is None:
            directory = Path(tempfile.mkdtemp(prefix="cluster-pg-"))
            stack.callback(shutil.rmtree, directory, ignore_errors=True)
        if os.geteuid() == 0:
            shutil.chown(directory, "postgres", "postgres")
        directory.chmod(0o700)
        if etcd is None:
            etcd = Etcd(directory)
            stack.callback(etcd.stop)
            etcd.start()
        members = [
            Node(
                f"node{i + 1}",
                directory,
                etcd.endpoint,
                bindir,
                synchronous=synchronous,
                strict=strict,
                scope=scope,
                parameters=dict(parameters or {}),
            )
            for i in range(nodes)
        ]
        cluster = Databases(etcd, members)
        for node in members:
            node.others = [other for other in members if other is not node]
        for node in reversed(members):
            stack.callback(node.stop)
        # The first node bootstraps (initdb) and leads; the others clone it once it does.
        members[0].write_config()
        members[0].start()
        cluster.wait_for_leader()
        for node in members[1:]:
            node.write_config()
            node.start()
        leader = cluster.wait_healthy()
        create_database(leader.url("postgres"), DATABASE)
        if migrated:
            from orders.data.db import make_engine, migrate

            engine = make_engine(cluster.primary_url)
            try:
                migrate(engine)
            finally:
                engine.dispose()
        cluster.wait_for_standbys()
        yield cluster


# --- A TCP proxy in front of the nodes ---------------------------------------------------------

PROXY_CONFIG = """\
# Written by devtools/patroni.py: PostgreSQL through one address, sent to the node named on the
# admin socket (Proxy.point_at), as a health-checked proxy or a DNS name would, a little late.
global
    stats socket {socket} mode 600 level admin
defaults
    mode tcp
    timeout connect 2s
    timeout client 1h
    timeout server 1h
listen postgresql
    bind 127.0.0.1:{port}
{servers}
"""


@dataclass
class Proxy:
    """haproxy (TCP) in front of `nodes`, sending new connections to one node. A connection keeps
    its node when the proxy is pointed elsewhere, as with haproxy without `on-marked-down
    shutdown-sessions`, pgbouncer, or a DNS name that changed."""

    nodes: list[Node]
    port: int
    socket: Path

    def url(self, database: str = DATABASE, **query: str) -> str:
        extra = "".join(f"&{k}={v}" for k, v in query.items()).replace("&", "?", 1)
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}{extra}"

    def point_at(self, node: Node) -> None:
        for other in self.nodes:
            self._command(f"set server postgresql/{other.name} state {'ready' if other is node else 'maint'}")

    def _command(self, line: str) -> None:
        with socket.socket(socket.AF_UNIX) as admin:
            admin.settimeout(5)
            admin.connect(str(self.socket))
            admin.sendall(line.encode() + b"\n")
            answer = admin.recv(4096).decode().strip()
        if answer:
            raise RuntimeError(f"haproxy refused {line!r}: {answer}")


@contextmanager
def proxy(dbs: Databases, directory: Path) -> Iterator[Proxy]:
    """haproxy in front of the cluster's nodes, pointed at the leader; stopped by its own id."""
    port = free_port()
    admin = directory / "proxy.sock"
    servers = "\n".join(f"    server {node.name} 127.0.0.1:{node.port}" for node in dbs.nodes)
    config = directory / "proxy.cfg"
    config.write_text(PROXY_CONFIG.format(socket=admin, port=port, servers=servers))
    with (directory / "proxy.log").open("w") as log:
        process = subprocess.Popen(
            [binary("haproxy"), "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        running = Proxy(dbs.nodes, port, admin)
        deadline = time.monotonic() + 10
        while True:
            try:
                running.point_at(dbs.primary)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"haproxy did not start: {(directory / 'proxy.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.05)
        yield running
    finally:
        stop_process(process, timeout=10)
