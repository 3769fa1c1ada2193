"""Generated statements page exactly like the unpaged query, or are refused in words.

Hypothesis builds the statement, not only the data: one to three sources over one table whose
columns are named like what SQLAlchemy and SQL also use (`id`, `info`, `name`, `keys`, `count`,
`select`, `order`), each source an alias of the table, a subquery, a CTE, a UNION or a UNION ALL
as a subquery; selected as whole entities, as columns (with colliding labels), as `Bundle`s, a
`column_property`, trimmed by `with_only_columns`; sorted by some of their columns in random
directions and then by each source's unique key. Whatever the library accepts must walk (both
ways, limit 1 to 4) to exactly the unpaged rows in their shape, on a Session and a Connection;
whatever it refuses must be a KeysetError in words (no object repr). The statements that a
unique key cannot be proven for (a UNION ALL without a column telling its branches apart) are
generated too, and must be refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, Integer, String, delete, func, insert, literal, select, union, union_all
from sqlalchemy.orm import Bundle, DeclarativeBase, Mapped, Session, aliased, column_property, mapped_column

from pagination import Keyset, KeysetError, iterate_ranges, paginate

from .databases import ENGINES
from .library import CODEC, library_engine, unpaged, walk, walk_back, walk_ranges


class Base(DeclarativeBase):
    pass


class Thing(Base):
    __tablename__ = "lib_things"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    info: Mapped[str] = mapped_column(String(20))
    name: Mapped[str] = mapped_column(String(20))
    keys: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    select_: Mapped[str] = mapped_column("select", String(20))
    order: Mapped[int] = mapped_column("order", Integer)
    info_length: Mapped[int] = column_property(func.length(info))


PLAIN = ["info", "name", "keys", "count", "select_", "order"]
COLUMNS = ["id", *PLAIN]
LABELS = ["id", "info", "name", "keys", "count", "select", "order", "from"]


@pytest.fixture(scope="module", params=ENGINES)
def things(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with library_engine(request.param, tmp_path_factory.mktemp("libgen"), "libgen") as engine:
        Base.metadata.create_all(engine)
        yield engine


rows = st.lists(
    st.fixed_dictionaries(
        {
            "info": st.sampled_from(["a", "b", "id"]),
            "name": st.sampled_from(["a", "b", "info"]),
            "keys": st.integers(0, 2),
            "count": st.integers(0, 1),
            "select_": st.sampled_from(["x", "select"]),
            "order": st.integers(-1, 1),
        }
    ),
    min_size=2,
    max_size=6,
)


@dataclass
class Source:
    """One FROM of a generated statement: its entity (when the ORM can map it), its columns by
    attribute name, and the columns that make a row of it unique (None: none can be proven)."""

    kind: str
    entity: Any
    columns: dict[str, Any]
    key: list[Any] | None
    extra: dict[str, Any] = field(default_factory=dict)


def make_source(kind: str, n: int) -> Source:
    where = Thing.id % 3 != n % 3 if n else Thing.id > 0
    if kind == "alias":
        entity = aliased(Thing, name=f"t{n}")
        return Source(kind, entity, {c: getattr(entity, c) for c in COLUMNS}, [entity.id])
    if kind in ("subquery", "cte"):
        inner = select(Thing).where(where)
        from_ = inner.cte(f"c{n}") if kind == "cte" else inner.subquery(f"s{n}")
        entity = aliased(Thing, from_)
        return Source(kind, entity, {c: getattr(entity, c) for c in COLUMNS}, [entity.id])
    if kind == "union":  # UNION: rows are distinct, so all the columns together are a key
        u = union(
            select(Thing.id, Thing.info, Thing.keys).where(where), select(Thing.id, Thing.name, Thing.keys)
        ).subquery(f"u{n}")
        columns = {"id": u.c.id, "info": u.c.info, "keys": u.c["keys"]}
        return Source(kind, None, columns, [u.c.id, u.c.info, u.c["keys"]])
    if kind == "union all, branch column":  # the constant tells the branches apart
        u = union_all(
            select(literal(1).label("branch"), Thing.id, Thing.info).where(where),
            select(literal(2).label("branch"), Thing.id, Thing.name),
        ).subquery(f"ua{n}")
        return Source(
            kind, None, {"id": u.c.id, "info": u.c.info}, [u.c.branch, u.c.id], {"branch": u.c.branch}
        )
    assert kind == "union all"  # the same id from both branches: no key can be proven
    u = union_all(select(Thing.id, Thing.info), select(Thing.id, Thing.name)).subquery(f"ub{n}")
    return Source(kind, None, {"id": u.c.id, "info": u.c.info}, None)


KINDS = ["alias", "subquery", "cte", "union", "union all, branch column", "union all"]


@st.composite
def statements(draw: Any) -> tuple[Any, Keyset, bool, str]:
    """(statement, sort, expected to be refused, description)."""
    sources = [make_source(draw(st.sampled_from(KINDS)), n) for n in range(draw(st.integers(1, 3)))]
    selected: list[Any] = []
    for n, source in enumerate(sources):
        how = draw(st.sampled_from(["entity", "columns", "labels", "bundle"]))
        if how == "entity" and source.entity is not None:
            selected.append(source.entity)
            continue
        names = draw(st.lists(st.sampled_from(sorted(source.columns)), min_size=1, max_size=3, unique=True))
        columns = [source.columns[c] for c in names]
        if source.entity is not None and draw(st.booleans()):
            columns.append(source.entity.info_length)  # a column_property
        if how == "labels":
            columns = [c.label(draw(st.sampled_from(LABELS))) for c in columns]
        if how == "bundle":
            selected.append(Bundle(f"b{n}", *columns))
        else:
            selected += columns
    stmt = select(*selected)
    for n, source in enumerate(sources[1:], 1):
        first, this = sources[0].columns, source.columns
        stmt = stmt.join_from(
            _from(sources[0]),
            _from(source),
            first["id"] % 2 == this["id"] % 2 if n == 1 else this["id"] >= first["id"],
        )
    if not draw(st.booleans()) or len(sources) == 1:
        stmt = stmt.select_from(_from(sources[0]))
    if draw(st.booleans()):  # what the statement selects, replaced: the FROMs stay
        stmt = stmt.with_only_columns(
            *selected[: draw(st.integers(1, len(selected)))], maintain_column_froms=True
        )
    terms: list[Any] = []
    for source in sources:
        for name in draw(st.lists(st.sampled_from(sorted(source.columns)), max_size=2, unique=True)):
            if name != "id":
                column = source.columns[name]
                terms.append(column.desc() if draw(st.booleans()) else column)
    refused = any(source.key is None for source in sources)
    for source in sources:
        for column in source.key if source.key is not None else [source.columns["id"]]:
            terms.append(column.desc() if draw(st.booleans()) else column)
    unique_terms = list({id(t): t for t in terms}.values())
    return stmt, unique_terms, refused, " + ".join(s.kind for s in sources)


def _from(source: Source) -> Any:
    if source.entity is not None:
        return source.entity
    return next(iter(source.columns.values())).table


def load(engine: Engine, data: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        conn.execute(delete(Thing.__table__))
        if data:
            conn.execute(
                insert(Thing.__table__), [{"id": i + 1, **_columns(row)} for i, row in enumerate(data)]
            )


def _columns(row: dict[str, Any]) -> dict[str, Any]:
    return {("select" if k == "select_" else k): v for k, v in row.items()}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(
    case=statements(), data=rows, limit=st.integers(1, 4), executor=st.sampled_from(["session", "connection"])
)
def test_generated_statements_page_exactly_like_the_unpaged_query(things, case, data, limit, executor):
    stmt, terms, refused, kinds = case
    note(f"{kinds}: {stmt}")
    load(things, data)
    with Session(things) if executor == "session" else things.connect() as ex:
        try:
            sort = Keyset("generated", *terms)
            first = paginate(ex, stmt, sort, limit=limit, codec=CODEC)
        except KeysetError as err:
            assert refused, f"refused a sort with a provable unique key: {err}"
            assert "object at 0x" not in str(err)
            event("refused")
            return
        event(f"paged {len(first.items)} rows on the first page" if first.items else "paged, empty")
        assert not refused, "accepted a sort over a UNION ALL whose rows can repeat"
        expected = unpaged(ex, stmt, sort)
        backward, forward, first = walk(ex, stmt, sort, limit)
        assert backward == [] and not first.has_previous
        assert forward == expected
        assert walk_back(ex, stmt, sort, limit) == expected
        # The same walk as ranges the caller runs itself (a COPY would): the same rows, and each
        # range's cursor resumes the walk right behind it.
        if sort.nulls_last is None:
            ranges = list(iterate_ranges(ex, stmt, sort, batch_size=limit, codec=CODEC))
            assert walk_ranges(ex, ranges) == expected
            if ranges:
                rest = iterate_ranges(ex, stmt, sort, batch_size=limit, codec=CODEC, after=ranges[0].cursor)
                assert walk_ranges(ex, list(rest)) == expected[ranges[0].rows :]
