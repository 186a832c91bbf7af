"""Data lifecycle: forget a contact, purge expired conversations, drop the chunks of removed sources.

Every deletion writes one `data_deletions` audit row with counts only: the audit proves that a
request was carried out without keeping the personal data it was about.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import delete, exists, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.delivery.receipts import purge_early_receipts
from gateway.errors import Conflict
from gateway.models import utcnow
from gateway.operators.slack_forget import OperatorThread
from gateway.operators.slack_purged import erase_purged_threads, keep_purged_threads
from gateway.settings import Settings
from storage.forgotten import drop_old_forgotten, remember_forgotten
from storage.message_meta import sent_by, stored_sender
from storage.models import Contact, Conversation, DataDeletion, Document, Escalation, Message, RemovedChat
from storage.opt_outs import first_opt_out, kept_for_opt_out

log = structlog.get_logger("gateway.retention")

ESCALATED_MEANWHILE_ATTEMPTS = 5
"""Tries of a forget, or of a purge's batch, each undone by an escalation opened in one of its conversations meanwhile."""
PURGE_BATCH = 1000  # expired conversations deleted per transaction
IDS_PER_STATEMENT = 1000
"""The most ids one statement names: PostgreSQL takes 32,767 parameters, and 1,000 conversations of groups
with a hundred writers each are 100,000 people."""


@dataclass
class DeletionReport:
    """What one deletion removed."""

    contacts: int = 0
    conversations: int = 0
    messages: int = 0
    escalations: int = 0
    chunks: int = 0
    documents: int = 0
    opt_outs_kept: int = 0  # contacts removed (forgotten, purged) but for their STOP
    removed_chats: int = 0  # marks that the bot was blocked in a forgotten person's private chat
    by_bot: dict[str, int] = field(default_factory=dict)
    by_source: dict[str, int] = field(default_factory=dict)  # chunks of each removed "bot/source"
    documents_by_source: dict[str, int] = field(default_factory=dict)  # and its documents
    # The Slack operator threads of the conversations `gateway forget` deleted, stored with them (`slack_purged`) for
    # it to erase after the commit; the purge's are stored alone, for the retention job's end. Not a count.
    operator_threads: list[OperatorThread] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Counts only, as stored in the audit row and printed by the CLI."""
        return {k: v for k, v in self.__dict__.items() if v and k != "operator_threads"}


async def _count(session: AsyncSession, model: type, where) -> int:
    return (await session.execute(select(func.count()).select_from(model).where(where))).scalar_one()


def _sent_by_contact():
    """Messages the contact (of the enclosing query) sent: the sender each inbound message records."""
    return (Message.direction == "in") & (Message.channel == Contact.channel) & (Message.sender == Contact.external_id)


def _sent_by(channel: str, user: str):
    """Messages the person `user` of `channel` sent, in any conversation of any bot."""
    return (Message.channel == channel) & sent_by(user)


# What is left of a contact who opted out: channel, user id and the STOP's time; nothing they wrote or were called.
_OPT_OUT_ONLY = {"display_name": "", "last_inbound_at": None, "created_at": first_opt_out()}


def _parts(ids: list[int]) -> list[list[int]]:
    """`ids` in lists of at most `IDS_PER_STATEMENT`, each short enough for one statement's IN (...)."""
    return [ids[start:start + IDS_PER_STATEMENT] for start in range(0, len(ids), IDS_PER_STATEMENT)]


async def _people_of(session: AsyncSession, conversation_ids: list[int]) -> dict[int, set[int]]:
    """Each conversation's people: its contact, and whoever wrote in it (in a group only the first writer
    is the contact)."""
    people: dict[int, set[int]] = {}
    for part in _parts(conversation_ids):
        contacts = select(Conversation.id, Conversation.contact_id).where(
            Conversation.id.in_(part), Conversation.contact_id.is_not(None))
        # Read from `meta` too where the column has none (`stored_sender`): cheap here, within these conversations.
        wrote = (Message.direction == "in") & (Message.channel == Contact.channel) & (
            stored_sender() == Contact.external_id)
        writers = (select(Message.conversation_id, Contact.id).select_from(Message).join(Contact, wrote)
                   .where(Message.conversation_id.in_(part)).distinct())
        for query in (contacts, writers):
            for conversation, contact in (await session.execute(query)).all():
                people.setdefault(conversation, set()).add(contact)
    return people


async def _delete_conversations(session: AsyncSession, ids: list[int], report: DeletionReport) -> list[OperatorThread]:
    """Delete conversations and count what goes with them (messages and escalations cascade); their escalations'
    Slack operator threads are stored (`purged_operator_threads`) in the same transaction, as the rows that named
    them go, and returned: the posts in Slack go after the commit."""
    threads: list[OperatorThread] = []
    for part in _parts(ids):  # read before their escalations go: the copies posted in Slack go after them
        threads += [OperatorThread(*row) for row in (await session.execute(
            select(Escalation.bot, Escalation.slack_channel, Escalation.slack_ts).where(
                Escalation.conversation_id.in_(part), Escalation.slack_ts.is_not(None)))).all()]
    for part in _parts(ids):  # a contact forgotten may have more conversations than a statement takes
        report.messages += await _count(session, Message, Message.conversation_id.in_(part))
        report.escalations += await _count(session, Escalation, Escalation.conversation_id.in_(part))
        # Explicit deletes rather than trusting every backend's ON DELETE CASCADE to be enabled.
        await session.execute(delete(Escalation).where(Escalation.conversation_id.in_(part)))
        await session.execute(delete(Message).where(Message.conversation_id.in_(part)))
        result = await session.execute(delete(Conversation).where(Conversation.id.in_(part)))
        report.conversations += result.rowcount
    # A process stopped before Slack answered leaves them to the retention job (`slack_purged`).
    await keep_purged_threads(session, threads)
    return threads


class _EscalatedMeanwhile(Exception):
    """An escalation was opened in a conversation between the locks of its escalations and its own."""


async def _lock_with_escalations(session: AsyncSession, conversations) -> list[int]:
    """Lock the conversations `conversations` selects (in order), their escalations first; their ids.

    An escalation opened in one between the two locks (an operator taking it over) is not held: deleting it
    would wait for whoever holds it while holding its conversation, which they may wait for (a deadlock:
    an operator's reply, forget and the purge against each other). Raises `_EscalatedMeanwhile` then: the
    conversation locked, no escalation comes in, and the next attempt takes them all in order."""
    escalations = select(Escalation.id).where(Escalation.conversation_id.in_(conversations))
    held = set((await session.execute(escalations.order_by(Escalation.id).with_for_update())).scalars())
    locked = list((await session.execute(conversations.with_for_update())).scalars())
    if set((await session.execute(escalations)).scalars()) - held:
        raise _EscalatedMeanwhile
    return locked


async def _again_if_escalated_meanwhile(sessions: async_sessionmaker[AsyncSession], work, **about):
    """`await work(session)` in a transaction of its own, rolled back and run again while it raises
    `_EscalatedMeanwhile` (each time another escalation opened in the instant between two statements), at most
    `ESCALATED_MEANWHILE_ATTEMPTS` times in all; then `Conflict`. `about` (`job`, `bot` or `channel`) goes in
    the log lines: an escalation opened on every attempt (a bug, or operators taking over its conversations
    one after another) made it run for ever, holding its locks in turn, and said nothing."""
    for attempt in range(1, ESCALATED_MEANWHILE_ATTEMPTS + 1):
        try:
            async with sessions() as session, session.begin():
                return await work(session)
        except _EscalatedMeanwhile:
            log.warning("retention.escalated_meanwhile", attempt=attempt, attempts=ESCALATED_MEANWHILE_ATTEMPTS,
                        **about)
    raise Conflict(f"{about.get('job', 'retention')}: an escalation opened in its conversations during each of "
                   f"{ESCALATED_MEANWHILE_ATTEMPTS} attempts, so nothing was deleted; run it again")


async def forget_contact(sessions: async_sessionmaker[AsyncSession], *, channel: str, user: str,
                         actor: str = "cli") -> DeletionReport:
    """Delete a contact (channel + platform user id), their conversations, messages and escalations.

    Their conversations are found by their contact, by chat id for one-to-one channels where the chat is
    the user (Telegram DMs, WhatsApp numbers, web chat sessions), and by the messages they sent. One in
    which someone else wrote too (a group, a shared thread; its contact is only its first writer) is the
    others' as well: only their messages go from it, with the replies to them.
    """
    report = await _again_if_escalated_meanwhile(
        sessions, lambda session: _forget(session, channel=channel, user=user, actor=actor),
        job="forget", channel=channel)
    # Whether anyone was found: a mistyped id was a line of `channel=` alone. The id itself is not logged, as the
    # audit row keeps none: the log would otherwise keep who asked to be forgotten.
    log.info("retention.forgot_contact", channel=channel, found=any(report.as_dict().values()), **report.as_dict())
    return report


async def _forget(session: AsyncSession, *, channel: str, user: str, actor: str) -> DeletionReport:
    """`forget_contact` in the caller's transaction."""
    report = DeletionReport()
    theirs = _sent_by(channel, user)
    # Locked first, as a store of their message takes them (contact, then conversation): a store under
    # way finishes before this reads their conversations, instead of a deadlock that aborted one.
    contact_ids = list((await session.execute(select(Contact.id).where(
        Contact.channel == channel, Contact.external_id == user).with_for_update())).scalars())
    conditions = [Conversation.chat == user, Conversation.id.in_(select(Message.conversation_id).where(theirs))]
    if contact_ids:
        conditions.append(Conversation.contact_id.in_(contact_ids))
    # A message of no recorded sender is taken for theirs: the others' are those that name another.
    others = exists().where(Message.conversation_id == Conversation.id, Message.direction == "in",
                            stored_sender() != user)
    found = select(Conversation.id).where(Conversation.channel == channel, or_(*conditions))
    # Locked, then asked again, as the purge does: a store under way in one (another member's message, a
    # turn's reply and an edit of theirs) holds it until it commits, unseen by a plain read, so the deletes
    # took a member's message along or left that reply and edit. Their escalations first, the order a
    # chat's move and an operator's transition take them in; the conversations before their messages, as
    # a turn's store takes them.
    await _lock_with_escalations(session, found.order_by(Conversation.id))
    ids = list((await session.execute(found.where(~others))).scalars())
    # What an edit of one of their messages names, kept (a sha256, no text): stored again from its edit otherwise.
    for part in _parts(ids):
        await remember_forgotten(session, Message.conversation_id.in_(part), params_per_statement=IDS_PER_STATEMENT)
    await remember_forgotten(session, theirs, params_per_statement=IDS_PER_STATEMENT)
    report.operator_threads = await _delete_conversations(session, ids, report)
    # What is left of theirs is in the others' conversations. The replies first: deleting a message
    # sets its replies' `reply_to_id` to NULL, and they could not be told apart after.
    replies = (Message.direction == "out") & Message.reply_to_id.in_(select(Message.id).where(theirs))
    for where in (replies, theirs):
        report.messages += (await session.execute(
            delete(Message).where(where).execution_options(synchronize_session=False))).rowcount
    if contact_ids:
        # Their STOP outlives them: opt-out rules want the suppression kept, so an opted-out contact stays as
        # its channel, user id and the STOP's time alone (no name, nothing they wrote), and is never messaged.
        report.opt_outs_kept = (await session.execute(update(Contact).where(
            Contact.id.in_(contact_ids), kept_for_opt_out()).values(**_OPT_OUT_ONLY))).rowcount
        report.contacts = (await session.execute(delete(Contact).where(
            Contact.id.in_(contact_ids), ~kept_for_opt_out()))).rowcount
    # Their private chat's id is theirs: the mark that they blocked the bot goes too.
    report.removed_chats = (await session.execute(
        delete(RemovedChat).where(RemovedChat.channel == channel, RemovedChat.chat == user))).rowcount
    session.add(DataDeletion(kind="forget", channel=channel, actor=actor, counts=report.as_dict()))
    return report


async def purge_expired(sessions: async_sessionmaker[AsyncSession], settings: Settings, *,
                        now: datetime | None = None, report: DeletionReport | None = None) -> DeletionReport:
    """Delete each bot's conversations with no message newer than its `retention_days`, counted in `report`
    (a new one by default), which holds what was committed when a batch fails."""
    now = now or utcnow()
    report = report if report is not None else DeletionReport()
    for bot in settings.bots:
        if not bot.retention_days:
            continue
        cutoff = now - timedelta(days=bot.retention_days)
        recent = exists().where(Message.conversation_id == Conversation.id, Message.created_at >= cutoff)
        expired = select(Conversation.id).where(
            Conversation.bot == bot.name, Conversation.created_at < cutoff, ~recent,
            # A conversation being worked on right now is never purged from under its worker.
            (Conversation.lease_until.is_(None)) | (Conversation.lease_until < now))
        # A batch at a time, each its own transaction: all of a bot's at once held every one of them locked
        # (on SQLite, the write lock: inbound webhooks waited), and past 32,767 conversations (a period set
        # on a large store) its id list was more parameters than a statement takes, so it failed every night.
        after = 0
        while True:
            batch = expired.where(Conversation.id > after).order_by(Conversation.id).limit(PURGE_BATCH)
            try:
                locked = await _again_if_escalated_meanwhile(
                    sessions, lambda session: _purge_batch(session, bot.name, batch, cutoff, report),
                    job="purge", bot=bot.name)
            except Conflict as exc:
                # The bot's next run tries again; the other bots are purged meanwhile.
                log.error("retention.purge_stopped", bot=bot.name, error=str(exc))
                break
            if len(locked) < PURGE_BATCH:
                break
            after = locked[-1]
    if report.conversations:
        log.info("retention.purged", **report.as_dict())
    return report


async def _purge_batch(session: AsyncSession, bot: str, expired, cutoff: datetime,
                       report: DeletionReport) -> list[int]:
    """Delete the conversations `expired` selects (and the people only they kept), in the caller's
    transaction; the ids it locked, in order."""
    # Locked, then asked again: a customer's message being stored in one of them holds its
    # conversation (the foreign key's lock) until it commits, and a plain read would not see it,
    # so the delete took the new message with it, after its webhook had been acknowledged. The
    # lock waits for that store (on SQLite, for the write lock) and keeps new ones and a worker's
    # lease out; the second read sees what they committed.
    # Their escalations before them, the order a chat's move and every operator transition take them in:
    # the conversation first, the purge waited for an escalation one of those held while it waited for the
    # conversation, and PostgreSQL aborted one of the two.
    locked = await _lock_with_escalations(session, expired)
    # A contact row another transaction holds is a store under way: it updates the contact before
    # it inserts into the conversation, so it would wait for this one while this one waited for it
    # (PostgreSQL's "deadlock detected", a 500 to the webhook). So the people of these conversations
    # (each one's contact, and whoever wrote in it) are locked without waiting (SKIP LOCKED; SQLite
    # has one writer and needs none of it), and a conversation one of them is held in is kept
    # whole: the next purge finds it again, and its people with it. Skipping only the held person
    # had deleted the conversation that made them a candidate, so no later purge looked at them.
    people = await _people_of(session, locked)
    everyone = sorted(set().union(*people.values()))
    free: set[int] = set()
    for part in _parts(everyone):  # a batch of groups of many writers each is more people than a statement takes
        free.update((await session.execute(select(Contact.id).where(Contact.id.in_(part))
                                           .with_for_update(skip_locked=True))).scalars())
    unheld = [c for c in locked if people.get(c, set()) <= free]
    ids = list((await session.execute(expired.where(Conversation.id.in_(unheld)))).scalars()) if unheld else []
    before = report.conversations
    # Contacts are shared by the bots: only the people of the conversations purged here (each one's
    # contact, and whoever wrote in it: in a group only the first writer is the contact) are this
    # bot's to remove. "No conversation's contact" alone took another bot's group members too.
    theirs = sorted(set().union(*(people.get(c, set()) for c in ids)))
    await _delete_conversations(session, ids, report)  # their threads stored with them, for `run_retention`'s end
    if ids:  # a chat the bot has no conversation in now: its removal mark (a private chat's id is the person's)
        await session.execute(delete(RemovedChat).where(RemovedChat.bot == bot, ~exists().where(
            Conversation.bot == RemovedChat.bot, Conversation.channel == RemovedChat.channel,
            Conversation.chat == RemovedChat.chat)))
    # Left with no conversation and no message with any bot, they carry only personal data: removed
    # too. Not one who wrote within the period (to any bot).
    orphans = select(Contact.id).where(~exists().where(Conversation.contact_id == Contact.id),
                                       ~exists().where(_sent_by_contact()),
                                       Contact.created_at < cutoff,
                                       Contact.last_inbound_at.is_(None) | (Contact.last_inbound_at < cutoff))
    for part in _parts(theirs):
        held = orphans.where(Contact.id.in_(part)).with_for_update(skip_locked=True)
        # A STOP outlives the conversations it was sent in (as it outlives `forget`): the contact stays as
        # its opt-out alone, or the person's next message was answered as a newcomer's.
        report.opt_outs_kept += (await session.execute(update(Contact).where(
            Contact.id.in_(held.where(kept_for_opt_out()))).values(
            **_OPT_OUT_ONLY))).rowcount
        report.contacts += (await session.execute(delete(Contact).where(Contact.id.in_(
            held.where(~kept_for_opt_out()))))).rowcount
    if ids:
        report.by_bot[bot] = report.by_bot.get(bot, 0) + report.conversations - before
        session.add(DataDeletion(kind="retention", bot=bot, counts={
            "conversations": report.conversations - before}))
    return locked


async def purge_removed_sources(sessions: async_sessionmaker[AsyncSession], settings: Settings, *,
                                index: Any, bots: set[str] | None = None) -> DeletionReport:
    """Delete the chunks (in Qdrant) and document rows of sources no longer in the config; with `bots`,
    only of those bots' sources (`gateway ingest` leaves a bot that is not in its config alone)."""
    configured = {(bot.name, source.name) for bot in settings.bots for source in bot.sources}
    report = DeletionReport()
    async with sessions() as session:
        query = select(Document) if bots is None else select(Document).where(Document.bot.in_(sorted(bots)))
        rows = list((await session.execute(query)).scalars())
    gone = [row for row in rows if (row.bot, row.source) not in configured]
    for bot in sorted({row.bot for row in gone}):
        mine = [row for row in gone if row.bot == bot]
        chunk_ids = [str(c) for row in mine for c in row.chunk_ids or []]
        if chunk_ids:
            await index.delete_points(bot, chunk_ids)  # the index first: a crash here leaves rows to retry
        async with sessions() as session, session.begin():
            ids = [row.id for row in mine]
            # In parts: a crawled site of 40,000 pages was more ids than one statement takes (32,767 on
            # PostgreSQL), and its rows stayed, retried and failed on every run.
            for part in _parts(ids):
                await session.execute(delete(Document).where(Document.id.in_(part)))
            session.add(DataDeletion(kind="source", bot=bot, counts={
                "documents": len(mine), "chunks": len(chunk_ids),
                "sources": len({row.source for row in mine})}))
        report.documents += len(mine)
        report.chunks += len(chunk_ids)
        report.by_bot[bot] = len(chunk_ids)
        for row in mine:
            key = f"{bot}/{row.source}"
            report.by_source[key] = report.by_source.get(key, 0) + len(row.chunk_ids or [])
            report.documents_by_source[key] = report.documents_by_source.get(key, 0) + 1
    if gone:
        log.info("retention.removed_sources_purged", **report.as_dict())
    return report


async def run_retention(sessions: async_sessionmaker[AsyncSession], settings: Settings, *,
                        knowledge: Any) -> DeletionReport:
    """The scheduled (leader-only) job: expired conversations, then removed sources' chunks, then the gateway's
    posts in the Slack operator threads of the conversations purged, by this run or left by an earlier one."""
    report = DeletionReport()
    try:
        await purge_expired(sessions, settings, report=report)
        async with sessions() as session, session.begin():
            await purge_early_receipts(session)  # receipts whose send was never recorded: nothing to attach to
            await drop_old_forgotten(session)  # the keys `gateway forget` keeps of what it deleted, once old
        # Knowledge opens its index lazily; without an open index the sources wait for the next run.
        index = getattr(knowledge, "index", None)
        if index is not None:
            sources = await purge_removed_sources(sessions, settings, index=index)
            report.documents, report.chunks = sources.documents, sources.chunks
    except Exception:  # the rows purged are committed, their threads stored: Slack is asked all the same
        try:
            await erase_purged_threads(sessions, settings)
        except Exception:  # the store may be what failed: the threads stay stored, and the job's error is raised
            log.exception("retention.operator_threads_failed", threads=[])
        raise
    await erase_purged_threads(sessions, settings)
    return report
