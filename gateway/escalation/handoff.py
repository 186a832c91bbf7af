"""Escalation to a human operator: the handoff state machine of a conversation.

    conversation.state:  bot ──escalate──▶ waiting ──claim──▶ operator ──resolve──▶ bot
                          │                 ◀──release──   ⟲ take over     ▲
                          └──────────── claim (never escalated) ───────▶┘
    escalation.state:          open ─────────▶ claimed ─────────▶ resolved

Every transition is a conditional UPDATE (`… WHERE state = <expected>`), so under concurrency exactly
one actor wins and the loser gets `Conflict`; each stored with who, when and why in `escalation_events`.
A claim is released by its holder (back to open) or taken over, explicitly, by another operator of the
bot, so an absent holder never strands a thread. On resolve, a customer message that came after the
operator's last reply and that nobody answered goes back to the worker, so the bot answers it.
Side effects (bus events, the Slack operator post) run after the transaction commits, through
`listeners`, so a rolled-back escalation never pings anyone. The claim transitions (claim, take over,
release) are in `gateway.escalation.claims`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import event as sa_event
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.background import cancel, settle
from gateway.errors import BadRequest, Conflict, NotFound
from gateway.escalation.claims import ClaimTransitions
from gateway.escalation.handback import answer_if_handed_back, requeue_unanswered
from gateway.escalation.records import conflict_now, hand_conversation, live_escalation, locked, record_event
from gateway.events import ESCALATIONS_TOPIC, EventBus
from gateway.models import CLIENT_ID, CLIENT_ID_RULE, as_utc, is_blank, utcnow
from gateway.operators.attachments import kinds
from gateway.operators.notices import acknowledgement_extras
from gateway.settings import Settings
from storage import repositories as repo
from storage.models import Conversation, Escalation, EscalationEvent, Message
from storage.text import storable_text

log = structlog.get_logger("gateway.escalation")

Listener = Callable[[dict[str, Any]], Awaitable[None]]
MAX_OPERATOR_TEXT = 4000
_WAIT_START = func.coalesce(Escalation.waiting_since, Escalation.created_at)  # the current wait's start


@dataclass(frozen=True, slots=True)
class SentReply:
    """An operator's reply: the stored message, and whether this call stored it (False: a repeated
    `message_id`, answered with the reply stored before, which is not sent again)."""

    message: Message
    created: bool


def reply_key(escalation_id: int, operator: str, message_id: str) -> str:
    """The reply row's `external_id` for a client's `message_id`: scoped to the escalation and the operator,
    so another thread's or another operator's "1" is a reply of its own. The operator is a digest (a name
    has no length limit), so the key stays within the column's 255 characters (at most 174)."""
    who = hashlib.sha256(operator.encode()).hexdigest()[:16]
    return f"operator:{escalation_id}:{who}:{message_id}"


class Escalations(ClaimTransitions):
    """Opens, claims, answers and resolves escalations; the one service behind every operator surface."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, settings: Settings, bus: EventBus,
                 metrics=None, outbox=None) -> None:
        self._sessions = sessions
        self._settings = settings
        self._bus = bus
        self._metrics = metrics
        self.outbox = outbox
        self.listeners: list[Listener] = []
        self._tasks: dict[asyncio.Task, dict[str, Any]] = {}  # a side effect running, and its event

    # ---- bot side: open inside the worker's transaction ---------------------------------------

    async def open_in(self, session: AsyncSession, *, conversation: Conversation, reason: str,
                      actor: str = "bot", trigger: str = "other") -> Escalation:
        """Escalate inside the caller's transaction; an already open escalation is reused. `trigger`
        names what opened it (`PipelineResult.trigger`): the log gets it and the reason's length, never
        the reason, which may be the model's words quoting the customer (operators read it in full)."""
        moved = await session.execute(
            hand_conversation(conversation.id, state="waiting", operator=None, only_from="bot"))
        if moved.rowcount != 1:
            existing = await live_escalation(session, conversation.id)
            if existing is not None:
                return existing
        conversation.state, conversation.assigned_operator = "waiting", None
        now = utcnow()
        reason = storable_text(reason)  # the model's `escalate_to_human` argument may hold a NUL
        escalation = Escalation(conversation_id=conversation.id, bot=conversation.bot, state="open",
                                reason=reason[:1000], notes=[], created_at=now)
        session.add(escalation)
        await session.flush()
        record_event(session, escalation, kind="opened", from_state="bot", to_state="waiting", actor=actor, reason=reason)
        await self._acknowledge(session, conversation=conversation)
        opened = {"escalation_id": escalation.id, "conversation_id": conversation.id, "bot": conversation.bot}

        def stored(_session) -> None:
            # Once committed: the caller's transaction may still roll back (the turn is then taken again
            # and escalates again), which logged and counted one escalation twice, the first never stored.
            log.info("escalation.opened", **opened, trigger=trigger, reason_chars=len(reason))
            if self._metrics:
                self._metrics.escalations.labels(bot=opened["bot"]).inc()

        sa_event.listen(session.sync_session, "after_commit", stored, once=True)
        self._after_commit(session, {"type": "opened", "escalation_id": escalation.id, "bot": conversation.bot,
                                     "conversation_id": conversation.id})
        return escalation

    async def _acknowledge(self, session: AsyncSession, *, conversation: Conversation) -> None:
        """One acknowledgement: added unless this turn's reply already says a person is coming."""
        bot = self._settings.bot(conversation.bot)
        last = (await session.execute(select(Message).where(
            Message.conversation_id == conversation.id, Message.direction == "out")
            .order_by(Message.id.desc()).limit(1))).scalar_one_or_none()
        already = last is not None and last.status == "pending" and _says_person_is_coming(last.text, bot)
        reply_to = last.reply_to_id if last is not None and last.status == "pending" else None
        for text in acknowledgement_extras(bot.escalation, already_acknowledged=already, now=utcnow(),
                                           replies=bot.replies):
            await repo.add_outbound(session, conversation=conversation, text=text, author="system",
                                    reply_to_id=reply_to)

    # ---- operator side ---------------------------------------------------------------------------

    def servable(self, bots: Iterable[str] | None) -> set[str]:
        """The bots whose escalations a caller allowed `bots` (`None`: every bot) may see and act on: of
        those configured now. A bot removed from the config has no settings to claim or resolve with."""
        configured = {bot.name for bot in self._settings.bots}
        return configured if bots is None else configured & set(bots)

    async def find(self, *, bots: Iterable[str] | None, state: str | None = None,
                   bot: str | None = None, limit: int = 200) -> list[Escalation]:
        """Escalations the caller may see, newest first; `bots=None` means every configured bot. Every claimed
        one (each held by a person), the `limit` open ones whose customers have waited longest, and the newest
        `limit` resolved. Cut at the newest 200 of all, a backlog (a model outage hands every conversation
        over) left out the customers who had waited longest; uncut, the console (which reads the list on every
        live event) made the server build 5,000 open escalations, 2 MB and seconds of work, for each reading.
        `counts` gives how many there are of each."""
        states = state.split(",") if state else ["open", "claimed", "resolved"]
        query = self._visible(bots, bot)
        async with self._sessions() as session:
            rows = list((await session.execute(query.where(Escalation.state == "claimed"))).scalars().all()) \
                if "claimed" in states else []
            if "open" in states:
                rows += (await session.execute(query.where(Escalation.state == "open").order_by(
                    _WAIT_START, Escalation.id).limit(limit))).scalars().all()
            if "resolved" in states:
                rows += (await session.execute(query.where(Escalation.state == "resolved").order_by(
                    Escalation.id.desc()).limit(limit))).scalars().all()
        return sorted(rows, key=lambda row: row.id, reverse=True)

    async def counts(self, *, bots: Iterable[str] | None, state: str | None = None,
                     bot: str | None = None) -> dict[str, int]:
        """How many escalations of each state in `state` (every state: None) the caller may see, `find`'s cut or not."""
        states = state.split(",") if state else ["open", "claimed", "resolved"]
        query = self._visible(bots, bot, func.count(Escalation.id), Escalation.state).where(
            Escalation.state.in_(states)).group_by(Escalation.state)
        async with self._sessions() as session:
            found = dict((name, count) for count, name in (await session.execute(query)).all())
        return {name: found.get(name, 0) for name in states}

    def _visible(self, bots: Iterable[str] | None, bot: str | None, *columns):
        """SELECT `columns` (the escalation, by default) of the escalations of the bots the caller may serve (`bot` alone)."""
        query = select(*(columns or (Escalation,))).where(Escalation.bot.in_(sorted(self.servable(bots))))
        return query.where(Escalation.bot == bot) if bot else query

    async def get(self, escalation_id: int, *, bots: Iterable[str] | None) -> Escalation:
        """One escalation; NotFound when it does not exist or belongs to a bot the caller may not serve
        (or one no longer configured)."""
        async with self._sessions() as session:
            escalation = await session.get(Escalation, escalation_id)
        if escalation is None or escalation.bot not in self.servable(bots):
            raise NotFound(f"no escalation {escalation_id}")
        return escalation

    async def events(self, escalation_id: int) -> list[EscalationEvent]:
        """The stored transitions and notes of an escalation, oldest first."""
        async with self._sessions() as session:
            return list((await session.execute(select(EscalationEvent).where(
                EscalationEvent.escalation_id == escalation_id).order_by(EscalationEvent.id))).scalars().all())

    async def reply(self, escalation_id: int, *, operator: str, text: str, bots: Iterable[str] | None,
                    source: str = "api", message_id: str | None = None) -> Message:
        """Send the operator's message to the customer on their own channel (claims an open escalation);
        the stored message (see `send_reply` for `message_id`)."""
        return (await self.send_reply(escalation_id, operator=operator, text=text, bots=bots, source=source,
                                      message_id=message_id)).message

    async def send_reply(self, escalation_id: int, *, operator: str, text: str, bots: Iterable[str] | None,
                         source: str = "api", message_id: str | None = None) -> SentReply:
        """`reply`, telling a new reply from a repeated one.

        `message_id` is the client's idempotency key (as in the web chat): the reply is stored under
        `reply_key`, and a repeat of it returns the stored reply, sent once, whatever the thread's state is
        now; the same id with another text is a Conflict. Two requests racing with one id may both pass
        the lookup: the unique delivery key (`uq_messages_delivery`) lets one insert in, the other returns
        that row. Without `message_id` every call is a new reply."""
        text = storable_text((text or "").strip())  # NUL would be refused by PostgreSQL: a 500
        if is_blank(text):  # zero-width characters alone too, as the web chat refuses them: nothing to read
            raise BadRequest("text must not be empty")
        if len(text) > MAX_OPERATOR_TEXT:
            raise BadRequest(f"text is longer than {MAX_OPERATOR_TEXT} characters")
        if message_id is not None and not CLIENT_ID.fullmatch(message_id):
            raise BadRequest(f"message_id must be {CLIENT_ID_RULE}")
        escalation = await self.get(escalation_id, bots=bots)
        key = reply_key(escalation_id, operator, message_id) if message_id is not None else None
        if key is not None and (stored := await self._stored_reply(escalation.conversation_id, key)) is not None:
            return _repeated(stored, text=text, message_id=message_id)
        if escalation.state == "open":
            escalation = await self.claim(escalation_id, operator=operator, bots=bots, reason="replied")
        if escalation.state != "claimed" or escalation.operator != operator:
            async with self._sessions() as session:
                raise await conflict_now(session, escalation)
        conversation_id = escalation.conversation_id
        try:
            async with self._sessions() as session, session.begin():
                # Checked again under a row lock: a take-over between the check above and this insert must
                # not let the previous holder's reply through.
                current = await session.get(Escalation, escalation_id, with_for_update=True)
                if current is None or current.state != "claimed" or current.operator != operator:
                    raise await conflict_now(session, current)
                # Its conversation as of the lock: a chat's move may have merged the one read above away.
                # (A plain id: the row itself is expired when the insert below fails and rolls back.)
                conversation_id = current.conversation_id
                conversation = await session.get(Conversation, conversation_id)
                message = await repo.add_outbound(session, conversation=conversation, text=text, author="operator",
                                                  external_id=key)
                message.meta = {"operator": operator, "escalation_id": escalation_id}
        except IntegrityError:
            # A concurrent request with the same key stored it first: answer with that reply, send nothing.
            stored = await self._stored_reply(conversation_id, key) if key is not None else None
            if stored is None:
                raise
            return _repeated(stored, text=text, message_id=message_id)
        log.info("escalation.reply", escalation_id=escalation_id, conversation_id=conversation_id,
                 operator=operator, bot=escalation.bot, message_id=message.id)
        await self._deliver(message.id)
        await self.emit({"type": "reply", "escalation_id": escalation_id, "bot": escalation.bot,
                          "conversation_id": conversation_id, "operator": operator, "text": text,
                         "source": source})
        return SentReply(message=message, created=True)

    async def _stored_reply(self, conversation_id: int, key: str) -> Message | None:
        """The reply stored under an idempotency key in the escalation's conversation, as it is now."""
        async with self._sessions() as session:
            conversation = await session.get(Conversation, conversation_id)
            return await repo.outbound_by_external_id(session, conversation=conversation, external_id=key)

    async def resolve(self, escalation_id: int, *, operator: str, bots: Iterable[str] | None,
                      reason: str = "") -> Escalation:
        """open|claimed → resolved, conversation → bot; the customer is told the bot is back. Repeated by who
        resolved it, while the customer has not asked for a person again since, it returns the escalation."""
        escalation = await self.get(escalation_id, bots=bots)
        async with self._sessions() as session, session.begin():
            now = utcnow()
            done = await session.execute(
                update(Escalation).where(
                    Escalation.id == escalation_id, Escalation.state.in_(("open", "claimed")),
                    (Escalation.operator.is_(None)) | (Escalation.operator == operator),
                ).values(state="resolved", resolved_at=now, operator=operator)
                .execution_options(synchronize_session=False))
            if done.rowcount != 1:
                current = await session.get(Escalation, escalation_id)
                if current is not None and current.state == "resolved" and current.operator == operator \
                        and await live_escalation(session, current.conversation_id) is None:
                    # A retried hand-back (no answer came, a double press) by who made it: done already, as a
                    # claim retried by its holder is. Once the customer asked again, it says where they are.
                    return current
                raise await conflict_now(session, current)
            escalation = await locked(session, escalation_id)
            conversation = await session.get(Conversation, escalation.conversation_id)
            from_state = conversation.state
            conversation.state, conversation.assigned_operator, conversation.unanswered_turns = "bot", None, 0
            record_event(session, escalation, kind="resolved", from_state=from_state, to_state="bot", actor=operator,
                    reason=reason)
            words = self._settings.bot(escalation.bot).escalation
            # Nobody ever joined (no claim, ever): "Our team has handed this conversation back" would not be true.
            joined = from_state == "operator" or (await session.execute(select(EscalationEvent.id).where(
                EscalationEvent.escalation_id == escalation_id, EscalationEvent.kind == "claimed").limit(1))).first()
            said = words.resolved_message if joined else words.resolved_unclaimed_message
            notice = await repo.add_outbound(session, conversation=conversation, author="system", text=said) \
                if said.strip() else None  # "" says nothing, as for claimed_message
            # Stored before the hand-back and answered by nobody: the bot answers it now (the worker polls).
            requeued = await requeue_unanswered(session, conversation_id=conversation.id, since=escalation.created_at)
            self._after_commit(session, {"type": "resolved", "escalation_id": escalation_id, "bot": escalation.bot,
                                         "conversation_id": escalation.conversation_id, "operator": operator})
        if self._metrics:
            self._metrics.observe_resolve(escalation.bot, (now - as_utc(escalation.created_at)).total_seconds())
        log.info("escalation.resolved", escalation_id=escalation_id, conversation_id=escalation.conversation_id,
                 operator=operator, bot=escalation.bot, requeued_message_id=requeued)
        if notice is not None:
            await self._deliver(notice.id)
        return await self.get(escalation_id, bots=None)

    async def add_note(self, escalation_id: int, *, operator: str, text: str,
                       bots: Iterable[str] | None) -> dict[str, Any]:
        """An internal note for other operators; never sent to the customer."""
        text = storable_text((text or "").strip())  # NUL would be refused by PostgreSQL: a 500
        if is_blank(text) or len(text) > MAX_OPERATOR_TEXT:
            raise BadRequest(f"a note needs 1 to {MAX_OPERATOR_TEXT} characters")
        escalation = await self.get(escalation_id, bots=bots)
        note = {"author": operator, "text": text, "at": utcnow().isoformat()}
        async with self._sessions() as session, session.begin():
            row = (await session.execute(select(Escalation).where(Escalation.id == escalation_id)
                                         .with_for_update())).scalar_one()
            row.notes = [*(row.notes or []), note]
            record_event(session, escalation, kind="note", actor=operator, reason=text)
            self._after_commit(session, {"type": "note", "escalation_id": escalation_id, "bot": escalation.bot,
                                         "conversation_id": escalation.conversation_id, "operator": operator})
        return note

    async def customer_message(self, message_id: int) -> None:
        """A customer's message while a person holds the thread: tell every operator surface. When
        the thread was handed back while it was being held (nobody answered it), the bot answers it."""
        async with self._sessions() as session:
            message = await session.get(Message, message_id)
            escalation = await live_escalation(session, message.conversation_id) if message else None
        if escalation is None:
            if message is not None:
                await answer_if_handed_back(self._sessions, message)
            return
        await self.emit({"type": "customer_message", "escalation_id": escalation.id, "bot": escalation.bot,
                          "conversation_id": escalation.conversation_id, "message_id": message_id,
                          "text": message.text, "attachments": kinds(message.attachments)})

    # ---- plumbing -------------------------------------------------------------------------------

    async def _deliver(self, message_id: int) -> None:
        if self.outbox is not None:
            await self.outbox.deliver(message_id)

    def _after_commit(self, session: AsyncSession, event: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()

        def fire(_session) -> None:
            loop.call_soon(self._spawn, event)

        sa_event.listen(session.sync_session, "after_commit", fire, once=True)

    def _spawn(self, event: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self.emit(event))
        self._tasks[task] = event
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    async def emit(self, event: dict[str, Any]) -> None:
        """Publish on the bus, then let each listener (e.g. the Slack operator channel) react."""
        self._bus.publish(ESCALATIONS_TOPIC, event)
        for listener in list(self.listeners):
            try:
                await listener(event)
            except Exception:  # one broken surface must not silence the others
                log.exception("escalation.listener_failed", escalation_id=event.get("escalation_id"))

    async def drain(self, *, timeout: float | None = None) -> None:
        """Wait for pending side effects (tests and shutdown). With `timeout`, what is still running
        then is cancelled and logged: a hanging operator-channel post held the shutdown past its bound
        (a header not posted is posted by `post_missing_headers` after the restart)."""
        if pending := {task: self._tasks[task] for task in await settle(self._tasks, timeout=timeout)}:
            await cancel(pending)
            log.warning("escalation.side_effects_abandoned", count=len(pending), wait_s=timeout,
                        events=[f"{e.get('type')}:{e.get('escalation_id')}" for e in pending.values()])


def _repeated(stored: Message, *, text: str, message_id: str | None) -> SentReply:
    """A repeated `message_id`: the reply stored under it, or a Conflict when that reply said something else."""
    if stored.text != text:
        raise Conflict(f"message_id {message_id!r} was already used for another reply (message {stored.id}); "
                       "send a new reply with a new message_id")
    log.info("escalation.reply_repeated", message_id=stored.id, status=stored.status)
    return SentReply(message=stored, created=False)


def _says_person_is_coming(text: str, bot) -> bool:
    from gateway.pipeline.core import person_promises

    return text.strip() in {bot.escalation.acknowledgement.strip(), *person_promises(bot)}
