"""Slack: the Events API over HTTP (signed), Socket Mode for development, replies with chat.postMessage;
verification and event dispatch on a slack-bolt AsyncApp (`channels.slack_bolt_app`).

Which events become messages (one answer per question, never two):
- DMs (`message` with channel_type `im`) are always answered; `app_mention` in a DM is ignored because
  the `message.im` event already carries it.
- In channels (`channel`, `group`, `mpim`) with `respond_in_groups: mention`, only `app_mention` is
  answered. The `message` event Slack also sends for that same mention is ignored, and so is any plain
  channel message, except a thread reply under one of the bot's own messages (a "reply to the bot") or
  in a thread the bot has a conversation in (it was asked there, and answered under the question): such
  a reply is `existing_conversation_only`, and the inbox stores it only when that conversation exists.
- With `respond_in_groups: always`, every channel `message` is answered and `app_mention` is ignored
  (the app must then subscribe to `message.channels` / `message.groups`).
- Edits (`message_changed`) and deletions (`message_deleted`) revise the message they name while it
  waits for its answer (`InboundMessage.revises`); of one already answered they are ignored with a
  reason: an edit must not produce a second answer.
- Messages from any bot (`bot_id`, subtype `bot_message`) and from our own bot user are ignored.

`external_id` is the envelope's `event_id`, so Slack's retries (same `event_id`, `X-Slack-Retry-Num`)
deduplicate in the inbox. Replies go in the thread the question came from; a top-level DM is answered
at top level so a DM stays one conversation.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import Capabilities, ImmediateResponse, RawRequest, WebhookResult
from channels.citations import render_citations
from channels.render import split_text
from channels.sent_parts import SentParts
from channels.slack_bolt_app import STALE_AFTER_S, build_app, verify_signature
from channels.slack_bolt_app import dispatch as _dispatch
from channels.slack_connection import SlackConnection
from channels.slack_errors import TOKEN_REFUSED, TRANSIENT, UNREACHABLE, rate_limit_wait, token_refused
from channels.slack_events import bot_ids, parse_event
from channels.slack_install import SCOPE_EFFECTS, foreign_workspace, missing_scopes, token_gone
from channels.slack_render import escape_mrkdwn, markdown_to_mrkdwn, safe_link_url, slack_to_plain
from gateway.backoff import doubling
from gateway.errors import BadRequest, ChannelSendError, RecipientUnreachable
from gateway.models import Citation, ConversationRef, OutboundMessage
from gateway.settings import SlackChannel

__all__ = [
    "SCOPE_EFFECTS",
    "SLACK_MESSAGE_LIMIT",
    "STALE_AFTER_S",
    "SlackAdapter",
    "escape_mrkdwn",
    "markdown_to_mrkdwn",
    "missing_scopes",
    "safe_link_url",
    "slack_to_plain",
]

log = structlog.get_logger("channels.slack")

# Slack accepts 40k chars in `text`, but a section block stops at 3,000 and long messages are
# collapsed behind "Show more"; 3,000 keeps every part readable and block-compatible.
SLACK_MESSAGE_LIMIT = 3000
SLACK_TEXT_MAX = 40_000
"""Slack truncates a message's `text` past this many characters (escapes included)."""
_ESCAPE = re.compile("&(?:amp|lt|gt);")
_TS = re.compile(r"\d{1,12}\.\d{1,9}")  # a Slack message ts
REPLY_EVENT = "gateway_reply"
"""Message metadata event type on every part the gateway posts: {"reply": key, "part": n}."""


class SlackAdapter(SlackConnection):
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
        max_wait_s: float = 5.0,
    ) -> None:
        self.bot = bot
        self.settings = settings
        self.api_base = settings.web_api_base
        self._http = http
        self._sleep = sleep  # injectable so tests can assert on Retry-After without waiting
        self._max_attempts = max_attempts
        self._max_wait_s = max_wait_s
        # retry_handlers=[]: we own retries, so an ambiguous failure is never silently re-posted.
        self.client = AsyncWebClient(
            token=settings.bot_token or None, base_url=self.api_base, session=http, retry_handlers=[]
        )
        self.bot_user_id: str | None = None
        # The token's own workspace (and organisation), from auth.test: events of other workspaces the app
        # is installed in reach the same URL, and this token cannot answer them (`foreign_workspace`).
        self.team_id: str | None = None
        self._enterprise: tuple[str | None, bool] = (None, False)
        self._foreign_warned: set[str] = set()
        self._uninstalled: str | None = None  # why no reply can be posted (app_uninstalled, a refused token)
        self._unreached: str | None = None  # auth.test could not reach Slack at start; None once Slack answers
        # Socket Mode's `interactive` payloads (the operator channel's buttons), set by the gateway's wiring:
        # over the socket they do not come to the Interactivity URL's route.
        self.on_interactive: Callable[[Any], Awaitable[None]] | None = None
        self._socket: Any = None
        self._identity_task: asyncio.Task | None = None  # auth.test asked again after it failed at start
        self._socket_task: asyncio.Task | None = None  # opening Socket Mode again after Slack was unreachable
        self._socket_problem: str | None = None
        # Parts already posted for a reply that later failed: a retry of the same reply resumes after them.
        self._sent_parts = SentParts()
        self.app = build_app(self)  # slack-bolt: verification, url_verification and event dispatch

    # ---- inbound -----------------------------------------------------------------------------

    def verify(self, request: RawRequest) -> None:
        """Check X-Slack-Signature and its freshness with bolt's RequestVerification (`slack_bolt_app`)."""
        verify_signature(self.settings.signing_secret, request, time.time())

    async def dispatch(self, request: RawRequest) -> WebhookResult:
        """`parse`, through the channel's bolt AsyncApp (url_verification, listeners): the webhook route's way."""
        return await _dispatch(self, request)

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
        if kind == "app_rate_limited":
            return self._rate_limited_events(body)
        if kind != "event_callback":
            return WebhookResult(ignored=(f"envelope type {kind!r} is not handled",))
        extra = {"event_id": body.get("event_id")}
        enterprise_id, enterprise_install = self._enterprise
        foreign = foreign_workspace(body, team_id=self.team_id, enterprise_id=enterprise_id,
                                    enterprise_install=enterprise_install)
        if foreign is not None:
            if foreign not in self._foreign_warned:  # once per workspace: every message there would say it again
                self._foreign_warned.add(foreign)
                log.warning("slack.foreign_workspace", bot=self.bot, workspace=foreign, token_workspace=self.team_id)
            return WebhookResult(ignored=(f"event from workspace {foreign}, which this bot's token (workspace "
                                          f"{self.team_id}) cannot answer",), extra=extra)
        if (gone := token_gone(body, bot_user_id=self.bot_user_id, team_id=self.team_id, enterprise_id=enterprise_id,
                               enterprise_install=enterprise_install)) is not None:
            self._uninstalled = gone  # every reply fails from now on: said in /readyz, not only per reply
            log.warning("slack.token_gone", bot=self.bot, reason=gone)
            return WebhookResult(ignored=(gone,), extra=extra)
        message, reason = parse_event(body, bot_ids=bot_ids(body, bot_user_id=self.bot_user_id),
                                      respond_in_groups=self.settings.respond_in_groups, channel_name=self.name,
                                      operator_channel=self.settings.operator_channel)
        if message is None:
            return WebhookResult(ignored=(reason,), extra=extra)
        return WebhookResult(messages=(message,), extra=extra)

    def _rate_limited_events(self, body: dict[str, Any]) -> WebhookResult:
        """Slack's `app_rate_limited`: past 30,000 events an hour in a workspace it drops the app's events for a
        minute, never retried; the questions in it are lost, so it is a warning naming that minute."""
        minute = body.get("minute_rate_limited")
        when = (datetime.fromtimestamp(minute, tz=timezone.utc).isoformat()
                if isinstance(minute, int) and not isinstance(minute, bool) and 0 <= minute < 2**37 else str(minute))
        log.warning("slack.app_rate_limited", bot=self.bot, team=body.get("team_id"), minute=when)
        return WebhookResult(ignored=(f"app_rate_limited: Slack stopped delivering this app's events in workspace "
                                      f"{body.get('team_id')} for the minute from {when} (over 30,000 an hour)",))

    # ---- outbound ----------------------------------------------------------------------------

    def render(self, message: OutboundMessage) -> list[str]:
        """The mrkdwn parts `send` posts for `message` (its sources under their heading), each of at most
        SLACK_MESSAGE_LIMIT chars."""
        body = markdown_to_mrkdwn(message.text)
        safe = tuple(Citation(c.source, c.title, safe_link_url(c.url)) for c in message.citations)
        footer = render_citations(safe, style="mrkdwn", heading=message.sources_heading)
        full = f"{body}\n\n{footer}" if body and footer else body or footer
        return split_text(full, limit=SLACK_MESSAGE_LIMIT)

    async def send(self, message: OutboundMessage) -> list[str]:
        """Post the reply (in its thread), part by part; return the message timestamps.

        Each part carries message metadata naming the reply and the part. A retry first asks Slack
        which parts already landed (a 5xx or a timeout can hide a successful post) and posts only
        the rest, so an interrupted reply is finished without a duplicate, even after a restart.
        """
        conv = message.conversation
        parts = self.render(message)
        with self._sent_parts.resume(message) as sent:
            if message.idempotency_key and message.attempt > 1:
                landed = await self._landed_parts(conv, message.idempotency_key, after=message.reply_to)
                while len(sent) < len(parts) and len(sent) in landed:
                    sent.append(landed[len(sent)])
            for index in range(len(sent), len(parts)):
                metadata = {"event_type": REPLY_EVENT, "event_payload": {"reply": message.idempotency_key, "part": index}}
                response = await self._call(
                    "chat_postMessage", channel=conv.chat, text=parts[index], thread_ts=conv.thread or None,
                    unfurl_links=False, unfurl_media=False,
                    **({"metadata": metadata} if message.idempotency_key else {}),
                    reconcilable=bool(message.idempotency_key),
                )
                await sent.add(str(response.get("ts")), more=index + 1 < len(parts))
        log.info("slack.sent", bot=self.bot, chat=conv.chat, thread=conv.thread, parts=len(sent))
        return sent

    async def _landed_parts(self, conv: ConversationRef, reply: str, *, after: str | None = None) -> dict[int, str]:
        """Part number → ts of this reply's parts Slack already holds (from their metadata).

        Read from the thread, after the question (`after`, its ts: conversations.replies lists a thread oldest
        first, and in one of over 200 replies the parts were never in the page read, so they were posted again), or
        from the latest 200 messages of an unthreaded chat. When Slack cannot
        be asked (a missing history scope, an outage), nothing is known and the parts are posted again. A rate
        limit is no such case: it is waited out as a post's is (`_call`), or the reply goes back to the outbox
        with its `retry_after`; posting blindly then showed the parts that had landed twice."""
        try:
            if conv.thread:
                oldest = {"oldest": after} if after and _TS.fullmatch(after) else {}
                response = await self._call("conversations_replies", channel=conv.chat, ts=conv.thread,
                                            include_all_metadata=True, limit=200, **oldest)
            else:
                response = await self._call("conversations_history", channel=conv.chat, include_all_metadata=True,
                                            limit=200)
        except (ChannelSendError, RecipientUnreachable) as exc:
            if isinstance(exc, ChannelSendError) and exc.rate_limited:
                raise
            log.warning("slack.reconcile_failed", bot=self.bot, chat=conv.chat, reply=reply, error=str(exc)[:200])
            return {}
        landed: dict[int, str] = {}
        for posted in response.get("messages") or []:
            # This app's own posts only: another app in the chat (a second deployment of the gateway, whose
            # reply keys are its own "m…" too) may post the same metadata, and its parts are not ours.
            if self.bot_user_id is not None and posted.get("user") != self.bot_user_id:
                continue
            metadata = posted.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            part = payload.get("part")  # Slack keeps any JSON here: an app's "first" was a ValueError that failed the send
            if metadata.get("event_type") == REPLY_EVENT and payload.get("reply") == reply and isinstance(part, int):
                landed[part] = str(posted.get("ts"))
        if landed:
            log.info("slack.reconciled", bot=self.bot, chat=conv.chat, reply=reply, parts=sorted(landed))
        return landed

    async def edit(self, conversation: ConversationRef, provider_message_id: str, text: str, *,
                   rendered: bool = False) -> None:
        """Replace a posted message's text: Markdown that fits in one message (streaming by edits), or, `rendered`,
        one of `render`'s parts as it is. chat.update is Tier 3 (50 a minute a workspace): once a second at most.
        The limit is on what Slack shows, an escape (`&lt;`) one character: a streamed code answer within the
        streamer's budget was over it once escaped, every edit was refused, and so was the final replacement."""
        mrkdwn = text if rendered else markdown_to_mrkdwn(text)
        if len(_ESCAPE.sub("&", mrkdwn)) > SLACK_MESSAGE_LIMIT or len(mrkdwn) > SLACK_TEXT_MAX:
            raise ChannelSendError("edit longer than one Slack message; roll over into a new one", permanent=True)
        await self._call("chat_update", channel=conversation.chat, ts=provider_message_id, text=mrkdwn)

    async def send_typing(self, conversation: ConversationRef) -> None:
        """Slack has no typing indicator for bot tokens over the Web API, so this does nothing."""

    async def _call(self, method: str, *, reconcilable: bool = False, **kwargs: Any) -> Any:
        """One Web API call with bounded retries, only where the call surely did not go through.
        `reconcilable`: a post whose retry can ask Slack whether it landed (see `send`).
        Rate limits are waited out here up to `max_wait_s` in all; a longer wait goes back to the
        outbox with its `retry_after`, which parks the conversation, so the worker's slot is free for
        other channels meanwhile (a workspace-wide 429 held every slot for its whole wait)."""
        waited = 0.0
        for attempt in range(1, self._max_attempts + 1):
            try:
                response = await getattr(self.client, method)(**kwargs)
            except SlackApiError as exc:
                status = exc.response.status_code
                error = (exc.response.data or {}).get("error", "") if isinstance(exc.response.data, dict) else ""
                if (retry_after := rate_limit_wait(exc)) is not None:
                    if attempt == self._max_attempts or waited + retry_after > self._max_wait_s:
                        raise ChannelSendError(f"slack {method}: rate limited", retry_after=retry_after,
                                               rate_limited=True) from exc
                    log.warning("slack.rate_limited", bot=self.bot, method=method, retry_after=retry_after)
                    waited += retry_after
                    await self._sleep(retry_after)
                    continue
                if error in TOKEN_REFUSED:  # said in /readyz (`connections`) and once in the log
                    if self._uninstalled is None:
                        log.warning("slack.token_gone", bot=self.bot, reason=token_refused(method, error))
                    self._uninstalled = token_refused(method, error)
                    raise ChannelSendError(f"slack {method}: {error} (this bot's token was refused, not the "
                                           "recipient)", permanent=True) from exc
                if error in UNREACHABLE:
                    raise RecipientUnreachable(f"slack {method}: {error}") from exc
                if status >= 500 or error in TRANSIENT:
                    # The post may have landed: not retried here; the worker's retry reconciles first.
                    raise ChannelSendError(f"slack {method}: {error or status}") from exc
                raise ChannelSendError(f"slack {method}: {error or status}", permanent=True) from exc
            except aiohttp.ClientConnectorError as exc:
                # The connection was never made, so nothing was posted: safe to retry.
                if attempt == self._max_attempts:
                    raise ChannelSendError(f"slack {method}: cannot connect ({exc})") from exc
                await self._sleep(doubling(attempt, first=1, cap=self._max_wait_s))
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                if method == "chat_postMessage" and not reconcilable:
                    # Sent, but no answer: Slack may have posted it, and without metadata to look it up
                    # posting again could show it twice. Fail visibly (at most once).
                    raise ChannelSendError(f"slack {method}: outcome unknown ({type(exc).__name__}); not "
                                           "resent to avoid a duplicate", permanent=True) from exc
                raise ChannelSendError(f"slack {method}: {type(exc).__name__}") from exc
            else:
                if self._uninstalled is not None:  # the token works again (a new one, the workspace back)
                    log.info("slack.token_back", bot=self.bot, was=self._uninstalled)
                    self._uninstalled = None
                self._unreached = None  # Slack answered: reachable after all
                return response
        raise AssertionError("unreachable")  # the loop always returns or raises
