"""The library's promises for any user's models, on SQLite, PostgreSQL 15 and 18, MariaDB:

1. never a hidden row: sort terms built from nullable and NOT NULL columns, JSON keys present,
   absent and JSON null, arithmetic, division, NULLIF, CASE, COALESCE, casts and functions (and
   pairs of them), each ascending and descending, walked forward and backward with page sizes 1,
   3 and 7, return exactly the unpaged ORDER BY's rows (the term is paged as nullable, in the
   engine's own NULL order, unless the library proves it NOT NULL);
2. its own cursor accepted: every aggregate kind (COUNT, SUM, AVG, MIN, MAX over Integer,
   BigInteger, Numeric and Double, and arithmetic of them) is typed by what the engine returns;
3. what it cannot page is a KeysetError before any SQL runs (window functions as keys, terms of
   a table outside the statement, a joined eager load of a collection by ``contains_eager``),
   naming what to write instead.

`outcome()` sorts a case into exact, wrong, crashed or refused; a failing case's message says
which (the issue's before/after counts are taken from these messages).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Double,
    Engine,
    ForeignKey,
    Integer,
    Numeric,
    String,
    Table,
    case,
    cast,
    delete,
    func,
    insert,
    literal,
    select,
    union_all,
    update,
)
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    contains_eager,
    joinedload,
    mapped_column,
    relationship,
)

from pagination import Keyset, KeysetError, paginate, start_at

from .databases import ENGINES
from .library import CODEC, library_engine, statements_of, unpaged, walk, walk_back


class Base(DeclarativeBase):
    pass


class Ranked(Base):
    """Rows whose sort value another connection changes while a session holds them."""

    __tablename__ = "lib_sound_ranked"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    rank: Mapped[int] = mapped_column(Integer)


class Doc(Base):
    __tablename__ = "lib_sound_docs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    a: Mapped[int | None] = mapped_column(Integer, nullable=True)
    b: Mapped[int] = mapped_column(Integer)
    s: Mapped[str | None] = mapped_column(String(20), nullable=True)
    t: Mapped[str] = mapped_column(String(20))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class Shop(Base):
    __tablename__ = "lib_sound_shops"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(20))
    sales: Mapped[list[Sale]] = relationship(back_populates="shop", order_by="Sale.id")


class Sale(Base):
    __tablename__ = "lib_sound_sales"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    shop_id: Mapped[int] = mapped_column(ForeignKey("lib_sound_shops.id"))
    qty: Mapped[int] = mapped_column(Integer)
    big: Mapped[int] = mapped_column(BigInteger)
    price: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    weight: Mapped[float] = mapped_column(Double)
    shop: Mapped[Shop] = relationship(back_populates="sales")


labels = Table(
    "lib_sound_sale_labels",
    Base.metadata,
    Column("sale_id", ForeignKey("lib_sound_sales.id"), primary_key=True),
    Column("label_id", ForeignKey("lib_sound_labels.id"), primary_key=True),
)


class Label(Base):
    __tablename__ = "lib_sound_labels"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(20))


Sale.labels = relationship(Label, secondary=labels)

CATS = ["b", "a", "c", "B"]


def _data(i: int) -> dict[str, Any]:
    kind = i % 5
    if kind == 0:
        return {}  # neither key
    if kind == 1:
        return {"cat": CATS[i % 4], "n": i % 6}
    if kind == 2:
        return {"cat": None, "n": None}  # JSON null
    if kind == 3:
        return {"cat": CATS[(i + 1) % 4]}
    return {"n": (i * 3) % 7}


DOCS = [
    {
        "id": i,
        "a": None if i % 3 == 0 else (i * 7) % 5,
        "b": i % 4,
        "s": None if i % 4 == 0 else "xyzw"[i % 4] * (i % 3 + 1),
        "t": "pqr"[i % 3],
        "data": _data(i),
    }
    for i in range(1, 31)
]
SHOPS = [{"id": i, "name": f"shop{i % 4}"} for i in range(1, 10)]
SALES = [
    {
        "id": i,
        "shop_id": 1 + (i * 5) % 9,
        "qty": (i * 7) % 11,
        "big": (i * 13) % 17 + 2**40,
        "price": Decimal(i % 7) + Decimal("0.25"),
        "weight": (i % 5) / 4,
    }
    for i in range(1, 46)
]

SALE_LABELS = [{"sale_id": s, "label_id": 1 + (s + k) % 5} for s in range(1, 46) for k in (0, 2)]

# Terms over nullable and NOT NULL columns, the null-makers among them.
TERMS: dict[str, Any] = {
    "a": Doc.a,
    "b": Doc.b,
    "s": Doc.s,
    "t": Doc.t,
    "json_cat": Doc.data["cat"].as_string(),
    "json_n": Doc.data["n"].as_integer(),
    "json_cat_or": func.coalesce(Doc.data["cat"].as_string(), "zz"),
    "a_plus_b": Doc.a + Doc.b,
    "b_plus_1": Doc.b + 1,
    "b_times_2": Doc.b * 2,
    "b_over_a": Doc.b / func.nullif(Doc.a, 0),
    "b_mod_3": Doc.b % 3,
    "nullif_b": func.nullif(Doc.b, 2),
    "case_no_else": case((Doc.b > 1, Doc.t)),
    "case_else": case((Doc.b > 1, Doc.t), else_="o"),
    "coalesce_a_b": func.coalesce(Doc.a, Doc.b),
    "coalesce_a_json": func.coalesce(Doc.a, Doc.data["n"].as_integer()),
    "lower_s": func.lower(Doc.s),
    "upper_t": func.upper(Doc.t),
    "length_t": func.length(Doc.t),
    "abs": func.abs(Doc.b - 2),
    "cast_b": cast(Doc.b, String(10)),
    "concat_t": Doc.t + "x",
    "concat_s": Doc.s + "x",
    "a_is_null": Doc.a.is_(None),
    "b_gt_1": Doc.b > 1,
}
PAIRS = [("json_cat", "a"), ("s", "json_n"), ("b_over_a", "case_no_else"), ("b", "nullif_b")]


def _sorts() -> list[tuple[str, Keyset]]:
    found = []
    for name, term in TERMS.items():
        for way in ("asc", "desc"):
            found.append((f"{name}-{way}", Keyset(f"{name}-{way}", getattr(term, way)(), Doc.id)))
    for first, second in PAIRS:
        terms = (TERMS[first].desc(), TERMS[second].asc(), Doc.id.desc())
        found.append((f"{first}+{second}", Keyset(f"{first}+{second}", *terms)))
    found.append(("json_cat-nulls-last", Keyset("jl", TERMS["json_cat"].asc().nulls_last(), Doc.id)))
    return found


SORTS = _sorts()

# Every aggregate kind, over each column type, per shop (GROUP BY), ending in the group's key.
AGGREGATES: dict[str, Any] = {
    "count": func.count(Sale.id),
    "sum_int": func.sum(Sale.qty),
    "sum_big": func.sum(Sale.big),
    "sum_numeric": func.sum(Sale.price),
    "sum_double": func.sum(Sale.weight),
    "avg_int": func.avg(Sale.qty),
    "avg_numeric": func.avg(Sale.price),
    "avg_double": func.avg(Sale.weight),
    "min_int": func.min(Sale.qty),
    "max_numeric": func.max(Sale.price),
    "sum_times": func.sum(Sale.qty * Sale.price),
    "sum_plus_count": func.sum(Sale.qty) + func.count(Sale.id),
    "max_minus_min": func.max(Sale.big) - func.min(Sale.big),
}


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    rows = {
        Doc: DOCS,
        Shop: SHOPS,
        Sale: SALES,
        Label: [{"id": i, "name": f"l{i % 3}"} for i in range(1, 6)],
        labels: SALE_LABELS,
    }
    kind, tmp = request.param, tmp_path_factory.mktemp("libsound")
    with library_engine(kind, tmp, "libsound", Base.metadata, rows) as engine:
        yield engine


def outcome(session: Session, stmt: Any, sort: Keyset, limit: int) -> tuple[str, str]:
    """("exact" | "wrong" | "crashed" | "refused", detail): forward and backward walks (and
    the walk back from the last page) against the unpaged ORDER BY's rows."""
    try:
        expected = unpaged(session, stmt, sort)
    except Exception as err:  # the unpaged query itself fails: not the library's
        raise AssertionError(f"unpaged query fails: {err}") from err
    try:
        backward, forward, _ = walk(session, stmt, sort, limit)
        back = walk_back(session, stmt, sort, limit)
    except KeysetError as err:
        return "refused", str(err).splitlines()[0]
    except Exception as err:
        session.rollback()
        return "crashed", f"{type(err).__name__}: {str(err).splitlines()[0]}"
    if backward or forward != expected or back != expected:
        lost = len(expected) - len(set(map(repr, forward)))
        return "wrong", f"forward {len(forward)}, back {len(back)} of {len(expected)} rows ({lost} lost)"
    return "exact", ""


@pytest.mark.parametrize("limit", [1, 3, 7])
@pytest.mark.parametrize("sort", [s for _, s in SORTS], ids=[n for n, _ in SORTS])
def test_every_term_pages_like_the_unpaged_order_by(engine, sort, limit):
    with Session(engine) as session:
        found, detail = outcome(session, select(Doc), sort, limit)
    assert found == "exact", f"outcome={found}: {detail}"


def test_a_proven_not_null_term_keeps_the_row_value_seek(engine):
    """Soundness must not cost the index range where NOT NULL is proven (the app's sorts)."""
    sort = Keyset("proven", Doc.t.desc(), func.coalesce(Doc.a, 0).desc(), Doc.id.desc())
    with Session(engine) as session:
        page = paginate(session, select(Doc), sort, limit=3, codec=CODEC)
        sent = _sent(
            engine, lambda: paginate(session, select(Doc), sort, limit=3, codec=CODEC, after=page.next_cursor)
        )
    if engine.dialect.name in ("postgresql", "sqlite"):
        assert any(re.search(r"\) <=? \(", sql) for sql in sent), sent


def _sent(engine: Engine, run: Callable[[], Any]) -> list[str]:
    return [statement for statement, _ in statements_of(engine, run)]


@pytest.mark.parametrize("way", ["asc", "desc"])
@pytest.mark.parametrize("name", list(AGGREGATES))
def test_every_aggregate_kind_pages_with_its_own_cursors(engine, name, way):
    aggregate = AGGREGATES[name].label(name)
    stmt = select(Shop.id, aggregate).join(Shop.sales).group_by(Shop.id)
    sort = Keyset(name, getattr(aggregate, way)(), Shop.id)
    with Session(engine) as session:
        for limit in (1, 3):
            found, detail = outcome(session, stmt, sort, limit)
            assert found == "exact", f"outcome={found}: {detail}"


def _refused(engine: Engine, stmt: Any, sort: Keyset, *words: str) -> None:
    with Session(engine) as session:
        sent = _sent(engine, lambda: _expect_refusal(session, stmt, sort, words))
    assert sent == [], f"SQL ran before the refusal: {sent}"


def _expect_refusal(session: Session, stmt: Any, sort: Keyset, words: tuple[str, ...]) -> None:
    with pytest.raises(KeysetError) as refusal:
        paginate(session, stmt, sort, limit=3, codec=CODEC)
    for word in words:
        assert word in str(refusal.value), str(refusal.value)


def test_a_window_function_key_is_refused_before_any_sql(engine):
    number = func.row_number().over(order_by=Doc.b).label("n")
    _refused(engine, select(Doc.id, number), Keyset("window", number, Doc.id), "window", "subquery")
    ranked = func.rank().over(partition_by=Doc.t, order_by=Doc.id)
    _refused(engine, select(Doc), Keyset("rank", ranked, Doc.id), "window", "subquery")


def test_a_term_of_a_table_outside_the_statement_is_refused_before_any_sql(engine):
    _refused(engine, select(Shop), Keyset("outside", Sale.id, Shop.id), "lib_sound_sales", "join")
    _refused(engine, select(Doc), Keyset("outside", func.lower(Shop.name), Doc.id), "lib_sound_shops")


def test_contains_eager_of_a_collection_is_refused_and_joinedload_pages_by_parent(engine):
    stmt = select(Shop).join(Shop.sales).options(contains_eager(Shop.sales))
    _refused(engine, stmt, Keyset("eager", Shop.id, Sale.id), "selectinload", "joinedload")
    loaded = select(Shop).options(joinedload(Shop.sales))
    sort = Keyset("shops", Shop.name, Shop.id)
    with Session(engine) as session:
        for limit in (1, 3, 7):
            found, detail = outcome(session, loaded, sort, limit)
            assert found == "exact", f"outcome={found}: {detail}"
            pages = paginate(session, loaded, sort, limit=limit, codec=CODEC)
            assert len(pages.items) == limit
            for shop in pages.items:  # whole collections
                assert [s.id for s in shop.sales] == sorted(s["id"] for s in SALES if s["shop_id"] == shop.id)


def test_start_at_an_aggregate_value_of_another_python_type(engine):
    """A position given as an int for a SUM the engine returns as Decimal (or the reverse) is
    one it compares exactly, not a refused cursor."""
    total = func.sum(Sale.qty).label("total")
    stmt = select(Shop.id, total).join(Shop.sales).group_by(Shop.id)
    sort = Keyset("total", total.desc(), Shop.id)
    with Session(engine) as session:
        expected = [tuple(r) for r in session.execute(stmt.order_by(*sort.order_by())).all()]
        for value in (20, Decimal(20), 20.0):
            at = start_at(sort, [value], codec=CODEC)
            page = paginate(session, stmt, sort, limit=50, codec=CODEC, after=at)
            assert [tuple(r) for r in page.items] == [r for r in expected if r[1] <= 20]


def _once_refused(dialect: str) -> list[tuple[str, Any, Keyset]]:
    """Statements refused before although their sort is unique in their rows."""
    found = []
    sub = select(Shop.id.label("x"), Shop.name).subquery()
    found.append(("an ORM key labelled in a subquery", select(sub), Keyset("x", sub.c.name, sub.c.x)))
    both = union_all(
        select(Shop.id.label("x"), literal("shop").label("kind")),
        select(Sale.id.label("x"), literal("sale").label("kind")),
    ).subquery()
    found.append(("ORM keys labelled in UNION ALL", select(both), Keyset("u", both.c.x, both.c.kind)))
    many = select(Sale.id, Label.name).join(Sale.labels)
    found.append(("many-to-many through a relationship", many, Keyset("m", Label.id, Sale.id.desc())))
    count = func.count(Sale.id).label("n")
    grouped = select(Shop, count).join(Shop.sales).group_by(Shop)
    found.append(("GROUP BY an entity", grouped, Keyset("g", count.desc(), Shop.name, Shop.id)))
    if dialect == "postgresql":
        first = (
            select(Sale.shop_id, Sale.id, Sale.qty)
            .distinct(Sale.shop_id)
            .order_by(Sale.shop_id, Sale.qty.desc(), Sale.id)
            .subquery()
        )
        found.append(("DISTINCT ON in a subquery", select(first), Keyset("d", first.c.qty, first.c.shop_id)))
    return found


@pytest.mark.filterwarnings("ignore:Passing expression to ``distinct``")
def test_statements_once_refused_page_exactly(engine):
    with Session(engine) as session:
        for what, stmt, sort in _once_refused(engine.dialect.name):
            for limit in (1, 3, 7):
                found, detail = outcome(session, stmt, sort, limit)
                assert found == "exact", f"{what}: outcome={found}: {detail}"


def test_key_values_come_from_the_database_not_from_a_stale_identity_map(engine):
    """A session that keeps its objects across transactions (expire_on_commit=False, common in
    web apps) holds a row whose sort value another connection has changed since: the ORM returns
    the object it holds, with the old value, for the new row. A cursor made from the object's
    attribute (as sqlakeyset makes it) would start the next page at the old value and skip every
    row between; the library reads the key values the database returned (labelled columns), so
    the walk gathers every row once. This is why a page selects its key columns again, a cost
    measured in the benchmark (pagination/README.md, "Speed beside sqlakeyset")."""
    sort = Keyset("ranked", Ranked.rank, Ranked.id)
    with engine.begin() as conn:
        conn.execute(delete(Ranked))
        conn.execute(insert(Ranked), [{"id": i, "rank": 10 * i} for i in range(1, 21)])
    try:
        with Session(engine, expire_on_commit=False) as session:
            held = {r.id: r for r in session.scalars(select(Ranked))}
            session.commit()  # the objects stay in the identity map, unexpired
            with engine.begin() as conn:  # another writer moves row 20 (rank 200) to third place
                conn.execute(update(Ranked).where(Ranked.id == 20).values(rank=25))
            first = paginate(session, select(Ranked), sort, limit=3, codec=CODEC)
            assert [r.id for r in first.items] == [1, 2, 20]
            assert held[20].rank == 200, "the ORM refreshed a held object: nothing is tested"
            seen, page = [r.id for r in first.items], first
            while page.has_more:
                page = paginate(session, select(Ranked), sort, limit=3, codec=CODEC, after=page.next_cursor)
                seen += [r.id for r in page.items]
        assert seen == [1, 2, 20, *range(3, 20)], seen
    finally:
        with engine.begin() as conn:
            conn.execute(delete(Ranked))
