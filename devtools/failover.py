"""Load that watches a failover from the client's side: API writers and API readers through haproxy,
recording every answer with its time. Used by tests/test_failover.py (which checks the figures)
and bench/cluster_level.py (which measures them).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import requests

# What a client waits for one answer; an answer that takes longer counts as an error.
TIMEOUT = 30


@dataclass
class Answer:
    sent: float  # time.monotonic() when the request was sent
    at: float  # and when its answer came
    method: str
    status: int  # 0: no HTTP answer at all (connection refused or reset, timeout)
    retry_after: str | None = None


@dataclass
class Load:
    base: str
    threads: int = 2
    pause: float = 0.02
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self._workers = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(self.threads)
        ]
        for worker in self._workers:
            worker.start()

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join()

    def _run(self, index: int) -> None:
        raise NotImplementedError

    def _record(self, sent: float, method: str, response: requests.Response | None) -> Answer:
        answer = Answer(
            sent,
            time.monotonic(),
            method,
            response.status_code if response is not None else 0,
            response.headers.get("Retry-After") if response is not None else None,
        )
        with self._lock:
            self.answers.append(answer)
        return answer

    def statuses(self, since: float = float("-inf"), until: float = float("inf")) -> Counter[int]:
        """The answers to the requests sent between `since` and `until`, by status."""
        with self._lock:
            return Counter(a.status for a in self.answers if since <= a.sent <= until)

    def first_success_after(self, moment: float) -> float | None:
        """When the first request sent after `moment` that succeeded was answered."""
        with self._lock:
            return min(
                (a.at for a in self.answers if a.sent > moment and 200 <= a.status < 300), default=None
            )

    def wait_for_success_after(self, moment: float, timeout: float = 90) -> float:
        deadline = time.monotonic() + timeout
        while (found := self.first_success_after(moment)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no successful answer within {timeout} s: {self.statuses(moment)}")
            time.sleep(0.05)
        return found


@dataclass
class Writers(Load):
    """Each thread POSTs an order (customer "Writer"), and every third time DELETEs one of the
    orders it created. `created` and `deleted` hold the acknowledged ones (201, 204); `in_doubt`
    the orders whose DELETE got no 204 (an error, a timeout, a 503 as the leader died): such a
    delete may have committed before its answer was lost, so the order may or may not be there."""

    created: list[int] = field(default_factory=list)
    deleted: set[int] = field(default_factory=set)
    in_doubt: set[int] = field(default_factory=set)
    # With keys, a POST whose answer was not 201 is sent again with the same Idempotency-Key until
    # it is (for up to `give_up` seconds, also after stop()): the client's side of "retry without
    # creating it twice". `abandoned` counts the orders that never got their 201.
    idempotency_keys: bool = False
    give_up: float = 60.0
    abandoned: int = 0
    post_times: list[float] = field(default_factory=list)  # seconds per acknowledged POST

    def _run(self, index: int) -> None:
        http = requests.Session()
        mine: list[int] = []
        turn = 0
        while not self._stop.is_set():
            turn += 1
            key = uuid.uuid4().hex if self.idempotency_keys else None
            headers = {"Idempotency-Key": key} if key else {}
            deadline = time.monotonic() + self.give_up
            while True:
                started = time.perf_counter()
                response = self._send(
                    http,
                    "POST",
                    "/api/orders",
                    json={"customer": "Writer", "amount": "1.00"},
                    headers=headers,
                )
                if response is not None and response.status_code == 201:
                    with self._lock:
                        self.created.append(int(response.json()["id"]))
                        self.post_times.append(time.perf_counter() - started)
                    mine.append(int(response.json()["id"]))
                    break
                if not key:
                    break
                if time.monotonic() > deadline:
                    with self._lock:
                        self.abandoned += 1
                    break
                time.sleep(self.pause)
            if turn % 3 == 0 and mine:
                victim = mine.pop(0)
                response = self._send(http, "DELETE", f"/api/orders/{victim}")
                with self._lock:
                    if response is not None and response.status_code == 204:
                        self.deleted.add(victim)
                    else:
                        self.in_doubt.add(victim)
            time.sleep(self.pause)

    def _send(
        self, http: requests.Session, method: str, path: str, **kwargs: Any
    ) -> requests.Response | None:
        sent = time.monotonic()
        try:
            response = http.request(method, f"{self.base}{path}", timeout=TIMEOUT, **kwargs)
        except requests.RequestException:
            response = None
        self._record(sent, method, response)
        return response


@dataclass
class Readers(Load):
    """Each thread walks the newest-first list of /api/orders page by page, again and again.
    `walks` holds each walk's ids; `spans` when each walk started and ended (monotonic)."""

    walks: list[list[int]] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)
    nodes: Counter[str] = field(default_factory=Counter)  # Server-Timing's db name per page
    # Each walk's pages as Server-Timing's db description ("replica2 0/3000060") and row count:
    # where a walk that went wrong read what.
    trails: list[list[str]] = field(default_factory=list)

    def _run(self, index: int) -> None:
        http = requests.Session()
        while not self._stop.is_set():
            ids: list[int] = []
            trail: list[str] = []
            started = time.monotonic()
            cursor: str | None = None
            while not self._stop.is_set():
                params: dict[str, str | int] = {"limit": 20, **({"after": cursor} if cursor else {})}
                sent = time.monotonic()
                try:
                    response: requests.Response | None = http.get(
                        f"{self.base}/api/orders", params=params, timeout=TIMEOUT
                    )
                except requests.RequestException:
                    response = None
                self._record(sent, "GET", response)
                if response is None or response.status_code != 200:
                    time.sleep(self.pause)
                    continue  # the same page again: a reader retries what failed
                body = response.json()
                timing = response.headers.get("Server-Timing", "")
                where = timing.partition('desc="')[2].partition('"')[0]
                with self._lock:
                    self.nodes[where.split(" ")[0]] += 1
                ids += [int(item["id"]) for item in body["items"]]
                trail.append(f"{where} {len(body['items'])} at {time.monotonic() - started:.2f} s")
                cursor = body["next_cursor"]
                if cursor is None:
                    with self._lock:
                        self.walks.append(ids)
                        self.trails.append(trail)
                        self.spans.append((started, time.monotonic()))
                    break
                time.sleep(self.pause)
