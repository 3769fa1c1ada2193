"""Search crowd: 12 clients searching beside a canary list reader, through the app under gunicorn
(serve.py, 2 workers of gunicorn.conf.py's gthread class with a deployment's default threads),
per engine: does searching slow the list for everyone else, and how long does a search's first
page take under that load? Each searcher is a process of its own, the canary this one.

The orders are seeded with a shop's names (orders/data/people.py, as `flask seed` draws them).
Each searcher, one search every SEARCH_EVERY_S, loops over searches of 1 to 10 words drawn from
the database's own names: a common word (a frequent first name or surname), two words of one
name, words that are each common but never meet in one name (the worst case before the names
table: every page empty), a rare word, and absent words. Every search is one request,
`GET /api/orders?q=...`, the API's first page. The canary reads `GET /api/orders?limit=20`, one
request after another: first alone (quiet), then beside the searchers, for the same time. The
rate limits are lifted (one address sends it all).

Printed per engine: the canary's p50 quiet and under load and their ratio (goal: at most 1.5x),
the searches' p50/p99 (goal: p99 at most 50 ms), their rate and any answer other than 200; then
the searches' p50/p99 by kind (with 20 s of searching, a kind's p99 is about its slowest).

    python -m bench.search_crowd [--rows 300000] [--engines postgresql,mysql] [--seconds 20]
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import random
import re
import statistics
import tempfile
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from devtools.gunicorn import gunicorn
from orders.data.db import make_engine
from orders.data.models import Order

from .common import SECRET, log, markdown_table
from .databases import seeded
from .http_level import UNREACHED_READ_LIMIT

SEARCHERS = 12
# Each searcher as a person at a search box: a search every 1.5 s (the 12 of the issue sent 97
# searches in 12 s), not back to back: closed-loop clients would measure the workers' queue.
SEARCH_EVERY_S = 1.5
CANARY_PATH = "/api/orders?limit=20"
KINDS = ("common", "name", "apart", "rare", "absent")
# Each searcher starts at its own moment of the first 1.5 s, as people do: started together, the
# twelve sent their first searches in the same millisecond, every run (the server's log: the
# slowest answers, 60-95 ms, all within 70 ms of the loaded phase's start), and that one burst
# was most of the searches' p99.
STARTS_S = [i * SEARCH_EVERY_S / SEARCHERS for i in range(SEARCHERS)]


def searches(url: str, rng: random.Random) -> list[tuple[str, str]]:
    """The searches the crowd sends, (kind, words), drawn from the seeded names (their words'
    frequencies)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            names = [n for (n,) in conn.execute(select(Order.customer).group_by(Order.customer))]
            total = conn.execute(select(func.count()).select_from(Order)).scalar_one()
    finally:
        engine.dispose()
    words_of = {name: set(re.findall(r"\w+", name.lower())) for name in names}
    frequency = Counter(w for ws in words_of.values() for w in ws)
    common = [w for w, _ in frequency.most_common(20)]
    rare = [w for w, n in frequency.items() if n == 1][:50] or common
    # Pairs of common words that no one name holds together.
    apart = [
        (a, b)
        for i, a in enumerate(common)
        for b in common[i + 1 :]
        if not any(a in ws and b in ws for ws in words_of.values())
    ] or [(common[0], "zzqx")]
    made: list[tuple[str, str]] = []
    for _ in range(400):
        kind = rng.choice(KINDS)
        if kind == "common":
            q = rng.choice(common)
        elif kind == "name":
            q = " ".join(list(words_of[rng.choice(names)])[:2])
        elif kind == "apart":
            a, b = rng.choice(apart)
            extra = rng.sample(common, k=rng.randint(0, 8))
            q = " ".join([a, b, *[w for w in extra if w not in (a, b)]][:10])
        elif kind == "rare":
            q = rng.choice(rare)
        else:
            q = " ".join(f"q{rng.randint(100, 999)}" for _ in range(rng.randint(1, 10)))
        # The box takes at most 64 characters (a longer q is a 400): words past that are left out.
        made.append((kind, q if len(q) <= 64 else q[:64].rsplit(" ", 1)[0]))
    log(f"   {len(names):,} names over {total:,} orders; {len(apart)} pairs of common words apart")
    return made


def _get(host: str, port: int, path: str) -> tuple[int, float]:
    started = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status, (time.perf_counter() - started) * 1000
    finally:
        conn.close()


def _run(
    host: str,
    port: int,
    paths: list[str],
    until: float,
    times: list[float],
    codes: Counter[int],
    every_s: float = 0.0,
    by_path: dict[str, list[float]] | None = None,
) -> None:
    """GET `paths` in turn until `until`, one request every `every_s` at most (0: back to back);
    each time also in `by_path` under its path, if given."""
    i = 0
    while (started := time.monotonic()) < until:
        path = paths[i % len(paths)]
        status, ms = _get(host, port, path)
        times.append(ms)
        if by_path is not None:
            by_path.setdefault(path, []).append(ms)
        codes[status] += 1
        i += 1
        time.sleep(max(0.0, every_s - (time.monotonic() - started)))


def _searcher(host: str, port: int, paths: list[str], start_s: float, until: float, answers: Any) -> None:
    """One searcher's loop in a process of its own, from `start_s` on; its times by path and
    answer codes go to `answers`."""
    time.sleep(start_s)
    times: list[float] = []
    codes: Counter[int] = Counter()
    by_path: dict[str, list[float]] = {}
    _run(host, port, paths, until, times, codes, SEARCH_EVERY_S, by_path)
    answers.put((by_path, codes))


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def measure(kind: str, url: str, *, seconds: float, tmp_dir: Path) -> dict[str, Any]:
    rng = random.Random(56)
    queries = searches(url, rng)
    env = {"SECRET_KEY": SECRET, "RATELIMIT_READS": UNREACHED_READ_LIMIT}
    # The threads a deployment runs (WEB_THREADS' default): this measures waiting as a deployment
    # has it. With one thread a worker (the first measures), 13 clients queued behind each other.
    server = gunicorn(url, log_path=tmp_dir / f"crowd-{kind}.log", workers=2, threads=None, env=env)
    with server as (base, _master):
        parsed = urllib.parse.urlparse(base)
        host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
        # Every search as drawn, repeats included (a common word comes again, as it would); a
        # path's kind is its words' (a search drawn under two kinds is the same request).
        paths = [f"/api/orders?{urllib.parse.urlencode({'q': q})}" for _, q in queries]
        kind_of = dict(zip(paths, (k for k, _ in queries), strict=True))
        _run(host, port, [CANARY_PATH, *paths[:20]], time.monotonic() + 3, [], Counter())  # warm up
        quiet: list[float] = []
        quiet_codes: Counter[int] = Counter()
        _run(host, port, [CANARY_PATH], time.monotonic() + seconds, quiet, quiet_codes)
        loaded: list[float] = []
        canary_codes: Counter[int] = Counter()
        found_by_path: dict[str, list[float]] = {}
        codes: Counter[int] = Counter()
        until = time.monotonic() + seconds
        # Each searcher a process of its own: as threads of this one, each waited for the
        # interpreter's lock behind the canary's loop at every step of a request (5 ms a switch),
        # and a search measured 20 ms here that the server answered in 1 to 3.
        fork = multiprocessing.get_context("fork")
        answers: Any = fork.Queue()
        crowd = [
            fork.Process(target=_searcher, args=(host, port, paths[i::SEARCHERS], start_s, until, answers))
            for i, start_s in enumerate(STARTS_S)
        ]
        for process in crowd:
            process.start()
        _run(host, port, [CANARY_PATH], until, loaded, canary_codes)
        for _ in crowd:
            times_by_path, searcher_codes = answers.get(timeout=60)
            codes.update(searcher_codes)
            for path, times in times_by_path.items():
                found_by_path.setdefault(path, []).extend(times)
        for process in crowd:
            process.join(timeout=10)
    quiet_p50, loaded_p50 = statistics.median(quiet), statistics.median(loaded)
    found = [ms for times in found_by_path.values() for ms in times]
    per_kind: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for path, times in found_by_path.items():
        per_kind[kind_of[path]].extend(times)
    return {
        "engine": kind,
        "canary_quiet_p50": quiet_p50,
        "canary_loaded_p50": loaded_p50,
        "canary_loaded_p99": _p(loaded, 0.99),
        "canary_ratio": loaded_p50 / quiet_p50,
        "search_p50": statistics.median(found),
        "search_p99": _p(found, 0.99),
        "searches_per_s": len(found) / seconds,
        "not_200": sum(n for c, n in (codes + canary_codes + quiet_codes).items() if c != 200),
        "per_kind": {k: (statistics.median(v), _p(v, 0.99), len(v)) for k, v in per_kind.items() if v},
    }


def report(results: list[dict[str, Any]]) -> str:
    header = ["engine", "canary p50 quiet", "canary p50 / p99 loaded", "ratio (goal 1.5x)"]
    header += ["search p50 / p99 (goal p99 50)", "searches/s", "not 200"]
    rows = [
        [
            r["engine"],
            f"{r['canary_quiet_p50']:.1f}",
            f"{r['canary_loaded_p50']:.1f} / {r['canary_loaded_p99']:.1f}",
            f"{r['canary_ratio']:.2f}x",
            f"{r['search_p50']:.1f} / {r['search_p99']:.1f}",
            f"{r['searches_per_s']:.0f}",
            str(r["not_200"]),
        ]
        for r in results
    ]
    title = (
        f"search crowd: {SEARCHERS} searchers (1-10 words) beside a canary list reader, through gunicorn (ms)"
    )
    kinds = "\n".join(
        f"  {r['engine']} searches by kind, p50 / p99 ms (count): "
        + ", ".join(f"{k} {p50:.1f} / {p99:.1f} ({n})" for k, (p50, p99, n) in r["per_kind"].items())
        for r in results
    )
    return markdown_table(title, header, rows) + "\n" + kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.search_crowd", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--engines", default="postgresql,mysql")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    results = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-crowd-"))
    for kind, url in seeded(args.engines, "crowd", args.rows, tmp, shop_names=True):
        results.append(measure(kind, url, seconds=args.seconds, tmp_dir=tmp))
    print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
