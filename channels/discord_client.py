"""The discord.py client the Discord adapter runs: every message, edit and deletion to the adapter,
unreadable events skipped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import discord

from channels.discord_errors import WAIT_IN_PLACE_S, may_wait
from channels.discord_parse import revision_of
from gateway.models import InboundMessage

log = logging.getLogger("channels.discord")


class GatewayClient(discord.Client):
    """A discord.Client that hands every message to `on_message` and survives events it cannot read.

    Why the parsers are wrapped: discord.py raises out of its connect loop on an event its models do not
    know (a captured embed-only MESSAGE_UPDATE has no `type`), which ended the connection for good."""

    def __init__(self, on_message: Callable[[discord.Message], Awaitable[None]], *, bot: str = "",
                 on_revision: Callable[[InboundMessage], Awaitable[None]] | None = None,
                 wait_in_place_s: float = WAIT_IN_PLACE_S, **options: Any) -> None:
        # The gateway never joins a voice channel: discord.py's "davey is not installed, voice will NOT
        # be supported" warning at every start only sent deployers looking for a package they do not need.
        discord.VoiceClient.warn_dave = False
        super().__init__(http_trace=_http_trace(), **options)
        # A longer rate limit raises RateLimited (back to the outbox) instead of being slept out while the
        # delivery worker's slot waits. Set on the HTTP client: the Client option is floored at 30 s.
        self.http.max_ratelimit_timeout = wait_in_place_s
        self._on_message = on_message
        self._on_revision = on_revision  # edits and deletions; None: ignored with a logged reason
        self._bot = bot  # for the log lines
        # Whether a server channel (id, guild id) is a thread, for an edit that is a question of its own (the adapter's).
        self.thread_of: Callable[[int, int], Awaitable[bool]] | None = None
        # A channel's turn (the adapter's `InboxFeed.turn`), taken by an edit before its first await, as by a new message.
        self.turn: Callable[[int], contextlib.AbstractAsyncContextManager[None]] = lambda _channel_id: contextlib.nullcontext()
        # The websocket looks each event's parser up in this dict: one unreadable event is skipped, not fatal.
        parsers = self._connection.parsers
        for event, parse in list(parsers.items()):
            parsers[event] = _skipping_unreadable(event, parse)
        _release_global_lock_on_cancel(self.http)

    async def login(self, token: str) -> None:
        """discord.py's login; a failed attempt closes the aiohttp session it opened. Why: discord.py
        opens one per attempt and leaves it open when the attempt fails, so every send or typing retry
        during an outage leaked one ("Unclosed client session"). Closing it closes its connector too,
        so the next attempt is given a fresh one."""
        try:
            await super().login(token)
        except Exception:
            with contextlib.suppress(Exception):
                await self.http.close()
            self.http.connector = discord.utils.MISSING
            raise

    async def on_message(self, message: discord.Message) -> None:
        """Gateway MESSAGE_CREATE, after discord.py has parsed it."""
        await self._on_message(message)

    # The raw events fire for every message, not only the ones discord.py still holds in its cache.
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """Gateway MESSAGE_UPDATE: revises the message while it waits for its answer (the adapter)."""
        # discord.py reads guild_id off the guild it holds: None for one it does not (and no thread look-up then).
        guild_id = payload.guild_id or (int(g) if str(g := payload.data.get("guild_id") or "").isdigit() else None)
        await self._revise(payload.message_id, payload.channel_id, payload.data, "MESSAGE_UPDATE", guild_id=guild_id)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        """Gateway MESSAGE_DELETE: withdraws the message while it waits for its answer."""
        await self._revise(payload.message_id, payload.channel_id, None, "MESSAGE_DELETE")

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        """Gateway MESSAGE_DELETE_BULK: each one as a MESSAGE_DELETE, all in one turn (before the events after it)."""
        async with self.turn(payload.channel_id):
            for message_id in sorted(payload.message_ids):
                await self._revise(message_id, payload.channel_id, None, "MESSAGE_DELETE_BULK", turn_held=True)

    async def _revise(self, message_id: int, channel_id: int, data: Any, event: str, *,
                      guild_id: int | None = None, turn_held: bool = False) -> None:
        bot_user_id = str(self.user.id) if self.user else ""
        # The bot's own role, as a new message reads it: an edit of "<@&role> how do I…" kept the mention.
        guild = self.get_guild(guild_id) if guild_id else None
        roles = (str(role.id),) if guild is not None and (role := guild.self_role) else ()
        # The turn first: a thread's look-up awaited before it let the events after it (a deletion) go in first.
        async with contextlib.nullcontext() if turn_held else self.turn(channel_id):
            revision = revision_of(message_id, channel_id, dict(data) if data is not None else None, event=event,
                                   bot_user_id=bot_user_id, bot_role_ids=roles)
            # Asked only of an edit that is a question now, which a thread's is: every other one (the bot's own
            # streamed answer) held the channel's turn up to LOOKUP_TIMEOUT_S for a look-up it did not need.
            if not isinstance(revision, str) and revision.new_if_never_stored and guild_id is not None \
                    and self.thread_of is not None and await self.thread_of(channel_id, guild_id):
                revision = revision_of(message_id, channel_id, dict(data), event=event, bot_user_id=bot_user_id,
                                       bot_role_ids=roles, in_thread=True)
            if isinstance(revision, str) or self._on_revision is None:
                self._ignored(message_id, revision if isinstance(revision, str) else f"{event}: nothing to answer")
            else:
                await self._on_revision(revision)

    def _ignored(self, message_id: int, reason: str) -> None:
        log.info("discord.ignored", extra={"bot": self._bot, "message_id": message_id, "reason": reason})


def _release_global_lock_on_cancel(http: discord.http.HTTPClient) -> None:
    """Make discord.py's global rate-limit lock survive a cancelled request.

    On a global 429 discord.py clears `_global_over`, sleeps `retry_after`, then sets it again; every
    request first waits for it. A request cancelled during that sleep (the typing indicator, cancelled
    whenever a turn ends; a streamed edit cut by the turn's deadline) never set it, and every later
    request of the process waited forever. Released on cancel: a request sent early meets at worst
    another 429, which discord.py sleeps out again. Only a request that found the lock open may have
    closed it: one cancelled while it waited for the lock leaves it to the request sleeping it out."""
    request = http.request

    def lock() -> asyncio.Event | None:
        found = getattr(http, "_global_over", None)  # made at login
        return found if isinstance(found, asyncio.Event) else None

    async def request_releasing_lock(*args: Any, **kwargs: Any) -> Any:
        entered_open = (held := lock()) is None or held.is_set()
        try:
            return await request(*args, **kwargs)
        except asyncio.CancelledError:
            if entered_open and (held := lock()) is not None and not held.is_set():
                held.set()
            raise

    http.request = request_releasing_lock  # type: ignore[method-assign]


def _http_trace() -> aiohttp.TraceConfig:
    """What discord.py would retry in place and the outbox retries instead, raised as each response ends.

    A 5xx raises DiscordServerError at once. Why: discord.py retried 500/502/504/524 in place, four times
    over 16 s, holding the delivery worker's slot; the outbox retries later instead, and the chunk's nonce
    (`enforce_nonce`) has Discord return the message it already posted rather than post it twice.

    A 429 whose wait would overdraw the send's budget (`wait_budget`) raises RateLimited. Why: discord.py
    waits out each 429 up to `max_ratelimit_timeout`, and up to five of them per request: 25 s in a worker
    slot where every other adapter waits 5 s in all per send."""

    async def on_request_end(_session: Any, _context: Any, params: aiohttp.TraceRequestEndParams) -> None:
        response = params.response
        if response.status >= 500:
            raise discord.DiscordServerError(response, await discord.http.json_or_text(response))
        if response.status == 429 and response.headers.get("Via"):  # without Via: Cloudflare's, never waited
            data = await discord.http.json_or_text(response)
            retry_after = data.get("retry_after") if isinstance(data, dict) else None
            if isinstance(retry_after, (int, float)) and not may_wait(float(retry_after)):
                raise discord.RateLimited(float(retry_after))

    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(on_request_end)
    return trace


def _skipping_unreadable(event: str, parse: Any) -> Any:
    def tolerant(data: Any) -> None:
        try:
            parse(data)
        except Exception:  # a shape discord.py's models do not know: skip this one event
            log.exception("discord.event_unreadable", extra={"event": event})

    return tolerant
