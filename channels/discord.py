"""Discord: a discord.py gateway client for DMs and mentions, plus the `/ask` interactions endpoint.

Inbound arrives two ways:
- the gateway (`start`): `on_message` → `parse_gateway_message` → `deliver`; external_id = message id;
- HTTP interactions (`verify` + `parse`): Ed25519-signed; PING → type 1, `/ask question:...` → an
  InboundMessage keyed by the interaction id and a deferred response (type 5, "thinking...").

Outbound goes through discord.py's HTTP client, which owns Discord's 429 buckets (it sleeps
`retry_after` and retries). Every chunk carries a deterministic nonce with `enforce_nonce`, so a send
retried after a lost response is deduplicated by Discord instead of posted twice.

`discord.http.Route.BASE` and `DiscordWebSocket.DEFAULT_GATEWAY` are class attributes, so one process
talks to one Discord API base and one gateway: the last adapter constructed sets them.

Edits (MESSAGE_UPDATE) and deletions are ignored with a reason: an answer to the first version has
already been queued, and re-answering every typo fix would spam the channel.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp
import discord
import yarl
from discord.gateway import DiscordWebSocket
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from channels.base import Capabilities, Deliver, ImmediateResponse, RawRequest, WebhookResult
from channels.render import render_citations, split_text
from gateway.errors import BadRequest, ChannelSendError, RecipientUnreachable, SignatureInvalid
from gateway.models import Attachment, ConversationRef, InboundMessage, OutboundMessage, Sender, utcnow
from gateway.settings import DiscordChannel

log = logging.getLogger(__name__)

DEFAULT_API_BASE = "https://discord.com/api/v10"
DEFAULT_GATEWAY = "wss://gateway.discord.gg/"
MAX_LENGTH = 2000
SIGNATURE_MAX_AGE = 300  # seconds; Discord does not replay, so an old timestamp means a captured request
INTERACTION_TTL = 15 * 60  # an interaction token accepts follow-ups for 15 minutes
_ANSWERED_TYPES = {0: "default", 19: "reply"}  # every other message type is a system notice
_CROSSPOST_FLAG = 1 << 1
_ATTACHMENT_KINDS = {"image": "image", "audio": "audio", "video": "video"}
_SMALL_HEADING = re.compile(r"^ {0,3}#{4,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(")
_FENCE = re.compile(r"^ {0,3}(?:```|~~~).*?^ {0,3}(?:```|~~~)[^\S\n]*$", re.MULTILINE | re.DOTALL)


# ---- inbound: pure parsing ---------------------------------------------------------------------------


def classify_gateway_message(
    payload: dict[str, Any], *, bot_user_id: str, respond_in_groups: str = "mention", in_thread: bool = False
) -> InboundMessage | str:
    """A MESSAGE_CREATE message object → an InboundMessage, or the reason it is ignored."""
    author = payload.get("author") or {}
    author_id = str(author.get("id", ""))
    kind = payload.get("type", 0)
    if author_id and author_id == bot_user_id:
        return "own message"
    if author.get("bot") or author.get("system"):
        return f"message from another bot ({author_id})"
    if payload.get("webhook_id"):
        return "message posted by a webhook"
    if kind not in _ANSWERED_TYPES:
        return f"system message type {kind}"
    if int(payload.get("flags") or 0) & _CROSSPOST_FLAG:
        return "crossposted announcement from another server"

    guild_id = str(payload.get("guild_id") or "")
    content = payload.get("content") or ""
    mentioned = _mentions_bot(payload, content, bot_user_id)
    reference = payload.get("message_reference") or {}
    replied = str(((payload.get("referenced_message") or {}).get("author") or {}).get("id", "")) == bot_user_id
    if guild_id and respond_in_groups == "mention" and not (mentioned or replied):
        return "guild message that neither mentions nor replies to the bot"

    text = re.sub(rf"<@!?{re.escape(bot_user_id)}>", "", content).strip() if bot_user_id else content.strip()
    attachments = tuple(_attachment(a, caption=text or None) for a in payload.get("attachments") or ())
    attachments += tuple(
        Attachment(kind="sticker", file_id=str(s.get("id")), caption=s.get("name"))
        for s in payload.get("sticker_items") or ()
    )
    channel_id = str(payload.get("channel_id", ""))
    return InboundMessage(
        channel="discord",
        external_id=str(payload["id"]),
        conversation=ConversationRef(
            channel="discord", workspace=guild_id, chat=channel_id, thread=channel_id if in_thread else ""
        ),
        sender=Sender(
            external_id=author_id,
            display_name=author.get("global_name") or author.get("username") or "",
            is_bot=False,
        ),
        text=text,
        attachments=attachments,
        reply_to=str(reference["message_id"]) if kind == 19 and reference.get("message_id") else None,
        sent_at=_timestamp(payload.get("timestamp")),
        raw=payload,
    )


def parse_gateway_message(
    payload: dict[str, Any], *, bot_user_id: str, respond_in_groups: str = "mention", in_thread: bool = False
) -> InboundMessage | None:
    """A MESSAGE_CREATE message object → an InboundMessage, or None when it is ignored (reason logged)."""
    result = classify_gateway_message(
        payload, bot_user_id=bot_user_id, respond_in_groups=respond_in_groups, in_thread=in_thread
    )
    if isinstance(result, str):
        log.info("discord.ignored", extra={"message_id": payload.get("id"), "reason": result})
        return None
    return result


def parse_gateway_event(
    envelope: dict[str, Any], *, bot_user_id: str, respond_in_groups: str = "mention"
) -> WebhookResult:
    """A raw gateway frame ({op, t, s, d}) → the messages it holds, or why it is ignored."""
    op, event, data = envelope.get("op"), envelope.get("t"), envelope.get("d")
    if op != 0:
        return WebhookResult(ignored=(f"gateway control frame op {op} (handled by discord.py)",))
    if event == "MESSAGE_CREATE" and isinstance(data, dict):
        result = classify_gateway_message(data, bot_user_id=bot_user_id, respond_in_groups=respond_in_groups)
        return WebhookResult(ignored=(result,)) if isinstance(result, str) else WebhookResult(messages=(result,))
    reasons = {
        "MESSAGE_UPDATE": "message edit: the first version was already answered",
        "MESSAGE_DELETE": "message deletion",
        "MESSAGE_REACTION_ADD": "reaction",
        "INTERACTION_CREATE": "interaction over the gateway: answered on the interactions endpoint",
    }
    return WebhookResult(ignored=(reasons.get(event or "", f"gateway event {event} is not a message"),))


def parse_interaction(body: dict[str, Any]) -> WebhookResult:
    """A verified HTTP interaction → PING pong, an `/ask` question (deferred), or a polite refusal."""
    kind = body.get("type")
    if kind == 1:
        return WebhookResult(response=_interaction_response({"type": 1}), ignored=("PING",))
    data = body.get("data") or {}
    if kind == 2 and data.get("name") == "ask" and data.get("type", 1) == 1:
        question = next((str(o.get("value", "")) for o in data.get("options") or () if o.get("name") == "question"), "")
        user = (body.get("member") or {}).get("user") or body.get("user") or {}
        message = InboundMessage(
            channel="discord",
            external_id=str(body["id"]),
            conversation=ConversationRef(
                channel="discord",
                workspace=str(body.get("guild_id") or ""),
                chat=str(body.get("channel_id") or (body.get("channel") or {}).get("id") or ""),
            ),
            sender=Sender(
                external_id=str(user.get("id", "")), display_name=user.get("global_name") or user.get("username") or ""
            ),
            text=question.strip(),
            raw=body,
        )
        return WebhookResult(messages=(message,), response=_interaction_response({"type": 5}))
    if kind == 4:  # autocomplete must be answered synchronously; we offer no suggestions
        return WebhookResult(
            response=_interaction_response({"type": 8, "data": {"choices": []}}), ignored=("autocomplete",)
        )
    name = data.get("name") or data.get("custom_id") or "?"
    refusal = {"type": 4, "data": {"content": "Please use /ask.", "flags": 64, "allowed_mentions": {"parse": []}}}
    return WebhookResult(
        response=_interaction_response(refusal), ignored=(f"interaction type {kind} ({name}) is not /ask",)
    )


def _interaction_response(body: dict[str, Any]) -> ImmediateResponse:
    return ImmediateResponse(body=json.dumps(body).encode())


def _mentions_bot(payload: dict[str, Any], content: str, bot_user_id: str) -> bool:
    if not bot_user_id:
        return False
    if any(str(m.get("id")) == bot_user_id for m in payload.get("mentions") or ()):
        return True
    return f"<@{bot_user_id}>" in content or f"<@!{bot_user_id}>" in content


def _attachment(item: dict[str, Any], *, caption: str | None) -> Attachment:
    mime = item.get("content_type")
    kind = _ATTACHMENT_KINDS.get((mime or "").split("/")[0], "document")
    return Attachment(kind=kind, url=item.get("url"), file_id=str(item.get("id")), mime_type=mime, caption=caption)


def _timestamp(value: str | None) -> datetime:
    try:
        return datetime.fromisoformat(value) if value else utcnow()
    except ValueError:
        return utcnow()


# ---- outbound: rendering -------------------------------------------------------------------------------


def to_discord_markdown(text: str) -> str:
    """CommonMark-ish answer → Discord Markdown: mostly the same; small headings and images adapted."""
    out, pos = [], 0
    for fence in _FENCE.finditer(text):  # code blocks pass through untouched
        out.append(_convert_prose(text[pos : fence.start()]))
        out.append(fence.group(0))
        pos = fence.end()
    out.append(_convert_prose(text[pos:]))
    return "".join(out)


def _convert_prose(text: str) -> str:
    # Discord renders only #, ## and ###; deeper headings would show their hashes.
    text = _SMALL_HEADING.sub(r"**\1**", text)
    # Discord does not render inline images; keep them as links.
    return _IMAGE.sub(r"[\1](", text)


def render_message(message: OutboundMessage) -> list[str]:
    """The chunks, each at most 2000 characters, that make up one reply with its sources."""
    body = to_discord_markdown(message.text).strip()
    footer = render_citations(message.citations, style="markdown", heading="**Sources:**")
    full = f"{body}\n\n{footer}" if body and footer else body or footer
    return split_text(full, limit=MAX_LENGTH)


def chunk_nonce(message: OutboundMessage, index: int) -> str:
    """A nonce (max 25 chars) stable across retries of the same chunk of the same reply."""
    key = f"{message.conversation.chat}|{message.conversation.thread}|{message.reply_to}|{index}|{message.text}"
    return hashlib.sha256(key.encode()).hexdigest()[:25]


# ---- the adapter ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _PendingInteraction:
    """An `/ask` that was deferred and still awaits its follow-up (in memory: the token is a credential)."""

    application_id: int
    token: str
    expires: float  # time.monotonic()
    conversation: ConversationRef


class _GatewayClient(discord.Client):
    """A discord.Client that hands every message to its adapter."""

    def __init__(self, adapter: DiscordAdapter, **options: Any) -> None:
        super().__init__(**options)
        self._adapter = adapter

    async def on_message(self, message: discord.Message) -> None:
        """Gateway MESSAGE_CREATE, after discord.py has parsed it."""
        await self._adapter._on_message(message)


class DiscordAdapter:
    """Discord over discord.py: gateway inbound, `/ask` interactions, REST outbound."""

    name = "discord"
    capabilities = Capabilities(max_length=MAX_LENGTH, markdown="discord", threads=True, edits=True, typing=True)

    def __init__(self, bot: str, settings: DiscordChannel, *, http: Any = None) -> None:
        # `http` is unused: discord.py owns its aiohttp session and rate-limit buckets.
        self.bot = bot
        self.settings = settings
        # Class attributes, hence process-wide: one process talks to one Discord API base and gateway.
        discord.http.Route.BASE = (settings.api_base or DEFAULT_API_BASE).rstrip("/")
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.gateway_url or DEFAULT_GATEWAY)
        intents = discord.Intents.default()
        intents.message_content = True  # privileged: enable it in the Developer Portal too
        self.client = _GatewayClient(self, intents=intents, max_ratelimit_timeout=60.0)
        self._verify_key = VerifyKey(bytes.fromhex(settings.public_key)) if settings.public_key else None
        self._deliver: Deliver | None = None
        self._task: asyncio.Task[None] | None = None
        self._login_lock = asyncio.Lock()
        self._logged_in = False
        self._interactions: dict[str, _PendingInteraction] = {}  # unanswered `/ask`, by interaction id

    # -- webhooks (interactions endpoint) --

    def verify(self, request: RawRequest) -> None:
        """Check the Ed25519 signature over timestamp + body, and refuse stale timestamps."""
        if self._verify_key is None:
            raise SignatureInvalid("discord.public_key is not configured: interactions are disabled")
        signature = request.header("x-signature-ed25519")
        timestamp = request.header("x-signature-timestamp")
        if not signature or not timestamp:
            raise SignatureInvalid("missing X-Signature-Ed25519 or X-Signature-Timestamp")
        try:
            self._verify_key.verify(timestamp.encode() + request.body, bytes.fromhex(signature))
        except (BadSignatureError, ValueError) as exc:
            raise SignatureInvalid("bad Ed25519 signature") from exc
        try:
            age = abs(time.time() - int(timestamp))
        except ValueError as exc:
            raise SignatureInvalid("malformed X-Signature-Timestamp") from exc
        if age > SIGNATURE_MAX_AGE:
            raise SignatureInvalid(f"stale X-Signature-Timestamp ({int(age)} s old)")

    def parse(self, request: RawRequest) -> WebhookResult:
        """A verified interaction → WebhookResult; remembers `/ask` tokens for the follow-up."""
        try:
            body = json.loads(request.body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest("interaction body is not JSON") from exc
        if not isinstance(body, dict):
            raise BadRequest("interaction body is not an object")
        result = parse_interaction(body)
        now = time.monotonic()
        self._interactions = {k: v for k, v in self._interactions.items() if v.expires > now}
        for message in result.messages:
            if body.get("application_id") and body.get("token"):
                self._interactions[message.external_id] = _PendingInteraction(
                    int(body["application_id"]), str(body["token"]), now + INTERACTION_TTL, message.conversation
                )
        # The token is a 15-minute credential: keep it in memory, out of the stored raw payload.
        messages = tuple(_without_token(m) for m in result.messages)
        return WebhookResult(messages=messages, ignored=result.ignored, response=result.response)

    # -- outbound --

    async def send(self, message: OutboundMessage) -> list[str]:
        """Render, split at 2000 chars and post; the first chunk replies to `reply_to`."""
        chunks = render_message(message)
        if not chunks:
            return []
        await self._ensure_login()
        key = self._interaction_for(message)
        if key is not None:
            ids = await self._send_followups(self._interactions[key], chunks)
            self._interactions.pop(key, None)  # only once answered, so a failed send can retry it
            return ids
        channel = self._channel(message.conversation)
        ids: list[str] = []
        for index, chunk in enumerate(chunks):
            reference = None
            if index == 0 and message.reply_to and message.reply_to.isdigit():
                reference = discord.MessageReference(
                    message_id=int(message.reply_to), channel_id=channel.id, fail_if_not_exists=False
                )
            try:
                sent = await channel.send(
                    chunk,
                    reference=reference,
                    nonce=chunk_nonce(message, index),
                    allowed_mentions=discord.AllowedMentions.none(),
                    suppress_embeds=True,
                )
            except Exception as exc:  # translated at the boundary, re-raised as our own tree
                raise _translate(exc, sent=len(ids)) from exc
            ids.append(str(sent.id))
        return ids

    def _interaction_for(self, message: OutboundMessage) -> str | None:
        """The unanswered `/ask` this reply answers: by `reply_to`, else the conversation's oldest."""
        now = time.monotonic()
        live = {k: v for k, v in self._interactions.items() if v.expires > now}
        if message.reply_to in live:
            return message.reply_to
        if message.reply_to is None:
            # Without reply_to, a deferred "thinking..." would otherwise never resolve.
            return next((k for k, v in live.items() if v.conversation == message.conversation), None)
        return None

    async def _send_followups(self, interaction: _PendingInteraction, chunks: list[str]) -> list[str]:
        # After a deferred response (type 5), the first follow-up replaces the "thinking..." state.
        webhook = discord.Webhook.partial(interaction.application_id, interaction.token, client=self.client)
        ids: list[str] = []
        for chunk in chunks:
            try:
                sent = await webhook.send(
                    chunk, wait=True, allowed_mentions=discord.AllowedMentions.none(), suppress_embeds=True
                )
            except Exception as exc:
                raise _translate(exc, sent=len(ids)) from exc
            ids.append(str(sent.id))
        return ids

    async def send_typing(self, conversation: ConversationRef) -> None:
        """Show "bot is typing..." for about 10 seconds."""
        await self._ensure_login()
        try:
            await self._channel(conversation).typing()
        except Exception as exc:
            raise _translate(exc, sent=0) from exc

    async def edit(self, conversation: ConversationRef, provider_message_id: str, text: str) -> None:
        """Replace a message's text (streaming by edits). `text` must fit in 2000 characters."""
        content = to_discord_markdown(text)
        if len(content) > MAX_LENGTH:
            raise BadRequest(f"an edit must fit in {MAX_LENGTH} characters; roll over into a new message")
        await self._ensure_login()
        partial = self._channel(conversation).get_partial_message(int(provider_message_id))
        try:
            await partial.edit(content=content, allowed_mentions=discord.AllowedMentions.none())
        except Exception as exc:
            raise _translate(exc, sent=0) from exc

    def _channel(self, conversation: ConversationRef) -> discord.PartialMessageable:
        # A thread is a channel on Discord: posting to its id replies inside the thread.
        target = conversation.thread or conversation.chat
        if not target.isdigit():
            raise ChannelSendError(f"not a Discord channel id: {target!r}", permanent=True)
        guild_id = int(conversation.workspace) if conversation.workspace else None
        return self.client.get_partial_messageable(int(target), guild_id=guild_id)

    async def _ensure_login(self) -> None:
        async with self._login_lock:
            if self._logged_in:
                return
            try:
                await self.client.login(self.settings.token)
            except discord.LoginFailure as exc:
                raise ChannelSendError("discord token rejected", permanent=True) from exc
            except Exception as exc:
                raise _translate(exc, sent=0) from exc
            self._logged_in = True

    # -- gateway --

    async def start(self, deliver: Deliver) -> None:
        """Log in and run the gateway connection in the background (reconnects are discord.py's job)."""
        self._deliver = deliver
        await self._ensure_login()
        self._task = asyncio.create_task(self.client.connect(reconnect=True), name=f"discord-gateway:{self.bot}")

    async def stop(self) -> None:
        """Close the gateway connection and the HTTP session."""
        await self.client.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _on_message(self, message: discord.Message) -> None:
        me = self.client.user
        result = classify_gateway_message(
            _payload_of(message),
            bot_user_id=str(me.id) if me else "",
            respond_in_groups=self.settings.respond_in_groups,
            in_thread=isinstance(message.channel, discord.Thread),
        )
        if isinstance(result, str):
            log.info("discord.ignored", extra={"bot": self.bot, "message_id": message.id, "reason": result})
            return
        if self._deliver is None:
            log.warning("discord.undelivered", extra={"bot": self.bot, "message_id": message.id})
            return
        try:
            await self._deliver(result)
        except Exception:  # the gateway must keep running; the message is logged for replay
            log.exception("discord.deliver_failed", extra={"bot": self.bot, "message_id": message.id})


def _payload_of(message: discord.Message) -> dict[str, Any]:
    """The MESSAGE_CREATE fields `classify_gateway_message` reads, rebuilt from a discord.Message."""
    guild_id = message.guild.id if message.guild else getattr(message.channel, "guild_id", None)
    reference = message.reference
    resolved = reference.resolved if reference else None
    payload: dict[str, Any] = {
        "id": str(message.id),
        "type": message.type.value,
        "flags": message.flags.value,
        "channel_id": str(message.channel.id),
        "content": message.content,
        "timestamp": message.created_at.isoformat(),
        "webhook_id": str(message.webhook_id) if message.webhook_id else None,
        "author": {
            "id": str(message.author.id),
            "username": message.author.name,
            "global_name": message.author.global_name,
            "bot": message.author.bot,
            "system": message.author.system,
        },
        "mentions": [{"id": str(user.id)} for user in message.mentions],
        "attachments": [
            {"id": str(a.id), "url": a.url, "content_type": a.content_type, "filename": a.filename}
            for a in message.attachments
        ],
        "sticker_items": [{"id": str(s.id), "name": s.name} for s in message.stickers],
    }
    if guild_id:
        payload["guild_id"] = str(guild_id)
    if reference and reference.message_id:
        payload["message_reference"] = {"message_id": str(reference.message_id)}
    if isinstance(resolved, discord.Message):
        payload["referenced_message"] = {"author": {"id": str(resolved.author.id)}}
    return payload


def _without_token(message: InboundMessage) -> InboundMessage:
    raw = {k: v for k, v in message.raw.items() if k != "token"}
    return InboundMessage(
        channel=message.channel,
        external_id=message.external_id,
        conversation=message.conversation,
        sender=message.sender,
        text=message.text,
        attachments=message.attachments,
        reply_to=message.reply_to,
        sent_at=message.sent_at,
        raw=raw,
    )


def _translate(exc: BaseException, *, sent: int) -> Exception:
    """discord.py / network exceptions → the gateway's error tree. `sent`: chunks already delivered."""
    note = f" after {sent} chunk(s) were delivered" if sent else ""
    if isinstance(exc, discord.RateLimited):
        return ChannelSendError(f"discord rate limit{note}", retry_after=exc.retry_after)
    if isinstance(exc, (discord.Forbidden, discord.NotFound)):
        return RecipientUnreachable(f"discord {exc.status} ({exc.code}): {exc.text}{note}")
    if isinstance(exc, discord.DiscordServerError):
        return ChannelSendError(f"discord server error {exc.status}{note}")
    if isinstance(exc, discord.HTTPException):
        if exc.status == 429:
            retry = exc.response.headers.get("Retry-After") if exc.response is not None else None
            return ChannelSendError(f"discord 429{note}", retry_after=float(retry) if retry else None)
        return ChannelSendError(f"discord {exc.status} ({exc.code}): {exc.text}{note}", permanent=True)
    if isinstance(exc, (OSError, asyncio.TimeoutError, aiohttp.ClientError, discord.ConnectionClosed)):
        return ChannelSendError(f"discord unreachable: {exc!r}{note}")
    if isinstance(exc, (ChannelSendError, RecipientUnreachable)):
        return exc
    return ChannelSendError(f"discord send failed: {exc!r}{note}")
