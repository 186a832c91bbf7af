"""Discord: a discord.py gateway client for DMs and mentions, plus the `/ask` interactions endpoint.

Inbound arrives two ways:
- the gateway (`start`): `on_message` → `classify_gateway_message` → `deliver`; external_id = message id;
- HTTP interactions (`verify` + `parse`): Ed25519-signed; PING → type 1, `/ask question:...` → an
  InboundMessage keyed by the interaction id and a deferred response (type 5, "thinking...").

Outbound goes through discord.py's HTTP client, which owns Discord's 429 buckets: a send (an edit, a
typing indicator) waits out rate limits up to `WAIT_IN_PLACE_S` in all, and a longer wait (or a 5xx, never
retried in place) goes back to the outbox with its `retry_after`, so one rate-limited channel does not
hold a worker slot. Every chunk
carries a deterministic nonce with `enforce_nonce`, so a send retried after a lost response is
deduplicated by Discord instead of posted twice; Discord only checks nonces for a few minutes, so the
adapter also remembers which chunks of a reply went through, and a retry resumes after them (after a
restart, from the ids the outbox kept: `delivered_parts`) and after those the channel shows it posted
(`channels.discord_reconcile`). `/ask` follow-ups (webhook messages) take
no nonce: one whose answer was lost (a timeout after the request went out, or a 5xx) is reported as
"outcome unknown" and not resent (`channels.discord_followups`). A streamed `/ask` answer is edited,
and continued, through its interaction too.

A gateway message the inbox cannot store (the database is away) is retried with backoff for up to
`DELIVER_PATIENCE` seconds: Discord never sends a MESSAGE_CREATE again.

The gateway connection is kept alive two ways. discord.py reconnects after network errors itself, but
an event its models cannot read (a captured embed-only MESSAGE_UPDATE lacks `type`) raised out of its
connect loop and ended it for good, the socket left open and every later message lost. So each event
parser is wrapped to log and skip what it cannot read (`discord.event_unreadable`), and `GatewayConnection.run`
reconnects, with backoff, after anything else that ends the loop; `connection_status` tells `/readyz`.

`discord.http.Route.BASE` and `DiscordWebSocket.DEFAULT_GATEWAY` are class attributes, so one process
talks to one Discord API base and one gateway: the last adapter constructed sets them.

An edit (MESSAGE_UPDATE) or deletion of a message still waiting for its answer revises it (the inbox's
`revises`); of one already answered, it is ignored with a reason: re-answering every typo fix would spam
the channel.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import time

import discord
import yarl
from discord.gateway import DiscordWebSocket

from channels.base import Capabilities, Deliver, RawRequest, WebhookResult
from channels.discord_client import GatewayClient
from channels.discord_connection import GatewayConnection
from channels.discord_errors import WAIT_IN_PLACE_S, translate, within_wait_budget
from channels.discord_followups import (
    FollowupPoster,
    InteractionExpired,
    Interactions,
    PendingInteraction,
    restored,
    to_store,
)
from channels.discord_inbound import InboxFeed, ThreadLookup
from channels.discord_parse import classify_gateway_message, parse_interaction, payload_of, without_token
from channels.discord_reconcile import adopt_landed
from channels.discord_render import MAX_LENGTH, addressed, chunk_nonce, render_message, to_discord_markdown, unaddressed
from channels.discord_signature import SIGNATURE_MAX_AGE, verify_key, verify_signature
from channels.sent_parts import Landed, SentParts
from gateway.background import cancel
from gateway.errors import BadRequest, ChannelSendError
from gateway.models import USE_ASK, ConversationRef, InboundMessage, OutboundMessage
from gateway.settings import DiscordChannel

__all__ = [
    "DEFAULT_API_BASE",
    "DEFAULT_GATEWAY",
    "INTERACTION_TTL",
    "MAX_LENGTH",
    "SIGNATURE_MAX_AGE",
    "DiscordAdapter",
    "chunk_nonce",
    "classify_gateway_message",
    "parse_interaction",
    "render_message",
    "to_discord_markdown",
]

log = logging.getLogger(__name__)

DEFAULT_API_BASE = "https://discord.com/api/v10"
DEFAULT_GATEWAY = "wss://gateway.discord.gg/"
INTERACTION_TTL = 15 * 60  # an interaction token accepts follow-ups for 15 minutes
# Discord shows "The application did not respond" when an interaction's response takes over 3 s: the
# question's store is waited for this long, the way there and back left over (`WebhookResult.respond_within`).
INTERACTION_RESPONSE_S = 2.0
_MISSING_PERMISSIONS = 50013
_MENTIONED_MAX = 1_000


# ---- the adapter ---------------------------------------------------------------------------------------


class DiscordAdapter:
    """Discord over discord.py: gateway inbound, `/ask` interactions, REST outbound."""

    name = "discord"
    capabilities = Capabilities(max_length=MAX_LENGTH, markdown="discord", threads=True, edits=True, typing=True)

    def __init__(self, bot: str, settings: DiscordChannel, *, use_ask: str = USE_ASK, not_stored: str = "",
                 wait_in_place_s: float = WAIT_IN_PLACE_S) -> None:
        # No `http` session to inject, unlike the other adapters: discord.py owns its aiohttp session
        # and rate-limit buckets.
        self.bot = bot
        self.settings = settings
        self.use_ask = use_ask  # the answer to another slash command than /ask (the bot's `replies.use_ask`)
        self.not_stored = not_stored  # an `/ask` whose store failed after its deferral (`WebhookResult.if_not_stored`)
        # Class attributes, hence process-wide: one process talks to one Discord API base and gateway.
        discord.http.Route.BASE = (settings.api_base or DEFAULT_API_BASE).rstrip("/")
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.gateway_url or DEFAULT_GATEWAY)
        intents = discord.Intents.default()
        intents.message_content = True  # privileged: enable it in the Developer Portal too
        self._inbox = InboxFeed(bot)  # gateway messages, in Discord's order
        self.client = GatewayClient(self._on_message, on_revision=self._inbox.patiently, bot=bot, intents=intents,
                                    wait_in_place_s=wait_in_place_s)
        self._threads = ThreadLookup(self.client, bot=bot)  # a thread discord.py does not hold, asked of Discord
        self.client.thread_of, self.client.turn = self._threads.of_channel, self._inbox.turn
        self._wait_in_place_s = wait_in_place_s  # a send's rate limits, waited out in place, in all
        self._verify_key = verify_key(settings.public_key)
        if self._verify_key is None:  # said once at start, not only as a 401 per interaction
            log.warning("discord.public_key_missing", extra={
                "bot": bot, "note": "discord.public_key is not set: /ask interactions are refused (401); channel "
                                    "messages still work"})
        self._task: asyncio.Task[None] | None = None
        self._login_lock = asyncio.Lock()
        self._logged_in = False
        self._interactions = Interactions()  # `/ask`: unanswered, and answered while their token lives
        # Ids of the chunks already delivered per reply, so a retried send never posts them again.
        self._sent_parts = SentParts()
        self._mentioned: dict[str, str] = {}  # a late `/ask`'s post → the member it mentions: its edits keep it
        self._followups = FollowupPoster(max_wait_s=wait_in_place_s)  # `/ask` answers: retried by us, never resent blindly
        self._connection = GatewayConnection(self.client, self._ensure_login, bot=bot)  # run, and run again

    # -- webhooks (interactions endpoint) --

    def verify(self, request: RawRequest) -> None:
        """Check the Ed25519 signature over timestamp + body, and refuse stale timestamps."""
        verify_signature(self._verify_key, request)

    def parse(self, request: RawRequest) -> WebhookResult:
        """A verified interaction → WebhookResult; remembers `/ask` tokens for the follow-up."""
        try:
            body = json.loads(request.body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest("interaction body is not JSON") from exc
        if not isinstance(body, dict):
            raise BadRequest("interaction body is not an object")
        result = parse_interaction(body, use_ask=self.use_ask)
        now, messages = time.monotonic(), []
        for message in result.messages:
            message = without_token(message)  # a 15-minute credential: out of the raw payload
            if body.get("application_id") and body.get("token"):
                application_id, token = int(body["application_id"]), str(body["token"])
                self._interactions.add(message.external_id, PendingInteraction(
                    application_id, token, now + INTERACTION_TTL, message.conversation))
                # Stored with the message (`meta.interaction`): its answer after a restart goes through it too.
                stored = to_store(application_id, token, time.time() + INTERACTION_TTL)
                message = dataclasses.replace(message, raw={**message.raw, "interaction": stored})
            messages.append(message)
        return WebhookResult(messages=tuple(messages), ignored=result.ignored, response=result.response,
                             respond_within=INTERACTION_RESPONSE_S if messages else None,
                             if_not_stored=functools.partial(self._not_stored, tuple(messages)))

    async def _not_stored(self, messages: tuple[InboundMessage, ...]) -> None:
        """Answer each `/ask` whose question was not stored with `not_stored`, once: no answer will come."""
        for message in messages:
            key, interaction = self._interactions.for_send(message.external_id, "", message.conversation)
            if key is None or not self.not_stored:
                continue
            self._interactions.expired(key, interaction)  # nothing else goes through it
            try:
                await self._followups.post(interaction.application_id, interaction.token, self.not_stored)
            except ChannelSendError as exc:
                log.warning("discord.not_stored_notice_failed", extra={"bot": self.bot, "error": str(exc)[:200]})

    # -- outbound --

    @within_wait_budget
    async def send(self, message: OutboundMessage) -> list[str]:
        """Render, split at 2000 chars and post; the first chunk replies to `reply_to`.

        In a server channel, a message addressed to the member that replies to none of theirs (an
        operator's: `addressee` is set) starts with a mention of that member, which pings them and no
        one else: the channel is shared."""
        if message.interaction is not None and message.reply_to:  # one this process never saw (a restart)
            self._interactions.restore(message.reply_to, restored(message.interaction, message.conversation))
        key, interaction = self._interactions.for_send(message.reply_to, message.addressee, message.conversation)
        # An `/ask` answered past its 15 minutes goes to the channel, where it can reply to nothing (an
        # interaction is no message): it is addressed to the member who asked, as an operator's message is.
        late = message.interaction is not None
        chunks, member = _rendered(message, _addressed(message))
        if interaction is not None and member:
            # A follow-up names no one, yet is split with room for the mention, as `render` splits it: an operator's
            # edit of it (`render`, then `edit`) finds the parts sent (one that fit one follow-up was two to the edit).
            chunks, member = [unaddressed(chunks[0], member), *chunks[1:]], None
        if not chunks:
            return []
        await self._ensure_login()
        with self._sent_parts.resume(message) as ids:
            if interaction is not None:
                try:
                    await self._send_followups(interaction, chunks, ids)
                    self._interactions.answered(key, interaction)  # only now, so a failed send can retry it
                    return list(ids)
                except InteractionExpired as exc:
                    # The token ran out before our own clock said so (a slow first attempt, a clock step):
                    # the rest of the answer goes to the channel, as it would after the 15 minutes.
                    self._interactions.expired(key, interaction)
                    log.warning("discord.interaction_expired", extra={"bot": self.bot, "interaction_id": key,
                                                                      "error": str(exc)[:200]})
                    late = True
                    if not ids:
                        chunks, member = _rendered(message, True)
            else:
                self._interactions.moved_on(message.conversation)  # a later answer's parts stay in the channel
            channel = self._channel(message.conversation)
            mentions = (discord.AllowedMentions(everyone=False, roles=False, replied_user=False,
                                                users=[discord.Object(int(member))])
                        if member else discord.AllowedMentions.none())
            if message.attempt > 1:  # an earlier attempt's lost answer may hide a post (channels.discord_reconcile)
                await adopt_landed(self.client, channel, message, chunks, ids)
            for index, chunk in enumerate(chunks):
                if index < len(ids):
                    continue  # delivered by an earlier attempt of this same reply
                reference = None
                if index == 0 and message.reply_to and message.reply_to.isdigit() and not late:
                    reference = discord.MessageReference(
                        message_id=int(message.reply_to), channel_id=channel.id, fail_if_not_exists=False
                    )
                post = functools.partial(channel.send, chunk, nonce=chunk_nonce(message, index),
                                         allowed_mentions=mentions, suppress_embeds=True)
                try:
                    try:
                        sent = await post(reference=reference)
                    except discord.Forbidden as exc:
                        if reference is None or exc.code != _MISSING_PERMISSIONS:
                            raise
                        # A reply needs Read Message History, which servers often leave out: the answer is
                        # still wanted, as a plain message (it fails again if Send Messages is missing too).
                        log.warning("discord.reply_forbidden", extra={"bot": self.bot, "channel_id": channel.id})
                        sent = await post(reference=None)
                except Exception as exc:  # translated at the boundary, re-raised as our own tree
                    raise translate(exc, sent=len(ids)) from exc
                await ids.add(str(sent.id), more=index + 1 < len(chunks))
                if index == 0 and member and late:  # a late `/ask`, streamed: its edits come with no addressee
                    self._mentioned = {**dict(list(self._mentioned.items())[-_MENTIONED_MAX + 1:]), str(sent.id): member}
        return list(ids)

    async def _send_followups(self, interaction: PendingInteraction, chunks: list[str], ids: Landed) -> None:
        """Post the chunks not yet in `ids` as follow-ups, adding each one's id as it lands."""
        # After a deferred response (type 5), the first follow-up replaces the "thinking..." state.
        for index in range(len(ids), len(chunks)):
            sent = await self._followups.post(interaction.application_id, interaction.token, chunks[index])
            self._interactions.landed(sent, interaction)
            await ids.add(sent, more=index + 1 < len(chunks))

    @within_wait_budget
    async def send_typing(self, conversation: ConversationRef) -> None:
        """Show "bot is typing..." for about 10 seconds; not while an `/ask` here awaits its answer, whose
        "thinking…" shows already (and the channel's endpoint needs the bot to see the channel)."""
        if self._interactions.awaiting(conversation):
            return
        await self._ensure_login()
        try:
            await self._channel(conversation).typing()
        except Exception as exc:
            raise translate(exc) from exc

    def render(self, message: OutboundMessage) -> list[str]:
        """The chunks `send` posts for `message` in the channel: one addressed to the member (an operator's, a
        late `/ask`'s answer) starts with the mention, and the chunks are split with it."""
        return _rendered(message, _addressed(message))[0]

    @within_wait_budget
    async def edit(self, conversation: ConversationRef, provider_message_id: str, text: str, *,
                   rendered: bool = False) -> None:
        """Replace a message's text: Markdown (streaming by edits) of at most 2000 characters, or, `rendered`, one
        of `render`'s chunks as it is (an operator's edit: the first keeps its mention). A late `/ask`'s post
        keeps its mention of the member too."""
        interaction = self._interactions.of_followup(provider_message_id)
        member = None if interaction is not None or rendered else self._mentioned.get(provider_message_id)
        content = text if rendered else to_discord_markdown(text)
        if rendered and interaction is not None:  # a follow-up names no one (`send`): nor does its edit
            content = unaddressed(content, conversation.member)
        if member and member.isdigit() and content.strip():  # as `render_message` addressed it
            content = addressed(content.strip(), member)
        if len(content) > MAX_LENGTH:
            raise BadRequest(f"an edit must fit in {MAX_LENGTH} characters; roll over into a new message")
        if interaction is not None:
            try:
                await self._followups.edit(interaction.application_id, interaction.token, provider_message_id,
                                           content)
                return
            except InteractionExpired:
                self._interactions.expired(None, interaction)  # the channel's endpoint may still take it
        await self._ensure_login()
        partial = self._channel(conversation).get_partial_message(int(provider_message_id))
        try:
            await partial.edit(content=content, allowed_mentions=discord.AllowedMentions.none())
        except Exception as exc:
            raise translate(exc) from exc

    def adopt_followups(self, message_ids: list[str], interaction: dict, conversation: ConversationRef) -> None:
        """Messages an earlier process posted through `interaction` (stored with its `/ask`): edited through it."""
        self._interactions.adopt(message_ids, restored(interaction, conversation))

    def _channel(self, conversation: ConversationRef) -> discord.PartialMessageable:
        # A thread is a channel on Discord, and a thread's conversation has its id as `chat`: posting
        # there replies inside it. A server channel's `thread` names a member, not a channel.
        target = conversation.chat
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
                raise translate(exc) from exc
            self._logged_in = True

    # -- gateway --

    async def start(self, deliver: Deliver) -> None:
        """Log in and run the gateway connection in the background (`GatewayConnection.run`, which reconnects).
        A rejected token raises; Discord unreachable at start does not: the connection loop logs in
        again with backoff, so a blip at boot does not leave the channel deaf until a restart."""
        self._inbox.deliver = deliver
        try:
            await self._ensure_login()
        except ChannelSendError as exc:
            if exc.permanent:
                raise
            log.warning("discord.login_failed", extra={"bot": self.bot, "error": str(exc)[:200],
                                                       "next": "retrying in the background"})
        self._task = asyncio.create_task(self._connection.run(), name=f"discord-gateway:{self.bot}")

    @property
    def connection_status(self) -> str:
        """The gateway connection, for `/readyz` (`GatewayConnection.status`)."""
        return self._connection.status(self._task)

    async def stop(self) -> None:
        """Close the gateway connection and the HTTP session."""
        self._connection.stopping = True
        await self.client.close()
        await self._followups.close()
        if self._task is not None:
            await cancel([self._task])
            self._task = None

    async def _on_message(self, message: discord.Message) -> None:
        async with self._inbox.turn(message.channel.id):  # before its first await: Discord's order (discord_inbound)
            me = self.client.user
            result = classify_gateway_message(
                payload_of(message),
                bot_user_id=str(me.id) if me else "",
                respond_in_groups=self.settings.respond_in_groups,
                in_thread=await self._threads.in_thread(message),
                bot_role_ids=(str(role.id),) if message.guild and (role := message.guild.self_role) else (),
            )
            if isinstance(result, str):
                log.info("discord.ignored", extra={"bot": self.bot, "discord_message_id": message.id,
                                                   "reason": result})
                return
            await self._inbox.patiently(result)


def _addressed(message: OutboundMessage) -> bool:
    """Whether `message` is addressed to the member (a late `/ask`'s answer, an operator's message): not one that
    replies to their message, which says whom it is for."""
    return message.interaction is not None or (not message.reply_to and message.addressee is not None)


def _rendered(message: OutboundMessage, addressed: bool) -> tuple[list[str], str | None]:
    """The chunks of `message`, addressed (a mention in front) to the conversation's member if `addressed` and
    the conversation is one member's in a server channel; and that member, or None."""
    member = message.conversation.member if addressed else None
    member = member if member and member.isdigit() else None  # a snowflake, or no mention at all
    return render_message(message, mention=member), member
