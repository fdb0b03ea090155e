"""Dependencies shared by the routes, as ``Annotated`` aliases.

    @router.get("/things")
    def things(conn: Connection, filters: QueryFilters, page: Page, _: ReadAuth): ...

Tokens are compared in constant time and never logged or echoed.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import json
import math
from collections.abc import Iterator
from typing import Annotated, Any, TypeVar

import sqlalchemy as sa
from fastapi import Depends, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError

from cachewatch.store import engine as enginemod
from cachewatch.store.columns import Filters

from .settings import ServerSettings
from .tokens import bearer_matches


def _settings(request: Request) -> ServerSettings:
    return request.app.state.settings


Settings = Annotated[ServerSettings, Depends(_settings)]


def _connection(settings: Settings) -> Iterator[sa.Connection]:
    # The schema was checked at startup; a transaction per request, committed at the end.
    with enginemod.connection(settings.store, ensure=False) as conn:
        yield conn


Connection = Annotated[sa.Connection, Depends(_connection)]


def _check_bearer(request: Request, expected: str | None) -> None:
    if expected is None:
        return
    if not bearer_matches(request, expected):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong bearer token: send the header 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )


def _write_auth(request: Request, settings: Settings) -> None:
    _check_bearer(request, settings.write_secret())


def _read_auth(request: Request, settings: Settings) -> None:
    _check_bearer(request, settings.read_secret())


WriteAuth = Annotated[None, Depends(_write_auth)]
ReadAuth = Annotated[None, Depends(_read_auth)]


def invalid(loc: tuple, message: str, value: Any = None) -> RequestValidationError:
    """A 422 in the same shape as FastAPI's own, naming the offending field."""
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": message, "input": value}])


def parse_time(name: str, value: str | None) -> float | None:
    """Epoch seconds (``1732230000.5``) or ISO 8601 (``2026-11-22T01:00:00Z``; naive means UTC)."""
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = dt.datetime.fromisoformat(value)
        except ValueError:
            raise invalid(
                ("query", name), "expected epoch seconds or an ISO 8601 time such as 2026-11-22T01:00:00Z", value
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = when.timestamp()
    if not math.isfinite(seconds):
        raise invalid(("query", name), "expected a finite time", value)
    return seconds


def _filters(
    run_id: Annotated[str | None, Query(max_length=32, description="Only this run.")] = None,
    since: Annotated[
        str | None, Query(max_length=64, description="From this time on (inclusive): epoch seconds or ISO 8601.")
    ] = None,
    until: Annotated[
        str | None, Query(max_length=64, description="Before this time (exclusive): epoch seconds or ISO 8601.")
    ] = None,
) -> Filters:
    return Filters(run_id=run_id or None, since=parse_time("since", since), until=parse_time("until", until))


QueryFilters = Annotated[Filters, Depends(_filters)]


@dataclasses.dataclass(frozen=True)
class PageParams:
    limit: int
    cursor: str | None


def _page(
    settings: Settings,
    limit: Annotated[
        int, Query(ge=1, description="Most rows in this page (bounded by the server's max_page_size).")
    ] = 100,
    cursor: Annotated[str | None, Query(max_length=512, description="The `next_cursor` of the previous page.")] = None,
) -> PageParams:
    if limit > settings.max_page_size:
        raise invalid(("query", "limit"), f"at most {settings.max_page_size} rows per page", limit)
    return PageParams(limit=limit, cursor=cursor or None)


Page = Annotated[PageParams, Depends(_page)]

_Tie = TypeVar("_Tie")


def encode_cursor(kind: str, position: Any) -> str:
    """An opaque cursor: which listing it belongs to and where the next page starts."""
    raw = json.dumps([kind, position], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str | None) -> Any:
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        found, position = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        found, position = None, None
    if found != kind:
        raise invalid(
            ("query", "cursor"),
            "not a cursor of this listing; pass the next_cursor of the previous page unchanged",
            cursor,
        )
    return position


def decode_offset(kind: str, cursor: str | None) -> int:
    """Where an offset-paged listing's page starts: 0 without a cursor."""
    offset = decode_cursor(kind, cursor) or 0
    if not isinstance(offset, int) or offset < 0:
        raise invalid(("query", "cursor"), "not a cursor of this listing", cursor)
    return offset


def decode_after(kind: str, cursor: str | None, tie: type[_Tie]) -> tuple[float, _Tie] | None:
    """Where a keyset-paged listing's page starts: after this (time, ``tie``) pair; None
    without a cursor. ``tie`` is the type of what orders rows of the same time."""
    after = decode_cursor(kind, cursor)
    if after is None:
        return None
    if not (
        isinstance(after, list) and len(after) == 2 and isinstance(after[0], (int, float)) and isinstance(after[1], tie)
    ):
        raise invalid(("query", "cursor"), "not a cursor of this listing", cursor)
    return float(after[0]), after[1]
