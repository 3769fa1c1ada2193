"""Finding things on the server, on every engine: search (an order number, or the start of any
word of a name, case- and accent-insensitive), cursors bound to the search, End as the first
page of the reverse order, and the estimates within 10% of the truth through writes that move
the status mix (no ANALYZE)."""

from __future__ import annotations

import datetime as dt
import random
import re
from decimal import Decimal
from html import unescape

import pytest
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session
from werkzeug.http import parse_options_header

from orders.data.models import STATUSES, Order
from orders.data.names import name_key
from orders.data.seed import CUSTOMERS, seed_orders
from orders.finding import reader
from orders.finding.estimates import Estimates, estimate, rounded

from .helpers import BASE, add_orders, walk_api

ROW_ID = re.compile(r'<tr id="order-\d+" data-id="(\d+)"')
# An estimate must be within this share of the true count, either way, after any writes.
TOLERANCE = 0.10


def seed_names(engine, per_name: int = 4) -> list[int]:
    rows = [
        (BASE - dt.timedelta(minutes=i), CUSTOMERS[i % len(CUSTOMERS)], Decimal(i % 50), "paid")
        for i in range(per_name * len(CUSTOMERS))
    ]
    return add_orders(engine, rows)


@pytest.mark.parametrize("typed", ["úrs", "URS", "Ursula", "  ursULA   fr"])
def test_search_by_name_is_a_case_and_accent_insensitive_prefix(client, engine, typed):
    seed_names(engine)
    for sort in ("newest", "customer", "amount"):
        items = walk_api(client, q=typed, sort=sort, limit=3)
        assert {i["customer"] for i in items} == {"Úrsula Freitas"}, sort
        assert len(items) == 4


def test_search_finds_the_start_of_any_word_not_the_middle(client, engine):
    seed_names(engine)
    assert {i["customer"] for i in walk_api(client, q="ana")} == {"Ana Souza"}
    assert {i["customer"] for i in walk_api(client, q="Freitas")} == {"Úrsula Freitas"}  # a surname
    assert {i["customer"] for i in walk_api(client, q="fre urs", sort="customer")} == {"Úrsula Freitas"}
    assert {i["customer"] for i in walk_api(client, q="so")} == {"Ana Souza", "Sofia Cardoso"}
    assert walk_api(client, q="ouza") == []  # the start of a word, not its middle (docs/finding.md)
    assert walk_api(client, q="ana lima") == []  # every word typed must be found
    assert (
        len(walk_api(client, q="ana", status="paid")) == 4
        and walk_api(client, q="ana", status="pending") == []
    )


def test_a_cursor_is_bound_to_its_search(client, engine):
    seed_names(engine)
    first = client.get("/api/orders", query_string={"q": "a", "limit": 2}).json
    assert first["has_more"]
    other = client.get("/api/orders", query_string={"q": "b", "after": first["next_cursor"]})
    assert other.status_code == 400
    unfiltered = client.get("/api/orders", query_string={"after": first["next_cursor"]})
    assert unfiltered.status_code == 400


def test_a_filtered_walk_while_others_insert_and_delete(client, engine):
    seed_names(engine, per_name=12)
    rng = random.Random(17)
    with Session(engine) as session:
        matching = set(session.scalars(select(Order.id).where(Order.customer_key.startswith("ana"))))
    deleted: set[int] = set()

    def others_write() -> None:
        for minutes in (-1, rng.randint(0, 40), 200):
            order = {"customer": rng.choice(["ana maria", "Bruno", "Ána Z"]), "amount": "1.00"}
            order["created_at"] = (BASE - dt.timedelta(minutes=minutes)).isoformat()
            assert client.post("/api/orders", json=order).status_code == 201
        victim = rng.choice(sorted(matching - deleted))
        assert client.delete(f"/api/orders/{victim}").status_code == 204
        deleted.add(victim)

    for sort in ("newest", "customer"):
        deleted.clear()
        seen = walk_api(client, others_write, q="ÁNA", sort=sort, limit=3)
        got = [int(i["id"]) for i in seen]
        assert len(got) == len(set(got)), "a row was returned twice"
        assert matching - deleted <= set(got), "a matching row that existed throughout was skipped"
        assert all(name_key(i["customer"]).startswith("ana") for i in seen)
        matching -= deleted


def test_an_order_number_opens_that_order_or_says_it_is_not_there(client, engine):
    ids = seed_names(engine, per_name=1)
    response = client.get("/orders", query_string={"q": f"#{ids[3]}"})
    assert response.status_code == 303 and response.headers["Location"].endswith(f"/orders/{ids[3]}")
    assert client.get("/orders", query_string={"q": str(ids[3])}).status_code == 303
    missing = client.get("/orders", query_string={"q": "999999"})
    assert missing.status_code == 404
    html = missing.get_data(as_text=True)
    assert "There is no order #999999" in html and 'name="q"' in html and 'value="999999"' in html
    # The API keeps just that order.
    assert [int(i["id"]) for i in walk_api(client, q=str(ids[3]))] == [ids[3]]


@pytest.mark.parametrize(
    "query", ["q=" + "a" * 65, "q=%CC%81", "q=a&q=b", "q=a+b+c+d+e+f+g+h+i+j+k", "q=!!!"]
)
def test_bad_searches_are_400(client, query):
    response = client.get("/api/orders?" + query)
    assert response.status_code == 400 and response.json["error"]["code"] == "invalid_parameter"


# Searches the app refuses, and what the box says of each (its own sentence; the API's 400 names q).
REFUSED = {
    "a b c d e f g h i j k": "Search takes at most 10 words, not 11.",
    "!!!": "Search needs letters or digits: the rest only separates words.",
    "---": "Search needs letters or digits: the rest only separates words.",
    "a" * 65: "Search takes an order number or a name of at most 64 characters, not 65.",
}


@pytest.mark.parametrize("typed", list(REFUSED))
def test_a_search_the_app_refuses_is_the_boxs_message_over_the_list(client, engine, typed):
    # A user trial: 11 words, or no letters at all, replaced the whole list page with a 400 error
    # page. The list page stays, as for an order number no order has: the same list without the
    # search, from its top (its sort and status kept), the box keeping what was typed, marked
    # invalid and described by its message; a 400 still, since the search was not run.
    seed_names(engine)
    args = {"sort": "customer", "status": "paid"}
    unsearched = client.get("/orders", query_string=args).get_data(as_text=True)
    page = client.get("/orders", query_string={**args, "q": typed})
    html = page.get_data(as_text=True)
    assert page.status_code == 400, html[:500]
    assert ROW_ID.findall(html) == ROW_ID.findall(unsearched) != []
    message = re.search(r'<p class="field-message" id="search-message" role="alert">([^<]*)</p>', html)
    assert message is not None and message.group(1) == REFUSED[typed], html[:3000]
    box = re.search(r'<input name="q" type="search"[^>]*>', html)
    assert box is not None
    assert f'value="{typed}"' in box.group() and 'aria-invalid="true"' in box.group()
    assert 'aria-describedby="search-message"' in box.group()
    # Nothing else carries the refused search on: no form, no link (next page, Top, End, sort).
    assert html.count('name="q"') == 1 and not re.search(r'href="[^"]*[?&;]q=', html)
    assert "sort=customer" in html and "status=paid" in html
    # The API's answer is as it was: a 400 with its code, naming the parameter.
    api = client.get("/api/orders", query_string={"q": typed})
    assert api.status_code == 400 and api.json["error"]["code"] == "invalid_parameter"
    assert api.json["error"]["message"].startswith("q "), api.json
    # A fragment request gets the error row (never a page swapped into the list); a boosted
    # navigation or a history restore, the page with the message.
    fragment = client.get("/orders", query_string={"q": typed}, headers={"HX-Request": "true"})
    row = fragment.get_data(as_text=True)
    assert fragment.status_code == 400 and row.lstrip().startswith("<tr") and "error-row" in row
    for headers in ({"HX-Request": "true", "HX-Boosted": "true"}, {"HX-History-Restore-Request": "true"}):
        whole = client.get("/orders", query_string={"q": typed}, headers=headers)
        assert whole.status_code == 400 and REFUSED[typed] in whole.get_data(as_text=True), headers
    # A list opened in place (scroll-window.js open()) is not swapped on a 400: it reads the message.
    opened = client.get(
        "/orders", query_string={"q": typed}, headers={"HX-Request": "true", "HX-Request-Type": "full"}
    )
    assert opened.status_code == 400 and 'class="error-message">q ' in opened.get_data(as_text=True)
    assert client.get("/orders/new", query_string={"q": typed}).status_code == 400


# Go-to values the list cannot read, and what the Go field says of each (the API's 400 names `to`).
REFUSED_GOTO = {
    ("newest", "2026-02-30"): "Go to takes a real date and time, not '2026-02-30'.",
    ("newest", "yesterday"): "Go to takes a date (2026-03-11) or a date and time (2026-03-11 14:30), "
    "not 'yesterday'.",
    ("amount", "12,34,5"): "Go to takes an amount like 1234.50, 1,234.50 or 1234,50 (thousands in "
    "groups of three), not '12,34,5'.",
    ("customer", "!!!"): "Go to needs letters or digits: the rest only separates words.",
}


@pytest.mark.parametrize(("sort", "typed"), list(REFUSED_GOTO))
def test_a_go_to_the_list_cannot_read_is_the_fields_message_over_the_list(client, engine, sort, typed):
    # A reader's trial without JavaScript: a mistyped date replaced the list, the bar and what was
    # typed with an error page, and its words were the API's ("to is not a real date and time").
    # The list page stays, as for a refused search: the same list (its sort and status kept), the
    # Go field keeping the text, marked invalid, with the reason under it; a 400 still.
    seed_names(engine)
    args = {"sort": sort, "status": "paid"}
    unmoved = client.get("/orders", query_string=args).get_data(as_text=True)
    page = client.get("/orders", query_string={**args, "to": typed})
    html = unescape(page.get_data(as_text=True))
    assert page.status_code == 400, html[:500]
    assert ROW_ID.findall(html) == ROW_ID.findall(unmoved) != []
    message = re.search(r'<p class="field-message" id="jump-message"[^>]*>([^<]*)</p>', html)
    assert message is not None and message.group(1) == REFUSED_GOTO[sort, typed], html[:3000]
    field = re.search(r'<input name="to"[^>]*>', html)
    assert (
        field is not None and f'value="{typed}"' in field.group() and 'aria-invalid="true"' in field.group()
    )
    assert (sort == "newest" or f"sort={sort}" in html) and "status=paid" in html  # newest: the default
    # The API names the parameter; the find bar (JavaScript's open()) reads the reader's sentence.
    api = client.get("/api/orders", query_string={"sort": sort, "to": typed})
    assert api.status_code == 400 and api.json["error"]["message"].startswith("to "), api.json
    opened = client.get(
        "/orders",
        query_string={"sort": sort, "to": typed},
        headers={"HX-Request": "true", "HX-Request-Type": "full"},
    )
    said = unescape(opened.get_data(as_text=True))
    assert opened.status_code == 400 and f'class="error-message">{REFUSED_GOTO[sort, typed]}' in said


def test_a_refused_searchs_page_when_the_database_does_not_answer_is_the_503(client, monkeypatch):
    # That page is read in an error handler, where an exception is a bare 500 unless answered.
    def no_connection(*args, **kwargs):
        raise PoolTimeout("no connection within the pool's timeout")

    monkeypatch.setattr(reader, "page", no_connection)
    response = client.get("/orders", query_string={"q": "!!!"})
    assert response.status_code == 503 and "Retry-After" in response.headers


@pytest.mark.parametrize("number", ["0", "#00", "99999999999999999999", "9223372036854775808"])
def test_an_order_number_no_order_can_have_is_a_search_that_finds_nothing(client, engine, number):
    # Outside the ids (0, past BIGINT) a number is still an order number, one no order has: the
    # list says so under the search box, as for a number past the last order (not an error page
    # in place of the list), and the API's walk is empty, as /api/orders/0 is a 404, not a 400.
    seed_names(engine)
    page = client.get("/orders", query_string={"q": number})
    html = page.get_data(as_text=True)
    shown = int(number.lstrip("#"))
    assert page.status_code == 404 and f"There is no order #{shown}." in html, html[:500]
    assert f"order #{shown}</span>" in html and "name word starting" not in html
    assert walk_api(client, q=number) == []
    export = client.get("/orders/export.csv", query_string={"q": number})
    assert export.status_code == 200 and export.get_data(as_text=True).count("\n") == 1  # the header alone


def test_the_export_of_a_search_is_named_for_it(client, engine):
    # A search's CSV was saved as orders-newest.csv, the whole list's name: the name says it is
    # filtered, by the words typed made safe for a header and a file system (letters and digits,
    # joined by "-"); not ASCII, an ASCII name for old clients and the name itself as filename*
    # (RFC 6266, RFC 5987).
    seed_names(engine)

    def disposition(**args: str) -> str:
        response = client.get("/orders/export.csv", query_string=args)
        assert response.status_code == 200, response.get_data(as_text=True)[:300]
        return response.headers["Content-Disposition"]

    assert disposition() == 'attachment; filename="orders-newest.csv"'
    assert disposition(sort="customer", status="paid") == 'attachment; filename="orders-customer-paid.csv"'
    assert disposition(q="fre  URS") == 'attachment; filename="orders-newest-search-fre-URS.csv"'
    assert disposition(q="#12") == 'attachment; filename="orders-newest-search-12.csv"'
    assert disposition(q="Úrsula", status="paid") == (
        'attachment; filename="orders-newest-paid-search-Ursula.csv"; '
        "filename*=UTF-8''orders-newest-paid-search-%C3%9Arsula.csv"
    )
    assert disposition(q="李 ana") == (
        'attachment; filename="orders-newest-search-ana.csv"; '
        "filename*=UTF-8''orders-newest-search-%E6%9D%8E-ana.csv"
    )
    assert disposition(q="李") == (
        'attachment; filename="orders-newest-search.csv"; '
        "filename*=UTF-8''orders-newest-search-%E6%9D%8E.csv"
    )
    # Quotes, separators and paths typed end nowhere but between words.
    hostile = disposition(q='ana"; filename=x.exe /../\\ \u202e')
    assert hostile == 'attachment; filename="orders-newest-search-ana-filename-x-exe.csv"'
    assert parse_options_header(hostile) == (
        "attachment",
        {"filename": "orders-newest-search-ana-filename-x-exe.csv"},
    )
    # A long search is cut to a name a file system keeps.
    long = parse_options_header(disposition(q="Maximiliano " * 5))[1]["filename"]
    assert long == "orders-newest-search-Maximiliano-Maximiliano-Maximiliano-Maxi.csv"


def test_the_search_term_is_in_the_url_and_the_box(client, engine):
    seed_names(engine)
    html = client.get("/orders", query_string={"q": "Úrs", "sort": "customer"}).get_data(as_text=True)
    assert 'value="Úrs"' in html
    # Sort/status, go to, Top and End keep the search.
    assert html.count('name="q" value="Úrs"') >= 2
    assert re.search(r'href="[^"]*q=%C3%9Ars[^"]*"[^>]*data-find="end"', html)


@pytest.mark.parametrize("sort", ["newest", "oldest", "amount", "customer"])
def test_end_is_the_last_rows_in_one_page(client, engine, sort):
    seed_names(engine)  # 100 orders, 20 a page
    html = client.get("/orders", query_string={"sort": sort}).get_data(as_text=True)
    end = re.search(r'href="([^"]+)"[^>]*data-find="end"', html).group(1).replace("&amp;", "&")
    last = client.get(end).get_data(as_text=True)
    api = walk_api(client, sort=sort, limit=100)
    assert [int(i) for i in ROW_ID.findall(last)] == [int(i["id"]) for i in api[-20:]]
    assert 'id="end-of-list"' in last and 'id="less"' in last  # the end, and a way up from it


def within_tolerance(session: Session) -> Estimates:
    """The estimates, checked against COUNT(*) (here only: the app never counts)."""
    found = estimate(session)
    truth = session.scalar(select(func.count()).select_from(Order))
    by_status = dict(session.execute(select(Order.status, func.count()).group_by(Order.status)).all())
    assert abs(found.total - truth) <= TOLERANCE * truth, (found, truth)
    assert abs(rounded(found.total) - truth) <= TOLERANCE * truth, (rounded(found.total), truth)
    for status in STATUSES:
        true = by_status.get(status, 0)
        assert abs(found.by_status[status] - true) <= TOLERANCE * true, (status, found, by_status)
    return found


def test_estimates_hold_after_seeding_and_after_writes_that_move_the_status_mix(client, engine):
    from .fixtures import clear

    clear(engine)
    with Session(engine) as session:
        seed_orders(session, 20_000)
        within_tolerance(session)
    # 5% new orders, all pending: some through the API, most by a bulk Core INSERT.
    for _ in range(20):
        assert client.post("/api/orders", json={"customer": "New Buyer", "amount": "5.00"}).status_code == 201
    new = [
        {"customer": "Bulk Buyer", "amount": Decimal(1), "status": "pending", "created_at": BASE}
        for _ in range(980)
    ]
    with Session(engine) as session:
        session.execute(insert(Order), new)
        session.commit()
        pending = within_tolerance(session).by_status["pending"]
        assert pending >= 2500 + 1000  # the seed's eighth, and every new one
        # Statuses change (pending orders paid) and one status's orders are deleted.
        paid = update(Order).where(Order.status == "pending", Order.id % 2 == 0).values(status="paid")
        session.execute(paid)
        session.execute(delete(Order).where(Order.status == "cancelled", Order.id % 3 > 0))
        session.commit()
        within_tolerance(session)
        # A rolled-back write counts for nothing.
        session.execute(delete(Order).where(Order.status == "shipped"))
        session.rollback()
        within_tolerance(session)


def test_the_page_shows_estimates_labelled_as_such(client, engine):
    seed_names(engine)
    html = client.get("/orders").get_data(as_text=True)
    assert re.search(r"about [0-9,]+ orders", html) and "estimate" in html.lower()
    assert rounded(123_456) == 120_000 and rounded(87) == 87 and rounded(1_950) == 2_000
    # The Status control says about how many orders each status has, but the chosen one: that is
    # the estimate beside the title, and its name alone fits its box on a phone (390 px, 200%).
    assert re.fullmatch(r"Paid \(about [0-9,]+\)", status_options(html)["paid"])
    assert status_options(html)[""] == "Any status"
    chosen = status_options(client.get("/orders?status=paid").get_data(as_text=True))
    assert chosen["paid"] == "Paid" and re.fullmatch(r"Any status \(about [0-9,]+\)", chosen[""])


def status_options(html: str) -> dict[str, str]:
    """The Status control's options: value to the text shown."""
    select = html[html.index('<select name="status">') :]
    return dict(
        re.findall(r'<option value="(\w*)"[^>]*>([^<]*)</option>', select[: select.index("</select>")])
    )


def test_words_never_together_are_read_in_bounded_windows_and_the_walk_loses_nothing(
    client, engine, monkeypatch
):
    """When the names cannot tell (every word common in names: more than NAMES_READ each), a
    search of several words reads at most SEARCH_WINDOW entries of its rarest word's range per
    page: where they hold no match the page is empty and its cursor goes on past them, so a
    search of common words never found together costs a window per page, not the table."""
    from orders.finding import named, search_window

    seed_names(engine, per_name=8)  # 200 orders, each name 8 times
    monkeypatch.setattr(search_window, "SEARCH_WINDOW", 5)
    monkeypatch.setattr(named, "NAMES_READ", 1)  # every word "common": the names do not decide
    first = client.get("/api/orders", query_string={"q": "ana fre", "limit": 3}).json
    assert first["items"] == [] and first["has_more"], first  # 5 of Ana's 8 orders read, none is Freitas
    assert walk_api(client, q="ana fre", limit=3) == []
    # Found together ("Ana Souza"): the same rows as one word alone, in order, across the windows.
    assert walk_api(client, q="sou ana", limit=3) == walk_api(client, q="souza", limit=3)
    assert len(walk_api(client, q="sou ana", limit=3)) == 8


def test_words_no_name_holds_together_answer_no_match_in_one_request(client, engine, monkeypatch):
    """ "ana fre": both words are held (Ana Souza, Úrsula Freitas), never by one name. The names
    say so before any order is read: the first request is the whole answer, an empty page with
    has_more false (the API) and "No orders match." (the page), however many orders each word
    has (the window made as small as 5 entries stands for a table far larger than it)."""
    from orders.finding import search_window

    seed_names(engine, per_name=8)
    monkeypatch.setattr(search_window, "SEARCH_WINDOW", 5)
    for sort in ("newest", "amount", "customer"):
        for q in ("ana fre", "FRE ána", "ana souza freitas", "urs sou"):
            body = client.get("/api/orders", query_string={"q": q, "sort": sort, "limit": 3}).json
            assert body["items"] == [] and body["has_more"] is False, (q, sort, body)
    html = client.get("/orders", query_string={"q": "ana fre"}).get_data(as_text=True)
    assert 'id="end-of-list"' in html and "No orders match." in html
    fragment = client.get("/orders", query_string={"q": "ana fre"}, headers={"HX-Request": "true"})
    assert "No orders match." in fragment.get_data(as_text=True)


def test_a_few_matches_scattered_among_a_common_word_come_in_the_first_request(client, engine, monkeypatch):
    """Three "Ana Freitas" orders spread among 200 others, 8 of them Ana's: the first page holds
    all three (their name's orders, read by name), not a window of Ana's orders at a time."""
    from orders.finding import search_window

    seed_names(engine, per_name=8)
    monkeypatch.setattr(search_window, "SEARCH_WINDOW", 5)
    scattered = add_orders(
        engine,
        [(BASE - dt.timedelta(minutes=m), "Ána Freitas", Decimal(m), "paid") for m in (3, 97, 190)],
    )
    for sort in ("newest", "oldest", "amount", "customer"):
        body = client.get("/api/orders", query_string={"q": "fre ana", "sort": sort, "limit": 10}).json
        assert sorted(int(i["id"]) for i in body["items"]) == sorted(scattered), (sort, body)
        assert body["has_more"] is False
    # Paged two at a time: the same three in order, and the cursors work across the pages.
    assert [int(i["id"]) for i in walk_api(client, q="fre ana", limit=2)] == scattered  # newest first
    assert len(walk_api(client, q="ana", limit=50)) == 8 + 3


PEOPLE = [
    "Łukasz Nowak",
    "Lukasz Lis",
    "O'Brien",
    "O’Brien Mac",
    "Ana Obrien",
    "Jean-Luc Picard",
    "王小明",
    "Søren Ørsted",
    "Þór Guðmundsson",
    "Luiz Costa",
    "Zeca Batista",
]


@pytest.mark.parametrize(
    ("typed", "found"),
    [
        ("lukasz", {"Łukasz Nowak", "Lukasz Lis"}),  # no Polish keyboard
        ("Łukasz", {"Łukasz Nowak", "Lukasz Lis"}),
        ("obrien", {"O'Brien", "O’Brien Mac", "Ana Obrien"}),
        ("o'brien", {"O'Brien", "O’Brien Mac", "Ana Obrien"}),  # the one word "obrien"
        ("O’Brien", {"O'Brien", "O’Brien Mac", "Ana Obrien"}),
        ("o brien", {"O'Brien", "O’Brien Mac"}),
        ("brien", {"O'Brien", "O’Brien Mac"}),
        ("jeanluc", {"Jean-Luc Picard"}),
        ("jean-luc", {"Jean-Luc Picard"}),
        ("luc", {"Jean-Luc Picard"}),
        ("小明", {"王小明"}),
        ("soren orsted", {"Søren Ørsted"}),
        ("thor gudmundsson", {"Þór Guðmundsson"}),
    ],
)
def test_names_are_found_as_readers_type_them(client, engine, typed, found):
    """Letters with a stroke or ligature folded as accents are, an apostrophe or hyphen inside a
    name joining its words (as well as separating them), a CJK name found from any character."""
    add_orders(
        engine, [(BASE - dt.timedelta(minutes=i), name, Decimal(i), "paid") for i, name in enumerate(PEOPLE)]
    )
    for sort in ("newest", "customer"):
        assert {i["customer"] for i in walk_api(client, q=typed, sort=sort, limit=2)} == found, sort


def test_folded_names_sort_among_their_latin_letters(client, engine):
    """Łukasz sorts among the L names and Ørsted among the O names in "Customer A–Z", not after Z."""
    add_orders(
        engine, [(BASE - dt.timedelta(minutes=i), name, Decimal(i), "paid") for i, name in enumerate(PEOPLE)]
    )
    names = [i["customer"] for i in walk_api(client, sort="customer", limit=4)]
    assert names == sorted(PEOPLE, key=name_key)
    assert (
        names.index("Luiz Costa")
        < names.index("Lukasz Lis")
        < names.index("Łukasz Nowak")
        < names.index("O'Brien")
    )
    assert (
        names.index("O’Brien Mac")
        < names.index("Søren Ørsted")
        < names.index("Zeca Batista")
        < names.index("王小明")
    )
