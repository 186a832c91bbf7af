"""Slack: the Events API over HTTP (signed), Socket Mode for development, replies with chat.postMessage.

Which events become messages (one answer per question, never two):
- DMs (`message` with channel_type `im`) are always answered; `app_mention` in a DM is ignored because
  the `message.im` event already carries it.
- In channels (`channel`, `group`, `mpim`) with `respond_in_groups: mention`, only `app_mention` is
  answered. The `message` event Slack also sends for that same mention is ignored, and so is any plain
  channel message, except a thread reply under one of the bot's own messages (a "reply to the bot").
- With `respond_in_groups: always`, every channel `message` is answered and `app_mention` is ignored
  (the app must then subscribe to `message.channels` / `message.groups`).
- Edits (`message_changed`) and deletions (`message_deleted`) are ignored with a reason: the original
  question was already answered, and an edit must not produce a second answer.
- Messages from any bot (`bot_id`, subtype `bot_message`) and from our own bot user are ignored.

`external_id` is the envelope's `event_id`, so Slack's retries (same `event_id`, `X-Slack-Retry-Num`)
deduplicate in the inbox. Replies go in the thread the question came from; a top-level DM is answered
at top level so a DM stays one conversation.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, quote

import aiohttp
import structlog
from markdown_to_mrkdwn import SlackMarkdownConverter
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import Capabilities, Deliver, ImmediateResponse, RawRequest, WebhookResult
from channels.render import render_citations, split_text
from gateway.errors import BadRequest, ChannelSendError, GatewayError, RecipientUnreachable, SignatureInvalid
from gateway.models import Attachment, Citation, ConversationRef, InboundMessage, OutboundMessage, Sender
from gateway.settings import SlackChannel

log = structlog.get_logger("channels.slack")

# Slack accepts 40k chars in `text`, but a section block stops at 3,000 and long messages are
# collapsed behind "Show more"; 3,000 keeps every part readable and block-compatible.
SLACK_MESSAGE_LIMIT = 3000
STALE_AFTER_S = 5 * 60
_ANSWERED_SUBTYPES = {None, "file_share", "thread_broadcast", "me_message"}
_UNREACHABLE = {
    "channel_not_found", "not_in_channel", "is_archived", "account_inactive", "user_not_found",
    "user_disabled", "cannot_dm_bot", "restricted_action", "team_access_not_granted", "ekm_access_denied",
}
_TRANSIENT = {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}


class SlackAdapter:
    """The Slack channel: verify and parse Events API deliveries, send replies, run Socket Mode."""

    name = "slack"
    capabilities = Capabilities(max_length=SLACK_MESSAGE_LIMIT, markdown="mrkdwn", threads=True, edits=True)

    def __init__(
        self,
        bot: str,
        settings: SlackChannel,
        *,
        http: aiohttp.ClientSession | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_attempts: int = 4,
        max_wait_s: float = 30.0,
    ) -> None:
        self.bot = bot
        self.settings = settings
        # slack_sdk appends the method name to base_url verbatim, so the trailing slash matters.
        self.api_base = (settings.api_base or "https://slack.com/api/").rstrip("/") + "/"
        self._http = http
        self._sleep = sleep  # injectable so tests can assert on Retry-After without waiting
        self._max_attempts = max_attempts
        self._max_wait_s = max_wait_s
        self._verifier = SignatureVerifier(settings.signing_secret) if settings.signing_secret.strip() else None
        # retry_handlers=[]: we own retries, so an ambiguous failure is never silently re-posted.
        self.client = AsyncWebClient(
            token=settings.bot_token or None, base_url=self.api_base, session=http, retry_handlers=[]
        )
        self.bot_user_id: str | None = None
        self._socket: Any = None
        # Parts already posted for a reply that later failed: a retry of the same reply resumes after them.
        self._progress: OrderedDict[tuple, list[str]] = OrderedDict()

    # ---- inbound -----------------------------------------------------------------------------

    def verify(self, request: RawRequest) -> None:
        """Check X-Slack-Signature (HMAC-SHA256 over `v0:{ts}:{body}`, constant-time) and freshness."""
        timestamp = request.header("x-slack-request-timestamp")
        signature = request.header("x-slack-signature")
        if not timestamp or not signature:
            raise SignatureInvalid("missing X-Slack-Signature or X-Slack-Request-Timestamp")
        if self._verifier is None:
            raise SignatureInvalid("slack.signing_secret is not configured")
        try:
            age = abs(self._verifier.clock.now() - int(timestamp))
        except ValueError:
            raise SignatureInvalid("malformed X-Slack-Request-Timestamp") from None
        if age > STALE_AFTER_S:
            raise SignatureInvalid(f"stale Slack request ({int(age)} s old)")
        try:
            valid = self._verifier.is_valid(body=request.body, timestamp=timestamp, signature=signature)
        except UnicodeDecodeError:
            valid = False
        if not valid:
            raise SignatureInvalid("bad Slack signature")

    def parse(self, request: RawRequest) -> WebhookResult:
        """Turn a verified Events API delivery (JSON, or a form post for commands) into messages."""
        content_type = request.header("content-type")
        try:
            text = request.body.decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest("Slack body is not UTF-8") from None
        if "application/x-www-form-urlencoded" in content_type:
            form = {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}
            if "payload" in form:
                try:
                    kind = json.loads(form["payload"]).get("type", "unknown")
                except (json.JSONDecodeError, AttributeError):
                    raise BadRequest("malformed Slack interactive payload") from None
                return WebhookResult(ignored=(f"interactive payload {kind!r} is not handled",))
            if "command" in form:
                return WebhookResult(ignored=(f"slash command {form['command']!r} is not handled",))
            raise BadRequest("unrecognized Slack form post")
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            raise BadRequest("Slack body is not JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("Slack body is not a JSON object")
        retry = request.header("x-slack-retry-num")
        result = self.parse_payload(body)
        if retry:
            result.extra.update(retry_num=retry, retry_reason=request.header("x-slack-retry-reason"))
        return result

    def parse_payload(self, body: dict[str, Any]) -> WebhookResult:
        """Parse one Events API envelope (also what Socket Mode delivers as `payload`)."""
        kind = body.get("type")
        if kind == "url_verification":
            challenge = json.dumps({"challenge": str(body.get("challenge", ""))}).encode()
            return WebhookResult(response=ImmediateResponse(body=challenge))
        if kind != "event_callback":
            return WebhookResult(ignored=(f"envelope type {kind!r} is not handled",))
        message, reason = self._parse_event(body)
        if message is None:
            return WebhookResult(ignored=(reason,), extra={"event_id": body.get("event_id")})
        return WebhookResult(messages=(message,), extra={"event_id": body.get("event_id")})

    def _bot_ids(self, body: dict[str, Any]) -> set[str]:
        ids = {a["user_id"] for a in body.get("authorizations") or () if a.get("is_bot") and a.get("user_id")}
        if not ids:
            ids = set(body.get("authed_users") or ())  # older envelopes list the bot user here
        if self.bot_user_id:
            ids.add(self.bot_user_id)
        return ids

    def _parse_event(self, body: dict[str, Any]) -> tuple[InboundMessage | None, str]:
        event = body.get("event") or {}
        kind, subtype = event.get("type"), event.get("subtype")
        if kind not in ("message", "app_mention"):
            return None, f"event type {kind!r} is not handled"
        if subtype == "message_changed":
            return None, "message_changed: edits are not answered again (the original was)"
        if subtype == "message_deleted":
            return None, "message_deleted: nothing to answer"
        if subtype == "bot_message" or event.get("bot_id"):
            return None, f"from a bot (bot_id={event.get('bot_id')})"
        if subtype not in _ANSWERED_SUBTYPES:
            return None, f"message subtype {subtype!r} is not handled"
        user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
        if not user or not channel or not ts:
            return None, "event without user, channel or ts"
        bot_ids = self._bot_ids(body)
        if user in bot_ids:
            return None, "the bot's own message"
        channel_type = event.get("channel_type") or ("im" if channel.startswith("D") else "channel")
        is_dm = channel_type == "im"
        raw_text = event.get("text") or ""
        mentions = {m for m in re.findall(r"<@([A-Z0-9]+)(?:\|[^>]*)?>", raw_text)}
        thread_ts = event.get("thread_ts")
        if kind == "app_mention":
            if is_dm:
                return None, "app_mention in a DM: the message.im event answers it"
            if self.settings.respond_in_groups == "always":
                return None, "app_mention duplicates the channel message event (respond_in_groups=always)"
        elif not is_dm and self.settings.respond_in_groups == "mention":
            if mentions & bot_ids:
                return None, "channel message mentioning the bot: answered from its app_mention event"
            replied = thread_ts and thread_ts != ts and event.get("parent_user_id") in bot_ids
            if not replied:
                return None, "channel message without a mention of the bot"
        text = raw_text
        for bot_id in bot_ids:
            text = re.sub(rf"<@{bot_id}(?:\|[^>]*)?>", "", text)
        text = slack_to_plain(text).strip()
        attachments = tuple(_attachment(f, text) for f in event.get("files") or ())
        profile = event.get("user_profile") or {}
        return (
            InboundMessage(
                channel=self.name,
                external_id=str(body.get("event_id") or f"{channel}:{ts}"),
                conversation=ConversationRef(
                    channel=self.name,
                    workspace=str(body.get("team_id") or event.get("team") or ""),
                    chat=channel,
                    thread=thread_ts or ("" if is_dm else ts),
                ),
                sender=Sender(
                    external_id=user, display_name=profile.get("display_name") or profile.get("real_name") or ""
                ),
                text=text,
                attachments=attachments,
                reply_to=thread_ts if thread_ts and thread_ts != ts else None,
                sent_at=_sent_at(ts),
                raw=body,
            ),
            "",
        )

    # ---- outbound ----------------------------------------------------------------------------

    def render(self, text: str, citations: tuple[Citation, ...] = ()) -> list[str]:
        """Markdown answer + citations → mrkdwn parts of at most SLACK_MESSAGE_LIMIT chars."""
        body = markdown_to_mrkdwn(text)
        safe = tuple(Citation(c.source, c.title, safe_link_url(c.url)) for c in citations)
        footer = render_citations(safe, style="mrkdwn", heading="*Sources:*")
        full = f"{body}\n\n{footer}" if body and footer else body or footer
        return split_text(full, limit=SLACK_MESSAGE_LIMIT)

    async def send(self, message: OutboundMessage) -> list[str]:
        """Post the reply (in its thread), part by part; return the message timestamps."""
        conv = message.conversation
        parts = self.render(message.text, message.citations)
        key = (conv.chat, conv.thread, tuple(parts))
        sent = self._progress.pop(key, [])
        try:
            for part in parts[len(sent):]:
                response = await self._call(
                    "chat_postMessage", channel=conv.chat, text=part, thread_ts=conv.thread or None,
                    unfurl_links=False, unfurl_media=False,
                )
                sent.append(str(response.get("ts")))
        except GatewayError:
            if sent:  # remember what went through so the worker's retry never posts it twice
                self._progress[key] = sent
                while len(self._progress) > 1000:
                    self._progress.popitem(last=False)
            raise
        log.info("slack.sent", bot=self.bot, chat=conv.chat, thread=conv.thread, parts=len(sent))
        return sent

    async def edit(self, conversation: ConversationRef, provider_message_id: str, text: str) -> None:
        """Replace a posted message's text (streaming by edits). The text must fit in one message.

        chat.update is Tier 3 (about 50 a minute per workspace): callers should edit at most about once a second.
        """
        rendered = markdown_to_mrkdwn(text)
        if len(rendered) > SLACK_MESSAGE_LIMIT:
            raise ChannelSendError("edit longer than one Slack message; roll over into a new one", permanent=True)
        await self._call("chat_update", channel=conversation.chat, ts=provider_message_id, text=rendered)

    async def send_typing(self, conversation: ConversationRef) -> None:
        """Slack has no typing indicator for bot tokens over the Web API, so this does nothing."""

    async def _call(self, method: str, **kwargs: Any) -> Any:
        """One Web API call with bounded retries, only where the call surely did not go through."""
        for attempt in range(1, self._max_attempts + 1):
            try:
                return await getattr(self.client, method)(**kwargs)
            except SlackApiError as exc:
                status = exc.response.status_code
                error = (exc.response.data or {}).get("error", "") if isinstance(exc.response.data, dict) else ""
                if status == 429 or error == "ratelimited":
                    retry_after = float(exc.response.headers.get("Retry-After", 1) or 1)
                    if attempt == self._max_attempts or retry_after > self._max_wait_s:
                        raise ChannelSendError(f"slack {method}: rate limited", retry_after=retry_after) from exc
                    log.warning("slack.rate_limited", bot=self.bot, method=method, retry_after=retry_after)
                    await self._sleep(retry_after)
                    continue
                if error in _UNREACHABLE:
                    raise RecipientUnreachable(f"slack {method}: {error}") from exc
                if status >= 500 or error in _TRANSIENT:
                    # The post may have landed: not retried here, the worker decides.
                    raise ChannelSendError(f"slack {method}: {error or status}") from exc
                raise ChannelSendError(f"slack {method}: {error or status}", permanent=True) from exc
            except aiohttp.ClientConnectorError as exc:
                # The connection was never made, so nothing was posted: safe to retry.
                if attempt == self._max_attempts:
                    raise ChannelSendError(f"slack {method}: cannot connect ({exc})") from exc
                await self._sleep(min(2 ** (attempt - 1), self._max_wait_s))
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                if method == "chat_postMessage":
                    # Sent, but no answer: Slack may have posted it, and a post has no idempotency
                    # key, so posting again could show it twice. Fail visibly (at most once).
                    raise ChannelSendError(f"slack {method}: outcome unknown ({type(exc).__name__}); not "
                                           "resent to avoid a duplicate", permanent=True) from exc
                raise ChannelSendError(f"slack {method}: {type(exc).__name__}") from exc
        raise AssertionError("unreachable")  # the loop always returns or raises

    # ---- long-lived connection ---------------------------------------------------------------

    async def start(self, deliver: Deliver) -> None:
        """Learn the bot's user id; with an app token, also open Socket Mode and deliver its events."""
        try:
            self.bot_user_id = (await self.client.auth_test()).get("user_id")
        except (SlackApiError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.warning("slack.auth_test_failed", bot=self.bot, error=str(exc))
        if not self.settings.app_token:
            return
        self._socket = await _open_socket_mode(self, deliver)

    async def stop(self) -> None:
        """Close Socket Mode, if open."""
        if self._socket is not None:
            await self._socket.close()
            self._socket = None


def _attachment(file: dict[str, Any], caption: str) -> Attachment:
    mime = file.get("mimetype") or ""
    major = mime.split("/", 1)[0]
    kind = major if major in ("image", "audio", "video") else "document"
    return Attachment(
        kind=kind, url=file.get("url_private"), file_id=file.get("id"), mime_type=mime or None, caption=caption or None
    )


# ---- Socket Mode -------------------------------------------------------------------------------


async def _open_socket_mode(adapter: SlackAdapter, deliver: Deliver) -> SocketModeClient:
    """Connect Socket Mode with the app token; every events_api envelope goes through `parse_payload`."""

    async def on_request(client: SocketModeClient, request: SocketModeRequest) -> None:
        if request.type == "events_api":
            result = adapter.parse_payload(request.payload)
            for reason in result.ignored:
                log.info("slack.ignored", bot=adapter.bot, reason=reason, event_id=result.extra.get("event_id"))
            # Stored before the ack: if storing fails, Slack redelivers and the inbox deduplicates.
            for message in result.messages:
                await deliver(message)
        else:
            log.info("slack.ignored", bot=adapter.bot, reason=f"socket mode {request.type!r} is not handled")
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    web = AsyncWebClient(base_url=adapter.api_base, session=adapter._http, retry_handlers=[])
    client = SocketModeClient(app_token=adapter.settings.app_token, web_client=web)
    client.socket_mode_request_listeners.append(on_request)
    try:
        # Fetched here, not inside connect(), which would retry a bad app token forever.
        client.wss_uri = await client.issue_new_wss_url()
    except SlackApiError as exc:
        await client.close()
        raise ChannelSendError(f"slack socket mode: apps.connections.open failed: {exc.response.get('error')}",
                               permanent=True) from exc
    await client.connect()
    log.info("slack.socket_mode_connected", bot=adapter.bot)
    return client


# ---- Markdown ⇄ mrkdwn ---------------------------------------------------------------------------

_HOLD = re.compile("\ue000(\\d+)\ue001")
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|~>])")
_MD_LINK = re.compile(r"!?\[([^\]\n]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_BARE_URL = re.compile(r"https?://[^\s<>\"`]+")


def escape_mrkdwn(text: str) -> str:
    """Escape the three characters Slack treats as control: & < >."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def safe_link_url(url: str | None) -> str | None:
    """A URL safe inside `<url|label>`: http(s)/mailto only, with & < > | escaped; else None."""
    if not url or not re.match(r"(?i)^(https?://|mailto:)\S+$", url.strip()):
        return None
    return quote(url.strip(), safe="/:?#[]@!$&'()*+,;=%~-._").replace("&", "&amp;")


def markdown_to_mrkdwn(markdown: str) -> str:
    """Convert the LLM's Markdown to Slack mrkdwn, escaping & < > everywhere except in real links."""
    pieces: list[str] = []
    prose: list[str] = []
    code: list[str] | None = None
    marker = ""
    for line in markdown.splitlines():
        if code is None:
            fence = _FENCE_LINE.match(line)
            if fence and not (fence.group(1)[0] == "`" and "`" in fence.group(2)):
                pieces.append(_prose_to_mrkdwn("\n".join(prose)))
                prose, code, marker = [], [], fence.group(1)
            else:
                prose.append(line)
        elif re.match(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}\s*$", line):
            pieces.append("```\n" + escape_mrkdwn("\n".join(code)) + "\n```")  # Slack shows no language tag
            code = None
        else:
            code.append(line)
    if code is not None:  # an unclosed fence still renders as code
        pieces.append("```\n" + escape_mrkdwn("\n".join(code)) + "\n```")
    pieces.append(_prose_to_mrkdwn("\n".join(prose)))
    return "\n".join(p for p in pieces if p is not None).strip("\n")


def _prose_to_mrkdwn(text: str) -> str | None:
    if not text:
        return None
    held: list[str] = []

    def hold(value: str) -> str:
        held.append(value)
        return f"\ue000{len(held) - 1}\ue001"

    def link(match: re.Match[str]) -> str:
        label, url = match.group(1).strip(), safe_link_url(match.group(2))
        label = escape_mrkdwn(re.sub(r"[*_~`]", "", label)).replace("|", "¦")
        if not url:
            return hold(label)
        return hold(f"<{url}|{label}>" if label else f"<{url}>")

    def bare(match: re.Match[str]) -> str:
        url = match.group(0)
        trail = re.search(r"[.,;:!?'\"]*$", url).group(0)
        if url.endswith(")") and "(" not in url:
            trail = url[-1:]
        url = url[: len(url) - len(trail)] if trail else url
        safe = safe_link_url(url)
        return (hold(f"<{safe}>") if safe else escape_mrkdwn(url)) + escape_mrkdwn(trail)

    text = _INLINE_CODE.sub(lambda m: hold("`" + escape_mrkdwn(m.group(2)) + "`"), text)
    text = _MD_ESCAPE.sub(lambda m: hold(escape_mrkdwn(m.group(1))), text)
    text = _MD_LINK.sub(link, text)
    text = _AUTOLINK.sub(lambda m: hold(f"<{safe_link_url(m.group(1)) or escape_mrkdwn(m.group(1))}>"), text)
    text = _BARE_URL.sub(bare, text)
    text = escape_mrkdwn(text)
    text = re.sub(r"^(\s*)&gt; (?=\S)", r"\1> ", text, flags=re.MULTILINE)  # keep Markdown quotes as Slack quotes
    lead = len(text) - len(text.lstrip("\n"))
    trail = len(text) - len(text.rstrip("\n"))
    converted = SlackMarkdownConverter().convert(text)
    for _ in range(3):  # held values may hold others (inline code inside a link label)
        converted = _HOLD.sub(lambda m: held[int(m.group(1))], converted)
    return "\n" * lead + converted + "\n" * trail


def slack_to_plain(text: str) -> str:
    """Slack's inbound markup → plain text for the model: links, mentions and entities decoded."""

    def control(match: re.Match[str]) -> str:
        inner = match.group(1)
        target, _, label = inner.partition("|")
        if target.startswith(("@U", "@W", "@B")):
            return "@" + (label or target[1:])
        if target.startswith("#C") or target.startswith("#G"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            return label or "@" + target[1:].split("^")[0]
        return f"{label} ({target})" if label and label != target else target

    text = re.sub(r"<([^<>\n]+)>", control, text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _sent_at(ts: Any) -> datetime:
    """The event time from Slack's `ts`; now when it is malformed (a signed body must never cause a 500)."""
    try:
        return datetime.fromtimestamp(float(ts), tz=timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return datetime.now(timezone.utc)
