"""Read routing to PostgreSQL streaming replicas, without ever letting a walk go back in time.

`DATABASE_URL` is the primary and takes every write. `DATABASE_REPLICA_URLS` (comma-separated) are
hot standbys that serve the list reads: the HTML list and its fragments, `GET /api/orders`, the
new-orders poll and the CSV export. Without replicas, or on SQLite or MariaDB (which have no WAL
LSN to compare), nothing here is switched on and the app reads and writes the one database.

The rule that keeps keyset pagination's promise across lagging replicas:

- Every page is read in one REPEATABLE READ transaction whose first statement reads the node's
  LSN (`pg_current_wal_lsn()` on the primary; on a standby the LSN it has received,
  which is at least `pg_last_wal_replay_lsn()`: see PAGE_LSN_SQL). That statement fixes the
  transaction's snapshot *before* the function is evaluated, so the LSN is at least as far
  as anything the page's rows can show. It is stamped into every cursor of the page
  (`meta={"lsn": ...}`).
- A page after a cursor is read only on a node known to have replayed at least the cursor's
  LSN *before* its snapshot is taken (our cached lower bound, else a fresh probe), so the
  next page's snapshot contains everything the previous page's could see. A replica that lags is
  skipped; the primary answers when no replica is ready.
- A first page goes to a replica only while that replica has been fully caught up with the
  primary within `REPLICA_MAX_LAG_MS` (see `NodeState.lag`).
- After a POST or DELETE the write's LSN goes back in a cookie and a `Read-After-LSN`
  header; that client's reads then route as if they carried a cursor at that LSN.

Routing uses SQLAlchemy's documented hook for it, `Session.get_bind` (session.py): the
request's read engine sits in `session.info`; flushes and DML always go to the primary.

This package, by job: lsn.py reads and compares LSNs; router.py keeps what this process
knows of each node and chooses one per read; session.py is the Session that reads there. The
request's side (which reads go where, the cookie, a read run again elsewhere) is
orders/web/read_routing.py; /healthz/nodes is in orders/views/health.py.
"""
