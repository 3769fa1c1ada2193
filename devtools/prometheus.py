"""A Prometheus of our own (Debian's `prometheus`) for `make cluster`, `make cluster-shards` and
tests/test_prometheus_cluster.py: the shipped deploy/prometheus/prometheus.yml with the alert rules
of deploy/prometheus/alerts.yml, its targets written for the processes the recipe started (every
app server's /metrics, haproxy's exporter, every Patroni node's /metrics, labelled with its
cluster's scope), on a free loopback port, its data in a temporary directory.

    with prometheus(Targets(orders=[...], haproxy=[...], patroni={"orders": [...]}), directory) as p:
        p.url, p.alerts(), p.query("up")

`Intervals` shortens the shipped scrape and evaluation intervals (15 s) for a test; the rules and
their `for` stay as shipped. The process is stopped by its own id, also when start-up fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from .gunicorn import ROOT, free_port, stop_process

if TYPE_CHECKING:
    from .patroni import Databases

SHIPPED = ROOT / "deploy" / "prometheus"
T = TypeVar("T")


class PrometheusUnavailable(RuntimeError):
    """No prometheus binary (scripts/ensure-prometheus installs Debian's package as root)."""


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )
    if found is None:
        why = "no prometheus (scripts/ensure-prometheus installs Debian's package as root)"
        raise PrometheusUnavailable(why)
    return found


@dataclass
class Targets:
    """host:port of what each job scrapes (deploy/prometheus/prometheus.yml names the jobs)."""

    orders: list[str] = field(default_factory=list)  # app servers (gunicorn's BIND)
    haproxy: list[str] = field(default_factory=list)  # the front's exporter
    patroni: dict[str, list[str]] = field(default_factory=dict)  # scope: its nodes' REST addresses

    def files(self) -> dict[str, list[dict[str, Any]]]:
        """The file_sd files' contents, by job."""
        return {
            "orders": [{"targets": self.orders}] if self.orders else [],
            "haproxy": [{"targets": self.haproxy}] if self.haproxy else [],
            "patroni": [
                {"targets": nodes, "labels": {"scope": scope}} for scope, nodes in self.patroni.items()
            ],
        }

    def count(self) -> int:
        return len(self.orders) + len(self.haproxy) + sum(len(n) for n in self.patroni.values())


@dataclass(frozen=True)
class Intervals:
    """Scrape and rule evaluation intervals (Prometheus durations); the shipped file's by default."""

    scrape: str | None = None
    evaluation: str | None = None


def write_config(directory: Path, targets: Targets, intervals: Intervals = Intervals()) -> Path:
    """The shipped configuration with the rules at their absolute path, `targets` in its file_sd
    files, and `intervals` if given; returns the config file's path."""
    config = yaml.safe_load((SHIPPED / "prometheus.yml").read_text())
    config["rule_files"] = [str(SHIPPED / name) for name in config["rule_files"]]
    if intervals.scrape:
        config["global"]["scrape_interval"] = intervals.scrape
    if intervals.evaluation:
        config["global"]["evaluation_interval"] = intervals.evaluation
    (directory / "targets").mkdir(parents=True, exist_ok=True)
    for job, entries in targets.files().items():
        (directory / "targets" / f"{job}.yml").write_text(yaml.safe_dump(entries))
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass
class Prometheus:
    url: str
    directory: Path
    process: subprocess.Popen[bytes]

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>: its `data`, or RuntimeError with Prometheus's error."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as err:
            body = json.loads(err.read() or b"{}")
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus /api/v1/{path}: {body}")
        return body["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending or firing), each with labels, annotations, state, activeAt."""
        return list(self.api("alerts")["alerts"])

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector: [{"metric": {...}, "value": [time, "value"]}, ...]."""
        return list(self.api("query", query=expr)["result"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", state="active")["activeTargets"])

    def wait_for(self, what: str, check: Callable[[], T | None], timeout: float) -> T:
        """Ask `check` every 0.5 s until it returns something (not None) or `timeout` s passed."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}: {self.log_tail()}")
            found = check()
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"Prometheus: {what} not within {timeout} s")
            time.sleep(0.5)

    def all_up(self, expected: int, timeout: float = 90) -> list[dict[str, Any]]:
        """Until `expected` targets are scraped and every one is up; returns them."""

        def up() -> list[dict[str, Any]] | None:
            found = self.targets()
            ok = len(found) == expected and all(t["health"] == "up" for t in found)
            return found if ok else None

        try:
            return self.wait_for(f"{expected} targets up", up, timeout)
        except TimeoutError as err:
            seen = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in self.targets()]
            raise TimeoutError(f"{err}: {seen}") from None

    def log_tail(self) -> str:
        return (self.directory / "prometheus.log").read_text()[-2000:]


@contextmanager
def prometheus(
    targets: Targets, directory: Path, *, intervals: Intervals = Intervals(), port: int | None = None
) -> Iterator[Prometheus]:
    """Prometheus on a free loopback port (or `port`) scraping `targets` with the shipped rules,
    its configuration, log and data under `directory`; yields once it is ready."""
    binary = prometheus_binary()
    directory.mkdir(parents=True, exist_ok=True)
    config = write_config(directory, targets, intervals)
    port = port or free_port()
    command = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
    ]
    log_path = directory / "prometheus.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=directory)
    running = Prometheus(f"http://127.0.0.1:{port}", directory, process)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{running.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start within 60 s: {running.log_tail()}")
            time.sleep(0.2)
        yield running
    finally:
        stop_process(process, timeout=10)


def patroni_targets(clusters: Iterable[Databases]) -> dict[str, list[str]]:
    """Each Patroni cluster's scope and its nodes' REST addresses (Patroni serves /metrics there)."""
    return {dbs.nodes[0].scope: [f"127.0.0.1:{node.rest_port}" for node in dbs.nodes] for dbs in clusters}
