"""How this app pages: its cursor codec, the seek form its database needs, and a cursor that opens
the list at given key values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from flask import current_app, has_app_context

from pagination import CursorCodec, Page, SeekForm, start_at

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from orders.finding.listing import ListRequest


def codec() -> CursorCodec:
    """The codec create_app() made from SECRET_KEY (and its fallbacks): seals and opens cursors."""
    found: CursorCodec = current_app.extensions["cursor_codec"]
    return found


def sharded() -> bool:
    """Whether the app reads orders through postgres_fdw shards (DATABASE_SHARD_URLS)."""
    return has_app_context() and bool(current_app.config.get("DATABASE_SHARD_URLS"))


def seek_form() -> SeekForm | None:
    """Over shards (postgres_fdw foreign partitions) the expanded seek with its leading bound, the
    form postgres_fdw ships to every shard (a row value would be filtered on the coordinator, each
    shard read from its first row); elsewhere the library's choice for the engine."""
    return "bounded" if sharded() else None


def position_at(listing: ListRequest, keys: list[Any], *, meta: Mapping[str, str] | None = None) -> str:
    """An inclusive `after` cursor at `keys` (a prefix of the sort's key values) in `listing`'s
    sort and filters: the list opened there starts with the first row at or past them."""
    return start_at(listing.keyset, keys, codec=codec(), filters=listing.filters, meta=meta)


def read_page(listing: ListRequest, session: Session) -> Page:
    """`listing`'s page as this app reads it: sealed with its codec, in its seek form."""
    page = listing.page(session, codec(), seek=seek_form())
    session.info["page_rows"] = len(page.items)  # the request's log line (orders/web/request_log.py)
    return page
