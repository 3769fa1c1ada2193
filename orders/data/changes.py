"""Whether new orders arrived, watched once per app process for all its live streams
(orders/views/stream.py; docs/scroll.md, "New orders, pushed").

One watcher per process, started by the first open stream and gone a few seconds after the last
one closed, so a process that holds no stream never asks the database anything:

- Every engine: the signature below is read once a second (TICK_S) on a pooled connection.
  PostgreSQL's LISTEN/NOTIFY is not used: a transaction that NOTIFYs takes a database-wide lock
  at commit and holds it until the commit is done, including the wait for a synchronous
  standby, so a NOTIFY in every order's INSERT (migration 0005's trigger, dropped by 0006)
  made every writer queue behind one commit's standby wait (tests/test_synchronous_commit.py
  found it: with the standby frozen, no later commit ever reached its own wait).

The signature is the orders' largest id and the sum of the per-status counts (order_counts, kept
by triggers in every writing transaction): an order committed after one with a larger id
changes the sum even though it leaves max(id) alone. Both read an index or 64 small rows.

Streams wait on `wait(version, timeout)`: a version number that moves when the signature does.
The watcher never writes to a client, and a slow client never holds the watcher.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from sqlalchemy import Engine, func
from sqlalchemy import select as sql_select

from orders.data.models import Order, OrderCount

log = logging.getLogger(__name__)

# How often the signature is read, and how often a waiting stream looks at its client
# and its lifetime: the 2 s the reader is promised is at most this, a pooled read, the event's
# write and the page's request for the count.
TICK_S = 1.0
# Before the watcher, out of work, ends (a stream opened meanwhile keeps it).
IDLE_S = 5.0
# After a failure (database down), the watcher tries again this long after.
RETRY_S = 2.0


@dataclass(frozen=True)
class State:
    """What a stream needs: `version` moves whenever `token` changes; `latest` is max(id)."""

    version: int
    token: str | None
    latest: int | None
    closed: bool


class Changes:
    """The watcher of one app process and the count of its open streams."""

    def __init__(self, engine: Engine, *, counts: bool):
        self.engine = engine
        self.counts = counts  # whether order_counts is there (not on a coordinator of shards)
        self._cond = threading.Condition()
        self._version = 0
        self._token: str | None = None
        self._latest: int | None = None
        self._streams = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._idle_since = 0.0

    # --- streams ------------------------------------------------------------------------------

    def enter(self, cap: int) -> bool:
        """Count one more open stream, unless `cap` are open already (or closed): False."""
        with self._cond:
            if self._closed or self._streams >= cap:
                return False
            self._streams += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="orders-changes", daemon=True)
                self._thread.start()
            return True

    def leave(self) -> None:
        with self._cond:
            self._streams -= 1
            if not self._streams:
                self._idle_since = time.monotonic()

    @property
    def open_streams(self) -> int:
        return self._streams

    def state(self) -> State:
        with self._cond:
            return State(self._version, self._token, self._latest, self._closed)

    def wait(self, version: int, timeout: float) -> State:
        """Once the version differs from `version` (or `timeout` seconds passed, or closed)."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version or self._closed, timeout)
            return State(self._version, self._token, self._latest, self._closed)

    def close(self, timeout: float = 5.0) -> None:
        """Every stream ends at its next wake-up (at once), the watcher within TICK_S."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # --- the watcher ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._wanted():
                    self._thread = None  # the next stream to open starts another
                    return
            try:
                self._check()
                self._sleep(TICK_S)
            except Exception as err:  # the database down or gone: the streams stay, the list polls
                log.warning(
                    "new orders: watching failed (%s: %s); again in %.0f s", type(err).__name__, err, RETRY_S
                )
                self._sleep(RETRY_S)

    def _wanted(self) -> bool:
        """Not closed, and a stream open now or within IDLE_S."""
        idle = not self._streams and time.monotonic() - self._idle_since >= IDLE_S
        return not (self._closed or idle)

    def _sleep(self, seconds: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._closed, seconds)

    def _check(self) -> None:
        """Read the signature; wake the streams if it changed."""
        with self.engine.connect() as conn:
            latest = conn.scalar(sql_select(func.max(Order.id)))
            count = conn.scalar(sql_select(func.coalesce(func.sum(OrderCount.n), 0))) if self.counts else 0
            conn.rollback()
        token = f"{latest or 0}-{count}"
        with self._cond:
            if token != self._token:
                self._token, self._latest = token, latest
                self._version += 1
                self._cond.notify_all()
