"""A fake Discord: the REST API under /api/v10 and a gateway websocket at /gateway, on 127.0.0.1.

It speaks enough of the protocol for discord.py: login (users/@me, applications/@me), a channel's object
(the ones put in `channels`: a thread, `thread_object`), messages
(create honouring `nonce` + `enforce_nonce`, edit, a channel's history after an id), typing, interaction follow-ups (and their edits), and a gateway
that sends HELLO, answers IDENTIFY with READY, acks heartbeats and can dispatch events. Every REST
request is recorded; `delays` slows the answers to some paths; `fail_next` scripts 429s (with Discord's headers) or any other error, and
`drop_next` accepts a request and then closes the connection unanswered (a timeout after Discord acted).
As Discord does, content over 2,000 characters is refused (400, code 50035), and a nonce dedupes a
create only for `nonce_ttl` seconds ("in the past few minutes").
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from aiohttp import WSMsgType, web

BOT_USER_ID = "1100000000000000001"
APPLICATION_ID = "1100000000000000002"
INTERACTION_CHANNEL_ID = "1100000000000000009"
_snowflakes = itertools.count(1_200_000_000_000_000_000)
CONTENT_LIMIT = 2000


@dataclass
class Recorded:
    """One REST request the SDK made."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any


@dataclass
class _Failure:
    method: str
    path_suffix: str
    status: int
    body: dict[str, Any]
    headers: dict[str, str]
    remaining: int
    skip: int = 0
    drop: bool = False  # process the request, then close the connection without an answer
    landed: bool = False  # process the request, then answer with the failure (a 5xx after Discord acted)


@dataclass
class FakeDiscord:
    """The fake platform. `url` is its root; `api_base` is what DiscordChannel.api_base should be."""

    requests: list[Recorded] = field(default_factory=list)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)  # id → message object
    identifies: list[dict[str, Any]] = field(default_factory=list)
    sessions_started: int = 0  # IDENTIFYs and RESUMEs handled (READY sent for an IDENTIFY)
    _failures: list[_Failure] = field(default_factory=list)
    _nonces: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)  # → (message id, at)
    nonce_ttl: float = 300.0
    identify_close_code: int | None = None  # answer IDENTIFY by closing with this code (4004: bad token)
    # Channels where the bot lacks Read Message History: Discord refuses a reply there (403, 50013).
    no_history: set[str] = field(default_factory=set)
    channels: dict[str, dict[str, Any]] = field(default_factory=dict)  # id → channel object (GET /channels/{id})
    delays: dict[str, float] = field(default_factory=dict)  # path suffix → seconds before answering (a slow Discord)
    _sockets: list[web.WebSocketResponse] = field(default_factory=list)
    _sequence: int = 0
    _runner: web.AppRunner | None = None
    url: str = ""
    token: str = "fake-bot-token"  # the only bot token the fake accepts

    @property
    def api_base(self) -> str:
        return f"{self.url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/gateway"

    async def start(self) -> FakeDiscord:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{tail:.*}", self._rest)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- scripting and assertions --

    def fail_next(
        self,
        method: str,
        path_suffix: str,
        *,
        status: int,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        times: int = 1,
        after: int = 0,
        landed: bool = False,
    ) -> None:
        """Let `after` matching requests through, then fail the next `times` with `status`; with `landed`,
        after acting on them (Discord posted the message, then answered 500)."""
        self._failures.append(_Failure(method, path_suffix, status, body or {}, headers or {}, times, after,
                                       landed=landed))

    def drop_next(self, method: str, path_suffix: str, *, after: int = 0) -> None:
        """Let `after` matching requests through, then act on the next one and close the connection unanswered."""
        self._failures.append(_Failure(method, path_suffix, 0, {}, {}, 1, after, drop=True))

    def rate_limit_next(self, method: str, path_suffix: str, *, retry_after: float = 0.05) -> None:
        """One 429 exactly as Discord sends it: JSON retry_after, Retry-After and X-RateLimit headers."""
        self.fail_next(
            method,
            path_suffix,
            status=429,
            body={"message": "You are being rate limited.", "retry_after": retry_after, "global": False},
            headers={
                "Retry-After": str(retry_after),
                "X-RateLimit-Limit": "5",
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset-After": str(retry_after),
                "X-RateLimit-Bucket": "fakebucket",
                "X-RateLimit-Scope": "user",
                "Via": "1.1 google",  # discord.py treats a 429 without Via as a Cloudflare ban
            },
        )

    def received(self, method: str, path_suffix: str) -> list[Recorded]:
        """The recorded requests whose path ends with `path_suffix`."""
        return [r for r in self.requests if r.method == method and r.path.endswith(path_suffix)]

    def channel_messages(self, channel_id: str) -> list[dict[str, Any]]:
        """Messages that exist in a channel, in creation order."""
        return [m for m in self.messages.values() if m["channel_id"] == channel_id]

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a gateway DISPATCH (op 0) to every connected client."""
        self._sequence += 1
        frame = {"op": 0, "t": event, "s": self._sequence, "d": data}
        for ws in list(self._sockets):
            await ws.send_str(json.dumps(frame))

    async def wait_identified(self, timeout: float = 30.0) -> None:
        """Until a client has sent IDENTIFY."""
        async with asyncio.timeout(timeout):
            while not self.identifies:
                await asyncio.sleep(0.01)

    # -- REST --

    async def _rest(self, request: web.Request) -> web.Response:
        body = await request.read()
        payload = json.loads(body) if body and request.content_type == "application/json" else None
        path = request.path
        self.requests.append(Recorded(request.method, path, dict(request.headers), payload))
        if delay := next((seconds for suffix, seconds in self.delays.items() if path.endswith(suffix)), 0.0):
            await asyncio.sleep(delay)
        for failure in self._failures:
            if failure.remaining and failure.method == request.method and path.endswith(failure.path_suffix):
                if failure.skip:
                    failure.skip -= 1
                    continue
                failure.remaining -= 1
                if failure.drop:
                    await self._answer(request, path, payload)  # Discord acted; the answer is lost
                    assert request.transport is not None
                    request.transport.close()
                    raise asyncio.CancelledError
                if failure.landed:
                    await self._answer(request, path, payload)
                return _json(failure.body, status=failure.status, headers=failure.headers)
        return await self._answer(request, path, payload)

    async def _answer(self, request: web.Request, path: str, payload: Any) -> web.Response:
        # Interaction follow-ups authenticate by the token in their URL, everything else by the bot token.
        if request.headers.get("Authorization") != f"Bot {self.token}" and "/webhooks/" not in path:
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        parts = path.removeprefix("/api/v10/").split("/")
        if request.method == "GET" and parts == ["users", "@me"]:
            return _json(_user(BOT_USER_ID, "gatewaybot", bot=True))
        if request.method == "GET" and parts == ["oauth2", "applications", "@me"]:
            return _json(_application())
        if parts[0] == "channels" and len(parts) == 2 and request.method == "GET":
            if parts[1] in self.channels:
                return _json(self.channels[parts[1]])
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        if parts[0] == "channels" and len(parts) == 3 and parts[2] == "typing" and request.method == "POST":
            return web.Response(status=204)
        if parts[0] == "channels" and len(parts) == 3 and parts[2] == "messages" and request.method == "POST":
            if parts[1] in self.no_history and (payload or {}).get("message_reference"):
                return _json({"message": "Missing Permissions", "code": 50013}, status=403)
            return _too_long(payload) or _json(self._create(parts[1], payload or {}))
        if parts[0] == "channels" and len(parts) == 3 and parts[2] == "messages" and request.method == "GET":
            if parts[1] in self.no_history:
                return _json({"message": "Missing Access", "code": 50001}, status=403)
            after, limit = int(request.query.get("after", 0)), int(request.query.get("limit", 50))
            found = [m for m in self.channel_messages(parts[1]) if int(m["id"]) > after]
            return _json(sorted(found, key=lambda m: int(m["id"]), reverse=True)[:limit])  # newest first, as Discord
        if parts[0] == "channels" and len(parts) == 4 and request.method == "PATCH":
            message = self.messages.get(parts[3])
            return _edited(message if message and message["channel_id"] == parts[1] else None, payload)
        if parts[0] == "webhooks" and len(parts) == 5 and parts[3] == "messages" and request.method == "PATCH":
            message = self.messages.get(parts[4])  # a follow-up, edited through its interaction's token
            return _edited(message if message and message.get("interaction_token") == parts[2] else None, payload)
        if parts[0] == "webhooks" and len(parts) == 3 and request.method == "POST":
            if too_long := _too_long(payload):
                return too_long
            # A follow-up lands in the interaction's channel, which the fake does not track.
            message = self._create(INTERACTION_CHANNEL_ID, payload or {})
            message["webhook_id"] = parts[1]
            message["interaction_token"] = parts[2]
            return _json(message)
        return _json({"message": "404: Not Found", "code": 0}, status=404)

    def _create(self, channel_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        nonce = payload.get("nonce")
        seen = self._nonces.get((channel_id, nonce)) if nonce and payload.get("enforce_nonce") else None
        if seen is not None and time.monotonic() - seen[1] < self.nonce_ttl:
            return self.messages[seen[0]]  # Discord returns the original
        message_id = str(next(_snowflakes))
        # Discord trims a message's content: a chunk starting with an indented line is stored without it.
        content = payload.get("content", "").strip()
        message = message_object(message_id=message_id, channel_id=channel_id, content=content,
                                 author=_user(BOT_USER_ID, "gatewaybot", bot=True), timestamp=_now(),
                                 type=19 if payload.get("message_reference") else 0, flags=payload.get("flags", 0))
        # Discord omits absent optional fields rather than sending null.
        for key in ("nonce", "message_reference"):
            if payload.get(key) is not None:
                message[key] = payload[key]
        self.messages[message_id] = message
        if nonce:
            self._nonces[(channel_id, nonce)] = (message_id, time.monotonic())
        return message

    # -- gateway --

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 45000}}))
        try:
            async for frame in ws:
                if frame.type != WSMsgType.TEXT:
                    continue
                data = json.loads(frame.data)
                if data.get("op") == 1:
                    await ws.send_str(json.dumps({"op": 11}))
                elif data.get("op") == 2:
                    self.identifies.append(data["d"])
                    if self.identify_close_code is not None:
                        await ws.close(code=self.identify_close_code, message=b"Authentication failed.")
                        break
                    await self._send_ready(ws)
                if data.get("op") in (2, 6):
                    self.sessions_started += 1
        finally:
            self._sockets.remove(ws)
        return ws

    async def _send_ready(self, ws: web.WebSocketResponse) -> None:
        self._sequence += 1
        ready = {
            "v": 10,
            "user": _user(BOT_USER_ID, "gatewaybot", bot=True),
            "guilds": [],
            "session_id": "fake-session",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": APPLICATION_ID, "flags": 0},
        }
        await ws.send_str(json.dumps({"op": 0, "t": "READY", "s": self._sequence, "d": ready}))


def _edited(message: dict[str, Any] | None, payload: Any) -> web.Response:
    """Discord's answer to an edit of `message` (None: not found where the request looked)."""
    if message is None:
        return _json({"message": "Unknown Message", "code": 10008}, status=404)
    if too_long := _too_long(payload):
        return too_long
    message["content"] = (payload or {}).get("content", message["content"])
    message["edited_timestamp"] = _now()
    return _json(message)


def _too_long(payload: Any) -> web.Response | None:
    """Discord's answer to content over the limit, or None."""
    content = (payload or {}).get("content") or ""
    if len(content) <= CONTENT_LIMIT:
        return None
    return _json({"message": "Invalid Form Body", "code": 50035, "errors": {"content": {"_errors": [
        {"code": "BASE_TYPE_MAX_LENGTH", "message": f"Must be {CONTENT_LIMIT} or fewer in length."}]}}}, status=400)


def message_object(*, message_id: str, channel_id: str, content: str, author: dict[str, Any], timestamp: str,
                   **extra: Any) -> dict[str, Any]:
    """A Discord message object as the API and the gateway send it (the fields discord.py reads)."""
    return {
        "id": message_id,
        "type": 0,
        "channel_id": channel_id,
        "content": content,
        "author": author,
        "attachments": [],
        "embeds": [],
        "mentions": [],
        "mention_roles": [],
        "pinned": False,
        "mention_everyone": False,
        "tts": False,
        "timestamp": timestamp,
        "edited_timestamp": None,
        "flags": 0,
        **extra,
    }


def thread_object(*, thread_id: str, parent_id: str, guild_id: str) -> dict[str, Any]:
    """A public thread (type 11) as GET /channels/{id} returns it (the fields discord.py reads)."""
    return {
        "id": thread_id, "type": 11, "guild_id": guild_id, "parent_id": parent_id, "owner_id": "900000000000000003",
        "name": "help thread", "message_count": 1, "member_count": 1, "rate_limit_per_user": 0, "flags": 0,
        "thread_metadata": {"archived": False, "auto_archive_duration": 1440, "archive_timestamp": _now(),
                            "locked": False},
    }


def _json(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exactly "application/json": discord.py compares the header verbatim, so a charset breaks it.
    return web.Response(
        body=json.dumps(body).encode(), status=status, headers={**(headers or {}), "Content-Type": "application/json"}
    )


def _user(user_id: str, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {"id": user_id, "username": name, "discriminator": "0", "avatar": None, "global_name": None, "bot": bot}


def _application() -> dict[str, Any]:
    return {
        "id": APPLICATION_ID,
        "name": "Fake App",
        "description": "",
        "icon": None,
        "bot_public": False,
        "bot_require_code_grant": False,
        "owner": _user("1100000000000000003", "owner"),
        "verify_key": "00" * 32,
        "flags": 0,
        "interactions_endpoint_url": None,
    }


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()
