"""Generated statements page exactly like the unpaged query, or are refused in words.

Hypothesis builds the statement, not only the data: one to three sources over one table whose
columns are named like what SQLAlchemy and SQL also use (`id`, `info`, `name`, `keys`, `count`,
`select`, `order`), each source an alias of the table, a subquery, a CTE, a UNION or a UNION ALL
as a subquery; selected as whole entities, as columns (with colliding labels), as `Bundle`s, a
`column_property`, trimmed by `with_only_columns`; joined by ON or by WHERE alone (an implicit
join), to many or to one (a source's whole key equal to a column of the first); sorted by some of
their columns in random directions and then by each source's unique key, except the key of a
source joined to one, which may be left out. Or SELECT DISTINCT of some columns (labelled, in
Bundles) and entities, sorted by all the columns and each entity's key: the whole row is unique.
Whatever the library accepts must walk (both ways, limit 1 to 4) to exactly the unpaged rows in
their shape, on a Session and a Connection; whatever it refuses must be a KeysetError in words
(no object repr). The statements that a unique key cannot be proven for (a UNION ALL without a
column telling its branches apart) are generated too, and must be refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, Integer, String, delete, func, insert, literal, select, union, union_all
from sqlalchemy.orm import Bundle, DeclarativeBase, Mapped, Session, aliased, column_property, mapped_column

from pagination import Keyset, KeysetError, iterate_ranges, paginate

from .databases import ENGINES
from .hunt import examples
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
    maybe: Mapped[int | None] = mapped_column(Integer, nullable=True)  # NULLs in the engine's order
    info_length: Mapped[int] = column_property(func.length(info))


PLAIN = ["info", "name", "keys", "count", "select_", "order", "maybe"]
COLUMNS = ["id", *PLAIN]
LABELS = ["id", "info", "name", "keys", "count", "select", "order", "from"]


@pytest.fixture(scope="module", params=ENGINES)
def things(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    kind, tmp = request.param, tmp_path_factory.mktemp("libgen")
    with library_engine(kind, tmp, "libgen", Base.metadata) as engine:
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
            "maybe": st.sampled_from([None, None, 0, 1]),
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
    # "distinct": SELECT DISTINCT of some columns, sorted by all of them (the whole selected row
    # is unique, whatever the sources' keys; of an entity, by its key); "rows": every row,
    # sorted to each source's key.
    distinct = draw(st.integers(0, 2)) == 0
    selected: list[Any] = []
    shown: list[Any] = []  # what a DISTINCT selects, as sort terms (a label: what it labels)
    for n, source in enumerate(sources):
        how = draw(st.sampled_from(["columns", "labels", "bundle", "entity"]))
        if how == "entity" and source.entity is not None:
            selected.append(source.entity)
            shown.append(source.columns["id"])  # its key: it decides the entity's other columns
            continue
        names = draw(st.lists(st.sampled_from(sorted(source.columns)), min_size=1, max_size=3, unique=True))
        columns = [source.columns[c] for c in names]
        if source.entity is not None and draw(st.booleans()):
            columns.append(source.entity.info_length)  # a column_property
        if how == "labels":
            shown += columns
            columns = [c.label(draw(st.sampled_from(LABELS))) for c in columns]
        if how == "bundle":
            # Labels that are other columns' names: swapped among the bundle's own columns
            # (Bundle("b", x.label("y"), y.label("x"))), or any of the table's column names.
            names = [getattr(c, "key", "x") for c in columns]
            if draw(st.booleans()):
                labels = names[1:] + names[:1]
            else:
                labels = [draw(st.sampled_from(LABELS)) for _ in columns]
            labels = list(dict.fromkeys(labels)) + [f"x{i}" for i in range(len(labels) - len(set(labels)))]
            bundle = Bundle(f"b{n}", *(c.label(label) for c, label in zip(columns, labels, strict=True)))
            selected.append(bundle)
            # Sort by the bundle's columns, named by their (swapped) labels.
            source.extra.update({f"bundle {label}": bundle.c[label] for label in labels})
            shown += [bundle.c[label] for label in labels]
        else:
            selected += columns
            shown += [] if how == "labels" else columns
    stmt = select(*selected)
    first = sources[0]
    keyless: list[Source] = []  # joined many-to-one: their key is not needed, and left out
    joins: list[str] = []
    for n, source in enumerate(sources[1:], 1):
        this = source.columns
        # ON or WHERE (an implicit join), to many, or to one: the whole key of `source` (its id,
        # for the kinds whose key is their id) required equal to a column of the first source.
        where, to_one = draw(st.booleans()), draw(st.booleans()) and source.key == [this["id"]]
        if to_one:
            condition = this["id"] == first.columns.get("keys", first.columns["id"])
            if draw(st.booleans()):
                keyless.append(source)
        else:
            condition = (
                first.columns["id"] % 2 == this["id"] % 2 if n == 1 else this["id"] >= first.columns["id"]
            )
        joins.append(("WHERE" if where else "ON") + (" to one" if to_one else " to many"))
        if where:
            stmt = stmt.select_from(_from(first), _from(source)).where(condition)
        else:
            stmt = stmt.join_from(_from(first), _from(source), condition)
    if not draw(st.booleans()) or len(sources) == 1:
        stmt = stmt.select_from(_from(sources[0]))
    if distinct:
        sort = [term.desc() if draw(st.booleans()) else term.asc() for term in shown]
        description = " ".join(["distinct", _kinds(sources), *joins])
        return stmt.distinct(), list({id(t): t for t in sort}.values()), False, description
    if draw(st.booleans()):  # what the statement selects, replaced: the FROMs stay
        stmt = stmt.with_only_columns(
            *selected[: draw(st.integers(1, len(selected)))], maintain_column_froms=True
        )
    terms: list[Any] = []
    for source in sources:
        choices = sorted([*source.columns, *(k for k in source.extra if k.startswith("bundle "))])
        for name in draw(st.lists(st.sampled_from(choices), max_size=2, unique=True)):
            if name != "id":
                column = source.columns.get(name, source.extra.get(name))
                term = column.desc() if draw(st.booleans()) else column.asc()
                placed = draw(st.sampled_from([None, None, "first", "last"]))
                terms.append(
                    term.nulls_first() if placed == "first" else term.nulls_last() if placed else term
                )
    keyed = [source for source in sources if all(source is not k for k in keyless)]
    refused = any(source.key is None for source in keyed)
    for source in keyed:
        for column in source.key if source.key is not None else [source.columns["id"]]:
            terms.append(column.desc() if draw(st.booleans()) else column)
    unique_terms = list({id(t): t for t in terms}.values())
    return stmt, unique_terms, refused, " ".join([_kinds(sources, keyless), *joins])


def _kinds(sources: list[Source], keyless: Sequence[Source] = ()) -> str:
    return " + ".join(
        s.kind + (" (to one, key left out)" if any(s is k for k in keyless) else "") for s in sources
    )


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
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(
    case=statements(), data=rows, limit=st.integers(1, 4), executor=st.sampled_from(["session", "connection"])
)
def test_generated_statements_page_exactly_like_the_unpaged_query(things, case, data, limit, executor):
    stmt, terms, refused, kinds = case
    note(f"{kinds}: {stmt}")
    for mode in ("distinct", "WHERE to one", "WHERE to many", "key left out"):
        if mode in kinds:
            event(f"has {mode}")
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
