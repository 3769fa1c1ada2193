"""The JSON API described in OpenAPI 3.1, served at GET /openapi.json (tests run schemathesis on it)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify

from orders.core.errors import ERRORS
from orders.core.settings import DEFAULT_PAGE_SIZE
from orders.data.models import CUSTOMER_MAX_LENGTH, STATUSES
from orders.data.names import WORD_PREFIX
from orders.finding.request import MAX_LIMIT
from orders.finding.search import MAX_SEARCH, MAX_WORDS
from orders.finding.sorts import DEFAULT_SORT, SORTS
from orders.writing.grammar import AMOUNT, MAX_AMOUNT

bp = Blueprint("openapi", __name__)

_CURSOR = {
    "type": "string",
    "maxLength": 512,
    "description": "An opaque cursor from next_cursor or prev_cursor, given back unchanged.",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _error_response(status: int) -> dict[str, Any]:
    """The response every error of this status gets, from the table in orders/core/errors.py."""
    kinds = {code: kind for code, kind in ERRORS.items() if kind.status == status}
    error: dict[str, Any] = {
        "type": "object",
        "required": ["code", "message", *(["errors"] if status == 422 else [])],
        "properties": {"code": {"enum": list(kinds)}},
    }
    response: dict[str, Any] = {
        "description": " ".join(f"`{code}`: {kind.meaning}" for code, kind in kinds.items()),
        "content": {
            "application/json": {
                "schema": {
                    "allOf": [
                        _ref("Error"),
                        {"type": "object", "properties": {"error": error}},
                    ]
                }
            }
        },
    }
    # A header is required when every code of this status carries it.
    headers = set.intersection(*(set(kind.headers) for kind in kinds.values()))
    if headers:
        response["headers"] = {name: _HEADERS[name] for name in sorted(headers)}
    return response


_HEADERS: dict[str, Any] = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    },
    "WWW-Authenticate": {
        "description": 'The scheme to authenticate with: `Bearer realm="orders"` (RFC 6750).',
        "required": True,
        "schema": {"type": "string", "pattern": "^Bearer "},
    },
    "Allow": {
        "description": "The methods this URL answers.",
        "required": True,
        "schema": {"type": "string"},
    },
}
# Statuses an operation of the JSON API can answer; 500 is a bug, never documented as an answer.
DOCUMENTED_STATUSES = sorted({kind.status for kind in ERRORS.values() if kind.status != 500})


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(status): {"$ref": f"#/components/responses/Error{status}"} for status in statuses}


_WRITE_SECURITY: list[dict[str, list[str]]] = [{"bearerToken": []}]


_ORDER_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The order's id (a positive 64-bit integer).",
    "schema": {"type": "integer", "minimum": 1},
    "example": 1,
}

# The default is the PAGE_SIZE setting, filled in per app (openapi()).
_LIMIT: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_PAGE_SIZE}

# Empty is as absent, as an HTML form sends an unchosen select (the list's own form does): random
# examples found `sort=` answered 200 while the description allowed only the sorts' names.
_SORT = {
    "name": "sort",
    "in": "query",
    "description": f"Empty or absent: {DEFAULT_SORT}.",
    "schema": {"enum": ["", *SORTS], "default": DEFAULT_SORT},
}
_STATUS = {
    "name": "status",
    "in": "query",
    "description": "Empty or absent: every status.",
    "schema": {"enum": ["", *STATUSES]},
}

SPEC: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "Orders",
        "version": "1",
        "description": (
            "An orders feed paged by keyset: cursors are positions, so inserts and deletes between "
            "requests never repeat or skip a row. Ids and amounts are strings, exact in any client."
        ),
    },
    "paths": {
        "/api/orders": {
            "get": {
                "operationId": "listOrders",
                "summary": "One page of orders, first or after/before a cursor.",
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "description": "Orders per page; anything else is a 400, never clamped.",
                        "schema": _LIMIT,
                    },
                    _SORT,
                    _STATUS,
                    {
                        "name": "q",
                        "in": "query",
                        "description": (
                            "Search. Digits (optionally after `#`) keep that order only. Other text keeps "
                            "the orders whose customer name has a word starting with each word given "
                            "(`fre` and `urs fre` find Úrsula Freitas), ignoring case and accents; words "
                            "are runs of letters and digits, compared on their first "
                            f"{WORD_PREFIX} characters, at most {MAX_WORDS} of them. Cursors are bound "
                            "to the search: give the same `q` with `after`/`before`."
                        ),
                        "schema": {"type": "string", "maxLength": MAX_SEARCH},
                    },
                    {"name": "after", "in": "query", "schema": _CURSOR},
                    {"name": "before", "in": "query", "schema": _CURSOR},
                    {
                        "name": "to",
                        "in": "query",
                        "description": (
                            "Go to: the page starts at the first order at or past this value in the "
                            "sort's order (a date or date and time for newest/oldest, also an order's "
                            "`created_at` as this API writes it, whose zone wins over `tz`; an amount for "
                            "amount, e.g. `1,234.50` or `1234,50`, a name for customer: the first name "
                            "with a word starting with each word given). A value beyond the list's "
                            "rows is a 400 that says so. Not with `after`/`before`; the page's cursors "
                            "continue from there without it."
                        ),
                        "schema": {"type": "string", "maxLength": 64},
                    },
                    {
                        "name": "tz",
                        "in": "query",
                        "description": (
                            "With a date `to` without a zone: the reader's minutes behind UTC (-840 to 840)."
                        ),
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "A page of orders in the sort's order.",
                        "content": {"application/json": {"schema": _ref("OrderPage")}},
                        # How a client walks on (schemathesis follows these in its stateful tests).
                        "links": {
                            "NextPage": {
                                "operationId": "listOrders",
                                "parameters": {
                                    "after": "$response.body#/next_cursor",
                                    "sort": "$request.query.sort",
                                    "status": "$request.query.status",
                                    "q": "$request.query.q",
                                },
                            },
                            "PreviousPage": {
                                "operationId": "listOrders",
                                "parameters": {
                                    "before": "$response.body#/prev_cursor",
                                    "sort": "$request.query.sort",
                                    "status": "$request.query.status",
                                    "q": "$request.query.q",
                                },
                            },
                        },
                    },
                    **_errors(400, 429, 503),
                },
            },
            "post": {
                "operationId": "createOrder",
                "summary": "Create an order.",
                "security": _WRITE_SECURITY,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("NewOrder")}},
                },
                "responses": {
                    "201": {
                        "description": "The order as stored.",
                        "headers": {
                            "Location": {
                                "description": "The new order's URL.",
                                "required": True,
                                "schema": {"type": "string"},
                            }
                        },
                        "content": {"application/json": {"schema": _ref("Order")}},
                        "links": {
                            "GetOrder": {
                                "operationId": "getOrder",
                                "parameters": {"id": "$response.body#/id"},
                            },
                            "DeleteOrder": {
                                "operationId": "deleteOrder",
                                "parameters": {"id": "$response.body#/id"},
                            },
                        },
                    },
                    **_errors(400, 401, 413, 415, 422, 429, 503),
                },
            },
        },
        "/api/orders/rail": {
            "get": {
                "operationId": "getRail",
                "summary": "The shape of the whole list in a sort: buckets, their counts, a cursor each.",
                "description": (
                    "Months, or weeks and days where they are dense (UTC), for newest and oldest; "
                    "amount bands of similar shares of the whole list for amount; initials for "
                    "customer (accents folded as the sort folds them; digits and signs before A, other "
                    "scripts after Z). The buckets come in the sort's order and are the same under "
                    "every status (chosen from the whole list); the counts are the status's, exact as "
                    "committed (kept with every write, never counted at read time); a bucket the "
                    "status has no order in is left out. Each `cursor` is an `after` cursor for "
                    "GET /api/orders with the same sort and status: its page starts at the bucket's "
                    "first order. `low` (inclusive) and `high` (exclusive, null: no end) bound the "
                    "sort's first column in ascending order. A search (`q`) gets no buckets and a "
                    "`note` saying why. Send the ETag back in If-None-Match: 304 until a count moves."
                ),
                "parameters": [
                    _SORT,
                    _STATUS,
                    {
                        "name": "q",
                        "in": "query",
                        "description": "A search: no buckets, and a note (not counted per word).",
                        "schema": {"type": "string", "maxLength": MAX_SEARCH},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The rail.",
                        "headers": {
                            "ETag": {
                                "description": "Changes when a count, bucket or cursor changes.",
                                "required": True,
                                "schema": {"type": "string"},
                            }
                        },
                        "content": {"application/json": {"schema": _ref("Rail")}},
                    },
                    "304": {"description": "Unchanged since the ETag given in If-None-Match."},
                    **_errors(400, 429, 503),
                },
            }
        },
        "/api/orders/{id}": {
            "get": {
                "operationId": "getOrder",
                "parameters": [_ORDER_ID],
                "responses": {
                    "200": {
                        "description": "The order.",
                        "content": {"application/json": {"schema": _ref("Order")}},
                    },
                    **_errors(404, 429, 503),
                },
            },
            "delete": {
                "operationId": "deleteOrder",
                "security": _WRITE_SECURITY,
                "parameters": [_ORDER_ID],
                "responses": {"204": {"description": "Deleted."}, **_errors(401, 404, 429, 503)},
            },
        },
        "/healthz": {
            "get": {
                "operationId": "health",
                "summary": "Whether this server is ready to serve: the database answers.",
                "description": "Readiness; a ready answer is given again for a second. The "
                "rate-limit storage (Redis) not answering is `degraded`, still 200: requests go on "
                "with limits counted per process. Liveness (the process serves, nothing asked) is "
                "/healthz/live.",
                "responses": {
                    "200": {
                        "description": "The database answers; `degraded` names what does not.",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["status"],
                                    "properties": {
                                        "status": {"enum": ["ok", "degraded"]},
                                        "degraded": {
                                            "type": "array",
                                            "items": {"enum": ["rate_limit_storage"]},
                                        },
                                    },
                                    "additionalProperties": False,
                                }
                            }
                        },
                    },
                    **_errors(503),
                },
            }
        },
    },
    "components": {
        "schemas": {
            "Order": {
                "type": "object",
                "required": ["id", "customer", "amount", "status", "created_at"],
                "additionalProperties": False,
                "properties": {
                    "id": {"type": "string", "pattern": "^[1-9][0-9]{0,18}$"},
                    "customer": {"type": "string", "minLength": 1, "maxLength": CUSTOMER_MAX_LENGTH},
                    "amount": {"type": "string", "pattern": "^(0|[1-9][0-9]{0,9})\\.[0-9]{2}$"},
                    "status": {"enum": STATUSES},
                    "created_at": {
                        "type": "string",
                        "format": "date-time",
                        "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z$",
                        "description": "UTC, always with microseconds.",
                    },
                },
            },
            "OrderPage": {
                "type": "object",
                "required": ["items", "next_cursor", "prev_cursor", "has_more", "has_previous"],
                "additionalProperties": False,
                "properties": {
                    "items": {"type": "array", "maxItems": MAX_LIMIT, "items": _ref("Order")},
                    "next_cursor": {**_CURSOR, "type": ["string", "null"]},
                    "prev_cursor": {**_CURSOR, "type": ["string", "null"]},
                    "has_more": {"type": "boolean", "description": "next_cursor != null"},
                    "has_previous": {"type": "boolean", "description": "prev_cursor != null"},
                },
            },
            "Rail": {
                "type": "object",
                "required": ["sort", "status", "kind", "unit", "total", "buckets", "note"],
                "additionalProperties": False,
                "properties": {
                    "sort": {"enum": list(SORTS)},
                    "status": {"enum": [*STATUSES, None]},
                    "kind": {"enum": ["datetime", "amount", "name"], "description": "What low/high hold."},
                    "unit": {"type": "string", "description": "What a bucket is, in words."},
                    "total": {"type": "integer", "minimum": 0, "description": "The sum of the counts."},
                    "buckets": {"type": "array", "items": _ref("RailBucket")},
                    "note": {"type": ["string", "null"], "description": "Why there are no buckets."},
                },
            },
            "RailBucket": {
                "type": "object",
                "required": [
                    "key",
                    "label",
                    "short",
                    "count",
                    "low",
                    "high",
                    "cursor",
                    "span_low",
                    "span_high",
                ],
                "additionalProperties": False,
                "properties": {
                    "key": {"type": "string"},
                    "label": {"type": "string", "description": "March 2026, 500.00 to 549.99, B"},
                    "short": {"type": "string", "description": "A label for a narrow rail: Mar 2026, 500, B"},
                    "count": {"type": "integer", "minimum": 1},
                    "low": {"type": "string"},
                    "high": {"type": ["string", "null"]},
                    "cursor": _CURSOR,
                    "span_low": {
                        "type": "string",
                        "description": (
                            "Where the bucket's orders start within [low, high), as finely as the "
                            "counts know it: the first day (UTC) or amount bin with an order of the "
                            "status; an initial's `low`."
                        ),
                    },
                    "span_high": {
                        "type": ["string", "null"],
                        "description": "Where they end (exclusive): the end of the last such day or bin.",
                    },
                },
            },
            "NewOrder": {
                "type": "object",
                "required": ["customer", "amount"],
                "additionalProperties": False,
                "properties": {
                    "customer": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": CUSTOMER_MAX_LENGTH,
                        "description": (
                            "Stored in NFC without surrounding spaces or zero-width marks; needs a "
                            "visible character; no control characters, line separators, bidi "
                            "overrides or isolates, or noncharacters."
                        ),
                    },
                    "amount": {
                        "description": (
                            "0 to 9999999999.99, at most two decimal places, ASCII digits, no sign or "
                            "exponent: the same grammar for a string and for a JSON number's text."
                        ),
                        "oneOf": [
                            {"type": "string", "pattern": f"^{AMOUNT.pattern}$"},
                            {"type": "integer", "minimum": 0, "maximum": int(MAX_AMOUNT)},
                        ],
                    },
                    "status": {"enum": STATUSES, "default": "pending"},
                    "created_at": {
                        "type": "string",
                        "format": "date-time",
                        "description": (
                            "With a timezone, from 1970 up to CREATED_AT_MAX_SKEW_SECONDS (5 s) after "
                            "the server's clock; left out: now (null is refused)."
                        ),
                    },
                },
            },
            "Error": {
                "type": "object",
                "required": ["error"],
                "additionalProperties": False,
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "additionalProperties": False,
                        "properties": {
                            "code": {"type": "string"},
                            "message": {"type": "string", "minLength": 1},
                            "errors": {"type": "object", "additionalProperties": {"type": "string"}},
                        },
                    }
                },
            },
        },
        "responses": {f"Error{status}": _error_response(status) for status in DOCUMENTED_STATUSES},
        "securitySchemes": {
            "bearerToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "One of the server's API_TOKENS. Needed for POST and DELETE only.",
            }
        },
    },
}


@bp.get("/openapi.json")
def openapi() -> Response:
    listing = SPEC["paths"]["/api/orders"]
    limit, *others = listing["get"]["parameters"]
    assert limit["name"] == "limit"
    parameters = [{**limit, "schema": {**_LIMIT, "default": current_app.config["PAGE_SIZE"]}}, *others]
    paths = {**SPEC["paths"], "/api/orders": {**listing, "get": {**listing["get"], "parameters": parameters}}}
    return jsonify({**SPEC, "paths": paths})
