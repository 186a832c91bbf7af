"""A local fake of the Telegram Bot API, for running the real aiogram client against.

It is a real HTTP server on 127.0.0.1 (ephemeral port) that speaks the Bot API wire protocol:
`POST /bot<token>/<method>` with form or multipart fields, answered with `{"ok": ..., "result": ...}`.
Point aiogram at it with `TelegramAPIServer.from_base(fake.base_url)` (our `api_base` setting).

What makes it useful:
- Every request is recorded (`requests`, `calls(method)`), so tests assert on what was sent.
- `parse_mode=HTML` text is parsed the way Telegram does: only Telegram's tags, only `&lt; &gt; &amp;
  &quot;` and numeric entities, balanced tags, and a bare `<` is refused with
  400 "Bad Request: can't parse entities: ...". The visible text and entities are kept per message,
  and the 4096-unit limit is checked on that visible text in UTF-16 units.
- Message ids are numbered per chat, as Telegram does: two chats' replies share ids.
- `fail_next(method, ...)` scripts the next replies: 429 with `parameters.retry_after`, 5xx, 403...,
  or (`html=True`) the HTML error page Telegram's proxies answer 502/504 with during an outage.
- `push_update(update)` queues an update for `getUpdates` long polling; `closed_topics` holds the forum
  topics closed meanwhile, where a send is refused with "TOPIC_CLOSED".

    async with FakeTelegramAPI(token) as fake:
        fake.fail_next("sendMessage", status=429, retry_after=1)
        ...
        assert fake.sent[0].text == "Hello"
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

LIMIT = 4096
_ALLOWED_TAGS = {
    "b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline", "ins": "underline",
    "s": "strikethrough", "strike": "strikethrough", "del": "strikethrough", "tg-spoiler": "spoiler",
    "span": "spoiler", "a": "text_link", "code": "code", "pre": "pre", "blockquote": "blockquote",
    "tg-emoji": "custom_emoji",
}
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_TAG_RE = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[a-zA-Z-]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>]+))?)*)\s*>")
_ATTR_RE = re.compile(r"([a-zA-Z-]+)(?:\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>]+))?")


class EntityParseError(ValueError):
    """Telegram's "can't parse entities" error."""


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, as Telegram counts."""
    return len(text.encode("utf-16-le")) // 2


def parse_telegram_html(source: str) -> tuple[str, list[dict[str, Any]]]:
    """Parse text the way Telegram's HTML parse_mode does: (visible text, entities) or EntityParseError."""
    out: list[str] = []
    entities: list[dict[str, Any]] = []
    # (tag, utf16 offset at open, attrs, index in `out` where its text starts: a mention's name)
    stack: list[tuple[str, int, dict[str, str], int]] = []
    pos = 0
    offset = 0

    def emit(chars: str) -> None:
        nonlocal offset
        out.append(chars)
        offset += utf16_len(chars)

    while pos < len(source):
        ch = source[pos]
        if ch == "<":
            match = _TAG_RE.match(source, pos)
            if not match:
                raise EntityParseError(f"Unsupported start tag at byte offset {len(source[:pos].encode())}")
            closing, tag, attr_text = match.group(1), match.group(2).lower(), match.group(3)
            if tag not in _ALLOWED_TAGS:
                raise EntityParseError(f'Unsupported start tag "{tag}" at byte offset {len(source[:pos].encode())}')
            if closing:
                if not stack or stack[-1][0] != tag:
                    raise EntityParseError(f'Unmatched end tag at byte offset {len(source[:pos].encode())}, expected "</{stack[-1][0] if stack else ""}>", found "</{tag}>"')
                open_tag, start, attrs, first_piece = stack.pop()
                if offset > start:
                    entity = {"type": _ALLOWED_TAGS[open_tag], "offset": start, "length": offset - start}
                    if open_tag == "a" and (user := re.fullmatch(r"tg://user\?id=(\d+)", attrs.get("href", ""))):
                        # Telegram sends the user's own profile; the fake knows only the linked words.
                        name = "".join(out[first_piece:])
                        entity["type"] = "text_mention"
                        entity["user"] = {"id": int(user.group(1)), "is_bot": False, "first_name": name}
                    elif open_tag == "a":
                        entity["url"] = attrs.get("href", "")
                    if open_tag == "code" and stack and stack[-1][0] == "pre":
                        entity["language"] = attrs.get("class", "").removeprefix("language-")
                    entities.append(entity)
            else:
                if stack and stack[-1][0] in ("code", "pre") and not (stack[-1][0] == "pre" and tag == "code"):
                    raise EntityParseError(f'Can\'t use tag "{tag}" inside "{stack[-1][0]}"')
                if tag in ("a", "code", "pre") and any(t == "a" for t, *_ in stack):
                    raise EntityParseError(f'Can\'t use tag "{tag}" inside "a"')  # links hold no code nor link
                attrs = {}
                for name, value in _ATTR_RE.findall(attr_text):
                    raw = value[1:-1] if value[:1] in "\"'" and len(value) >= 2 else value
                    attrs[name.lower()] = html.unescape(raw)
                stack.append((tag, offset, attrs, len(out)))
            pos = match.end()
        elif ch == "&":
            match = re.match(r"&(#x[0-9a-fA-F]+|#[0-9]+|[a-zA-Z]+);", source[pos:])
            if match and match.group(1).startswith("#"):
                code = match.group(1)
                emit(chr(int(code[2:], 16) if code[1] in "xX" else int(code[1:])))
                pos += match.end()
            elif match and match.group(1) in _NAMED:
                emit(_NAMED[match.group(1)])
                pos += match.end()
            else:
                # Telegram keeps an unrecognised '&' as a literal character.
                emit("&")
                pos += 1
        else:
            emit(ch)
            pos += 1
    if stack:
        raise EntityParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    return "".join(out), entities


@dataclass(frozen=True)
class RecordedCall:
    """One API call as the fake received it. `params` are decoded (JSON fields parsed)."""

    method: str
    params: dict[str, Any]
    at: float


@dataclass
class SentMessage:
    """A message the fake accepted, as a Telegram user would see it."""

    message_id: int
    chat_id: int | str
    text: str
    entities: list[dict[str, Any]]
    source: str
    parse_mode: str | None
    thread_id: int | None = None
    reply_to: int | None = None
    edits: list[str] = field(default_factory=list)
    deleted: bool = False  # removed with deleteMessage (kept here, so tests see what was deleted)


@dataclass(frozen=True)
class _Scripted:
    status: int
    description: str
    retry_after: int | None = None
    migrate_to_chat_id: int | None = None
    html: bool = False


class FakeTelegramAPI:
    """The fake Bot API server. Use as `async with FakeTelegramAPI(token) as fake:`."""

    def __init__(self, token: str, *, username: str = "support_bot", poll_wait: float = 0.5) -> None:
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.username = username
        self.poll_wait = poll_wait  # caps getUpdates' long-poll timeout so tests stay fast
        self.requests: list[RecordedCall] = []
        self.sent: list[SentMessage] = []
        self.webhook: dict[str, Any] = {}
        self.closed_topics: set[tuple[int | str, int]] = set()  # (chat, message_thread_id): members can't post
        self._scripts: dict[str, deque[_Scripted | None]] = defaultdict(deque)  # None: let one call through
        self._updates: list[dict[str, Any]] = []
        self._updates_event = asyncio.Event()
        # Per chat, as Telegram numbers them: two chats' messages routinely share an id.
        self._ids: dict[int | str, itertools.count] = defaultdict(lambda: itertools.count(1000))
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def __aenter__(self) -> "FakeTelegramAPI":
        app = web.Application()
        app.router.add_route("POST", "/bot{token}/{method}", self._handle)
        app.router.add_route("GET", "/bot{token}/{method}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # Scripting and inspection
    def fail_next(
        self, method: str, *, status: int = 429, description: str | None = None,
        retry_after: int | None = None, migrate_to_chat_id: int | None = None, times: int = 1, skip: int = 0,
        html: bool = False,
    ) -> None:
        """Let `skip` calls of `method` through, then fail the next `times` with this status.

        A 429 carries `parameters.retry_after`; `migrate_to_chat_id` mimics a group upgraded to a supergroup.
        """
        default = {429: "Too Many Requests: retry after {}", 403: "Forbidden: bot was blocked by the user",
                   400: "Bad Request", 500: "Internal Server Error", 502: "Bad Gateway"}.get(status, "Error")
        text = description or default.format(retry_after)
        queue = self._scripts[method.lower()]
        queue.extend([None] * skip)
        for _ in range(times):
            self._scripts[method.lower()].append(_Scripted(status, text, retry_after, migrate_to_chat_id, html))

    def push_update(self, update: dict[str, Any]) -> None:
        """Queue an update for the next getUpdates."""
        self._updates.append(update)
        self._updates_event.set()

    def calls(self, method: str) -> list[RecordedCall]:
        """Recorded calls of one method (case-insensitive, as Telegram treats method names)."""
        return [c for c in self.requests if c.method.lower() == method.lower()]

    # Server
    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        self.requests.append(RecordedCall(method, params, time.monotonic()))
        if request.match_info["token"] != self.token:
            return self._error(401, "Unauthorized")
        scripted = self._scripts[method.lower()]
        fail = scripted.popleft() if scripted else None
        if fail is not None and fail.html:
            page = f"<html><head><title>{fail.status} {fail.description}</title></head><body><center><h1>" \
                   f"{fail.status} {fail.description}</h1></center><hr><center>nginx</center></body></html>"
            return web.Response(status=fail.status, text=page, content_type="text/html")
        if fail is not None:
            extra: dict[str, Any] = {}
            if fail.retry_after is not None:
                extra["retry_after"] = fail.retry_after
            if fail.migrate_to_chat_id is not None:
                extra["migrate_to_chat_id"] = fail.migrate_to_chat_id
            return self._error(fail.status, fail.description, extra)
        handler = getattr(self, f"_m_{method.lower()}", None)
        if handler is None:
            return self._error(404, "Not Found: method not found")
        try:
            result = await handler(params)
        except _ApiError as exc:
            return self._error(exc.status, exc.description)
        return web.json_response({"ok": True, "result": result})

    @staticmethod
    async def _params(request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            return dict(await request.json())
        form = await request.post()
        params: dict[str, Any] = {}
        for key, value in form.items():
            text = value if isinstance(value, str) else value.file.read().decode()
            try:
                params[key] = json.loads(text) if text[:1] in "[{" else text
            except json.JSONDecodeError:
                params[key] = text
        return params

    @staticmethod
    def _error(status: int, description: str, parameters: dict[str, Any] | None = None) -> web.Response:
        body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
        if parameters:
            body["parameters"] = parameters
        return web.json_response(body, status=status)

    def _render(self, params: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        source = str(params.get("text", ""))
        mode = str(params.get("parse_mode", "") or "")
        if mode.lower() == "html":
            try:
                text, entities = parse_telegram_html(source)
            except EntityParseError as exc:
                raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        elif mode:
            raise _ApiError(400, f"Bad Request: unsupported parse_mode {mode!r} in this fake")
        else:
            text, entities = source, []
        if not text.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > LIMIT:
            raise _ApiError(400, "Bad Request: message is too long")
        return text, entities

    def _message_json(self, msg: SentMessage) -> dict[str, Any]:
        chat_id = msg.chat_id if isinstance(msg.chat_id, int) else 0
        out: dict[str, Any] = {
            "message_id": msg.message_id, "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": self.bot_id, "is_bot": True, "first_name": "Support", "username": self.username},
            "text": msg.text,
        }
        if msg.entities:
            out["entities"] = msg.entities
        if msg.thread_id is not None:
            out["message_thread_id"] = msg.thread_id
            out["is_topic_message"] = True
        return out

    # Bot API methods
    async def _m_getme(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": "Support", "username": self.username,
                "can_join_groups": True, "can_read_all_group_messages": False, "supports_inline_queries": False}

    async def _m_sendmessage(self, params: dict[str, Any]) -> dict[str, Any]:
        text, entities = self._render(params)
        chat = params.get("chat_id", "")
        chat_id: int | str = int(chat) if re.fullmatch(r"-?\d+", str(chat)) else str(chat)
        reply = params.get("reply_parameters") or {}
        thread = params.get("message_thread_id")
        if thread and (chat_id, int(thread)) in self.closed_topics:
            raise _ApiError(400, "Bad Request: TOPIC_CLOSED")  # as Telegram answers a bot that is no admin
        msg = SentMessage(next(self._ids[chat_id]), chat_id, text, entities, str(params.get("text", "")),
                          params.get("parse_mode"), int(thread) if thread else None,
                          int(reply["message_id"]) if isinstance(reply, dict) and reply.get("message_id") else None)
        self.sent.append(msg)
        return self._message_json(msg)

    async def _m_editmessagetext(self, params: dict[str, Any]) -> dict[str, Any]:
        text, entities = self._render(params)
        chat = str(params.get("chat_id", ""))
        target = next((m for m in self.sent if m.message_id == int(params.get("message_id", 0))
                       and str(m.chat_id) == chat), None)
        if target is None:
            raise _ApiError(400, "Bad Request: message to edit not found")
        if target.text == text and target.entities == entities:
            raise _ApiError(400, "Bad Request: message is not modified: specified new message content and reply "
                                 "markup are exactly the same as a current content and reply markup of the message")
        target.edits.append(target.text)
        target.text, target.entities, target.source = text, entities, str(params.get("text", ""))
        return self._message_json(target)

    async def _m_deletemessage(self, params: dict[str, Any]) -> bool:
        chat = str(params.get("chat_id", ""))
        target = next((m for m in self.sent if m.message_id == int(params.get("message_id", 0))
                       and str(m.chat_id) == chat and not m.deleted), None)
        if target is None:
            raise _ApiError(400, "Bad Request: message to delete not found")
        target.deleted = True
        return True

    async def _m_sendchataction(self, params: dict[str, Any]) -> bool:
        if params.get("action") not in {"typing", "upload_photo", "upload_document", "record_voice"}:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _m_setwebhook(self, params: dict[str, Any]) -> bool:
        secret = str(params.get("secret_token", ""))
        if secret and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret):
            raise _ApiError(400, "Bad Request: secret token contains unallowed characters")
        self.webhook = params
        return True

    async def _m_deletewebhook(self, params: dict[str, Any]) -> bool:
        self.webhook = {}
        return True

    async def _m_getupdates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook:
            raise _ApiError(409, "Conflict: can't use getUpdates method while webhook is active")
        offset = int(params.get("offset", 0) or 0)
        # Confirming by offset drops older updates, exactly as Telegram does.
        self._updates = [u for u in self._updates if not isinstance(u.get("update_id"), int) or u["update_id"] >= offset]
        if not self._updates:
            self._updates_event.clear()
            wait = min(float(params.get("timeout", 0) or 0), self.poll_wait)
            try:
                await asyncio.wait_for(self._updates_event.wait(), timeout=wait)
            except TimeoutError:
                return []
        return list(self._updates[:100])


class _ApiError(Exception):
    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
