"""Where the suite's CPU goes, next to where its time goes (docs/testing.md, "Where the time goes").

pytest's `--durations` tells wall time, and on a 2-core machine wall time mixes a test's own
work with its waits (a failover's TTL, a person's pace in the browser) and with the other
workers' load. This plugin also tells CPU: each pytest process (each xdist worker) moves itself
into a cgroup of its own (cgroup v1 `cpuacct`, as this machine mounts it), so everything it
starts afterwards (gunicorn, Chromium, an embedded PostgreSQL, Patroni) is counted with it, and
every test's CPU is the cgroup's usage before and after it. The database daemons that were
running before the run (the system PostgreSQL 15 and MariaDB) are not counted.

    .venv/bin/python -m pytest -p devtools.cpu_census --cpu-census=/tmp/census -n 2 tests/
    .venv/bin/python -m devtools.cpu_census /tmp/census      # per module: CPU s, wall s, tests

Root only (it writes to /sys/fs/cgroup); without the flag the plugin does nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_ROWS = pytest.StashKey[list[tuple[str, float, float, float]]]()  # test, CPU s, wall s, start
_GROUP = pytest.StashKey[Path]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-census", metavar="DIR", help="write each test's CPU and wall seconds to DIR")


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--cpu-census"):
        return
    if not CPUACCT.is_dir():
        raise pytest.UsageError(f"--cpu-census needs cgroup v1 cpuacct at {CPUACCT}")
    group = CPUACCT / f"cpu-census-{os.getpid()}"
    group.mkdir(exist_ok=True)
    (group / "cgroup.procs").write_text(str(os.getpid()))
    config.stash[_GROUP] = group
    config.stash[_ROWS] = []


def _usage(config: pytest.Config) -> float:
    return int((config.stash[_GROUP] / "cpuacct.usage").read_text()) / 1e9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if _GROUP not in item.config.stash:
        yield
        return
    cpu, wall, began = _usage(item.config), time.monotonic(), time.time()
    yield
    row = (item.nodeid, _usage(item.config) - cpu, time.monotonic() - wall, began)
    item.config.stash[_ROWS].append(row)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _GROUP not in config.stash:
        return
    out = Path(config.getoption("--cpu-census"))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{os.getpid()}.json").write_text(json.dumps(config.stash[_ROWS]))
    # Back to the root group, and this one removed (it stays if a process it started still runs).
    (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
    with contextlib.suppress(OSError):
        config.stash[_GROUP].rmdir()


def summary(directory: Path) -> str:
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    workers = []  # per worker: its first start, its last end, the module it ended with
    for path in directory.glob("*.json"):
        rows = json.loads(path.read_text())
        for nodeid, cpu, wall, *_ in rows:
            totals = modules[nodeid.split("::", 1)[0]]
            totals[0] += cpu
            totals[1] += wall
            totals[2] += 1
        timed = [row for row in rows if len(row) > 3]
        if timed:
            last = max(timed, key=lambda row: row[3] + row[2])
            workers.append((min(row[3] for row in timed), last[3] + last[2], last[0].split("::", 1)[0]))
    lines = [f"{'CPU s':>8} {'wall s':>8} {'tests':>6}  module"]
    for module, (cpu, wall, count) in sorted(modules.items(), key=lambda item: -item[1][0]):
        lines.append(f"{cpu:8.1f} {wall:8.1f} {count:6.0f}  {module}")
    cpu_all = sum(t[0] for t in modules.values())
    wall_all = sum(t[1] for t in modules.values())
    lines.append(f"{cpu_all:8.1f} {wall_all:8.1f} {sum(t[2] for t in modules.values()):6.0f}  in all")
    if workers:  # the run's tail: when each worker ran out of work, after the first one began
        first = min(start for start, _, _ in workers)
        lines.append(
            "worker ends (s after the first test): "
            + ", ".join(
                f"{end - first:.0f} ({module})" for _, end, module in sorted(workers, key=lambda w: w[1])
            )
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
