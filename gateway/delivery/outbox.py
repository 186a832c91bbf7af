"""The outbox: replies are stored first, then sent through their channel and marked sent or failed.

A send that fails for a reason that may pass (a rate limit, a 5xx, a network error) is retried with
backoff: the reply stays `pending` with `meta.next_attempt_at`, and `deliver` returns "retry". The
worker then parks the conversation until that time, so later replies never overtake it. The parts of a
split reply that went through before the failure are stored with it (`meta.delivered_parts`, their
platform ids) and handed to the next attempt (`OutboundMessage.delivered_parts`), so it resumes after
them even in a new process: the customer never gets part 1 twice, and its id is recorded with the
reply's others, where its delivery receipt finds it. A rate limit is no failed attempt: it is waited out,
up to `max_wait_s` after its first rate limit. After `max_attempts`, that wait, or a permanent error, the
reply is marked failed and surfaced: a warning log, `gateway_send_failures_total` (via
`Metrics.message_out`), and the message's `error` with its reason.

WhatsApp's 24-hour window is checked here (`window.py`), because only the gateway knows when the contact last
wrote to the reply's bot (its business number's window): outside it, the configured Content template is sent instead (its conversation marked: the text follows the
customer's next message), or the reply fails visibly. A reply WhatsApp refused later as outside the window
(a 63016 receipt, `gateway/delivery/receipts.py`) comes back with `meta.window_closed`, treated the same.

While a send is in flight its row is `sending`, and its `updated_at` is refreshed every `heartbeat_s`.
Why: a `sending` row that has not moved for two lease periods is taken for a dead replica's and
requeued (`Worker._requeue_stalled_sends`, `recover`). A send that waits on the platform (Telegram's
flood wait, a slow API) is alive, and an escalation or operator message is sent outside any
conversation lease, so without the heartbeat it would be requeued and sent a second time.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta

import structlog
from opentelemetry.trace import SpanKind
from sqlalchemy import false, null, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased
from sqlalchemy.orm.attributes import set_committed_value

from channels.base import ChannelAdapter
from channels.sent_parts import record_landed
from gateway.backoff import doubling
from gateway.delivery.heartbeat import sending_heartbeat
from gateway.delivery.receipts import adopt_early_receipts
from gateway.delivery.record import record_outcome
from gateway.delivery.send_breaker import SendBreaker
from gateway.delivery.streaming import remove_leftovers
from gateway.delivery.window import (
    OUTSIDE_WINDOW,
    OutsideWindow,
    RefusedHere,
    confirms_opt_out,
    last_written_to_bot,
    send_within_window,
)
from gateway.errors import BotRemoved, ChannelError, ChannelSendError, RecipientOptedOut, RecipientUnreachable
from gateway.events import ESCALATIONS_TOPIC, EventBus, conversation_topic
from gateway.models import SOURCES_HEADING, Citation, ConversationRef, OutboundMessage, as_utc, utcnow
from gateway.observability import otel
from gateway.observability.logs import redact
from storage import repositories as repo
from storage.meta_keys import merged_meta, set_meta_key
from storage.models import Contact, Conversation, Escalation, Message, RemovedChat
from storage.opt_outs import with_opt_out
from storage.removed_chats import removed_from_its_chat, still_removed

log = structlog.get_logger("gateway.outbox")

MIN_RATE_LIMIT_WAIT_S = 1.0  # the shortest wait for a rate-limited send, whatever the platform said
HEARTBEAT_S = 10.0
"""How often an in-flight send refreshes its row; well under the two lease periods (60 s by default)
after which a `sending` row counts as a dead replica's."""
MAX_WAIT_S = 3600.0
"""A reply still rate limited this long after its first rate limit fails (`rate_limited_too_long`): a bot the platform
keeps limiting must not queue its replies forever, and rate limits do not use up `max_attempts`."""
RETRYING = ("retry", "deferred")
"""`deliver` results that leave the reply pending for a later attempt."""


def next_attempt_at(message: Message) -> datetime | None:
    """When a reply waiting for a retry may be sent again (None: now)."""
    value = (message.meta or {}).get("next_attempt_at")
    return datetime.fromisoformat(value) if value else None


def _sent_ids(exc: Exception) -> list[str]:
    """The platform ids of the parts a failed send delivered (adapters set `sent_ids`)."""
    return [str(p) for p in getattr(exc, "sent_ids", None) or []]


def _merged(earlier: list[str], current: list[str]) -> list[str]:
    """`earlier` parts, then `current` ones not among them, in order (an adapter that resumed returns both)."""
    return list(dict.fromkeys([*earlier, *(str(p) for p in current)]))


class Outbox:
    """Sends stored replies. `adapters` maps (bot, channel) to the adapter that delivers there."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, adapters: Mapping[tuple[str, str], ChannelAdapter],
                 bus: EventBus, metrics=None, max_attempts: int = 10, backoff_s: float = 2.0,
                 max_backoff_s: float = 300.0, max_platform_wait_s: float = 3600.0, max_wait_s: float = MAX_WAIT_S,
                 heartbeat_s: float = HEARTBEAT_S, breaker: SendBreaker | None = None,
                 sources_headings: Mapping[str, str] | None = None) -> None:
        self._sessions = sessions
        self._sources_headings = sources_headings or {}  # bot name -> its `replies.sources_heading`
        self._breaker = breaker or SendBreaker()
        self._adapters = adapters
        self._bus = bus
        self._metrics = metrics
        # Where an operator's failed reply is told: `Escalations.emit` once wired (services.py), so the
        # Slack operator thread hears of it as well as the consoles; the bus alone until then.
        self.tell_escalation: Callable[[dict], Awaitable[None]] | None = None
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_platform_wait_s = max_platform_wait_s  # the longest `retry_after` a platform may impose
        self.max_wait_s = max_wait_s
        self.heartbeat_s = heartbeat_s

    async def deliver(self, message_id: int, *,
                      via: Callable[[OutboundMessage], Awaitable[list[str]]] | None = None) -> str:
        """Send one pending reply. Returns sent, failed, retry (failed now, will be retried),
        deferred (its retry time has not come), or skipped. Safe to call twice: only one caller sends.

        `via` replaces `adapter.send` for this attempt only (gateway/delivery/streaming.py: the reply was
        streamed, so it is edited into place); its errors are handled like the adapter's."""
        async with self._sessions() as session, session.begin():
            message = await session.get(Message, message_id)
            if message is None or message.status != "pending":
                return "skipped"
            due = next_attempt_at(message)
            if due is not None and due > utcnow():
                return "deferred"
            paused_until = self._breaker.paused_until(message.bot, message.channel)
            if paused_until is not None:
                # Its platform is down (`send_breaker`): rescheduled without an attempt, so the worker
                # parks the conversation until then instead of waiting on the platform's timeouts.
                # The key merged into the row as it stands: what an attempt settled since the read (its landed parts)
                # stays.
                await session.execute(
                    update(Message).where(Message.id == message_id, Message.status == "pending")
                    .values(meta=merged_meta(session.bind.dialect.name, {"next_attempt_at": paused_until.isoformat()}))
                    .execution_options(synchronize_session=False))
                return "deferred"
            claimed = (await session.execute(
                update(Message).where(Message.id == message_id, Message.status == "pending")
                .values(status="sending", attempts=Message.attempts + 1, updated_at=utcnow())
                # `meta` too: another caller's attempt may have settled since the read (its delivered parts).
                .returning(Message.status, Message.attempts, Message.updated_at, Message.meta)
                .execution_options(synchronize_session=False)
            )).one_or_none()
            if claimed is None:
                return "skipped"
            for key, value in claimed._mapping.items():  # the claimed row, as a refresh would read it
                set_committed_value(message, key, value)
            # The conversation, its contact and their STOP to its bot, the message replied to, its chat's removal
            # mark, when the customer last wrote to its bot (WhatsApp's window, no other channel's): one round trip.
            inbound_row = aliased(Message)
            wrote = last_written_to_bot() if message.channel == "whatsapp" else null()
            conversation, contact, inbound, removed_at, wrote_at, opted_out_at = (await session.execute(with_opt_out(
                select(Conversation, Contact, inbound_row, RemovedChat.removed_at, wrote)
                .where(Conversation.id == message.conversation_id)
                .outerjoin(Contact, Contact.id == Conversation.contact_id)
                .outerjoin(RemovedChat, removed_from_its_chat())
                .outerjoin(inbound_row, inbound_row.id == message.reply_to_id if message.reply_to_id else false()),
                bot=Conversation.bot, contact_id=Contact.id))).one()
        # `reply_to` is the customer's message: grepping its id finds the send too.
        bound = log.bind(message_id=message.id, reply_to=message.reply_to_id, conversation_id=conversation.id,
                         bot=message.bot, channel=message.channel, attempt=message.attempts)
        adapter = self._adapters.get((message.bot, message.channel))
        status, error, reason, provider_ids, meta = "sent", None, None, [], dict(message.meta or {})
        opted_out = False  # the platform says the contact opted out (a STOP that never reached us)
        removed = False  # the platform says the bot was removed from the chat (a `my_chat_member` missed)
        attempted_at = utcnow()  # a removal it tells is dated so: a question asked since is the bot's, back
        meta.pop("next_attempt_at", None)
        # Parts an earlier attempt delivered (module docstring); kept in `meta` only while a retry is due.
        delivered = [str(p) for p in meta.pop("delivered_parts", None) or []]
        if adapter is None:
            status, reason = "failed", "no_adapter"
            error = f"channel {message.channel!r} is not enabled for bot {message.bot!r}"
        else:
            reply_to = (inbound.meta or {}).get("platform_message_id") if inbound is not None else None
            outbound = OutboundMessage(
                conversation=ConversationRef(channel=conversation.channel, workspace=conversation.workspace,
                                             chat=conversation.chat, thread=conversation.thread),
                text=message.text,
                reply_to=reply_to,
                addressee=(contact.display_name if contact is not None else "") if reply_to is None else None,
                citations=tuple(Citation(source=c.get("source", ""), title=c.get("title", ""), url=c.get("url"))
                                for c in message.citations or []),
                idempotency_key=f"m{message.id}", attempt=message.attempts,
                delivered_parts=tuple(delivered),
                sources_heading=self._sources_headings.get(message.bot, SOURCES_HEADING),
                interaction=(inbound.meta or {}).get("interaction") if reply_to is not None else None,  # Discord's /ask
            )
            try:
                async with sending_heartbeat(self._sessions, message.id, every_s=self.heartbeat_s, bound=bound):
                    with otel.span("outbox.send", kind=SpanKind.PRODUCER, attributes={
                            "gateway.message_id": message.id, "gateway.channel": message.channel,
                            "gateway.attempt": message.attempts}):
                        if via is not None:
                            provider_ids, template = list(await via(outbound)), None
                        else:
                            await self._remove_streamed(adapter, outbound, inbound)
                            # A kill between two parts must not send the first again (channels/sent_parts.py).
                            recording = record_landed.set(
                                lambda landed: self._record_landed(message.id, meta, _merged(delivered, landed), bound))
                            try:
                                provider_ids, template = await send_within_window(
                                    adapter, outbound, last_inbound_at=wrote_at,
                                    window_closed="window_closed" in meta,
                                    opted_out_at=None if confirms_opt_out(message) else opted_out_at,
                                    removed_at=still_removed(removed_at, heard_at=inbound and (inbound.sent_at or inbound.created_at)))
                            finally:
                                record_landed.reset(recording)
                if template:
                    meta["template"] = template
                    bound.info("outbound.template_sent", content_sid=template, reason=OUTSIDE_WINDOW)
            except OutsideWindow as exc:
                self._breaker.released(message.bot, message.channel)
                status, reason, error = "failed", "outside_window", f"undeliverable: {exc}"
            except RecipientUnreachable as exc:
                # Refused here, the platform was not asked: that says nothing of whether it is back.
                (self._breaker.released if isinstance(exc, RefusedHere) else self._breaker.reached)(
                    message.bot, message.channel)
                opted_out = isinstance(exc, RecipientOptedOut) and contact is not None and opted_out_at is None
                removed = isinstance(exc, BotRemoved)  # told anew: a mark from before is dated from now on
                provider_ids = _sent_ids(exc)
                status, reason, error = "failed", "unreachable", f"recipient unreachable: {exc}"
            except ChannelSendError as exc:
                provider_ids = _sent_ids(exc)
                if not exc.permanent and not exc.rate_limited:
                    self._breaker.failed(message.bot, message.channel, error=str(exc)[:200])
                else:  # a refusal or a rate limit: the platform is there and answering
                    self._breaker.reached(message.bot, message.channel)
                # A rate limit is the platform saying "later", not a failed attempt: it counts against the
                # time a reply may wait (`max_wait_s`), not `max_attempts`, so a 13-minute limit delays it.
                # Measured from its first rate limit, not from when it was stored: a reply held meanwhile
                # (a parked conversation, a paused channel, an operator's) was not waiting on the platform.
                rate_limits = int(meta.get("rate_limits", 0)) + (1 if exc.rate_limited else 0)
                if exc.rate_limited:
                    meta.setdefault("rate_limited_since", utcnow().isoformat())
                else:  # the streak of rate limits is over: a later one waits anew
                    meta.pop("rate_limited_since", None)
                failures = message.attempts - rate_limits
                waited = utcnow() - as_utc(datetime.fromisoformat(meta.get("rate_limited_since", utcnow().isoformat())))
                if exc.permanent:
                    status, reason, error = "failed", "permanent", f"send failed: {exc}"
                elif exc.rate_limited and waited.total_seconds() >= self.max_wait_s:
                    status, reason = "failed", "rate_limited_too_long"
                    error = f"still rate limited {int(waited.total_seconds())}s after its first rate limit: {exc}"
                elif not exc.rate_limited and failures >= self.max_attempts:
                    status, reason = "failed", "attempts_exhausted"
                    error = f"send failed after {failures} attempts: {exc}"
                else:
                    # Each kind of wait counts its own tries: rate limits did not double the back-off of a
                    # later outage, and an outage did not lengthen a platform's "retry after 20 s".
                    delay = self._backoff(rate_limits if exc.rate_limited else failures, exc.retry_after,
                                          rate_limited=exc.rate_limited)
                    status, meta["rate_limits"] = "retry", rate_limits
                    done = "rate limited" if exc.rate_limited else f"attempt {failures}/{self.max_attempts} failed"
                    error = f"{done}, retrying in {delay:g}s: {exc}"
                    meta["next_attempt_at"] = (utcnow() + timedelta(seconds=delay)).isoformat()
                    # Stored in the same UPDATE that schedules the retry. Not after a failed `via`: the
                    # streamer's ids are of streamed messages it blanks, not parts of a whole send.
                    landed = _merged(delivered, provider_ids) if via is None else delivered
                    if landed:
                        meta["delivered_parts"] = landed
            except ChannelError as exc:
                status, reason, error = "failed", "channel_error", f"channel error: {exc}"
            except Exception as exc:  # an adapter bug must not leave the reply in limbo
                bound.exception("outbound.adapter_crashed")
                status, reason, error = "failed", "adapter_error", f"adapter error: {type(exc).__name__}"
        # A platform's or a library's words may quote what they were sent with (Telegram's API URL holds the bot's
        # token): stored, shown to operators (console, `reply_failed`) and logged redacted.
        error = redact(error) if error else error
        if status != "retry":
            # The reply is settled: every part that reached the customer, this attempt's and earlier ones'.
            provider_ids = _merged(delivered, provider_ids)
        # The platform has the outcome now: recorded through a database blip (`record.py`).
        await record_outcome(self._sessions, message, chat=conversation.chat, status=status, error=error, meta=meta,
                             provider_ids=provider_ids, removed_at=removed_at,
                             opted_out_contact=contact.id if opted_out else None,
                             removed_since=attempted_at if removed else None, bound=bound)
        if status == "sent":
            self._breaker.reached(message.bot, message.channel)
            bound.info("outbound.sent", provider_ids=provider_ids)
            if adapter is not None and adapter.capabilities.delivery_receipts:
                # A receipt that raced ahead of this record was parked; adopt it now that both are committed.
                await adopt_early_receipts(self._sessions, bot=message.bot, channel=message.channel,
                                           provider_ids=[str(p) for p in provider_ids])
        elif status == "retry":
            bound.warning("outbound.retry_scheduled", error=error, next_attempt_at=meta["next_attempt_at"])
        else:
            # Surfaced three ways: this log line, the failure counter, and the message's error.
            bound.warning("outbound.failed", error=error, reason=reason, delivered_parts=provider_ids)
            if message.author == "operator":
                await self._tell_operators(message, error=error)
        if self._metrics:
            self._metrics.message_out(bot=message.bot, channel=message.channel, status=status)
        self._bus.publish(conversation_topic(conversation.id), {"type": "message", "status": status})
        return status

    async def _tell_operators(self, message: Message, *, error: str | None) -> None:
        """An operator's reply that failed after a retry (its API call had answered `pending`): the
        console showed "Not delivered" only when something else refreshed it. Best effort."""
        # The escalation it was written in: the conversation's newest may be a later one (the reply's retry
        # outlasted a hand-back, the customer asked again), whose thread nobody wrote it in.
        escalation_id = (message.meta or {}).get("escalation_id")
        try:
            if not isinstance(escalation_id, int):  # a reply stored before its escalation was recorded with it
                async with self._sessions() as session:
                    escalation_id = (await session.execute(
                        select(Escalation.id).where(Escalation.conversation_id == message.conversation_id)
                        .order_by(Escalation.id.desc()).limit(1))).scalar_one_or_none()
        except (DBAPIError, OSError):
            return
        if escalation_id is None:
            return
        event = {"type": "reply_failed", "escalation_id": escalation_id, "bot": message.bot,
                 "conversation_id": message.conversation_id, "message_id": message.id, "error": error,
                 "operator": (message.meta or {}).get("operator", ""), "text": message.text}
        if self.tell_escalation is None:
            self._bus.publish(ESCALATIONS_TOPIC, event)
        else:
            await self.tell_escalation(event)

    async def _record_landed(self, message_id: int, meta: dict, landed: list[str], bound) -> None:
        """Store the parts of a reply in flight that landed so far, where a requeued attempt resumes after
        them (`meta.delivered_parts`). Best effort: a database blip must not fail the send."""
        try:
            async with self._sessions() as session, session.begin():
                await session.execute(
                    update(Message).where(Message.id == message_id, Message.status == "sending")
                    .values(meta={**meta, "delivered_parts": landed}).execution_options(synchronize_session=False))
        except (DBAPIError, OSError) as exc:
            bound.warning("outbound.parts_not_saved", provider_ids=landed, error=type(exc).__name__)

    def _backoff(self, attempt: int, retry_after: float | None, *, rate_limited: bool = False) -> float:
        """Exponential up to `max_backoff_s`, and never sooner than the platform's own wait (up to an hour).

        With the defaults, 10 attempts span about 13 minutes: a platform outage of that length delays the
        reply rather than losing it. Why the platform's wait may pass `max_backoff_s`: a send retried before
        a long flood wait ends (Telegram can ask for many minutes) is refused again and only uses up the
        attempts. Why it is only a floor for other failures: an adapter's fixed wait for a 5xx (5 s) would
        spend every attempt within half a minute. A rate limit's `retry_after` is the schedule itself: the
        platform said when it takes the send again, and doubling past that only delays the reply."""
        if retry_after is not None and math.isnan(retry_after):  # no wait named: max() and min() would keep NaN
            retry_after = None
        platform_wait = None if retry_after is None else min(
            max(retry_after, 0.0), max(self.max_backoff_s, self.max_platform_wait_s))
        if rate_limited and platform_wait is not None:  # at least a second: "0" was a retry at once, over and over
            return round(max(platform_wait, MIN_RATE_LIMIT_WAIT_S), 3)
        wait = doubling(attempt, first=self.backoff_s, cap=self.max_backoff_s)
        return round(wait if platform_wait is None else max(wait, platform_wait), 3)

    async def _remove_streamed(self, adapter, outbound: OutboundMessage, inbound: Message | None) -> None:
        """Sent whole (not edited into place), a reply must not leave what was streamed for it in the
        chat: a process that died between storing the reply and its final edit left it there."""
        leftover = (inbound.meta or {}).get("streamed") if inbound is not None else None
        if not leftover or not getattr(adapter.capabilities, "edits", False):
            return
        await remove_leftovers(adapter, outbound.conversation, [str(i) for i in leftover],
                               interaction=outbound.interaction)
        # The key alone, merged into the row as it stands: the whole `meta` read before the platform's calls undid
        # a change committed meanwhile (a chat move dropping its quote, `storage.chat_moves`).
        async with self._sessions() as session, session.begin():
            meta = await set_meta_key(session, message_id=inbound.id, key="streamed", value=[])
        inbound.meta = meta if meta is not None else {**inbound.meta, "streamed": []}

    async def recover(self, *, older_than_s: float = 120.0) -> int:
        """Requeue replies left in `sending` by a crash. Delivery is at-least-once only for this window: a
        process killed after the platform accepted the send but before we recorded it may send that one again."""
        async with self._sessions() as session, session.begin():
            requeued = await repo.requeue_sends_after_crash(session, now=utcnow(),
                                                            older_than=timedelta(seconds=older_than_s))
        if requeued:
            log.warning("outbound.requeued_after_crash", count=requeued)
        return requeued

