"""LSNs: PostgreSQL's `X/Y` read, compared and written back, and the statements that read them."""

from __future__ import annotations

PRIMARY_LSN_SQL = "SELECT pg_current_wal_lsn()::text"
# A replica's probe: its replayed LSN, and when its server started. LSNs only grow
# within one run of the server: a standby killed and started again opens for reads once it is
# consistent, which can be well behind where it had replayed before (it replays on from its last
# restartpoint), so what was known of it before a restart says nothing now.
REPLICA_LSN_SQL = "SELECT pg_last_wal_replay_lsn()::text, pg_postmaster_start_time()::text"
# What a page on a standby is stamped with: the replayed LSN, and the received one above it.
# A standby's startup process makes a replayed commit visible an instant before it advances the
# replayed LSN, so a snapshot can hold a commit just past pg_last_wal_replay_lsn(); it cannot
# hold one the standby has not received. (NULL receive LSN: streaming stopped; GREATEST skips
# NULLs.) On the primary both are pg_current_wal_lsn().
# A replica promoted since it was last probed (a failover) is read like the primary it now is,
# and its pages are stamped with its own LSN.
# The server's start time too, as in REPLICA_LSN_SQL: a page read on a replica that restarted
# since it was last probed cannot trust what the probe said.
PAGE_LSN_SQL = {
    True: "SELECT pg_current_wal_lsn()::text, pg_current_wal_lsn()::text, NULL",
    False: (
        "SELECT pg_last_wal_replay_lsn()::text, CASE WHEN pg_is_in_recovery() "
        "THEN GREATEST(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) "
        "ELSE pg_current_wal_lsn() END::text, pg_postmaster_start_time()::text"
    ),
}


def parse_lsn(value: str | None) -> int | None:
    """PostgreSQL's `X/Y` (two hex numbers) as one integer; None for anything else."""
    if not value or len(value) > 17:
        return None
    high, sep, low = value.partition("/")
    try:
        if not sep or not high or not low:
            return None
        return (int(high, 16) << 32) | int(low, 16)
    except ValueError:
        return None


def format_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
