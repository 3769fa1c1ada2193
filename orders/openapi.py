"""The JSON API described in OpenAPI 3.1, served at GET /openapi.json (tests run schemathesis on it)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify

from .api import MAX_AMOUNT
from .listing import MAX_LIMIT
from .models import CUSTOMER_MAX_LENGTH, DEFAULT_SORT, SORTS, STATUSES

bp = Blueprint("openapi", __name__)

_ERROR_CODES = {
    400: ["invalid_cursor", "cursor_mismatch", "invalid_parameter"],
    404: ["not_found"],
    413: ["payload_too_large"],
    415: ["unsupported_media_type"],
    422: ["invalid_order"],
    503: ["unavailable"],
}
_ERROR_DESCRIPTIONS = {
    400: "A parameter or cursor the client got wrong; the message says which and why.",
    404: "No such order.",
    413: "The body is larger than 16 KiB.",
    415: "The body is not application/json.",
    422: "The order has invalid fields; `errors` maps each field to what is wrong with it.",
    503: "The database is not answering; retry after the number of seconds in Retry-After.",
}
_CURSOR = {
    "type": "string",
    "maxLength": 512,
    "description": "An opaque cursor from next_cursor or prev_cursor, given back unchanged.",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _error_response(status: int) -> dict[str, Any]:
    error: dict[str, Any] = {
        "type": "object",
        "required": ["code", "message", *(["errors"] if status == 422 else [])],
        "properties": {"code": {"enum": _ERROR_CODES[status]}},
    }
    response: dict[str, Any] = {
        "description": _ERROR_DESCRIPTIONS[status],
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
    if status == 503:
        response["headers"] = {
            "Retry-After": {
                "description": "Seconds to wait before retrying.",
                "required": True,
                "schema": {"type": "integer", "minimum": 1},
            }
        }
    return response


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(status): {"$ref": f"#/components/responses/Error{status}"} for status in statuses}


_ORDER_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The order's id (a positive 64-bit integer).",
    "schema": {"type": "integer", "minimum": 1},
    "example": 1,
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
                        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 20},
                    },
                    {
                        "name": "sort",
                        "in": "query",
                        "schema": {"enum": list(SORTS), "default": DEFAULT_SORT},
                    },
                    {"name": "status", "in": "query", "schema": {"enum": STATUSES}},
                    {"name": "after", "in": "query", "schema": _CURSOR},
                    {"name": "before", "in": "query", "schema": _CURSOR},
                ],
                "responses": {
                    "200": {
                        "description": "A page of orders in the sort's order.",
                        "content": {"application/json": {"schema": _ref("OrderPage")}},
                    },
                    **_errors(400, 503),
                },
            },
            "post": {
                "operationId": "createOrder",
                "summary": "Create an order.",
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
                    },
                    **_errors(413, 415, 422, 503),
                },
            },
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
                    **_errors(404, 503),
                },
            },
            "delete": {
                "operationId": "deleteOrder",
                "parameters": [_ORDER_ID],
                "responses": {"204": {"description": "Deleted."}, **_errors(404, 503)},
            },
        },
        "/healthz": {
            "get": {
                "operationId": "health",
                "summary": "Whether the database answers.",
                "responses": {
                    "200": {
                        "description": "The database answers.",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["status"],
                                    "properties": {"status": {"const": "ok"}},
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
            "NewOrder": {
                "type": "object",
                "required": ["customer", "amount"],
                "additionalProperties": False,
                "properties": {
                    "customer": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": CUSTOMER_MAX_LENGTH,
                        "description": "Trimmed; no control characters.",
                    },
                    "amount": {
                        "description": "At most two decimal places, 0 to 9999999999.99.",
                        "oneOf": [
                            {"type": "string", "pattern": "^[0-9]{1,10}(\\.[0-9]{1,2})?$"},
                            {"type": "integer", "minimum": 0, "maximum": int(MAX_AMOUNT)},
                        ],
                    },
                    "status": {"enum": STATUSES, "default": "pending"},
                    "created_at": {
                        "type": "string",
                        "format": "date-time",
                        "description": "With a timezone, between 1970 and 9998; default: now.",
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
        "responses": {f"Error{status}": _error_response(status) for status in _ERROR_CODES},
    },
}


@bp.get("/openapi.json")
def openapi():  # type: ignore[no-untyped-def]
    return jsonify(SPEC)
