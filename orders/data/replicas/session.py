"""The Session that reads from the node a request's read was routed to; writes always go to the primary."""

from __future__ import annotations

from typing import Any

from flask import g
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.dml import UpdateBase


class RoutingSession(Session):
    """A Session whose reads go to `info["read_bind"]` when a read route was chosen.

    SQLAlchemy's documented way to route a Session (`Session.get_bind`, "Custom Vertical
    Partitioning"). Writes are never routed: a flush or an INSERT/UPDATE/DELETE goes to the
    primary even inside a routed request.
    """

    def get_bind(self, mapper: Any = None, *, clause: Any = None, **kw: Any) -> Any:
        read_bind = self.info.get("read_bind")
        if read_bind is not None and not self._flushing and not isinstance(clause, UpdateBase):
            return read_bind
        return super().get_bind(mapper, clause=clause, **kw)


class RoutingSessionMaker(sessionmaker[RoutingSession]):
    """Sessions opened during a routed request read from that request's node (the CSV export opens
    its own session, which outlives the request)."""

    def __call__(self, **local_kw: Any) -> RoutingSession:
        route = g.get("read_route") if _in_request() else None
        if route is not None and "info" not in local_kw:
            local_kw["info"] = {"read_bind": route.node.engine}
        return super().__call__(**local_kw)


def _in_request() -> bool:
    from flask import has_request_context

    return has_request_context()
