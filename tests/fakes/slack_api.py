"""A local fake of the Slack Web API and Socket Mode, for tests with the real slack_sdk pointed at it.

It is a real aiohttp server on 127.0.0.1 (ephemeral port), in the test's own event loop. It records
every Web API call, can be scripted to fail a method (429 with Retry-After, 5xx, Slack errors), and
serves a Socket Mode websocket that pushes envelopes and records the client's acks.

    fake = await FakeSlack.start()
    adapter = SlackAdapter("demo", SlackChannel(..., api_base=fake.api_base))
    fake.fail("chat.postMessage", status=429, retry_after=2)
    ...
    assert fake.count("chat.postMessage") == 2
    await fake.stop()
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from aiohttp import WSMsgType, web

BOT_TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-test-token"
BOT_USER_ID = "UBOT"
BOT_ID = "BBOT"


@dataclass
class Call:
    """One recorded Web API request."""

    method: str
    params: dict[str, Any]
    token: str | None


@dataclass
class Failure:
    """A scripted failure for the next call of a method."""

    status: int = 200
    error: str = "internal_error"
    retry_after: int | None = None
    landed: bool = False  # the call took effect (a message was posted) before the error came back


@dataclass
class FakeSlack:
    """The fake server; use `await FakeSlack.start()`."""

    runner: web.AppRunner | None = None
    port: int = 0
    calls: list[Call] = field(default_factory=list)
    failures: dict[str, deque[Failure]] = field(default_factory=lambda: defaultdict(deque))
    scheduled: dict[tuple[str, int], Failure] = field(default_factory=dict)
    acks: list[str] = field(default_factory=list)
    sockets: list[web.WebSocketResponse] = field(default_factory=list)
    # Seconds between recording a call and answering it, by "method" or "method:channel".
    delays: dict[str, float] = field(default_factory=dict)
    delayed: int = 0  # calls waiting out a delay now: they take a failure scripted meanwhile
    deleted: list[str] = field(default_factory=list)  # ts of messages removed with chat.delete
    # Messages people wrote in channels (`say`), which the history lists beside the app's own posts.
    written: list[dict[str, Any]] = field(default_factory=list)
    # What auth.test reports in `x-oauth-scopes`, as Slack does on every Web API answer.
    scopes: list[str] = field(default_factory=lambda: ["chat:write", "channels:history", "groups:history", "im:history",
                                                       "app_mentions:read", "channels:read"])
    # Members users.info knows, by user id (Slack's `user` object: `name`, `real_name`, `profile`).
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Fields auth.test adds or overrides (an org-wide token: `enterprise_id`, `is_enterprise_install`).
    identity: dict[str, Any] = field(default_factory=dict)
    # The websocket URL apps.connections.open hands out, when not this server's own (one nothing listens on).
    socket_url: str | None = None
    _ts: float = 0.0

    @classmethod
    async def start(cls) -> "FakeSlack":
        """Start listening on an ephemeral port."""
        fake = cls()
        app = web.Application()
        app.router.add_post("/api/{method}", fake._api)
        app.router.add_get("/api/{method}", fake._api)  # slack_sdk reads history with GET
        app.router.add_get("/link", fake._socket)
        fake.runner = web.AppRunner(app)
        await fake.runner.setup()
        site = web.TCPSite(fake.runner, "127.0.0.1", 0)
        await site.start()
        fake.port = site._server.sockets[0].getsockname()[1]
        return fake

    async def stop(self) -> None:
        """Close sockets and the server."""
        for ws in self.sockets:
            await ws.close()
        if self.runner:
            await self.runner.cleanup()

    @property
    def api_base(self) -> str:
        """What the adapter's `api_base` should be."""
        return f"http://127.0.0.1:{self.port}/api/"

    def fail(self, method: str, *, status: int = 200, error: str = "internal_error", retry_after: int | None = None,
             times: int = 1, channel: str | None = None, landed: bool = False) -> None:
        """Make the next `times` calls of `method` (to `channel` only, when given) fail this way; with
        `landed`, after taking effect."""
        for _ in range(times):
            self.failures[f"{method}:{channel}" if channel else method].append(
                Failure(status=status, error=error, retry_after=retry_after, landed=landed))

    def fail_call(self, method: str, number: int, *, status: int = 500, error: str = "internal_error",
                  landed: bool = False) -> None:
        """Make the `number`-th call (1-based, counting every call) of `method` fail; with `landed`, after
        it took effect (Slack posted the message, then answered with the error)."""
        self.scheduled[(method, number)] = Failure(status=status, error=error, landed=landed)

    def calls_to(self, method: str) -> list[Call]:
        """Recorded calls of one method (failed ones included)."""
        return [c for c in self.calls if c.method == method]

    def count(self, method: str) -> int:
        """How many times a method was called."""
        return len(self.calls_to(method))

    def _next_ts(self) -> str:
        """A message ts as Slack makes one: the time it was posted (the app's `oldest=` reads compare it with real
        times: a fixed 2023 base hid every post from them), one clock with the app's posts and the members' messages,
        strictly increasing, so the history keeps their order."""
        self._ts = max(time.time(), self._ts + 0.000001)
        return f"{self._ts:.6f}"

    def say(self, channel: str, text: str, *, user: str = "UMEMBER", thread_ts: str | None = None,
            bot_id: str | None = None, metadata: dict[str, Any] | None = None) -> str:
        """A message in `channel` written by someone else than this app (a person, or another app with
        `bot_id` and maybe `metadata`); returns its ts."""
        ts = self._next_ts()
        self.written.append({"channel": channel, "text": text, "ts": ts, "user": user, "thread_ts": thread_ts,
                             **({"bot_id": bot_id} if bot_id else {}), **({"metadata": metadata} if metadata else {})})
        return ts

    def posted(self) -> list[dict[str, Any]]:
        """The messages that really went through chat.postMessage (as Slack stored them)."""
        return [c.params | {"ts": c.params.get("_ts")} for c in self.calls_to("chat.postMessage") if "_ts" in c.params]

    async def push(self, payload: dict[str, Any], *, kind: str = "events_api") -> str:
        """Send one Socket Mode envelope to every connected client; return its envelope_id."""
        envelope_id = f"env-{len(self.acks)}-{time.monotonic_ns()}"
        message = {"envelope_id": envelope_id, "type": kind, "payload": payload, "accepts_response_payload": False}
        for ws in self.sockets:
            await ws.send_str(json.dumps(message))
        return envelope_id

    async def wait_for_ack(self, envelope_id: str, *, timeout: float = 30.0) -> None:
        """Wait until the client acknowledged an envelope."""
        deadline = time.monotonic() + timeout
        while envelope_id not in self.acks:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no ack for {envelope_id}")
            await asyncio.sleep(0.01)

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        raw = await request.read()
        if request.content_type == "application/json" and raw:
            params = json.loads(raw)
        else:
            params = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
        params = {**request.query, **params}
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth else params.get("token")
        call = Call(method, params, token)
        self.calls.append(call)
        pause = self.delays.get(f"{method}:{params.get('channel')}", self.delays.get(method))
        if pause:  # a slow Slack: the call is visible here before the client has its answer
            self.delayed += 1
            try:
                await asyncio.sleep(pause)
            finally:
                self.delayed -= 1
        failure = self.scheduled.pop((method, self.count(method)), None)
        for key in (f"{method}:{params.get('channel')}", method):
            if failure is None and self.failures[key]:
                failure = self.failures[key].popleft()
        if failure is not None:
            if failure.landed:
                self._answer(method, call)
            headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
            error = "ratelimited" if failure.status == 429 else failure.error
            return web.json_response({"ok": False, "error": error}, status=failure.status, headers=headers)
        expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if token != expected:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        headers = {"x-oauth-scopes": ",".join(self.scopes)} if method == "auth.test" else {}
        return web.json_response(self._answer(method, call), headers=headers)

    def _answer(self, method: str, call: Call) -> dict[str, Any]:
        if method == "auth.test":
            return {"ok": True, "user_id": BOT_USER_ID, "bot_id": BOT_ID, "team_id": "T111", "user": "gateway",
                    **self.identity}
        if method == "apps.connections.open":
            return {"ok": True, "url": self.socket_url or f"ws://127.0.0.1:{self.port}/link?ticket=t"}
        if method == "chat.postMessage":
            if not call.params.get("channel"):
                return {"ok": False, "error": "channel_not_found"}
            if len(call.params.get("text") or "") > 40000:
                return {"ok": False, "error": "msg_too_long"}
            ts = self._next_ts()
            call.params["_ts"] = ts
            return {"ok": True, "channel": call.params["channel"], "ts": ts,
                    "message": {"text": call.params.get("text"), "ts": ts, "thread_ts": call.params.get("thread_ts")}}
        if method in ("conversations.replies", "conversations.history"):
            return {"ok": True, "has_more": False, "messages": self._history(call.params)}
        if method == "chat.delete":
            self.deleted.append(str(call.params.get("ts")))
            return {"ok": True, "channel": call.params.get("channel"), "ts": call.params.get("ts")}
        if method == "chat.update":
            return {"ok": True, "channel": call.params.get("channel"), "ts": call.params.get("ts"),
                    "text": call.params.get("text")}
        if method == "chat.postEphemeral":  # shown to `user` alone; nothing lands in the channel's history
            if not call.params.get("channel") or not call.params.get("user"):
                return {"ok": False, "error": "channel_not_found" if not call.params.get("channel") else "user_not_found"}
            self._ts += 1
            return {"ok": True, "message_ts": f"1700000000.{self._ts:06d}"}
        if method == "users.info":
            user = self.users.get(str(call.params.get("user")))
            return {"ok": True, "user": {"id": call.params["user"], **user}} if user else {"ok": False,
                                                                                          "error": "user_not_found"}
        return {"ok": False, "error": "unknown_method"}

    def _history(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Posted messages of a channel, newest first as conversations.history lists them, or of one thread, oldest
        first as conversations.replies does; only those after `oldest` when given; metadata only with
        include_all_metadata."""
        thread = params.get("ts") if "ts" in params else None
        oldest = float(params.get("oldest") or 0)
        out = []
        # The app's posts carry its bot user and bot id, as Slack lists them; a person's only their user.
        mine = [{**posted, "user": BOT_USER_ID, "bot_id": BOT_ID} for posted in self.posted()]
        for posted in sorted([*mine, *self.written], key=lambda m: float(m["ts"]), reverse=not thread):
            if posted.get("channel") != params.get("channel") or (thread and posted.get("thread_ts") != thread):
                continue
            if float(posted["ts"]) <= oldest:
                continue
            message = {"type": "message", "text": posted.get("text"), "ts": posted["ts"], "thread_ts": posted.get("thread_ts"),
                       "user": posted["user"], **({"bot_id": posted["bot_id"]} if "bot_id" in posted else {})}
            if posted.get("metadata") and str(params.get("include_all_metadata")).lower() in ("true", "1"):
                message["metadata"] = posted["metadata"]
            out.append(message)
        return out[: int(params.get("limit") or 100)]

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.sockets.append(ws)
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1, "debug_info": {"host": "fake"}}))
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                data = json.loads(msg.data)
                if "envelope_id" in data:
                    self.acks.append(data["envelope_id"])
        self.sockets.remove(ws)
        return ws


def sign(body: bytes, *, secret: str, timestamp: int | None = None) -> dict[str, str]:
    """Slack's request signing, as Slack does it: v0=HMAC-SHA256(secret, 'v0:{ts}:{body}')."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"x-slack-request-timestamp": ts, "x-slack-signature": f"v0={digest}"}
