"""Access to the composed services from a request, and shared error responses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request
from fastapi.responses import JSONResponse

if TYPE_CHECKING:
    from gateway.services import Services


def services(request: Request) -> "Services":
    """The services built by `create_app` for this application."""
    return request.app.state.services


def error(status: int, message: str, **extra) -> JSONResponse:
    """A JSON error body: {"error": message, ...}."""
    return JSONResponse({"error": message, **extra}, status_code=status)
