"""A throwaway scale-out cluster on loopback: three PostgreSQL nodes under Patroni (etcd as its
store, synchronous mode; devtools/patroni.py), gunicorn app servers, haproxy in front, and for
`make cluster` a Prometheus scraping all of them with the shipped alert rules
(devtools/prometheus.py). Used by `make cluster`, the cluster tests and bench/cluster_level.py.

`python -m devtools.cluster` starts it all, seeds demo orders, prints the URLs and stops everything
on Ctrl-C. Every process started here is stopped by its own id, also when start-up fails halfway.

The app finds the primary itself: DATABASE_URL is a libpq multi-host URL with
`target_session_attrs=read-write` (libpq connects to each node in turn and keeps the one that
accepts writes), and DATABASE_REPLICA_URLS lists every node (the app reads only from nodes in
recovery, checked per page by WAL position). haproxy balances the app servers only; no proxy sits
between the app and PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psutil

from .gunicorn import ROOT, free_port, gunicorn, stop_process
from .patroni import ClusterUnavailable, Databases, binary, databases
from .prometheus import (
    Intervals,
    Prometheus,
    PrometheusUnavailable,
    Targets,
    patroni_targets,
    prometheus_binary,
)
from .prometheus import prometheus as start_prometheus

__all__ = ["Cluster", "ClusterUnavailable", "Databases", "cluster", "databases", "haproxy", "seed"]


def haproxy_binary() -> str:
    try:
        return binary("haproxy")
    except ClusterUnavailable as err:
        why = "no haproxy (scripts/ensure-haproxy installs Debian's package as root)"
        raise ClusterUnavailable(why) from err


# --- haproxy -------------------------------------------------------------------------------

HAPROXY_CONFIG = """\
# Written by devtools/cluster.py for a throwaway cluster on loopback.
global
    maxconn 512
    # One line per request on haproxy's own output (its log file): status, timings, retries.
    log stdout format raw local0

defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    # A request that could not be sent to an app server (refused, reset, closed without an answer)
    # is sent again, to another app server (redispatch), at most twice...
    retries 2
    option redispatch 1
    retry-on conn-failure empty-response response-timeout

# haproxy's Prometheus exporter (queues, sessions, 5xx and retries per backend), on a loopback port
# of its own: the public front above never serves it (deploy/haproxy.cfg does the same).
frontend metrics
    bind 127.0.0.1:{metrics_port}
    http-request set-log-level silent
    http-request use-service prometheus-exporter if {{ path /metrics }}
    http-request return status 404

frontend orders
    bind 127.0.0.1:{port}
    # The client's address, for an app that trusts this one hop (werkzeug's ProxyFix).
    option forwardfor
    default_backend app_servers

backend app_servers
    balance roundrobin
    # ...but only a read (GET, HEAD) or a POST with an Idempotency-Key (the app creates its order
    # at most once): another write the dead server may have committed is never sent twice; its
    # client gets haproxy's 502 (docs/several-servers.md). A connection that failed is retried for
    # every method (the request was never sent).
    http-request disable-l7-retry unless METH_GET || {{ req.hdr(Idempotency-Key) -m found }}
    # /healthz/nodes answers while the app process serves requests; it does not ask the
    # databases, so a database outage does not take every app server out (readers then get the
    # app's own 503 `unavailable` with Retry-After, not haproxy's page).
    option httpchk GET /healthz/nodes
    default-server inter 1s fall 2 rise 1
{servers}
"""


@contextmanager
def haproxy(backends: Sequence[str], log_path: Path, *, metrics_port: int | None = None) -> Iterator[str]:
    """haproxy on a free loopback port, balancing round robin over `backends` (base URLs), its
    Prometheus exporter on `metrics_port` (default: another free port) at /metrics."""
    binary = haproxy_binary()
    port = free_port()
    metrics_port = metrics_port or free_port()
    servers = "\n".join(
        f"    server app{i + 1} {url.removeprefix('http://')} check" for i, url in enumerate(backends)
    )
    config = log_path.with_suffix(".cfg")
    config.write_text(HAPROXY_CONFIG.format(port=port, metrics_port=metrics_port, servers=servers))
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
    app_servers: list[str]  # base URLs
    app_processes: list[psutil.Process]  # their gunicorn masters
    haproxy_metrics: str = ""  # host:port of haproxy's Prometheus exporter (/metrics)
    prometheus: Prometheus | None = None  # when asked for (cluster(prometheus=...))


@contextmanager
def cluster(
    *,
    app_servers: int = 2,
    nodes: int = 3,
    workers: int = 2,
    threads: int = 2,
    env: dict[str, str] | None = None,
    log_dir: Path | None = None,
    seed_rows: int = 0,
    synchronous: bool = True,
    prometheus: Intervals | None = None,
) -> Iterator[Cluster]:
    """`nodes` Patroni nodes, `app_servers` gunicorns finding the primary by libpq and reading
    from the replicas, haproxy in front; with `prometheus` (its intervals: `Intervals()` for the
    shipped ones) a Prometheus scraping them all (devtools/prometheus.py)."""
    haproxy_binary()  # fail before starting anything
    if prometheus is not None:
        prometheus_binary()
    with ExitStack() as stack:
        logs = log_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cluster-logs-")))
        dbs = stack.enter_context(databases(nodes, synchronous=synchronous))
        if seed_rows:
            seed(dbs, seed_rows)
        environment = {
            "DATABASE_REPLICA_URLS": dbs.replica_urls,
            # haproxy is one hop and adds X-Forwarded-For: rate limits count each client.
            "TRUSTED_PROXIES": "1",
            "SECRET_KEY": os.environ.get("SECRET_KEY", "cluster-" + os.urandom(24).hex()),
            **(env or {}),
        }
        servers = []
        for index in range(app_servers):
            server = stack.enter_context(
                gunicorn(
                    dbs.primary_url,
                    log_path=logs / f"app{index + 1}.log",
                    workers=workers,
                    threads=threads,
                    env=environment,
                )
            )
            servers.append(server)
        bases = [base for base, _ in servers]
        metrics_port = free_port()
        url = stack.enter_context(haproxy(bases, logs / "haproxy.log", metrics_port=metrics_port))
        running = Cluster(url, dbs, bases, [master for _, master in servers], f"127.0.0.1:{metrics_port}")
        if prometheus is not None:
            targets = Targets(
                orders=[base.removeprefix("http://") for base in bases],
                haproxy=[running.haproxy_metrics],
                patroni=patroni_targets([dbs]),
            )
            running.prometheus = stack.enter_context(
                start_prometheus(targets, logs / "prometheus", intervals=prometheus)
            )
        yield running


def seed(dbs: Databases, rows: int) -> None:
    from sqlalchemy.orm import Session

    from orders.data.db import make_engine
    from orders.data.seed import seed_orders

    engine = make_engine(dbs.primary_url)
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
    print("starting etcd, 3 PostgreSQL nodes under Patroni, app servers, haproxy, Prometheus...", flush=True)
    with cluster(
        app_servers=args.app_servers,
        workers=args.workers,
        log_dir=log_dir,
        seed_rows=args.rows,
        prometheus=monitoring(),
    ) as running:
        dbs = running.databases
        print(f"\n  orders list:  {running.url}/orders")
        print(f"  JSON API:     {running.url}/api/orders")
        print(f"  routing:      {running.url}/healthz/nodes")
        print(f"  DATABASE_URL: {dbs.primary_url}")
        for member in dbs.members():
            node = dbs.node(member["name"])
            print(f"  {node.name}:        {node.url()}  {member['role']}, Patroni {node.rest}/patroni")
        for index, base in enumerate(running.app_servers):
            print(f"  app{index + 1}:         {base}")
        print(f"  haproxy:      http://{running.haproxy_metrics}/metrics (its Prometheus exporter)")
        print_prometheus(running.prometheus)
        print(f"  patronictl:   patronictl -c {dbs.nodes[0].config} list")
        print(f"  logs:         {log_dir} (Patroni's and etcd's: {dbs.nodes[0].directory})")
        wait_for_ctrl_c()
    print("stopped.")


def monitoring() -> Intervals | None:
    """The shipped intervals, or None (and why) when there is no prometheus binary."""
    try:
        prometheus_binary()
    except PrometheusUnavailable as err:
        print(f"  (no Prometheus: {err})", flush=True)
        return None
    return Intervals()


def print_prometheus(running: Prometheus | None, width: int = 14) -> None:
    """Its address in the recipe's list of URLs, the label padded to `width`."""
    if running is not None:
        print(f"  {'Prometheus:':<{width}}{running.url}/alerts (targets: {running.url}/targets;")
        print(f"  {'':<{width}}rules: deploy/prometheus/alerts.yml)")


def wait_for_ctrl_c() -> None:
    """Block until Ctrl-C or a kill (SIGINT, SIGTERM); the caller's `with` blocks then stop what
    they started. A shell without job control starts background commands with SIGINT ignored,
    so both are set explicitly."""
    print("\nCtrl-C stops everything.", flush=True)
    with suppress(KeyboardInterrupt):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
