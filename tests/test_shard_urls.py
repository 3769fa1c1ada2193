"""A shard URL becomes its foreign server's libpq options (orders/data/shards.py): one host or a
multi-host URL (`?host=h1:p1&host=h2:p2&target_session_attrs=read-write`, as DATABASE_URL takes
it for a Patroni cluster) gives postgres_fdw the comma-separated `host` and `port` lists libpq
reads, in order; an option postgres_fdw would not pass on is refused in one line. No database: the
real failover through these options is tests/test_shard_failover.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orders.data.shards import LIBPQ_OPTIONS, ShardServer, ShardSetupError

hostnames = st.from_regex(
    r"[a-z][a-z0-9-]{0,14}(\.[a-z][a-z0-9-]{0,9}){0,2}", fullmatch=True
) | st.sampled_from(["127.0.0.1", "10.0.0.12"])
nodes = st.lists(st.tuples(hostnames, st.integers(1, 65535)), min_size=1, max_size=5)
options = st.dictionaries(
    st.sampled_from(LIBPQ_OPTIONS), st.sampled_from(["read-write", "primary", "random", "require", "app"])
)


@given(nodes=nodes, options=options, dbname=st.from_regex(r"[a-z_]{1,12}", fullmatch=True))
def test_every_node_and_option_reaches_the_foreign_server_in_order(nodes, options, dbname):
    query = "&".join([*(f"host={h}:{p}" for h, p in nodes), *(f"{k}={v}" for k, v in options.items())])
    server = ShardServer.from_url(f"postgresql+psycopg://app:secret@/{dbname}?{query}")
    assert server.options() == {
        "host": ",".join(h for h, _ in nodes),
        "port": ",".join(str(p) for _, p in nodes),
        "dbname": dbname,
        **options,
    }
    assert (server.user, server.password) == ("app", "secret")  # for the user mapping, not the server
    assert all(f"{h}:{p}" in server.shown for h, p in nodes)


@given(host=hostnames, port=st.integers(1, 65535))
def test_one_host_in_the_netloc_is_one_node(host, port):
    server = ShardServer.from_url(f"postgresql+psycopg://postgres@{host}:{port}/orders")
    assert server.options() == {"host": host, "port": str(port), "dbname": "orders"}
    assert server.shown == f"{host}:{port}/orders"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "postgresql+psycopg://u@/o?host=a:1&client_encoding=LATIN1",
            "client_encoding not passed to a shard",
        ),
        ("postgresql+psycopg://u@/o?host=a:x", "'a:x' is not host:port"),
        ("mysql+pymysql://u@h/o", "is not PostgreSQL"),
    ],
)
def test_what_cannot_reach_a_shard_is_refused_in_one_line(url, message):
    with pytest.raises(ShardSetupError, match=message):
        ShardServer.from_url(url)
