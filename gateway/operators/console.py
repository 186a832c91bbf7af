"""The operator console at `/operator`: one static page that talks to the operator API with a token."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse

from gateway.http.webchat import STATIC_DIR

router = APIRouter(tags=["operators"], include_in_schema=False)

# The page holds no data of its own; everything comes from the API after the operator gives a token.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@router.get("/operator")
async def console() -> FileResponse:
    """The console page; its script and styles are under /static/operator.*."""
    return FileResponse(STATIC_DIR / "operator.html", media_type="text/html", headers=SECURITY_HEADERS)
