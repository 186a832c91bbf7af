"""Admin endpoints for the local CLI: ingest through the running server.

Qdrant local mode lets one process hold its folder, so `gateway ingest` on the same machine sends
the job here. It authenticates with the token the server writes to `var/admin.token` at start.
"""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse

from gateway.http.deps import error, services

router = APIRouter(prefix="/v1/admin", tags=["admin"], include_in_schema=False)


@router.post("/ingest")
async def ingest(request: Request, bot: str | None = None, source: str | None = None,
                 authorization: str = Header(default="")) -> JSONResponse:
    """Run an ingest now and return its counts."""
    svc = services(request)
    if svc.role == "web":
        return error(503, "this process only receives (serve --role web); ingest through the process that "
                          "runs the worker and holds the index")
    supplied = authorization.removeprefix("Bearer ").strip()
    if not supplied or not secrets.compare_digest(supplied.encode(), svc.admin_token.encode()):
        return error(401, "admin token required")
    try:
        reports = await svc.knowledge.ingest(bot=bot, source=source, trigger="cli")
    except KeyError as exc:
        return error(404, f"unknown {exc.args[0]}")
    return JSONResponse({"runs": [r.as_dict() for r in reports]})
