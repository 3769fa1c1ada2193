"""Search by any word, against Python: on every engine, a searched walk in any sort returns
exactly the orders a Python filter over every row keeps, in the sort's order, for names in many
scripts (Latin with accents, Greek, Cyrillic, CJK, Arabic, combining marks, several spaces,
hyphens, apostrophes); with orders inserted and deleted between its pages it loses nothing that
existed throughout and returns no order twice. The words table is written with every order:
ORM, seed, migration."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete, select, text
from sqlalchemy.orm import Session

from orders.data.db import make_engine, migrate
from orders.data.models import STATUSES, Order, OrderWord
from orders.data.names import KEY_LENGTH, WORD_PREFIX, name_key, name_words, normalized_name, word_prefixes
from orders.data.words import index_orders
from orders.finding import reader
from orders.finding.request import ListRequest
from orders.finding.search import Search, SearchError, query_words
from orders.finding.sorts import SORTS
from pagination import CursorCodec

from .databases import ENGINES, throwaway_database
from .fixtures import clear
from .helpers import BASE, add_orders, name_strategies
from .hunt import examples

SCRIPTS = (
    "aAáÁàÀâãäçÇéÉêíóôõúÚüßñÑøÅ"  # Latin with accents
    "ŁłØĐđðĦŦĿŀıÆæŒœÞþĸƏɛ"  # Latin letters NFKD leaves whole (folded: "Ł" is "l", "Æ" "ae")
    "ΩωαβγΆέήΪ"  # Greek
    "БбЖжЯяЁёЙ"  # Cyrillic
    "日本山田太郎李王小明김민준やまだ"  # CJK: Han, Hangul, kana
    "محمدعليى"  # Arabic
    "\u0301\u0308\u0327\u0903"  # combining marks (acute, diaeresis, cedilla; a spacing Devanagari sign)
    "  -'’ʼ`·‐–."  # spaces, hyphens, apostrophes, a middle dot, a dot
)
raw_names, customer_names = name_strategies(SCRIPTS, 20)
# The characters of scripts written without spaces, by the start of their Unicode names.
CJK_NAMES = (
    "CJK",
    "HIRAGANA",
    "KATAKANA",
    "HENTAIGANA",
    "HANGUL CHOSEONG",  # a Hangul syllable's first jamo, after NFKD
    "IDEOGRAPHIC ITERATION MARK",
    "IDEOGRAPHIC CLOSING MARK",
    "IDEOGRAPHIC NUMBER ZERO",
)


def matches(query: str, customer: str) -> bool:
    """The rule, written apart from the code (docs/finding.md, "Search"): each word of the query
    is the start of what can be read in the name's key from a place a word starts, compared on
    its first WORD_PREFIX characters. The query's words: its key's letters, digits and marks,
    an apostrophe between two of them dropped, anything else (a hyphen too) separating. In the
    name, an apostrophe or hyphen between two letters joins; from a word's start after a space
    the reading skips both ("jean-luc" reads "jeanluc"), after a hyphen it skips apostrophes up to
    the next hyphen ("smith-o'brien" reads "obrien" from "o"), after an apostrophe it stops at
    either ("brien"); in CJK every character of such a reading's first WORD_PREFIX starts one too
    (what is read from there, to the WORD_PREFIXth)."""

    def word_char(ch: str) -> bool:
        return unicodedata.category(ch)[0] in "LNM"

    def cjk(ch: str) -> bool:
        return unicodedata.name(ch, "").startswith(CJK_NAMES)

    def joins(text: str, i: int) -> bool:  # an apostrophe or hyphen between two word characters
        return text[i] in "'-" and 0 < i < len(text) - 1 and word_char(text[i - 1]) and word_char(text[i + 1])

    key = normalized_name(customer)  # the whole name, not its key (cut at KEY_LENGTH characters)

    def read(i: int, skipped: str) -> str:
        text = ""
        while i < len(key) and (word_char(key[i]) or (key[i] in skipped and joins(key, i))):
            text += key[i] if word_char(key[i]) else ""
            i += 1
        return text

    readings = []
    for i, ch in enumerate(key):
        if not word_char(ch):
            continue
        word_start = i == 0 or not word_char(key[i - 1])
        after_space = word_start and (i == 0 or not joins(key, i - 1))
        after_hyphen = after_space or (word_start and key[i - 1] == "-")
        for starts, skipped in ((word_start, ""), (after_hyphen, "'"), (after_space, "'-")):
            if starts:
                reading = read(i, skipped)[:WORD_PREFIX]
                readings += [reading[j:] for j in range(len(reading)) if j == 0 or cjk(reading[j])]
    typed = name_key(query)
    kept = "".join(
        "" if ch == "'" and joins(typed, i) else ch if word_char(ch) else " " for i, ch in enumerate(typed)
    )
    return all(any(r.startswith(w[:WORD_PREFIX]) for r in readings) for w in kept.split())


def sort_key(sort: str, row: Any) -> Any:
    stamp = row.created_at.timestamp()
    return {
        "newest": (-stamp, -row.id),
        "oldest": (stamp, row.id),
        "amount": (-row.amount, -row.id),
        "customer": (name_key(row.customer), row.id),
    }[sort]


def typed_from(name: str, data: st.DataObject) -> str:
    """What a person might type for this name: the start of one of its words, or of its words
    joined where an apostrophe or hyphen joins them ("obrien", "jeanluc"), any case."""
    words = [w for w in re.split(r"[\s\-‐–'’ʼ`·.]+", name) if w]
    words += [re.sub(r"[\-‐–'’ʼ`·]", "", w) for w in name.split()]
    word = data.draw(st.sampled_from(words)) if words else name
    typed = word[: data.draw(st.integers(1, max(1, len(word))))]
    return data.draw(st.sampled_from([typed, typed.upper(), typed.lower()]))


def walk(engine: Engine, codec: CursorCodec, listing: ListRequest, between_pages: Any) -> list[Any]:
    seen: list[Any] = []
    after = None
    while True:
        with Session(engine) as session:
            page = reader.page(replace(listing, codec=codec).at(after), session)
        seen += page.items
        if not page.has_more:
            return seen
        between_pages()
        after = page.next_cursor


def test_words_of_a_name_and_of_a_query() -> None:
    assert word_prefixes(name_key("Jean-Luc O'Brien")) >= {"j", "jean", "l", "luc", "o", "b", "brien"}
    assert "jean-" not in word_prefixes(name_key("Jean-Luc"))
    # Joined at an apostrophe or a hyphen, a name is found by its words written together too.
    assert word_prefixes(name_key("Jean-Luc O’Brien")) >= {"jeanluc", "obrien", "obr"}
    assert word_prefixes(name_key("Smith-O'Brien")) >= {"smithobrien", "obrien", "smith", "brien"}
    assert "lucobrien" not in word_prefixes(name_key("Jean-Luc O'Brien"))  # not across a space
    # A query joins at an apostrophe and splits at a hyphen: "o'brien" is one word, as typed.
    for typed, words in {
        "o'brien": ("obrien",),
        "O’Brien": ("obrien",),
        "o brien": ("brien", "o"),
        "jean-luc": ("jean", "luc"),
        "jeanluc": ("jeanluc",),
        "Łukasz": ("lukasz",),
        "小明": ("小明",),
    }.items():
        assert query_words(name_key(typed)) == words, typed
    # Each CJK character starts a word: 王小明 is found by 小明 (a Hangul syllable too).
    assert word_prefixes(name_key("王小明")) == {"王", "王小", "王小明", "小", "小明", "明"}
    assert set(query_words(name_key("민준"))) <= word_prefixes(name_key("김민준"))
    assert word_prefixes(name_key("Łukasz")) == word_prefixes("lukasz")
    assert word_prefixes(name_key("Ana Alves")) == {"a", "an", "ana", "al", "alv", "alve", "alves"}
    assert max(map(len, word_prefixes("x" * 40))) == WORD_PREFIX
    assert query_words(name_key("Ú a  ANA an-fr")) == ("ana", "fr", "u")  # implied words dropped
    assert query_words(name_key("山田 太郎")) == ("太郎", "山田")
    assert Search.parse("Freitas") == Search("Freitas", words=("freitas",))
    for bad in ("- '", "a b c d e f g h i j k"):  # 11 words: at most MAX_WORDS (10)
        with pytest.raises(SearchError):
            Search.parse(bad)


@settings(
    max_examples=examples(20),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(st.lists(customer_names, min_size=1, max_size=20), st.sampled_from(list(SORTS)), st.data())
@example(
    [
        "Úrsula Freitas",
        "Jean-Luc O'Brien",
        "Ωμέγα  Άλφα",
        "Борис Ёлкин",
        "山田 太郎",
        "محمد علي",
        "José\u0301",
        "Łukasz O’Brien",
        "王小明",
        "Þór Ægisson",
    ],
    "customer",
    None,
)
def test_a_searched_walk_is_the_python_filter_of_every_row(engine, codec, customers, sort, data):
    clear(engine)
    rows = [
        (BASE - dt.timedelta(minutes=i % 5), name, Decimal(i % 4), STATUSES[i % 4])
        for i, name in enumerate(customers)
    ]
    add_orders(engine, rows)
    if data is None:  # the explicit example: every name is found by the start of each of its words
        for name in customers:
            for word in re.split(r"[\s\-'’]+", name):
                listing = ListRequest(sort, None, 2, Search.parse(word[:3].upper()))
                found = {r.customer for r in walk(engine, codec, listing, lambda: None)}
                assert name in found, (word, found)
        # As readers type them: without the letter's stroke, the apostrophe or the first character.
        for typed, name in {
            "lukasz": "Łukasz O’Brien",
            "obrien": "Łukasz O’Brien",
            "o'brien": "Łukasz O’Brien",
            "o brien": "Łukasz O’Brien",
            "jeanluc": "Jean-Luc O'Brien",
            "小明": "王小明",
            "thor aegis": "Þór Ægisson",
        }.items():
            listing = ListRequest(sort, None, 2, Search.parse(typed))
            assert name in {r.customer for r in walk(engine, codec, listing, lambda: None)}, typed
        return
    typed = data.draw(st.one_of(st.builds(typed_from, st.sampled_from(customers), st.just(data)), raw_names))
    try:
        search = Search.parse(typed)
    except SearchError:
        search = None
    assume(search is not None and search.words)
    assert search is not None
    limit = data.draw(st.integers(1, 4))
    listing = ListRequest(sort, None, limit, search)

    with Session(engine) as session:
        before = session.execute(select(Order)).scalars().all()
        before_rows = {o.id: o for o in before}
        session.expunge_all()
    deleted: set[int] = set()

    def others_write() -> None:
        # Inserted: one whose name has the typed word, one drawn; deleted: one that was there.
        more = [data.draw(customer_names), f"{data.draw(customer_names)[:10]} {typed}"]
        when = BASE - dt.timedelta(minutes=data.draw(st.integers(0, 6)))
        add_orders(engine, [(when, name, Decimal(2), "paid") for name in more])
        alive = sorted(set(before_rows) - deleted)
        if alive:
            victim = data.draw(st.sampled_from(alive))
            with Session(engine) as session:
                session.execute(delete(Order).where(Order.id == victim))
                session.commit()
            deleted.add(victim)

    got = walk(engine, codec, listing, others_write)
    ids = [r.id for r in got]
    assert len(ids) == len(set(ids)), "an order was returned twice"
    assert all(matches(typed, r.customer) for r in got), [r.customer for r in got]
    throughout = {i for i, o in before_rows.items() if i not in deleted and matches(typed, o.customer)}
    assert throughout <= set(ids), "an order that matched throughout was skipped"
    assert [sort_key(sort, r) for r in got] == sorted(sort_key(sort, r) for r in got)

    # Now nobody writes: the walk is exactly the Python filter over every row, in order.
    with Session(engine) as session:
        every = session.execute(select(Order)).scalars().all()
    expected = sorted((o for o in every if matches(typed, o.customer)), key=lambda o: sort_key(sort, o))
    assert [r.id for r in walk(engine, codec, listing, lambda: None)] == [o.id for o in expected]
    # And the table holds exactly each order's prefixes (written with each, deleted with each).
    with Session(engine) as session:
        stored = {tuple(r) for r in session.execute(select(OrderWord.id, OrderWord.word))}
    assert stored == {(o.id, w) for o in every for w in word_prefixes(o.customer_key)}


@pytest.fixture(params=ENGINES)
def empty_url(request: pytest.FixtureRequest, tmp_path) -> Any:
    with throwaway_database(request.param, tmp_path, "words") as url:
        yield url


def test_migration_0004_fills_words_and_counts_of_the_rows_already_there(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        migrate(engine, "0003")
        names = ["Úrsula Freitas", "Jean-Luc O'Brien", "Борис", "山田 太郎"] * 1302  # more than a batch
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO orders (customer, customer_key, amount, status, created_at) "
                    "VALUES (:c, :k, 1, :s, :t)"
                ),
                [
                    {"c": n, "k": name_key(n), "s": STATUSES[i % 3], "t": BASE.replace(tzinfo=None)}
                    for i, n in enumerate(names)
                ],
            )
        migrate(engine)
        with Session(engine) as session:
            stored = session.execute(select(OrderWord.id, OrderWord.word)).all()
            keys = dict(session.execute(select(Order.id, Order.customer_key)).all())
            counts = dict(
                session.execute(text("SELECT status, SUM(n) FROM order_counts GROUP BY status")).all()
            )
        assert sorted(map(tuple, stored)) == sorted((i, w) for i, k in keys.items() for w in word_prefixes(k))
        assert {s: int(n) for s, n in counts.items()} == {STATUSES[i]: len(names) // 3 for i in range(3)}
    finally:
        engine.dispose()


# 59 characters; its key is cut at KEY_LENGTH after "ß" became "ss": "... gross gmb".
LONG_NAME = "Weißgerber Großhandel Süßwaren Straßenbau Meißner Groß GmbH"


def test_a_name_longer_than_its_key_is_found_by_its_last_word(empty_url: str) -> None:
    """Words come from the whole name, not from its key: "gmbh" finds the order written by the ORM
    (the API) and by the bulk writer (the seed's index_orders), on every engine; it found neither
    when the words were the key's."""
    assert name_key(LONG_NAME).endswith("gross gmb") and len(name_key(LONG_NAME)) == KEY_LENGTH
    engine = make_engine(empty_url)
    try:
        migrate(engine)
        with Session(engine) as session:
            session.add(Order(customer=LONG_NAME, amount=Decimal("1.00"), status="paid", created_at=BASE))
            session.commit()
        with engine.begin() as conn:
            conn.execute(
                Order.__table__.insert(),
                [
                    {
                        "customer": LONG_NAME,
                        "customer_key": name_key(LONG_NAME),
                        "amount": 2,
                        "status": "paid",
                        "created_at": BASE,
                    }
                ],
            )
            last = conn.scalar(select(Order.id).order_by(Order.id.desc()).limit(1))
            assert index_orders(conn, last, last) == len(name_words(LONG_NAME))
        for typed in ("gmbh", "GMBH meiss", "weiss gmbh"):
            with Session(engine) as session:
                listing = ListRequest("newest", None, 10, Search.parse(typed), codec=CursorCodec("k" * 32))
                page = reader.page(listing, session)
            assert [row.customer for row in page.items] == [LONG_NAME, LONG_NAME], typed
    finally:
        engine.dispose()


def test_migration_0007_writes_again_the_words_of_names_whose_key_was_cut(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        migrate(engine, "0006")
        short = "Ana Souza"
        with engine.begin() as conn:
            for name in (LONG_NAME, short):
                conn.execute(
                    text(
                        "INSERT INTO orders (customer, customer_key, amount, status, created_at) "
                        "VALUES (:c, :k, 1, 'paid', :t)"
                    ),
                    {"c": name, "k": name_key(name), "t": BASE.replace(tzinfo=None)},
                )
            # As 0006's code wrote them: from the key.
            for order_id, key in conn.execute(select(Order.id, Order.customer_key)).all():
                conn.execute(
                    OrderWord.__table__.insert(),
                    [
                        {"id": order_id, "word": w, "created_at": BASE, "amount": 1, "customer_key": key}
                        for w in sorted(word_prefixes(key))
                    ],
                )
        migrate(engine)
        with Session(engine) as session:
            words = {}
            for order_id, word in session.execute(select(OrderWord.id, OrderWord.word)).all():
                words.setdefault(order_id, set()).add(word)
            names = dict(session.execute(select(Order.id, Order.customer)).all())
        assert {names[i]: w for i, w in words.items()} == {n: name_words(n) for n in (LONG_NAME, short)}
        assert "gmbh" in name_words(LONG_NAME) and "gmbh" not in word_prefixes(name_key(LONG_NAME))
    finally:
        engine.dispose()
