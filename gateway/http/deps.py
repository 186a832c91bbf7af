"""Access to the composed services from a request, and shared error responses."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

from fastapi import Path, Query, Request
from fastapi.responses import JSONResponse

from gateway.models import as_utc

if TYPE_CHECKING:
    from gateway.services import Services

# Ids are INTEGER columns, 32 bits on PostgreSQL (64 on SQLite): a larger number in a URL is a 422, not a
# driver error (500: asyncpg refuses a parameter out of int32 range).
MAX_ID = 2**31 - 1
RowId = Annotated[int, Path(ge=1, le=MAX_ID)]
AfterId = Annotated[int, Query(ge=0, le=MAX_ID)]


def services(request: Request) -> "Services":
    """The services built by `create_app` for this application."""
    return request.app.state.services


def error(status: int, message: str, **extra) -> JSONResponse:
    """A JSON error body: {"error": message, ...}."""
    return JSONResponse({"error": message, **extra}, status_code=status)


def utc_iso(value: datetime | None) -> str | None:
    """ISO 8601 with an explicit "+00:00": SQLite gives back naive datetimes, which clients read as local time."""
    return as_utc(value).isoformat() if value is not None else None
