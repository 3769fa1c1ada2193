"""The HTML list through the Flask test client: full pages, fragments, no-JS paging, errors."""

from __future__ import annotations

import csv
import datetime as dt
import inspect
import io
import re
from decimal import Decimal
from html import unescape

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2 import nodes
from werkzeug.datastructures import MultiDict

from orders.app import create_app
from orders.core.settings import SettingsError
from orders.data.models import LIST_ROW, Order
from orders.finding.request import ListRequest, app_codec
from orders.views.api import row_json

from . import hunt
from .fixtures import make_app
from .helpers import BASE, add_orders, delete_orders, link, seed, seed_ties

pytestmark = pytest.mark.usefixtures("app")
ROW_ID = re.compile(r'<tr id="order-\d+" data-id="(\d+)"')
VARY = {"HX-Request", "HX-Boosted", "HX-Request-Type", "HX-History-Restore-Request"}


def vary(response) -> set[str]:
    return {v.strip() for v in response.headers.get("Vary", "").split(",")}


def attr(html: str, name: str) -> list[str]:
    return [v.replace("&amp;", "&") for v in re.findall(rf' {name}="([^"]+)"', html)]


def test_root_redirects_to_the_list(client):
    response = client.get("/")
    assert response.status_code == 302 and response.headers["Location"].endswith("/orders")


def test_full_page_has_rows_sentinel_and_footer(client, engine):
    seed_ties(engine, 50)
    html = client.get("/orders").get_data(as_text=True)
    assert len(ROW_ID.findall(html)) == 20
    assert 'id="more"' in html and 'hx-get="/orders?' in html and 'hx-swap="scroll-window"' in html
    assert "<footer" in html
    # The total is unknown; indexes are not given (a window over a changing list cannot know them).
    assert 'aria-rowcount="-1"' in html and "aria-rowindex" not in html


def test_fragment_is_rows_and_the_next_control_only(client, engine):
    seed_ties(engine, 50)
    page = client.get("/orders").get_data(as_text=True)
    response = client.get(link(page, "next"), headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert vary(response) >= VARY
    fragment = response.get_data(as_text=True)
    assert "<html" not in fragment and "<footer" not in fragment
    assert len(ROW_ID.findall(fragment)) == 20
    last = client.get(link(fragment, "next"), headers={"HX-Request": "true"}).get_data(as_text=True)
    assert len(ROW_ID.findall(last)) == 10 and 'id="end-of-list"' in last


def test_a_name_with_markup_is_text_in_every_row(client, engine):
    """The rows are rendered without autoescape (templates/_rows.html escapes each value where it
    reads it): a name full of markup is shown as text, in the cell and in its title."""
    hostile = "<script>alert('x')</script> \"Q\" & <b>co</b>"
    seed_ties(engine, 30)
    add_orders(engine, [(BASE - dt.timedelta(minutes=10), hostile, Decimal("9999999999.99"), "paid")])
    page = client.get("/orders").get_data(as_text=True)
    fragment = client.get(link(page, "next"), headers={"HX-Request": "true"}).get_data(as_text=True)
    shown = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &#34;Q&#34; &amp; &lt;b&gt;co&lt;/b&gt;"
    for html in (page, fragment):
        assert "<script>alert" not in html and "<b>co" not in html
    assert f'title="{shown}">{shown}</td>' in page + fragment
    assert ">9,999,999,999.99</td>" in page + fragment


def test_after_auto_pages_the_sentinel_becomes_a_load_more_button(client, engine):
    client.application.config["AUTO_PAGES"] = 5  # an operator's setting (by default it never asks)
    seed_ties(engine, 200)
    url, kinds = "/orders", []
    for _ in range(8):
        html = client.get(url, headers={"HX-Request": "true"}).get_data(as_text=True)
        kinds.append("button" if re.search(r"<button[^>]*>Load more orders</button>", html) else "sentinel")
        url = link(html, "next")
    # Page 1 and five automatic loads, then a click, then automatic loads again.
    assert kinds == ["sentinel"] * 5 + ["button", "sentinel", "sentinel"]


def test_without_javascript_next_and_previous_links_walk_the_whole_list(client, engine):
    ids = seed_ties(engine, 95)
    seen, url, pages = [], "/orders", []
    while url:
        html = client.get(url).get_data(as_text=True)
        assert "<footer" in html
        pages.append(html)
        seen += [int(i) for i in ROW_ID.findall(html)]
        url = link(html, "next")
    assert len(seen) == len(set(seen)) == len(ids)
    back, url = [], link(pages[-1], "prev")
    while url:
        html = client.get(url).get_data(as_text=True)
        back = [int(i) for i in ROW_ID.findall(html)] + back
        url = link(html, "prev")
    assert back == seen[: len(back)] and len(back) == len(seen) - len(ROW_ID.findall(pages[-1]))


def test_bad_cursor_in_the_url_is_a_400_page_linking_to_the_top(client):
    response = client.get("/orders?after=tampered.cursor")
    assert response.status_code == 400
    html = response.get_data(as_text=True)
    assert "cursor" in html and 'href="/orders"' in html and "<footer" in html
    fragment = client.get("/orders?after=tampered.cursor", headers={"HX-Request": "true"})
    assert fragment.status_code == 400 and "<html" not in fragment.get_data(as_text=True)
    assert client.get("/orders?page=0").status_code == 400
    assert client.get("/orders?sort=nope").status_code == 400


def test_changing_sort_rejects_the_old_sorts_cursor(client, engine):
    seed_ties(engine, 50)
    next_url = link(client.get("/orders").get_data(as_text=True), "next")
    response = client.get(next_url + "&sort=amount")
    assert response.status_code == 400
    assert "sort" in response.get_data(as_text=True)


def test_new_orders_banner_counts_rows_above_the_first_row(client, engine):
    seed_ties(engine, 30)
    html = client.get("/orders").get_data(as_text=True)
    poll = re.search(r'hx-get="(/orders/new[^"]+)"', html).group(1).replace("&amp;", "&")
    assert client.get(poll).get_data(as_text=True).strip() == ""
    for n in range(3):
        client.post("/api/orders", json={"customer": f"late {n}", "amount": "1.00"})
    banner = client.get(poll).get_data(as_text=True)
    assert "3 new orders" in banner and 'href="/orders"' in banner
    # Counting below a position means nothing here: said, not silently answered with 0.
    refused = client.get(poll.replace("before=", "after="))
    assert refused.status_code == 400 and "give before" in refused.get_data(as_text=True)


def test_order_page_and_missing_order(client, engine):
    (order_id, *_) = seed_ties(engine, 1)
    assert f"Order #{order_id}" in client.get(f"/orders/{order_id}").get_data(as_text=True)
    assert client.get("/orders/999999999").status_code == 404
    assert client.get(f"/orders/{2**70}").status_code == 404


def test_csv_export_streams_every_row(client, engine):
    ids = seed_ties(engine, 2500)
    response = client.get("/orders/export.csv")
    assert response.status_code == 200 and response.mimetype == "text/csv"
    lines = response.get_data(as_text=True).splitlines()
    assert lines[0] == "id,customer,amount,status,created_at"
    assert sorted(int(line.split(",")[0]) for line in lines[1:]) == sorted(ids)
    assert client.get("/orders/export.csv?after=bad").status_code == 400


def test_database_down_is_503_with_retry_after(tmp_path):
    # A real connection attempt to a port where nothing listens: the database "went away".
    app = make_app("postgresql+psycopg://postgres@127.0.0.1:1/none")
    client = app.test_client()
    for url in ("/healthz", "/api/orders"):
        response = client.get(url)
        assert response.status_code == 503
        assert response.json["error"]["code"] == "unavailable"
        assert response.headers["Retry-After"]
        assert "psycopg" not in response.get_data(as_text=True)
    page = client.get("/orders")
    assert page.status_code == 503 and "SELECT" not in page.get_data(as_text=True)
    assert ">Try again</a>" in page.get_data(as_text=True)
    fragment = client.get("/orders", headers={"HX-Request": "true"})
    assert fragment.status_code == 503
    assert "data-retry" in fragment.get_data(as_text=True)  # asking again later can succeed


def test_production_refuses_to_start_without_a_real_secret(monkeypatch):
    monkeypatch.setenv("APP_ENV", "production")
    monkeypatch.delenv("SECRET_KEY", raising=False)
    with pytest.raises(SettingsError, match="SECRET_KEY"):
        create_app()
    monkeypatch.setenv("SECRET_KEY", "short")
    with pytest.raises(SettingsError, match="SECRET_KEY"):
        create_app()


@pytest.mark.parametrize(
    ("headers", "whole_page"),
    [
        ({}, True),
        ({"HX-Request": "true"}, False),
        ({"HX-Request": "true", "HX-Boosted": "true"}, True),
        # htmx 2 restoring history without a snapshot sends both headers: a whole page it must be.
        ({"HX-Request": "true", "HX-History-Restore-Request": "true"}, True),
        # htmx 4 restoring history (a full GET, no snapshot) sends the restore header alone.
        ({"HX-History-Restore-Request": "true"}, True),
        # htmx 4 selecting the list from the whole page (open(): Top, End, go to, the pill).
        ({"HX-Request": "true", "HX-Request-Type": "full"}, True),
        ({"HX-Request": "true", "HX-Request-Type": "partial"}, False),
    ],
)
def test_one_classification_decides_page_or_fragment_for_views_and_errors(
    client, engine, headers, whole_page
):
    seed_ties(engine, 30)
    for url, status in (("/orders", 200), ("/orders?after=tampered.cursor", 400)):
        response = client.get(url, headers=headers)
        assert response.status_code == status
        assert ("<footer" in response.get_data(as_text=True)) is whole_page, (url, headers)
        assert vary(response) >= VARY, url


def test_a_position_url_opens_the_list_at_that_row_with_links_both_ways(client, engine):
    ids = seed_ties(engine, 100)
    order = [int(i) for i in ROW_ID.findall(client.get("/orders?limit=100").get_data(as_text=True))]
    assert sorted(order) == sorted(ids)
    second = client.get(
        link(client.get("/orders").get_data(as_text=True), "next"), headers={"HX-Request": "true"}
    )
    fragment = second.get_data(as_text=True)
    # Each page's first row carries the URL that opens the list there; the first page's is the top.
    (pos,) = attr(fragment, "data-pos")
    assert attr(client.get("/orders").get_data(as_text=True), "data-pos") == ["/orders"]
    html = client.get(pos).get_data(as_text=True)
    assert [int(i) for i in ROW_ID.findall(html)] == order[20:40]
    assert link(html, "prev") and link(html, "next")
    newer = client.get(link(html, "prev")).get_data(as_text=True)
    assert [int(i) for i in ROW_ID.findall(newer)] == order[:20]
    # A before fragment is the rows above and their own top sentinel, no bottom control.
    deeper = client.get(attr(html, "data-after")[0]).get_data(as_text=True)
    above = client.get(attr(deeper, "data-before")[0], headers={"HX-Request": "true"}).get_data(as_text=True)
    assert [int(i) for i in ROW_ID.findall(above)] == order[20:40]
    assert 'id="less"' in above and 'id="more"' not in above and "end-of-list" not in above
    # Bound to sort and filters like any cursor.
    assert client.get(pos + "&sort=amount").status_code == 400
    assert client.get(pos + "&status=paid").status_code == 400


def test_load_more_is_a_button_in_a_get_form(client, engine):
    client.application.config["AUTO_PAGES"] = 5  # an operator's setting (by default it never asks)
    seed_ties(engine, 200)
    url = "/orders"
    for _ in range(6):
        html = client.get(url, headers={"HX-Request": "true"}).get_data(as_text=True)
        url = link(html, "next")
    assert re.search(r'<button type="submit" class="button">Load more orders</button>', html)
    assert not re.search(r"<a [^>]*>Load more", html)
    # Without JavaScript the form is a plain GET of the next page.
    assert len(ROW_ID.findall(client.get(url).get_data(as_text=True))) == 20


def test_a_deleted_order_says_so_and_links_back_to_the_same_place(client, engine):
    ids = seed_ties(engine, 60)
    place = "/orders?after=somewhere#order-7"
    delete_orders(engine, [ids[5]])
    for headers in (
        {"HX-Request": "true", "HX-Boosted": "true", "HX-Current-URL": "http://localhost" + place},
        {"Referer": "http://localhost/orders?after=somewhere"},
    ):
        gone = client.get(f"/orders/{ids[5]}", headers=headers)
        assert gone.status_code == 404
        html = gone.get_data(as_text=True)
        assert f"Order #{ids[5]} no longer exists" in html
        back = re.search(r'class="button back-link" href="([^"]+)"', html).group(1).replace("&amp;", "&")
        assert back == place.split("#")[0] + ("#order-7" if "HX-Current-URL" in headers else "")
    # Only this site's list is a way back: another host or path falls back to the top.
    for header in ("http://evil.example/orders?x=1", "http://localhost/api/orders", "javascript:alert(1)"):
        html = client.get(f"/orders/{ids[5]}", headers={"Referer": header}).get_data(as_text=True)
        assert 'class="button back-link" href="/orders"' in html, header
    # An order that exists links back the same way.
    html = client.get(f"/orders/{ids[6]}", headers={"Referer": "http://localhost/orders?after=x"}).get_data(
        as_text=True
    )
    assert 'href="/orders?after=x"' in html


def test_a_page_size_chosen_in_the_url_holds_for_the_pages_after_it(client, engine):
    """`limit=5` gave 5 rows, and the page after it (its Next link, its sentinel's fragment) the
    server's default: the links now keep a page size the URL chose, and leave it out otherwise."""
    seed(engine, 30)
    html = client.get("/orders?status=paid&limit=3").get_data(as_text=True)
    assert len(ROW_ID.findall(html)) == 3
    after = link(html, "next")
    assert after and "limit=3" in after and "status=paid" in after
    fragment = client.get(after, headers={"HX-Request": "true"}).get_data(as_text=True)
    assert len(ROW_ID.findall(fragment)) == 3
    assert re.search(r'hx-get="[^"]*limit=3', fragment), "the next fragment's URL lost the size"
    plain = client.get("/orders?status=paid").get_data(as_text=True)
    assert "limit=" not in (link(plain, "next") or "")


def test_a_failed_fragment_with_a_stale_cursor_links_to_its_lists_first_page(client):
    """A cursor that cannot be read (altered, another key, another list) fails the same way every
    time: the row offers the same list's first page, not a Retry that could never work."""
    query = "sort=oldest&status=paid&q=ana&after=tampered.cursor"
    response = client.get(f"/orders?{query}", headers={"HX-Request": "true"})
    html = response.get_data(as_text=True)
    assert response.status_code == 400
    assert html.lstrip().startswith("<tr") and "error-row" in html and "cursor" in html
    assert "data-retry" not in html
    assert 'href="/orders?sort=oldest&amp;status=paid&amp;q=ana">Start from the first page</a>' in html
    # A bad parameter: the top of the orders (the parameter itself may be what was wrong).
    html = client.get("/orders?sort=bogus&after=x", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert "data-retry" not in html and 'href="/orders">Start from the first page</a>' in html


def rows_of(client, url: str) -> list[tuple[str, ...]]:
    html = client.get(url).get_data(as_text=True)
    return re.findall(
        r'data-id="(\d+)".*?<td class="customer"[^>]*>([^<]*)</td>\s*'
        r'<td class="amount">([^<]*)</td>.*?datetime="([^"]+)"',
        html,
        re.S,
    )


@pytest.mark.parametrize(
    ("sort", "to", "at_or_past"),
    [
        ("newest", "2026-03-11T10:20", lambda r: r[3] <= "2026-03-11T10:20:00.000000Z"),
        ("newest", "2026-03-11", lambda r: r[3] < "2026-03-12"),
        ("oldest", "2026-03-11T10:20", lambda r: r[3] >= "2026-03-11T10:20:00.000000Z"),
        # As the API writes created_at, and with a zone of its own (which wins over tz).
        ("newest", "2026-03-11T10:20:00.000000Z", lambda r: r[3] <= "2026-03-11T10:20:00.000000Z"),
        ("oldest", "2026-03-11T12:20:00.5%2B02:00&tz=-60", lambda r: r[3] >= "2026-03-11T10:20:00.500000Z"),
        ("amount", "4.50", lambda r: Decimal(r[2].replace(",", "")) <= Decimal("4.50")),
        ("customer", "cust3", lambda r: r[1] >= "cust3"),
    ],
)
def test_go_to_a_value_opens_the_list_at_the_first_row_at_or_past_it(client, engine, sort, to, at_or_past):
    seed_ties(engine, 300)
    response = client.get(f"/orders?sort={sort}&to={to}")
    assert response.status_code == 303
    position = response.headers["Location"]
    assert "after=" in position and "to=" not in position
    rows = rows_of(client, position)
    assert rows and at_or_past(rows[0])
    # The row just above it (the page before) is not: it is the first one at or past the value.
    html = client.get(position).get_data(as_text=True)
    above = link(html, "prev")
    if above:
        assert not at_or_past(rows_of(client, above)[-1])


@pytest.mark.parametrize(
    "query",
    [
        "to=yesterday",
        "to=2026-02-30",
        "to=2026-03-11T25:00",
        "to=2026-03-11Z",  # a zone without a time
        "to=2026-03-11T10:20%2B2",
        "to=2026-03-11T10:20:00.1234567Z",
        "to=",
        "to=2026-03-11&tz=9999",
        "sort=amount&to=1e5",
        "sort=amount&to=-3",
        "sort=amount&to=99999999999",
        "sort=amount&to=%D9%A1%D9%A2",  # Arabic-Indic digits
        "sort=customer&to=" + "x" * 65,
        "sort=customer&to=a%00b",
        "to=2026-03-11&after=abc",
        "to=2026-03-11&to=2026-03-12",
    ],
)
def test_go_to_refuses_values_the_sort_cannot_hold_with_a_400(client, engine, query):
    response = client.get("/orders?" + query)
    assert response.status_code == 400, query
    assert "to" in response.get_data(as_text=True) or "cannot" in response.get_data(as_text=True)


@pytest.mark.parametrize(
    ("query", "says"),
    [
        # Zones no place has: +99:00 moved the go-to by four days, silently.
        ("to=2026-03-11T10:20:00%2B99:00", "takes a zone of Z or from -14:00 to +14:00, not '+99:00'"),
        ("to=2026-03-11T10:20:00%2B00:60", "takes a zone of Z or from -14:00 to +14:00, not '+00:60'"),
        ("to=2026-03-11T10:20:00-14:01", "takes a zone of Z or from -14:00 to +14:00, not '-14:01'"),
        # Thousands after a leading zero: "0.001" was 1 and "0,500" was 500.
        ("sort=amount&to=0.001", "thousands in groups of three), not '0.001'"),
        ("sort=amount&to=0,500", "thousands in groups of three), not '0,500'"),
    ],
)
def test_go_to_refuses_what_it_would_have_to_guess_and_says_why(client, engine, query, says):
    for path in ("/api/orders", "/orders", "/orders/export.csv"):
        response = client.get(f"{path}?{query}")
        assert response.status_code == 400, (path, query)
        text = unescape(response.get_data(as_text=True))
        assert says in text, (path, text[:300])
    for fine in ("to=2026-03-11T10:20:00%2B14:00", "to=2026-03-11T10:20:00-12:00", "sort=amount&to=0,50"):
        answer = client.get(f"/api/orders?{fine}").get_json()
        assert "zone" not in str(answer) and "groups of three" not in str(answer), (fine, answer)


def test_an_amount_nothing_is_at_is_named_as_it_was_read(client, engine):
    """ "12.345" is 12,345.00 (a separator before three digits groups thousands): the 400 named the
    text alone ("no order at 12.345"), which read as false beside the 12.34 and 12.35 rows a reader
    had just seen. It names the amount understood, the text typed beside it where they differ."""
    client.post("/api/orders", json={"customer": "Ana", "amount": "12.34"})
    said = {}
    for typed in ("12.345", "1.234,50", "99999", "99,999.00"):
        response = client.get("/api/orders", query_string={"sort": "amount", "to": typed})
        assert response.status_code == 400, typed
        said[typed] = response.get_json()["error"]["message"]
    assert said["12.345"].startswith("no order at 12,345.00 (typed '12.345') in this list"), said
    assert said["1.234,50"].startswith("no order at 1,234.50 (typed '1.234,50')"), said
    assert said["99999"].startswith("no order at 99,999.00 in this list"), said
    assert said["99,999.00"].startswith("no order at 99,999.00 in this list"), said


@pytest.mark.parametrize("sort", ["newest", "oldest"])
def test_an_orders_created_at_from_the_api_goes_to_its_time_in_every_reader(client, engine, sort):
    """A client passes back the time the API gave it (`2026-03-11T10:20:00.000000Z`) as `to`: the
    API, the page and the export all open at the first row with that time, the same row; a zone
    typed wins over tz (+02:00 with tz=300 is the same instant)."""
    seed_ties(engine, 300)
    items = client.get(f"/api/orders?sort={sort}&limit=100").get_json()["items"]
    when = items[57]["created_at"]
    first = next(r for r in items if r["created_at"] == when)  # the first row with that time
    shifted = dt.datetime.fromisoformat(when).astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat()
    for to in (when, shifted):
        query = {"sort": sort, "to": to, "tz": "300"}
        api = client.get("/api/orders", query_string={**query, "limit": 1}).get_json()["items"]
        page = client.get("/orders", query_string=query)
        assert page.status_code == 303, page.get_data()[:300]
        export = list(
            csv.DictReader(
                io.StringIO(client.get("/orders/export.csv", query_string=query).get_data(as_text=True))
            )
        )
        assert (
            api[0]["id"] == rows_of(client, page.headers["Location"])[0][0] == export[0]["id"] == first["id"]
        ), to
        assert api[0]["created_at"] == when


def test_unstorable_characters_are_unicode_categories_cc_and_cs():
    # The list's parameter check is one regex of ranges: exactly the control characters and
    # surrogates, over every code point.
    import unicodedata

    from orders.finding.params import _UNSTORABLE

    wrong = [
        cp
        for cp in range(0x110000)
        if bool(_UNSTORABLE.fullmatch(chr(cp))) != (unicodedata.category(chr(cp)) in ("Cc", "Cs"))
    ]
    assert wrong == []


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"after": "AbC-_123", "page": 2},
        {"sort": "customer", "status": "paid", "q": "Úrsula Freitas & co+/?=#%", "before": "x~y"},
        {"q": "O'Brien (ltd); a,b:c@d!$*", "after": "z"},
    ],
)
def test_list_links_are_what_url_for_builds(app, args):
    from flask import url_for

    from orders.views.list_page import list_link

    with app.test_request_context("/orders"):
        assert list_link(url_for("list_page.orders"), args) == url_for("list_page.orders", **args)


@given(
    st.dictionaries(
        st.sampled_from(["after", "before", "sort", "status", "q", "page", "to"]),
        st.none() | st.integers() | st.text() | st.text(alphabet="AZaz09-_.~!$'()*,/:;?@ +&=#%"),
    )
)
@settings(
    max_examples=hunt.examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_list_links_are_what_url_for_builds_for_any_text(app, args):
    # Plain text is joined as it is, anything else quoted: either way url_for's string.
    from flask import url_for

    from orders.views.list_page import list_link

    with app.test_request_context("/orders"):
        assert list_link(url_for("list_page.orders"), args) == url_for("list_page.orders", **args)


def test_a_list_rows_readers_unpack_it_in_the_tables_column_order(app):
    """The rows template and the API's row_json read a page's rows by position (models.LIST_ROW):
    each names the table's columns in their order, and every list statement selects just those.
    A column added, dropped or moved must change all three together, or this fails."""
    assert tuple(column.name for column in Order.__table__.columns) == LIST_ROW
    source = app.jinja_env.loader.get_source(app.jinja_env, "_rows.html")[0]
    rows = nodes.Getattr(nodes.Name("page", "load"), "items", "load")
    loops = [loop for loop in app.jinja_env.parse(source).find_all(nodes.For) if loop.iter == rows]
    assert [tuple(name.name for name in loop.target.items) for loop in loops] == [LIST_ROW]
    assert tuple(inspect.signature(row_json).parameters) == LIST_ROW
    with app.app_context():
        for args in ({}, {"q": "silva"}, {"q": "ana silva", "status": "paid"}, {"sort": "customer"}):
            for sharded in (False, True):
                listing = ListRequest.from_args(MultiDict(args), codec=app_codec(), sharded=sharded)
                selected = tuple(column.name for column in listing.statement().selected_columns)
                assert selected == LIST_ROW, (args, sharded)
