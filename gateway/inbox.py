"""The durable inbox: every inbound message is stored before its webhook or API call returns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.burst import BURST_OWNER
from gateway.edits_meanwhile import TAKEN_BACK
from gateway.models import ConversationRef, InboundMessage
from gateway.observability import otel
from gateway.pg_bridge import announce
from storage import message_meta
from storage import repositories as repo
from storage.chat_moves import move_chat, unfinished_moves
from storage.conflicts import run_again_on_conflict
from storage.forgotten import MessageForgotten, was_forgotten
from storage.message_meta import first_stored_edit_key
from storage.meta_keys import merged_meta, stored_revision_before
from storage.models import Conversation, Message
from storage.removed_chats import mark_removed
from storage.text import storable_text

HELD_STATES = ("waiting", "operator")
"""A conversation's states while it is a person's: asked for, or taken."""

log = structlog.get_logger("gateway.inbox")

ID_MAX_CHARS = 255
"""The longest id the store holds (VARCHAR(255)): a message's delivery id, a conversation's chat, thread and
workspace, a sender's id. Platform ids are far shorter; a longer one is no platform's."""


def logged_id(message: InboundMessage) -> str:
    """`message.external_id` as logged. A web chat's is `<session_id>/<message_id>` (`gateway.http.webchat`), and a
    session id reads the visitor's transcript and writes as them (README: Tools): it is masked, `…/m-1`."""
    if message.channel == "web" and "/" in message.external_id:
        return "…/" + message.external_id.split("/", 1)[1]
    return message.external_id


class UnstorableMessage(ValueError):
    """A message whose ids the store cannot hold (`overlong_id`): unusable, not a database outage."""


def overlong_id(message: InboundMessage) -> str | None:
    """Which id of `message` is longer than `ID_MAX_CHARS`, said as a reason, or None. Stored as it came, one
    failed the insert on PostgreSQL (a 500 the platform retried for ever; SQLite kept it whole), and Telegram
    polling, taking the database's error for an outage, fetched that update again and again, the later ones
    queued behind it. Webhooks answer it with 400 (`gateway.http.webhooks`), the inbox refuses it too."""
    ref = message.conversation
    fields = {"id": message.external_id, "chat": ref.chat, "thread": ref.thread, "workspace": ref.workspace,
              "sender": message.sender.external_id}
    if message.revises is not None and message.new_if_never_stored and isinstance(ref.chat, str):
        # Stored, when the message it edits never was, under `edit-of:{chat}:{its id}` (`Inbox._revise`): longer
        # than the chat id, so a chat of 240 characters passed and that key failed the insert on PostgreSQL.
        fields["edit's id"] = first_stored_edit_key(ref.chat, str(message.revises))
    return next((f"{name} is {len(value)} characters, longer than the {ID_MAX_CHARS} an id may have"
                 for name, value in fields.items() if isinstance(value, str) and len(value) > ID_MAX_CHARS), None)


def storable(message: InboundMessage) -> InboundMessage:
    """The message as the database can store it: `storable_text` applied to every string field,
    nested ones too (the raw payload is not stored). NUL and lone surrogates are valid JSON, and the
    insert failed on them with a 500 that the platform retried forever."""
    return _storable(message)


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, tuple):
        return tuple(_storable(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _storable(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name != "raw"}
        changed = {k: v for k, v in changes.items() if v is not getattr(value, k)}
        return dataclasses.replace(value, **changed) if changed else value
    return value


def _newer(edit: InboundMessage, meta: dict[str, Any] | None) -> bool:
    """Whether `edit` comes after the edit the message's text is from (`meta.revision`); true where the
    platform does not order its edits."""
    applied = (meta or {}).get("revision")
    if edit.revision is None:
        return True
    if isinstance(applied, int):  # stored before edits were ordered by their date too: a Telegram update id
        return edit.revision[-1] > applied
    return not isinstance(applied, list) or tuple(edit.revision) > tuple(applied)


def _revision(edit: InboundMessage) -> dict[str, Any]:
    """The `meta.revision` of a message whose text is now `edit`'s."""
    return {"revision": list(edit.revision)} if edit.revision is not None else {}


def _revised(bot: str, revision: InboundMessage, *columns):
    """SELECT `columns` of the inbound message(s) of `bot` that `revision` revises: in its channel and chat, by its
    `meta.platform_message_id` (the platform's message id, unique per chat only)."""
    return select(*columns).join(Conversation, Message.conversation_id == Conversation.id).where(
        Message.bot == bot, Message.channel == revision.channel, Message.direction == "in",
        Conversation.chat == revision.conversation.chat,
        Message.meta["platform_message_id"].as_string() == revision.revises)


def _answered_place_moved(dialect: str, bot: str, move: InboundMessage):
    """The UPDATE … RETURNING id that moves the place of `move`'s message when it is answered (not pending) and
    holds an older revision: what `Inbox._move_place` writes under its locks, merged by the database."""
    named = _revised(bot, move, func.min(Message.id)).correlate(None).scalar_subquery()
    changes = message_meta.said(message_meta.inbound_meta(move)) | {"live_location": True} | _revision(move)
    return (update(Message).where(Message.id == named, Message.status != "pending",
                                  stored_revision_before(dialect, move.revision))
            .values(text=move.text, meta=merged_meta(dialect, changes, dropped=message_meta.SAID_META))
            .returning(Message.id))


def _applied(meta: dict[str, Any] | None, external_id: str) -> dict[str, Any]:
    """`meta` with `external_id` among `applied_edits`: the deliveries of the edits applied to the message
    while it waited (those that are a message of their own once it is answered, `stored_if_answered`)."""
    applied = list((meta or {}).get("applied_edits") or [])
    return {**(meta or {}), "applied_edits": applied if external_id in applied else [*applied, external_id]}


async def _applied_already(session: AsyncSession, bot: str, edit: InboundMessage) -> bool:
    """Whether `edit` is a redelivery of one applied to a message it names while that message waited: the first
    one, or an edit of it stored to pass on (`add_edit_to_answer`, which holds its platform id too), which
    `_revise` applies the next edit to while that one waits; only the first was read, and the retry passed on again."""
    metas = (await session.execute(_revised(bot, edit, Message.meta))).scalars()
    return any(edit.external_id in ((meta or {}).get("applied_edits") or []) for meta in metas)


@dataclass(frozen=True, slots=True)
class Accepted:
    """What the caller needs to acknowledge, and to wait for the answer if it wants to."""

    message_id: int
    conversation_id: int
    duplicate: bool


class Inbox:
    """Stores inbound messages idempotently and wakes the worker."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, on_stored=None) -> None:
        self._sessions = sessions
        self._on_stored = on_stored
        # Moves that left a pair of conversations both held by workers (`ChatMove.busy`): tried again
        # before each message this process stores, so they converge once a turn ends even when no
        # notice of the move comes again (the sends to the old id already go to the new one). The ones
        # this process made, and those stored by any process (`finish_moves`): read periodically, not
        # once per message. The table is what every process trusts; reading it before each message
        # instead cost every message a statement and a transaction more (bench/message_path.py: 22 → 23
        # statements, 12 → 13 transactions), for a table nearly always empty.
        self._unfinished_moves: dict[tuple[str, ConversationRef], str] = {}

    async def accept(self, bot: str, message: InboundMessage) -> Accepted | None:
        """Store `message` for `bot` once; a repeated delivery is acknowledged but not stored again.

        None when nothing is stored: the message is `existing_conversation_only` and its conversation
        does not exist (a Slack thread reply without a mention, in a thread the bot was never asked in),
        or it is an edit or deletion (`revises`), applied to the message it names while that one waits, a
        chat's move to a new id (`moves_to`), applied to its conversations, the bot's removal from a chat
        or return to it (`bot_removed`), recorded for every replica's outbox, or a redelivery of a message
        `gateway forget` deleted (storage/forgotten.py)."""
        message = storable(message)  # every entry point (webhooks, polling, sockets, gateway) passes here
        if (too_long := overlong_id(message)) is not None:
            raise UnstorableMessage(too_long)
        await self._retry_moves()
        # Storing is one transaction, idempotent by the delivery's id: one PostgreSQL aborted for a
        # deadlock with another writer (a late receipt, an answer's store) is simply run again.
        return await run_again_on_conflict(lambda: self._accept(bot, message), what="inbound")

    async def _accept(self, bot: str, message: InboundMessage) -> Accepted | None:
        if message.moves_to is not None:
            await self.move_chat(bot, message.conversation, message.moves_to)
            return None
        if message.bot_removed is not None:
            async with self._sessions() as session, session.begin():
                await mark_removed(session, bot=bot, channel=message.channel, chat=message.conversation.chat,
                                   removed=message.bot_removed, at=message.sent_at)
            return None
        if message.revises is not None and message.live_location:
            return await self._move_place(bot, message)
        if message.revises is not None:
            return await self._revise(bot, message)
        try:
            return await self._store(bot, message)
        except MessageForgotten:  # raised out of the transaction: the contact and conversation it made are undone
            log.info("inbound.ignored", bot=bot, channel=message.channel, external_id=logged_id(message),
                     reason="a redelivery of a message `gateway forget` deleted")
            return None

    async def _store(self, bot: str, message: InboundMessage) -> Accepted | None:
        async with self._sessions() as session, session.begin():
            if message.existing_conversation_only and await repo.find_conversation(
                    session, bot=bot, ref=message.conversation) is None:
                log.info("inbound.ignored", bot=bot, channel=message.channel, external_id=logged_id(message),
                         reason="a thread reply without a mention, in a thread the bot has no conversation in")
                return None
            if message.only_while_held and getattr(await repo.find_conversation(
                    session, bot=bot, ref=message.conversation), "state", "bot") not in HELD_STATES:
                log.info("inbound.ignored", bot=bot, channel=message.channel, external_id=logged_id(message),
                         reason="a group message without a mention, from a member no person is talking to")
                return None
            stored = await repo.store_inbound(session, bot=bot, message=message,
                                              traceparent=otel.current_traceparent())
            if not stored.duplicate:
                if stored.lease_owner == BURST_OWNER:
                    # It may be the piece that ends a burst being waited for ("my order" / "is late" / "?"):
                    # looked at now, not once the wait is due (gateway/burst.py). The lease was read under
                    # the row's KEY SHARE lock, so a park in flight was waited for and is seen; a park that
                    # starts after it waits for this commit and reads this message (`Worker._park_burst`).
                    # Any other holder (most messages: nobody) saves the statement.
                    await repo.end_park(session, conversation_id=stored.conversation_id, parked_owner=BURST_OWNER)
                await announce(session)  # wakes workers in other processes when this commits
        log.info("inbound.duplicate" if stored.duplicate else "inbound.stored", bot=bot, channel=message.channel,
                 external_id=logged_id(message), message_id=stored.message_id,
                 conversation_id=stored.conversation_id)
        if not stored.duplicate and self._on_stored is not None:
            self._on_stored(stored.conversation_id)
        return Accepted(message_id=stored.message_id, conversation_id=stored.conversation_id,
                        duplicate=stored.duplicate)

    async def finish_moves(self, now: datetime | None = None) -> None:
        """Try again every move left unfinished, by any process (a periodic check, `HandoffReminders`): the
        one that made it may be gone, and other replicas store the chat's messages meanwhile."""
        async with self._sessions() as session:
            stored = await unfinished_moves(session)
        self._unfinished_moves = {(m.bot, ConversationRef(channel=m.channel, workspace=m.workspace, chat=m.chat)):
                                  m.new_chat for m in stored}
        await self._retry_moves()

    async def _retry_moves(self) -> None:
        """Try each move this process knows unfinished; one that fails is logged and tried again later."""
        for (moving_bot, ref), new_chat in list(self._unfinished_moves.items()):
            try:
                await run_again_on_conflict(lambda: self.move_chat(moving_bot, ref, new_chat), what="chat move")
            except Exception as exc:  # a message is stored all the same; the move is tried with the next, or check
                log.warning("inbound.chat_move_failed", bot=moving_bot, channel=ref.channel, chat=ref.chat,
                            to=new_chat, error=f"{type(exc).__name__}: {str(exc)[:200]}")

    async def move_chat(self, bot: str, ref: ConversationRef, new_chat: str) -> None:
        """The chat `ref.chat` lives on as `new_chat` (storage/chat_moves.py): its conversations follow it."""
        async with self._sessions() as session, session.begin():
            moved = await move_chat(session, bot=bot, channel=ref.channel, workspace=ref.workspace,
                                    old=ref.chat, new=new_chat)
        key = (bot, ConversationRef(channel=ref.channel, workspace=ref.workspace, chat=ref.chat))
        if moved.busy:
            self._unfinished_moves[key] = new_chat
        else:
            self._unfinished_moves.pop(key, None)
        if moved.moved or moved.merged or moved.busy:
            log.info("inbound.chat_moved", bot=bot, channel=ref.channel, chat=ref.chat, to=new_chat,
                     conversations=list(moved.moved), merged=list(moved.merged), busy=list(moved.busy))

    async def _move_place(self, bot: str, move: InboundMessage) -> None:
        """A shared live location moved (`InboundMessage.live_location`): its message, answered or not, takes the
        newest place, text and `meta.shared` (what operators and tools read). No question, nor an edit to answer:
        one being answered keeps its answer (gateway/edits_meanwhile.py), and a move comes every few seconds
        for hours, so it wakes no worker and is logged at debug only."""
        async with self._sessions() as session, session.begin():
            # Nearly every move is of a message answered long ago: one UPDATE, when the move is surely the newer. The
            # locks below keep a move in step with a turn reading the message (a burst's park, the answer's store),
            # which only a pending message has; it, a message never stored and an older move are read below.
            moved = (await session.execute(_answered_place_moved(session.bind.dialect.name, bot, move))).scalar_one_or_none()
            if moved is not None:
                log.debug("inbound.place_moved", bot=bot, channel=move.channel, message_id=moved,
                          revision=move.revision, applied=True)
                return None
            found = (await session.execute(
                _revised(bot, move, Message.id, Message.conversation_id).order_by(Message.id).limit(1))).first()
            if found is not None:
                # Locked in the order the answer's store takes them (`Inbox._revise`).
                await session.get(Conversation, found.conversation_id, with_for_update={"key_share": True})
                target = await session.get(Message, found.id, with_for_update=True)
                newer = _newer(move, target.meta)
                if newer:
                    target.text = move.text
                    target.meta = message_meta.with_said(target.meta, message_meta.inbound_meta(move)) | {
                        "live_location": True} | _revision(move)
        if found is None:  # its first version was ignored (a group member's, without the bot's @mention)
            log.debug("inbound.ignored", bot=bot, channel=move.channel, platform_message_id=move.revises,
                      reason="a live location's move, of a message never stored")
        else:
            log.debug("inbound.place_moved", bot=bot, channel=move.channel, message_id=found.id,
                      revision=move.revision, applied=newer)

    async def _revise(self, bot: str, edit: InboundMessage) -> Accepted | None:
        """Apply an edit or a deletion to the message it names while that message waits for its answer:
        the customer who fixed a typo, or took a message back, was answered on what they had withdrawn.
        An edit that lands while the answer is being written is answered after it, as a message of its
        own (`MessageHandler._finish`); a deletion then drops the answer."""
        async with self._sessions() as session, session.begin():
            # The message it names, found by the database: reading every pending message of the chat with
            # its whole `meta` to pick it in Python cost a busy chat (a burst, a queue held by a person) more.
            found = (await session.execute(
                _revised(bot, edit, Message.id, Message.conversation_id).where(Message.status == "pending")
                .order_by(Message.id).limit(1))).first()
            target = None
            if found is not None:
                # The conversation's row, then the message: the order the answer's store takes them in
                # (`MessageHandler._finish`), which then finishes first. Every pending message of the chat
                # was locked first, in the scan's order (an updated row last), and then the conversation:
                # each side held a message the other waited for, and PostgreSQL aborted one.
                await session.get(Conversation, found.conversation_id, with_for_update={"key_share": True})
                target = await session.get(Message, found.id, with_for_update=True)
                if target.status != "pending":  # answered or taken back meanwhile
                    target = None
            older = target is not None and not edit.deleted and not _newer(edit, target.meta)
            if older:  # the edit after it was applied first: its text stands
                log.info("inbound.ignored", bot=bot, channel=edit.channel, message_id=target.id,
                         revision=edit.revision, reason="an edit no newer than the one already applied")
                return None
            if target is not None:
                if edit.deleted:
                    target.status, target.error = "ignored", TAKEN_BACK
                else:
                    # The command it now holds, if any ("/start" edited into a question is a question), and what
                    # it shares.
                    target.text = edit.text
                    target.meta = message_meta.with_said(target.meta, message_meta.inbound_meta(edit)) | _revision(edit)
                if edit.stored_if_answered:  # no event of it is stored: this tells its redelivery from a new change
                    target.meta = _applied(target.meta, edit.external_id)
                await repo.end_park(session, conversation_id=target.conversation_id, parked_owner=BURST_OWNER)
            redelivered = target is None and edit.stored_if_answered and await _applied_already(session, bot, edit)
            unknown = target is None and edit.new_if_never_stored and not edit.deleted and not (await session.execute(
                _revised(bot, edit, Message.id).limit(1))).first()
            # Never stored, or deleted by `gateway forget` (storage/forgotten.py): then its edit must not store it again.
            forgotten = unknown and await was_forgotten(session, bot=bot, channel=edit.channel,
                                                        chat=edit.conversation.chat, platform_message_id=edit.revises)
        if forgotten:
            log.info("inbound.ignored", bot=bot, channel=edit.channel, external_id=edit.external_id,
                     reason="an edit of a message `gateway forget` deleted")
            return None
        if unknown:  # its first version was ignored (a group message without the bot's @mention), or its delivery failed
            # Stored under a key of the message it edits, not of this update: two edits handled at once both
            # found it never stored (that check and this store are two transactions), and both were stored
            # and answered; the delivery key now lets one in, and the other is its duplicate, applied to it as
            # an edit when it is the newer of the two.
            accepted = await self._accept(bot, dataclasses.replace(
                edit, revises=None, new_if_never_stored=False,
                external_id=first_stored_edit_key(edit.conversation.chat, edit.revises)))
            if accepted is not None and accepted.duplicate:
                await self._revise(bot, dataclasses.replace(edit, new_if_never_stored=False))
            return accepted
        what = "deletion" if edit.deleted else "edit"
        if redelivered:  # Slack's retry of an operator's edit applied while their reply waited: passed on once
            log.info("inbound.ignored", bot=bot, channel=edit.channel, external_id=edit.external_id,
                     reason=f"a redelivery of the {what} applied to its message while it waited")
            return None
        if target is None and edit.stored_if_answered:  # passed on by whoever handles its conversation
            return await self._accept(bot, dataclasses.replace(
                edit, revises=None, deleted=False, stored_if_answered=False,
                raw={**edit.raw, "revises": edit.revises, "deleted": edit.deleted}))
        if target is None:
            log.info("inbound.ignored", bot=bot, channel=edit.channel, platform_message_id=edit.revises,
                     reason=f"{what} of a message already answered (or never stored): not answered again")
        else:
            log.info("inbound.revised", bot=bot, channel=edit.channel, message_id=target.id, change=what)
            if self._on_stored is not None:  # a burst waited for may now read as a whole question
                self._on_stored(target.conversation_id)
        return None
