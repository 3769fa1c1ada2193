"""One rule for every text parameter of every list route: a character no engine can store (NUL:
PostgreSQL refuses it in text, and `q=%00` was a 500 on /api/orders, /orders, its fragments and
/orders/export.csv), or any other control character, is a 400 that names the parameter, on every
engine (conftest's `client` runs on each), before any parameter is read. One exception, for what
a person types or pastes (the search `q`, go-to's `to`): a tab or a line break there is a space.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orders.finding.params import TYPED

from .helpers import BASE, add_orders
from .hunt import examples

ROUTES = {
    "api": ("/api/orders", {}),
    "page": ("/orders", {}),
    "fragment": ("/orders", {"HX-Request": "true"}),
    "new orders": ("/orders/new", {}),
    "export": ("/orders/export.csv", {}),
}
# Every parameter a list route reads (orders/finding/request.py, orders/views/list_page.py), and one
# it does not.
PARAMETERS = ["q", "to", "tz", "after", "before", "sort", "status", "limit", "page", "bom", "unknown"]
# The integer parameters, each with a value just out of its range (orders/finding/params.py parse_int).
INTEGERS = {"limit": "101", "page": "0", "bom": "2"}
# Control characters: C0 (NUL first), DEL and C1, and a lone surrogate as percent-encoded text.
CONTROLS = st.one_of(st.sampled_from("\x00\x1f\x7f\x85\x9b"), st.characters(categories=["Cc"]))


def assert_names(response, name: str) -> None:
    assert response.status_code == 400, (name, response.status_code, response.get_data()[:300])
    text = response.get_data(as_text=True)
    assert f"{name} contains U+" in text, text[:400]
    if response.is_json:
        assert response.json["error"]["code"] == "invalid_parameter"


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("name", PARAMETERS)
def test_nul_in_any_parameter_is_a_400_naming_it(client, route: str, name: str) -> None:
    path, headers = ROUTES[route]
    response = client.get(f"{path}?{name}=ana%00x", headers=headers)
    assert_names(response, name)


@settings(
    max_examples=examples(60), suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(
    route=st.sampled_from(list(ROUTES)),
    name=st.sampled_from(PARAMETERS),
    before=st.text(alphabet=st.characters(categories=["L", "N"]), max_size=5),
    control=CONTROLS,
)
def test_every_control_character_anywhere_is_a_400_naming_it(
    client, route: str, name: str, before: str, control: str
) -> None:
    path, headers = ROUTES[route]
    response = client.get(f"{path}?sort=newest&{name}={quote(before + control)}", headers=headers)
    if name in TYPED and control.isspace():
        spaced = client.get(f"{path}?sort=newest&{name}={quote(before + ' ')}", headers=headers)
        assert response.status_code == spaced.status_code, (name, repr(control), response.get_data()[:300])
        if response.is_json:
            assert response.json == spaced.json
        return
    assert_names(response, name)


# What a spreadsheet's cell or a terminal's line brings along when pasted.
PASTED_SPACES = ["\t", "\n", "\r\n", "\x0b", "\x0c", "\x1f", "\x85"]


@pytest.mark.parametrize("space", PASTED_SPACES, ids=repr)
def test_a_tab_or_line_break_pasted_in_the_search_or_go_to_is_a_space(client, engine, space: str) -> None:
    """A name copied from a spreadsheet's cell ("Ana\tSilva", "Ana Silva\n") finds what the same
    words with a space find, in the API, the page (its box shows the spaces) and the export; a
    go-to's date with a line break after it goes where the date goes. Anywhere else the same
    character is still refused, and so is every control character that is not whitespace."""
    add_orders(
        engine,
        [
            (BASE - dt.timedelta(minutes=i), name, Decimal("9.50"), "paid")
            for i, name in enumerate(["Ana Silva", "Bruno Costa", "Ana Souza", "Silva Ana", "Carla Silva"])
        ],
    )
    pasted, spaced = f"Ana{space}Silva{space}", "Ana Silva"
    api = client.get("/api/orders", query_string={"q": pasted})
    assert api.status_code == 200 and api.json == client.get("/api/orders", query_string={"q": spaced}).json
    assert sorted(o["customer"] for o in api.json["items"]) == ["Ana Silva", "Silva Ana"], api.json
    page = client.get("/orders", query_string={"q": pasted})
    assert page.status_code == 200, page.get_data()[:300]
    assert 'value="Ana Silva"' in page.get_data(as_text=True)
    export = client.get("/orders/export.csv", query_string={"q": pasted})
    assert export.status_code == 200
    assert export.data == client.get("/orders/export.csv", query_string={"q": spaced}).data
    newest = api.json["items"][0]["created_at"]
    went = client.get("/api/orders", query_string={"to": newest + space})
    assert (
        went.status_code == 200 and went.json == client.get("/api/orders", query_string={"to": newest}).json
    )
    for name, value in (("sort", "newest" + space), ("q", "Ana\x01Silva")):
        assert_names(client.get("/api/orders", query_string={name: value}), name)


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("name", list(INTEGERS))
@pytest.mark.parametrize("digits", [4301, 10_000])
def test_a_number_too_long_to_convert_is_refused_like_one_out_of_range(
    client, route: str, name: str, digits: int
) -> None:
    """CPython's int() refuses a string of over 4,300 digits: `limit=111...1` was a 500 on every
    list route. A number that long is out of every range: the same answer as one just out of it
    (a 400 naming the parameter where the route reads it, and where it does not, what it ignores)."""
    path, headers = ROUTES[route]
    out_of_range = client.get(f"{path}?{name}={INTEGERS[name]}", headers=headers)
    too_long = client.get(f"{path}?{name}={'1' * digits}", headers=headers)
    assert too_long.status_code == out_of_range.status_code, too_long.get_data()[:300]
    if too_long.status_code == 400:
        assert f"{name} must be an integer from" in too_long.get_data(as_text=True)
    # Zeros in front are the number's (`05` is 5), however many.
    padded = client.get(f"{path}?{name}={'0' * digits}1", headers=headers)
    assert padded.status_code < 500, padded.get_data()[:300]


def test_a_control_character_in_a_parameter_name_is_refused_too(client) -> None:
    response = client.get("/api/orders?q%00=ana")
    assert response.status_code == 400
    assert "a parameter name contains U+0000" in response.json["error"]["message"]


def test_ordinary_text_still_reads(client) -> None:
    for query in ("q=Jos%C3%A9", "q=%23+12", "q=ana+maria"):
        assert client.get(f"/api/orders?{query}").status_code == 200, query
