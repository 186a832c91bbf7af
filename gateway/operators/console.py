"""The operator console at `/operator`: one static page that talks to the operator API with a token."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

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


CONSOLE_PAGE = "operator.html"


@router.get("/operator")
async def console() -> FileResponse:
    """The console page; its script and styles are under /static/operator.*."""
    return FileResponse(STATIC_DIR / CONSOLE_PAGE, media_type="text/html", headers=SECURITY_HEADERS)


class StaticAssets(StaticFiles):
    """The files under /static, where the console's page is too: it gets the headers `/operator` sends. Why:
    /static/operator.html is the same console, and without them any site could frame it (clickjacking its
    buttons once an operator signed in inside the frame) and it ran without its CSP. The widget's page stays
    frameable: sites embed it."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        if path == CONSOLE_PAGE:
            response.headers.update(SECURITY_HEADERS)
        return response
