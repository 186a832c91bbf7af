"""Telegram, through aiogram 3: webhook or long polling in, HTML messages out.

Inbound
- Webhook: Telegram sends `X-Telegram-Bot-Api-Secret-Token` (the secret given to setWebhook); we compare it in
  constant time. It carries no timestamp, so no staleness check: the inbox's dedupe (`external_id`) absorbs replays.
- Polling (`mode: polling`): `telegram_polling.TelegramPoller` long-polls getUpdates through the bot's session, reads
  each update as the webhook body is read, and moves the offset past it only once stored.
- `external_id` is `update_id:chat:message_id` (`telegram_updates.delivery_key`): a redelivery dedupes, and a
  new message under an update id Telegram reused (it restarts them after a week without updates) does not.
- An edit of a message still waiting for its answer replaces its text (a typo fixed in time; one that
  lands while the answer is written is answered after it); an edit of one already answered is ignored
  (answering it would double-reply). A live location's moves are edits too, flagged
  (`InboundMessage.live_location`): its record takes the newest place, and no move is answered. Deletions
  never reach bots. Callback queries, inline queries and payments are ignored with a reason, as are service
  messages, our own and other bots' messages.
- `my_chat_member` (the bot kicked, left, blocked, or added back) is logged and stored (`bot_removed`): the
  outbox of every replica fails replies to a chat it left at once (storage/removed_chats.py). A send's, edit's or
  deletion's 403 saying the bot was kicked or blocked (`telegram_errors.REMOVED`) is `BotRemoved`, which the
  outbox stores too (a streamed answer meets it at its final edit).
- In groups the bot answers only when @mentioned, replied to, or sent a command, unless `respond_in_groups: always`.
  A forum topic is one conversation (`ConversationRef.thread`); elsewhere in a group each member's questions are
  their own (`gateway.models.member_thread`).
- `/start` and `/help` are flagged as `raw["command"]` so the pipeline sends the greeting (a deep link's
  `/start <payload>` keeps the payload as `raw["start_payload"]`, not as text); `/ask question` works in
  groups where privacy mode hides plain messages, and so does `/help question`, answered as the question.
- A group upgraded to a supergroup gets a new chat id: Telegram's notices of it (and a send refused with
  `migrate_to_chat_id`, resent to the new id) move its conversations there (`InboundMessage.moves_to`).

Outbound: Markdown → Telegram HTML (`telegram_render`), split at 4096 UTF-16 units, citations as links. 429
`retry_after` is honoured in place (bounded), 5xx is retried with backoff, and chunks that went through are remembered
so a retried send resumes rather than repeats. An error page that is not JSON (Telegram's proxies answer 502/504 in
HTML in outages) is a server error. A closed forum topic fails its reply at once (`telegram.topic_closed`). A typing
indicator refused with a 429 is not asked for again in that chat before its `retry_after` is over.
"""

from __future__ import annotations

import asyncio
import secrets
import time

import aiohttp
import structlog
from aiogram.client.session.base import BaseSession
from aiogram.exceptions import (
    AiogramError,
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramMigrateToChat,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import LinkPreviewOptions, ReplyParameters

from channels.base import Capabilities, Deliver, RawRequest, WebhookResult
from channels.sent_parts import SentParts
from channels.telegram_bot import chat_id_of, make_bot, topic_id
from channels.telegram_errors import REMOVED, UNREACHABLE, is_error_page, rate_limited, says
from channels.telegram_polling import TelegramPoller
from channels.telegram_render import (
    TELEGRAM_LIMIT,
    markdown_to_html,
    render_messages,
    visible_length,
    visible_text,
)
from channels.telegram_updates import UpdateParser, UsernameUnknown, decode_update
from gateway.background import cancel
from gateway.backoff import doubling
from gateway.errors import BotRemoved, ChannelSendError, RecipientUnreachable, SignatureInvalid
from gateway.models import ConversationRef, InboundMessage, OutboundMessage, Sender
from gateway.settings import TelegramChannel

log = structlog.get_logger(__name__)

SECRET_HEADER = "x-telegram-bot-api-secret-token"


class TelegramAdapter:
    """The Telegram channel: verify, parse, send, edit, typing, and the polling loop."""

    name = "telegram"
    capabilities = Capabilities(
        max_length=TELEGRAM_LIMIT, markdown="html", length_unit="utf16", threads=True, edits=True, typing=True
    )

    def __init__(
        self,
        bot: str,
        settings: TelegramChannel,
        *,
        http: BaseSession | None = None,
        username: str | None = None,
        max_attempts: int = 4,
        max_retry_wait: float = 5.0,
        polling_timeout: int = 25,
        identity_retry_s: float = 5.0,
    ) -> None:
        self.bot_name = bot
        self.settings = settings
        self.bot = make_bot(settings, session=http)
        self.parser = UpdateParser(bot_id=self.bot.id, username=username,
                                   respond_in_groups=settings.respond_in_groups, bot_name=bot)
        self.max_attempts = max_attempts
        self.max_retry_wait = max_retry_wait
        self.polling_timeout = polling_timeout
        self.identity_retry_s = identity_retry_s  # the first wait before asking getMe again; doubles up to 5 min
        self._identity: asyncio.Task[None] | None = None
        self._polling: asyncio.Task[None] | None = None
        self._poller: TelegramPoller | None = None
        # Chunks already delivered per outbound message, so a retried send never repeats them.
        self._sent_parts = SentParts()
        # Groups upgraded to supergroups, old id -> new, learned from a refused send: this process's later
        # sends, edits and typing go to the new id even before the stored conversation is moved.
        self._moved: dict[str, int | str] = {}
        self._deliver: Deliver | None = None  # the inbox's, given to start(): a refused send moves the chat
        self._typing_after: dict[str, float] = {}  # chat -> when (monotonic) a rate-limited typing may be asked again

    # Inbound
    def verify(self, request: RawRequest) -> None:
        """Check the secret token header in constant time; raise SignatureInvalid otherwise."""
        expected = self.settings.webhook_secret
        if not expected:
            raise SignatureInvalid("telegram.webhook_secret is not configured; refusing unauthenticated webhooks")
        got = request.header(SECRET_HEADER)
        if not got:
            raise SignatureInvalid("missing X-Telegram-Bot-Api-Secret-Token")
        if not secrets.compare_digest(got.encode(), expected.encode()):
            raise SignatureInvalid("wrong X-Telegram-Bot-Api-Secret-Token")

    def parse(self, request: RawRequest) -> WebhookResult:
        """A verified webhook body (one Update) → normalized messages or ignore reasons. Pure."""
        try:
            return self.parser.parse(decode_update(request.body))
        except UsernameUnknown as exc:  # Telegram sends it again, by when getMe may have answered
            return exc.webhook_result()

    # Outbound
    async def send(self, message: OutboundMessage) -> list[str]:
        """Render, split and send a reply; return Telegram message ids, one per message sent.

        A failure carries the ids of the chunks that went through as `sent_ids` (the outbox stores them);
        a retry resumes after them: from memory, or in a new process from `message.delivered_parts`."""
        conv = message.conversation
        reply_to = int(message.reply_to) if message.reply_to and message.reply_to.isdigit() else None
        chunks = self.render(message)
        chat: int | str = self._chat_id(conv.chat)
        if conv.chat in self._moved:
            reply_to = None  # a message of the old group: the supergroup numbers its own from 1, another one's
        thread = topic_id(conv)
        with self._sent_parts.resume(message) as done:
            for index, chunk in enumerate(chunks):
                if index < len(done):
                    continue  # delivered by an earlier attempt of this same send
                try:
                    chat, message_id = await self._send_chunk(chat, chunk, thread=thread,
                                                              reply_to=reply_to if index == 0 else None)
                except RecipientUnreachable as exc:
                    if says(REMOVED, str(exc)):  # missed `my_chat_member`: the outbox stores the removal
                        raise self._unreachable(conv.chat, str(exc)) from exc
                    raise
                await done.add(message_id, more=index + 1 < len(chunks))
                log.info("telegram.sent", bot=self.bot_name, chat=conv.chat, telegram_message_id=message_id, part=index + 1,
                         parts=len(chunks))
        return list(done)

    def render(self, message: OutboundMessage) -> list[str]:
        """The HTML messages `send` posts for `message`. In a group, one for the member that replies to none of
        theirs (an operator's) names them in front of the first, and every part leaves room for the mention."""
        member = message.conversation.member
        addressed = message.addressee is not None and not (message.reply_to and message.reply_to.isdigit())
        mention = (member, message.addressee or "") if addressed and member and member.isdigit() else None
        return render_messages(message.text, message.citations, limit=TELEGRAM_LIMIT, mention=mention,
                               sources_heading=message.sources_heading)

    async def _send_chunk(self, chat: int | str, html: str, *, thread: int | None, reply_to: int | None) -> tuple[int | str, str]:
        parse_mode: str | None = "HTML"
        text = html
        waited = 0.0
        for attempt in range(1, self.max_attempts + 1):
            try:
                sent = await self.bot.send_message(
                    chat_id=chat, text=text, parse_mode=parse_mode, message_thread_id=thread,
                    link_preview_options=LinkPreviewOptions(is_disabled=True),
                    reply_parameters=ReplyParameters(message_id=reply_to, allow_sending_without_reply=True) if reply_to else None,
                )
                return chat, str(sent.message_id)
            except TelegramRetryAfter as exc:
                # A 429 means the message was not accepted, so sending again cannot duplicate it.
                # Waited out here up to `max_retry_wait` in all; longer, the outbox waits with the
                # conversation parked, and the worker's slot serves other chats meanwhile.
                if waited + exc.retry_after > self.max_retry_wait or attempt == self.max_attempts:
                    raise rate_limited(exc) from exc
                log.warning("telegram.rate_limited", bot=self.bot_name, chat=str(chat), retry_after=exc.retry_after)
                waited += exc.retry_after
                await asyncio.sleep(exc.retry_after)
            except TelegramMigrateToChat as exc:
                # The group became a supergroup with a new id: Telegram delivered nothing, so the resend
                # there is the only copy; the conversation follows, so the next reply goes there at once.
                await self._follow_move(chat, exc.migrate_to_chat_id)
                chat, reply_to = exc.migrate_to_chat_id, None  # that id is of the old group's messages
            except TelegramBadRequest as exc:
                reason = exc.message.lower()
                if "can't parse entities" in reason and parse_mode:
                    # Our renderer should never produce this; if it does, the words still get through.
                    log.error("telegram.html_rejected", bot=self.bot_name, error=exc.message)
                    parse_mode, text = None, visible_text(html)
                elif "thread not found" in reason and thread is not None:
                    thread = None  # the topic was closed or deleted; answer in the main chat
                elif "topic_closed" in reason and thread is not None:  # not to the general chat: no one asked there
                    log.warning("telegram.topic_closed", bot=self.bot_name, chat=str(chat), thread=thread)
                    raise RecipientUnreachable(f"telegram: forum topic {thread} is closed; reopen it to answer") from exc
                elif says(UNREACHABLE, reason):
                    raise RecipientUnreachable(f"telegram: {exc.message}") from exc
                else:
                    raise ChannelSendError(f"telegram refused the message: {exc.message}", permanent=True) from exc
            except TelegramForbiddenError as exc:
                raise RecipientUnreachable(f"telegram: {exc.message}") from exc
            except TelegramServerError as exc:
                if attempt == self.max_attempts:
                    raise ChannelSendError(f"telegram server error: {exc.message}", retry_after=5.0) from exc
                await asyncio.sleep(doubling(attempt, first=0.5, cap=5.0))
            except ClientDecodeError as exc:
                if not is_error_page(exc):
                    # JSON we could not read as a Message: Telegram may well have delivered it.
                    raise ChannelSendError("telegram send outcome unknown (unreadable answer); not resent to "
                                           "avoid a duplicate", permanent=True) from exc
                # Not JSON at all: a proxy's 502/504 page, as a JSON 5xx is a server error.
                if attempt == self.max_attempts:
                    raise ChannelSendError("telegram server error (an error page, not JSON)", retry_after=5.0) from exc
                await asyncio.sleep(doubling(attempt, first=0.5, cap=5.0))
            except TelegramNetworkError as exc:
                if isinstance(exc.__cause__, aiohttp.ClientConnectorError):
                    # The connection never opened, so Telegram never saw it: safe to send again later.
                    raise ChannelSendError(f"telegram unreachable: {exc.message}", retry_after=5.0) from exc
                # A timeout or a dropped connection after the request went out: Telegram may have delivered it, and
                # sendMessage has no idempotency key, so a resend could show it twice. Fail it visibly (at most once).
                raise ChannelSendError(f"telegram send outcome unknown ({exc.message}); not resent to avoid "
                                       "a duplicate", permanent=True) from exc
            except TelegramAPIError as exc:
                raise ChannelSendError(f"telegram error: {exc.message}", permanent=True) from exc
        raise ChannelSendError("telegram: send attempts exhausted", retry_after=5.0)

    async def delete(self, conversation: ConversationRef, provider_message_id: str) -> None:
        """Delete a message this bot sent (a streamed draft the final reply no longer needs). Telegram
        lets a bot delete its own messages for 48 hours; past that, the streamer edits it instead."""
        try:
            await self.bot.delete_message(chat_id=self._chat_id(conversation.chat), message_id=int(provider_message_id))
        except TelegramRetryAfter as exc:
            raise rate_limited(exc) from exc
        except TelegramForbiddenError as exc:
            raise self._unreachable(conversation.chat, f"telegram: {exc.message}") from exc
        except (TelegramAPIError, ClientDecodeError) as exc:
            raise ChannelSendError(f"telegram refused the deletion: {exc.message}", permanent=True) from exc

    async def edit(self, conversation: ConversationRef, provider_message_id: str, text: str, *,
                   rendered: bool = False) -> None:
        """Replace a sent message's text: Markdown (streaming by edits; the caller rolls over past the limit),
        or, `rendered`, one of `render`'s messages as it is (an operator's edit: the first keeps its mention)."""
        html = text if rendered else markdown_to_html(text)
        if visible_length(html) > TELEGRAM_LIMIT:
            raise ChannelSendError("edit longer than Telegram's 4096 limit; send a new message instead", permanent=True)
        if not visible_text(html).strip():
            return
        try:
            try:
                await self._edit_text(conversation, provider_message_id, html, parse_mode="HTML")
            except TelegramBadRequest as exc:
                if "can't parse entities" not in exc.message.lower():
                    raise
                log.error("telegram.html_rejected", bot=self.bot_name, error=exc.message)  # as a send: words get through
                await self._edit_text(conversation, provider_message_id, visible_text(html), parse_mode=None)
        except TelegramRetryAfter as exc:
            # Streaming edits are disposable: report the wait and let the streamer coalesce.
            raise rate_limited(exc) from exc
        except TelegramBadRequest as exc:
            if "message is not modified" in exc.message:
                return
            raise ChannelSendError(f"telegram refused the edit: {exc.message}", permanent=True) from exc
        except TelegramForbiddenError as exc:
            raise self._unreachable(conversation.chat, f"telegram: {exc.message}") from exc
        except (TelegramAPIError, ClientDecodeError) as exc:
            raise ChannelSendError(f"telegram edit failed: {exc.message}") from exc

    async def _edit_text(self, conversation: ConversationRef, message_id: str, text: str, *, parse_mode: str | None) -> None:
        await self.bot.edit_message_text(text=text, chat_id=self._chat_id(conversation.chat), message_id=int(message_id),
                                         parse_mode=parse_mode, link_preview_options=LinkPreviewOptions(is_disabled=True))

    async def send_typing(self, conversation: ConversationRef) -> None:
        """Show "typing…" for about 5 s. Best effort: a failure here must not fail the answer."""
        thread = topic_id(conversation)
        chat = self._chat_id(conversation.chat)
        if self._typing_after.get(str(chat), 0.0) > time.monotonic():
            return  # Telegram said when to come back: asked at each refresh (4 s), each was one more refusal
        try:
            try:
                await self.bot.send_chat_action(chat_id=chat, action="typing", message_thread_id=thread)
            except TelegramMigrateToChat as exc:  # typing is what a turn sends first: it learns of it first
                await self._follow_move(chat, exc.migrate_to_chat_id)
                await self.bot.send_chat_action(chat_id=exc.migrate_to_chat_id, action="typing",
                                                message_thread_id=thread)
        except AiogramError as exc:
            if isinstance(exc, TelegramRetryAfter):
                self._typing_after = {c: t for c, t in self._typing_after.items() if t > time.monotonic()}
                self._typing_after[str(chat)] = time.monotonic() + exc.retry_after
            log.warning("telegram.typing_failed", bot=self.bot_name, chat=conversation.chat, error=str(exc)[:200])

    def _unreachable(self, chat: str, error: str) -> RecipientUnreachable:
        """Telegram's refusal of a send, edit or deletion in `chat`: `BotRemoved` when it says the bot was removed
        (kicked, blocked: `my_chat_member` missed), which the outbox stores for every replica, else unreachable."""
        if not says(REMOVED, error):
            return RecipientUnreachable(error)
        log.warning("telegram.removed_from_chat", bot=self.bot_name, chat=chat, error=error)
        return BotRemoved(error)

    def _chat_id(self, chat: str) -> int | str:
        """Where to send for a stored chat id: its new id if the group was upgraded to a supergroup."""
        return self._moved.get(chat) or chat_id_of(chat)

    async def _follow_move(self, old: int | str, new: int | str) -> None:
        """Remember the upgraded group's new id, and move its stored conversations there (through the inbox,
        as Telegram's own notice of the upgrade does). Best effort: that notice moves them too."""
        self._moved[str(old)] = new
        log.info("telegram.chat_moved", bot=self.bot_name, chat=str(old), to=str(new))
        if self._deliver is None:
            return
        try:
            await self._deliver(InboundMessage(
                channel=self.name, external_id=f"moved:{old}", conversation=ConversationRef(channel=self.name, chat=str(old)),
                sender=Sender(external_id=""), text="", moves_to=str(new)))
        except Exception as exc:  # the store is away: the reply still goes to the new id, and is not lost
            log.warning("telegram.chat_move_not_stored", bot=self.bot_name, chat=str(old), to=str(new),
                        error=f"{type(exc).__name__}: {str(exc)[:200]}")

    # Lifecycle
    async def start(self, deliver: Deliver) -> None:
        """Learn our username (for @mentions); in polling mode, start long-polling getUpdates."""
        self._deliver = deliver
        if self._identity is None and not await self._learn_username(failures=0):
            self._identity = asyncio.create_task(self._learn_username_later(), name=f"telegram-getme-{self.bot_name}")
        if self.settings.mode != "polling" or self._polling is not None:
            return
        try:
            # getUpdates is refused while a webhook is set; polling mode means we own the updates.
            await self.bot.delete_webhook(drop_pending_updates=False, request_timeout=10)
        except AiogramError as exc:
            log.warning("telegram.delete_webhook_failed", bot=self.bot_name, error=str(exc)[:200])
        self._poller = TelegramPoller(self.bot, self.parser, deliver, bot_name=self.bot_name,
                                      timeout=self.polling_timeout)
        self._polling = asyncio.create_task(self._poller.run(), name=f"telegram-polling-{self.bot_name}")
        log.info("telegram.polling_started", bot=self.bot_name)

    async def _learn_username(self, *, failures: int) -> bool:
        """Ask getMe for our username (what a group's @mentions and commands name; asked again until known, or each
        was ignored until a restart); bounded, so an unreachable Telegram cannot hold up startup. False: it failed."""
        try:
            self.parser.username = (await self.bot.get_me(request_timeout=10)).username
        except AiogramError as exc:
            if isinstance(exc, TelegramUnauthorizedError) and not failures:  # at start: no retry fixes it (`failed_channels`)
                raise ChannelSendError(f"telegram token rejected (getMe: {exc})"[:200], permanent=True) from exc
            log.warning("telegram.get_me_failed", bot=self.bot_name, error=str(exc)[:200], failures=failures + 1)
            return False
        if failures:
            log.info("telegram.username_learned", bot=self.bot_name, username=self.parser.username, failures=failures)
        return True

    async def _learn_username_later(self) -> None:
        failures = 1
        while True:
            await asyncio.sleep(doubling(failures, first=self.identity_retry_s, cap=300.0))
            if await self._learn_username(failures=failures):
                return
            failures += 1

    @property
    def connection_status(self) -> str | None:
        """Long polling, for `/readyz` (None in webhook mode: Telegram calls us). A wrong token or no route
        to Telegram showed nothing there, only `telegram.poll_failed` lines in the log."""
        if self.settings.mode != "polling":
            return None
        if self._polling is None or self._poller is None:
            return "not started"
        return self._poller.problem or ("polling" if self._poller.polled else "connecting")

    async def stop(self) -> None:
        """Stop polling (if running), and asking getMe again, and close the HTTP session."""
        if self._identity is not None:
            await cancel([self._identity])
            self._identity = None
        if self._polling is not None:
            # Safe at any point: the offset only passes stored updates, so an interrupted one comes again.
            await cancel([self._polling])
            self._polling = None
            log.info("telegram.polling_stopped", bot=self.bot_name)
        await self.bot.session.close()
