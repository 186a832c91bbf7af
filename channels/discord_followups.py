"""`/ask` follow-ups: the answer posted through the interaction's webhook, with retries the adapter owns.

Why not discord.py's `Webhook.send`: its webhook client posts again after every 5xx (five tries, 25 s)
and sleeps out any 429, however long. A follow-up takes no nonce, so a 5xx that came back after
Discord had posted it (Cloudflare's 502/504 in front of a slow Discord) showed the answer twice, and a
2-minute global rate limit held a worker slot for 2 minutes. Here a short rate limit is waited out in
place (`max_wait_s` in all, and within the send's `wait_budget`, as for channel messages), a longer one goes back to the
outbox with its `retry_after`, and a 5xx or a lost answer is "outcome unknown", never resent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord

from channels.discord_errors import WAIT_IN_PLACE_S, may_wait, outcome_unknown, translate
from gateway.backoff import asked_wait
from gateway.errors import ChannelSendError, RecipientUnreachable
from gateway.models import ConversationRef

_SUPPRESS_EMBEDS = 1 << 2
_USER_AGENT = f"DiscordBot (https://github.com/Rapptz/discord.py {discord.__version__})"
_TOKEN_GONE = {10015, 50027}  # Unknown Webhook, Invalid Webhook Token: the 15 minutes are over


@dataclass(frozen=True, slots=True)
class PendingInteraction:
    """An `/ask` that was deferred and still awaits its follow-up (the token is a credential: in memory, and
    stored with its message only, `to_store`)."""

    application_id: int
    token: str
    expires: float  # time.monotonic()
    conversation: ConversationRef


def to_store(application_id: int, token: str, expires_at: float) -> dict[str, Any]:
    """An `/ask`'s interaction as it is stored with the message (`meta.interaction`); `expires_at` is
    wall-clock (time.time()), which a process started later can read."""
    return {"application_id": str(application_id), "token": token, "expires_at": expires_at}


def restored(stored: Mapping[str, Any], conversation: ConversationRef) -> PendingInteraction | None:
    """The interaction `to_store` stored, while its token lives; None once expired or unreadable."""
    try:
        application_id, token = int(stored["application_id"]), str(stored["token"])
        left = float(stored["expires_at"]) - time.time()
    except (KeyError, TypeError, ValueError):
        return None
    return PendingInteraction(application_id, token, time.monotonic() + left, conversation) if left > 0 else None


class Interactions:
    """The `/ask` interactions in memory: unanswered ones by interaction id, and answered ones while their
    token lives, by conversation and by follow-up message id. Why keep the answered: a streamed answer's
    later parts and its edits go through the interaction, since the channel's own endpoints need the bot to
    see the channel, which an app added for its commands alone does not."""

    def __init__(self) -> None:
        self._pending: dict[str, PendingInteraction] = {}
        self._answered: dict[ConversationRef, PendingInteraction] = {}
        self._followup_of: dict[str, PendingInteraction] = {}

    def _prune(self) -> None:
        now = time.monotonic()
        for book in (self._pending, self._answered, self._followup_of):
            for key in [k for k, v in book.items() if v.expires <= now]:
                del book[key]

    def add(self, interaction_id: str, interaction: PendingInteraction) -> None:
        """An `/ask` deferred ("thinking…"), awaiting its answer."""
        self._prune()
        self._pending[interaction_id] = interaction

    def restore(self, interaction_id: str, interaction: PendingInteraction | None) -> None:
        """An `/ask` this process does not hold (it started after the interaction came), as stored with it:
        answered through its follow-ups like one it parsed itself."""
        if interaction is not None and interaction_id not in self._pending:
            self.add(interaction_id, interaction)

    def for_send(self, reply_to: str | None, addressee: str | None,
                 conversation: ConversationRef) -> tuple[str | None, PendingInteraction | None]:
        """The interaction a send goes through, with its id while it is unanswered: by `reply_to`; without
        one, the conversation's oldest unanswered (else its "thinking…" never resolves), or, for a send with
        no `addressee` either (a streamed answer's later part; an operator's message or a notice has one),
        the one it last answered."""
        self._prune()
        if reply_to in self._pending:
            return reply_to, self._pending[reply_to]
        if reply_to is not None:
            return None, None
        key = next((k for k, v in self._pending.items() if v.conversation == conversation), None)
        if key is not None:
            return key, self._pending[key]
        return None, self._answered.get(conversation) if addressee is None else None

    def awaiting(self, conversation: ConversationRef) -> bool:
        """Whether an `/ask` in `conversation` still shows "thinking…"."""
        return self.for_send(None, "", conversation)[0] is not None

    def answered(self, interaction_id: str | None, interaction: PendingInteraction) -> None:
        """The answer went out: later sends continue it (`for_send`) while the token lives."""
        if interaction_id is not None:
            self._pending.pop(interaction_id, None)
        self._answered[interaction.conversation] = interaction

    def moved_on(self, conversation: ConversationRef) -> None:
        """A send went to the channel: what follows continues that, not the `/ask` answered before it."""
        self._answered.pop(conversation, None)

    def landed(self, message_id: str, interaction: PendingInteraction) -> None:
        self._followup_of[message_id] = interaction

    def adopt(self, message_ids: list[str], interaction: PendingInteraction | None) -> None:
        """Follow-ups an earlier process posted through `interaction` (it died mid-stream): edited through it
        as this process's own are, while its token lives."""
        if interaction is not None:
            for message_id in message_ids:
                self._followup_of[str(message_id)] = interaction

    def of_followup(self, message_id: str) -> PendingInteraction | None:
        """The live interaction `message_id` was posted through, if any."""
        self._prune()
        return self._followup_of.get(message_id)

    def expired(self, interaction_id: str | None, interaction: PendingInteraction) -> None:
        """Discord no longer takes this token: forget it everywhere."""
        self._pending.pop(interaction_id or "", None)
        for book in (self._answered, self._followup_of):
            for key in [k for k, v in book.items() if v is interaction]:
                del book[key]


class InteractionExpired(ChannelSendError):
    """Discord no longer takes follow-ups with this interaction token; the answer can go to the channel."""


class FollowupPoster:
    """Posts follow-up messages to `{api_base}/webhooks/{application_id}/{token}` and returns their ids."""

    def __init__(self, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 max_wait_s: float = WAIT_IN_PLACE_S,
                 timeout_s: float = 30.0) -> None:
        self._sleep = sleep
        self._max_wait_s = max_wait_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def post(self, application_id: int, token: str, content: str) -> str:
        """One follow-up (mentions none, embeds suppressed) → its message id; errors in the gateway's tree."""
        url = f"{discord.http.Route.BASE}/webhooks/{application_id}/{token}"
        body = {"content": content, "allowed_mentions": {"parse": []}, "flags": _SUPPRESS_EMBEDS}
        return await self._send("POST", url, body, resendable=False)

    async def edit(self, application_id: int, token: str, message_id: str, content: str) -> None:
        """Replace a follow-up's text through the interaction (a streamed answer). Why not the channel's
        endpoint: it needs the bot to see the channel, which an app added for its commands alone does not."""
        url = f"{discord.http.Route.BASE}/webhooks/{application_id}/{token}/messages/{message_id}"
        await self._send("PATCH", url, {"content": content, "allowed_mentions": {"parse": []}}, resendable=True)

    async def _send(self, method: str, url: str, body: dict[str, Any], *, resendable: bool) -> str:
        """`resendable`: sending it twice does no harm (an edit), so a 5xx or a lost answer may be retried."""
        waited = 0.0
        while True:
            status, data, headers = await self._request(method, url, body, resendable=resendable)
            if 200 <= status < 300 and isinstance(data, dict) and data.get("id"):
                return str(data["id"])
            if status == 429:
                retry_after = _retry_after(data, headers)
                # Without Discord's `Via` (Cloudflare's own limit, often an hour's ban) it is not waited out here.
                if not headers.get("Via") or waited + retry_after > self._max_wait_s or not may_wait(retry_after):
                    raise ChannelSendError(f"discord follow-up rate limited for {retry_after:g} s",
                                           retry_after=retry_after, rate_limited=True)
                waited += retry_after
                await self._sleep(retry_after)
                continue
            detail = f"{status} ({data.get('code') if isinstance(data, dict) else None}): {_message(data)}"
            if resendable and status >= 500:
                raise ChannelSendError(f"discord follow-up server error {detail}")
            if status >= 500 or 200 <= status < 300:
                # Discord may have posted it before failing to answer: a follow-up has no nonce to dedupe a resend.
                raise ChannelSendError(f"discord follow-up outcome unknown ({detail}); not resent to avoid a "
                                       "duplicate", permanent=True)
            code = data.get("code") if isinstance(data, dict) else None
            if status in (401, 404) and code in _TOKEN_GONE:
                raise InteractionExpired(f"discord follow-up {detail}")
            if status in (403, 404):
                raise RecipientUnreachable(f"discord follow-up {detail}")
            raise ChannelSendError(f"discord follow-up {detail}", permanent=True)

    async def _request(self, method: str, url: str, body: dict[str, Any], *,
                       resendable: bool) -> tuple[int, Any, Any]:
        if self._session is None or self._session.closed:
            # discord.py's own User-Agent: Discord asks for "DiscordBot (url, version)" from every client.
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers={"User-Agent": _USER_AGENT})
        try:
            async with self._session.request(method, url, json=body, params={"wait": "true"}) as response:
                try:
                    data = await response.json(content_type=None)
                except ValueError:
                    data = None
                return response.status, data, response.headers
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            if outcome_unknown(exc) and not resendable:
                raise ChannelSendError(f"discord follow-up outcome unknown ({exc!r}); not resent to avoid a "
                                       "duplicate", permanent=True) from exc
            raise translate(exc) from exc

    async def close(self) -> None:
        """Close the HTTP session, if one was opened."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def _retry_after(data: Any, headers: Any) -> float:
    value = data.get("retry_after") if isinstance(data, dict) else None
    return asked_wait(value if value is not None else headers.get("Retry-After"))


def _message(data: Any) -> str:
    return str(data.get("message", "")) if isinstance(data, dict) else str(data or "")[:200]
