"""Who may write: `Authorization: Bearer <token>` with one of API_TOKENS, checked in constant time.

Reads stay public. Writes (the JSON API's POST and DELETE) need a token. In development, when
API_TOKENS is unset, writes are open to loopback clients only (127.0.0.0/8, ::1), so `make run`
works without setup while nobody else on the network can write; APP_ENV=production refuses to
start without API_TOKENS (app.py).
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
from collections.abc import Callable
from typing import Any

from flask import current_app, request

from orders.core.errors import ApiError

REALM = "orders"


def _presented_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    # RFC 6750: the scheme is case-insensitive; the token is everything after one space.
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def token_is_valid(presented: str, tokens: tuple[str, ...]) -> bool:
    """Compare against every configured token, each in constant time, without stopping at the
    first match: neither how long the check takes nor which token matched tells anything."""
    given = presented.encode("utf-8", "surrogateescape")
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(given, token.encode("utf-8"))
    return matched


def _is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _unauthorized(message: str, error: str) -> ApiError:
    challenge = f'Bearer realm="{REALM}"' + (f', error="{error}"' if error else "")
    return ApiError("unauthorized", message, headers={"WWW-Authenticate": challenge})


def check_write_access() -> None:
    """Raise 401 unless this request may write."""
    tokens: tuple[str, ...] = current_app.config["API_TOKENS"]
    presented = _presented_token()
    if not tokens:
        if _is_loopback(request.remote_addr):
            return
        raise _unauthorized(
            "writes are open to loopback clients only while API_TOKENS is not set", "invalid_token"
        )
    if presented is None:
        # RFC 6750 3.1: no credentials at all is answered without an error attribute.
        raise _unauthorized("send Authorization: Bearer <token> to create or delete orders", "")
    if not token_is_valid(presented, tokens):
        raise _unauthorized("the bearer token is not valid", "invalid_token")


def write_access(view: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a view that changes data: it runs only for a client that may write."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check_write_access()
        return view(*args, **kwargs)

    return wrapper
