"""Export: ``flask --app app export --output <file>`` as a separate process, as an operator runs it.

Reported per table size: wall time (Python start-up and imports included), rows per second,
and peak memory. The peak is "Maximum resident set size" from ``/usr/bin/time`` (the child's
rusage, so no polling can miss a short peak). Not ``os.wait4`` from this process: a forked
child starts with its parent's high-water mark, and this process is over 100 MB by then.
Without /usr/bin/time, psutil polls the child every 10 ms instead.
Comparing a 300k export with a 30k one shows whether memory stays flat (one keyset batch
at a time) or grows with the table. The marginal rate between the two sizes removes start-up time.

Then the download as a user receives it: GET /orders/export.csv from the app under gunicorn (the
production recipe, gunicorn.conf.py), read to its end by curl, side by side with the engine's own
fastest dump of the same rows and columns in the same order (dump_seconds), in interleaved rounds:
the share of that speed the download reaches is the median of the rounds' ratios.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import requests

from devtools.gunicorn import gunicorn
from orders.exports.stream import EXPORT_BATCH_SIZE

from .common import SECRET, log

ROOT = Path(__file__).resolve().parent.parent
FLASK = ROOT / ".venv" / "bin" / "flask"
TIME = "/usr/bin/time"


def _poll_peak_rss(process: subprocess.Popen[bytes], peak: list[int]) -> None:
    try:
        child = psutil.Process(process.pid)
        while process.poll() is None:
            peak[0] = max(peak[0], child.memory_info().rss)
            time.sleep(0.01)
    except psutil.NoSuchProcess:
        pass


def run_export(url: str, rows: int, tmp_dir: Path, label: str) -> dict[str, Any]:
    output = tmp_dir / f"export-{label}-{rows}.csv"
    env = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": SECRET}
    stderr_path = tmp_dir / f"export-{label}-{rows}.log"
    usage_path = tmp_dir / f"export-{label}-{rows}.time"
    command = [str(FLASK), "--app", "app", "export", "--output", str(output)]
    timed = shutil.which(TIME) is not None
    if timed:
        # %M: peak RSS in KiB; %U/%S: CPU seconds. Written to a file, apart from the app's stderr.
        command = [TIME, "-f", "%M %U %S", "-o", str(usage_path), *command]
    peak = [0]
    try:
        with stderr_path.open("w") as stderr:
            t0 = time.perf_counter()
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
            if not timed:
                threading.Thread(target=_poll_peak_rss, args=(process, peak), daemon=True).start()
            process.wait()
            seconds = time.perf_counter() - t0
        if process.returncode != 0:
            raise RuntimeError(f"export exited with {process.returncode}: {stderr_path.read_text()[-1500:]}")
        if timed:
            max_kib, user, system = usage_path.read_text().split()[-3:]
            max_rss_mb, cpu_seconds = int(max_kib) / 1024, float(user) + float(system)
        else:
            max_rss_mb, cpu_seconds = peak[0] / 2**20, None
        with output.open("rb") as f:
            lines = sum(1 for _ in f)
        result = {
            "engine": label,
            "rows": rows,
            "exported_rows": lines - 1,  # the header line
            "seconds": seconds,
            "rows_per_second": rows / seconds,
            "max_rss_mb": max_rss_mb,
            "cpu_seconds": cpu_seconds,
            "memory_source": "/usr/bin/time %M" if timed else "psutil polling every 10 ms",
            "batch_size": EXPORT_BATCH_SIZE,  # the command's default, which it runs with here
            "file_mb": output.stat().st_size / 1e6,
        }
        rate = result["rows_per_second"]
        log(
            f"  export {label:>14} {rows:>9,} rows: {seconds:6.2f} s  {rate:9,.0f} rows/s  "
            f"peak RSS {max_rss_mb:.1f} MB"
        )
        result.update(download_vs_dump(url, rows, tmp_dir, label))
        return result
    finally:
        output.unlink(missing_ok=True)
        stderr_path.unlink(missing_ok=True)
        usage_path.unlink(missing_ok=True)


DOWNLOAD_ROUNDS = 3


def download_vs_dump(url: str, rows: int, tmp_dir: Path, label: str) -> dict[str, Any]:
    """The download over HTTP (curl against gunicorn) and the engine's own dump, in interleaved
    rounds: each round's ratio compares two runs that met the same machine."""
    env = {"SECRET_KEY": SECRET, "RATELIMIT_READS": "100000000 per minute"}
    downloads: list[float] = []
    dumps: list[float] = []
    tool = ""
    with gunicorn(url, log_path=tmp_dir / f"export-{label}-gunicorn.log", workers=2, env=env) as (base, _):
        download_seconds(base)  # warm: the worker's pool, the engine's caches
        for _ in range(DOWNLOAD_ROUNDS):
            downloads.append(download_seconds(base))
            tool, dump = dump_seconds(url, tmp_dir)
            dumps.append(dump)
    ratios = [d / s for d, s in zip(dumps, downloads, strict=True)]
    stream, dump, share = statistics.median(downloads), statistics.median(dumps), statistics.median(ratios)
    log(
        f"  download {label:>12} {rows:>9,} rows: {stream:6.2f} s  {rows / stream:9,.0f} rows/s"
        f"  | {tool}: {dump:6.2f} s  (download: {share:.2f} of it; rounds "
        + " ".join(f"{r:.2f}" for r in ratios)
        + ")"
    )
    return {
        "download_via": "curl against gunicorn" if shutil.which("curl") else "requests against gunicorn",
        "stream_seconds": stream,
        "stream_rows_per_second": rows / stream,
        "dump_tool": tool,
        "dump_seconds": dump,
        "stream_of_dump": share,
        "stream_of_dump_rounds": ratios,
    }


def download_seconds(base: str) -> float:
    """GET /orders/export.csv read to its end by curl (by requests without curl), as a user's
    download receives it, into /dev/null."""
    url = base + "/orders/export.csv"
    started = time.perf_counter()
    if shutil.which("curl"):
        out = subprocess.run(
            ["curl", "-sS", "-o", os.devnull, "-w", "%{http_code} %{size_download}", url],
            capture_output=True,
            text=True,
            check=True,
        )
        status, size = (int(v) for v in out.stdout.split())
    else:
        with requests.get(url, stream=True, timeout=60) as response:
            status = response.status_code
            size = sum(len(block) for block in response.iter_content(65536))
    seconds = time.perf_counter() - started
    if status != 200 or size == 0:
        raise RuntimeError(f"export download: {status}, {size} bytes")
    return seconds


def _dump_query(dialect: Any) -> str:
    """SELECT the CSV's columns in the export's (default) order, as SQL for `dialect`."""
    from sqlalchemy import select

    from orders.data.models import Order
    from orders.exports.csv_format import CSV_COLUMNS
    from orders.finding.sorts import DEFAULT_SORT, LIBRARY_SORTS

    query = select(*[Order.__table__.c[name] for name in CSV_COLUMNS]).order_by(
        *LIBRARY_SORTS[DEFAULT_SORT].order_by()
    )
    return str(query.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))


def dump_seconds(url: str, tmp_dir: Path) -> tuple[str, float]:
    """The engine's own fastest way to write the export's columns in its order, timed here:
    PostgreSQL's `COPY (SELECT ...) TO STDOUT` read through psycopg in this process; MariaDB's
    `mariadb --batch` client and SQLite's `sqlite3 -csv` shell writing to a file (both are
    child processes: their start-up, a few milliseconds, is in the time)."""
    from sqlalchemy.engine import make_url

    from orders.data.db import make_engine

    engine = make_engine(url)
    try:
        sql = _dump_query(engine.dialect)
        if engine.dialect.name == "postgresql":
            connection = engine.raw_connection()
            try:
                cursor = connection.cursor()
                started = time.perf_counter()
                with cursor.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)") as copy:  # type: ignore[attr-defined]  # psycopg's
                    for _ in copy:
                        pass
                return "COPY TO STDOUT", time.perf_counter() - started
            finally:
                connection.close()
    finally:
        engine.dispose()
    parts = make_url(url)
    if parts.get_backend_name() == "sqlite":
        tool, command = "sqlite3 -csv", ["sqlite3", "-csv", str(parts.database), sql]
    else:
        tool = "mariadb --batch"
        server = ["-h", str(parts.host), "-P", str(parts.port or 3306), "-u", str(parts.username)]
        command = [
            "mariadb",
            "--batch",
            "--quick",
            "--skip-column-names",
            *server,
            str(parts.database),
            "-e",
            sql,
        ]
        if parts.password:
            command.insert(1, f"--password={parts.password}")
    output = tmp_dir / "dump.out"
    with output.open("wb") as out:
        started = time.perf_counter()
        subprocess.run(command, stdout=out, check=True)
        seconds = time.perf_counter() - started
    output.unlink()
    return tool, seconds


def marginal_rate(small: dict[str, Any], large: dict[str, Any]) -> float | None:
    """Rows per second once the process is running: the difference between two export sizes."""
    extra_seconds = large["seconds"] - small["seconds"]
    if extra_seconds <= 0:
        return None
    return (large["rows"] - small["rows"]) / extra_seconds
