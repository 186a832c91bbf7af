"""Data lifecycle: `gateway forget`, per-bot retention, and removed sources' chunks leaving the index."""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager
from datetime import timedelta

from sqlalchemy import func, select, update

from gateway.cli import main
from gateway.models import ConversationRef, InboundMessage, Sender, utcnow
from gateway.retention import forget_contact, purge_expired, purge_removed_sources
from gateway.settings import Settings
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Contact, Conversation, DataDeletion, Document, Escalation, Message, OptOut
from storage.opt_outs import opt_out
from tests.conftest import upgrade, write_config
from tests.storage.old_rows import old_message, store_old
from tests.worker_rig import until_waiting_for_a_lock


async def _store(sessions, *, bot: str, channel: str, user: str, chat: str, n: int = 2) -> int:
    async with sessions() as session, session.begin():
        for i in range(n):
            stored = await repo.store_inbound(session, bot=bot, message=InboundMessage(
                channel=channel, external_id=f"{chat}-{user}-{i}", conversation=ConversationRef(channel=channel, chat=chat),
                sender=Sender(external_id=user, display_name="Ada Lovelace"), text=f"my secret {i}"))
        conversation = await session.get(Conversation, stored.conversation_id)
        await repo.add_outbound(session, conversation=conversation, text="an answer", reply_to_id=stored.message_id)
        session.add(Escalation(conversation_id=conversation.id, bot=bot, reason="asked for a human"))
    return stored.conversation_id


async def _expired_web_conversation(sessions, user: str, *, contacts_too: bool = False) -> int:
    """A web conversation of acme's whose every message is 45 days old (and, with `contacts_too`, every
    contact): one a 30-day purge deletes."""
    conversation = await _store(sessions, bot="acme", channel="web", user=user, chat=user)
    long_ago = utcnow() - timedelta(days=45)
    async with sessions() as session, session.begin():
        await session.execute(update(Conversation).where(Conversation.id == conversation).values(created_at=long_ago))
        await session.execute(update(Message).where(Message.conversation_id == conversation).values(created_at=long_ago))
        if contacts_too:
            await session.execute(update(Contact).values(created_at=long_ago, last_inbound_at=long_ago))
    return conversation


async def _member_writes(sessions, *, bot: str, chat: str, member: str, text: str) -> None:
    """A group member other than the group conversation's first writer (its contact) writes in it."""
    async with sessions() as session, session.begin():
        await repo.store_inbound(session, bot=bot, message=InboundMessage(
            channel="telegram", external_id=f"{chat}-{member}", sender=Sender(external_id=member),
            conversation=ConversationRef(channel="telegram", chat=chat), text=text))


async def _age_everything(sessions, when) -> None:
    """Every conversation, message and contact as if made, and last written in, at `when`."""
    async with sessions() as session, session.begin():
        for model in (Conversation, Message, Contact):
            await session.execute(update(model).values(created_at=when))
        await session.execute(update(Contact).values(last_inbound_at=when))


async def _count(sessions, model, *where) -> int:
    async with sessions() as session:
        return (await session.execute(select(func.count()).select_from(model).where(*where))).scalar_one()


@asynccontextmanager
async def _purge_rig(url: str, *, migrate: bool = False, bots: list[dict] | None = None):
    """(engine, sessions, settings of `bots`, by default acme keeping 30 days) on `url`, a bare database migrated
    first with `migrate`; the engine disposed after."""
    if migrate:
        await asyncio.to_thread(upgrade, url)
    engine = create_engine(url)
    try:
        yield engine, session_factory(engine), Settings(
            database_url=url, bots=bots or [{"name": "acme", "retention_days": 30}])
    finally:
        await engine.dispose()


async def test_forget_cli_deletes_the_contact_and_audits_without_personal_data(migrated_url, tmp_path, capsys) -> None:
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    try:
        gone = await _store(sessions, bot="acme", channel="telegram", user="4242", chat="4242")
        kept = await _store(sessions, bot="acme", channel="telegram", user="777", chat="777")
        also_kept = await _store(sessions, bot="acme", channel="whatsapp", user="4242", chat="4242")
        config = write_config(tmp_path, database_url=migrated_url)
        code = await __import__("asyncio").to_thread(
            main, ["forget", "--config", str(config), "--channel", "telegram", "--user", "4242", "--json"])
        assert code == 0
        assert json.loads(capsys.readouterr().out) == {"contacts": 1, "conversations": 1, "messages": 3,
                                                       "escalations": 1}
        assert await _count(sessions, Message, Message.conversation_id == gone) == 0
        assert await _count(sessions, Conversation, Conversation.id == gone) == 0
        assert await _count(sessions, Escalation, Escalation.conversation_id == gone) == 0
        assert await _count(sessions, Contact, Contact.channel == "telegram", Contact.external_id == "4242") == 0
        assert await _count(sessions, Message, Message.conversation_id.in_([kept, also_kept])) == 6
        async with sessions() as session:
            audit = (await session.execute(select(DataDeletion))).scalars().one()
        assert audit.kind == "forget" and audit.channel == "telegram" and audit.counts["messages"] == 3
        assert "4242" not in json.dumps(audit.counts) + audit.actor and "Ada" not in json.dumps(audit.counts)
    finally:
        await engine.dispose()


async def test_retention_purges_only_old_conversations_of_bots_with_a_period(migrated_url) -> None:
    bots = [{"name": "acme", "retention_days": 30}, {"name": "keep"}]
    async with _purge_rig(migrated_url, bots=bots) as (_, sessions, settings):
        old = await _store(sessions, bot="acme", channel="web", user="s-old", chat="s-old")
        fresh = await _store(sessions, bot="acme", channel="web", user="s-new", chat="s-new")
        other = await _store(sessions, bot="keep", channel="web", user="s-keep", chat="s-keep")
        long_ago = utcnow() - timedelta(days=45)
        async with sessions() as session, session.begin():
            for cid in (old, other):
                await session.execute(update(Conversation).where(Conversation.id == cid).values(created_at=long_ago))
                await session.execute(update(Message).where(Message.conversation_id == cid).values(created_at=long_ago))
            await session.execute(update(Contact).where(Contact.external_id.in_(["s-old", "s-keep"]))
                                  .values(created_at=long_ago, last_inbound_at=long_ago))
            # A group member: no conversation's contact (the group's first writer is), but wrote today.
            session.add(Contact(channel="telegram", external_id="member", display_name="Ben", created_at=long_ago,
                                last_inbound_at=utcnow()))
        report = await purge_expired(sessions, settings)
        assert report.conversations == 1 and report.by_bot == {"acme": 1} and report.contacts == 1
        assert await _count(sessions, Conversation, Conversation.id == old) == 0
        assert await _count(sessions, Conversation, Conversation.id.in_([fresh, other])) == 2
        assert await _count(sessions, Contact, Contact.external_id == "member") == 1
        assert await _count(sessions, DataDeletion, DataDeletion.kind == "retention") == 1
        assert (await purge_expired(sessions, settings)).conversations == 0  # idempotent


async def test_retention_keeps_the_opt_out_of_a_contact_whose_conversations_it_purged(migrated_url) -> None:
    # A STOP must outlive the conversations it was sent in: with the contact gone, their next message was
    # answered as a new person's. What stays is the opt-out alone, as `forget` keeps it.
    async with _purge_rig(migrated_url) as (_, sessions, settings):
        stopped = await _expired_web_conversation(sessions, "s-stop", contacts_too=True)
        await _expired_web_conversation(sessions, "s-gone", contacts_too=True)
        stop_time = utcnow() - timedelta(days=40)
        async with sessions() as session, session.begin():
            contact = (await session.execute(select(Contact).where(Contact.external_id == "s-stop"))).scalar_one()
            await opt_out(session, bot="acme", contact_id=contact.id, at=stop_time)
        report = await purge_expired(sessions, settings)
        assert (report.conversations, report.contacts, report.opt_outs_kept) == (2, 1, 1)
        assert await _count(sessions, Conversation, Conversation.id == stopped) == 0
        async with sessions() as session:
            kept = (await session.execute(select(Contact))).scalars().all()
            [stop] = (await session.execute(select(OptOut))).scalars().all()
        assert [(c.external_id, c.display_name, c.last_inbound_at) for c in kept] == [("s-stop", "", None)]
        assert (stop.contact_id, stop.bot, kept[0].created_at) == (kept[0].id, "acme", stop.opted_out_at)


async def test_retention_deletes_a_large_backlog_a_batch_per_transaction(migrated_url, monkeypatch) -> None:
    """All of a bot's expired conversations went in one transaction, locking every one, and past 32,767
    of them (a period set on a large store) the id list exceeded a statement's parameters: "the number of
    query arguments cannot exceed 32767", every night. `PURGE_BATCH` small here stands in for that size."""
    import gateway.retention as retention

    monkeypatch.setattr(retention, "PURGE_BATCH", 2, raising=False)
    async with _purge_rig(migrated_url) as (_, sessions, settings):
        for n in range(5):
            await _expired_web_conversation(sessions, f"s-backlog-{n}")
        report = await purge_expired(sessions, settings)
        assert report.conversations == 5 and report.by_bot == {"acme": 5}
        assert await _count(sessions, Conversation) == 0
        async with sessions() as session:
            audits = (await session.execute(select(DataDeletion.counts).where(DataDeletion.kind == "retention")
                                            .order_by(DataDeletion.id))).scalars().all()
        assert audits == [{"conversations": 2}, {"conversations": 2}, {"conversations": 1}]


async def test_retention_keeps_the_contacts_of_another_bots_group_members(migrated_url) -> None:
    # A group member who wrote only to a bot that keeps everything is no conversation's contact (the
    # group's first writer is): the purge of a bot with a period deleted their contact row all the same.
    bots = [{"name": "acme", "retention_days": 1}, {"name": "keep"}]
    async with _purge_rig(migrated_url, bots=bots) as (_, sessions, settings):
        group = await _store(sessions, bot="keep", channel="telegram", user="first", chat="-100group")
        await _member_writes(sessions, bot="keep", chat="-100group", member="member", text="me too")
        mine = await _store(sessions, bot="acme", channel="telegram", user="mine", chat="-100mine")
        await _member_writes(sessions, bot="acme", chat="-100mine", member="other", text="same here")
        two_days_ago = utcnow() - timedelta(days=2)
        await _age_everything(sessions, two_days_ago)
        report = await purge_expired(sessions, settings)
        assert report.by_bot == {"acme": 1} and report.contacts == 2  # acme's group: its first writer, its member
        assert await _count(sessions, Contact, Contact.external_id.in_(["mine", "other"])) == 0
        assert await _count(sessions, Contact, Contact.external_id.in_(["first", "member"])) == 2
        assert await _count(sessions, Message, Message.conversation_id == group) == 4
        assert mine != group


async def test_retention_purges_a_group_member_whose_message_a_gateway_older_than_0016_stored(migrated_url) -> None:
    # A gateway of before 0016 still running on its schema (a rollback, a replica not yet replaced) stores the
    # sender in `meta` alone: the purge did not count such a member among the group's people, and their contact
    # outlived the group, and the retention period, for good.
    async with _purge_rig(migrated_url) as (engine, sessions, settings):
        await store_old(engine, [old_message("m-old", {"sender": "member"})])  # Telegram group -100group of acme
        await _member_writes(sessions, bot="acme", chat="-100group", member="first", text="hi all")
        async with sessions() as session, session.begin():
            await repo.upsert_contact(session, channel="telegram", external_id="member", display_name="M")
        await _age_everything(sessions, utcnow() - timedelta(days=45))
        report = await purge_expired(sessions, settings)
        assert (report.conversations, report.contacts) == (1, 2)
        assert await _count(sessions, Contact) == 0


async def test_retention_keeps_a_conversation_whose_customer_writes_while_it_is_purged(migrated_url) -> None:
    # A customer comes back to an expired conversation just as the purge runs: their message is being
    # stored (its webhook about to be acknowledged) when the purge looks. It used to read past the
    # uncommitted message, then delete the conversation and the message with it.
    async with _purge_rig(migrated_url) as (engine, sessions, settings):
        old = await _expired_web_conversation(sessions, "s-back")
        storing = sessions()
        await storing.begin()
        stored = await repo.store_inbound(storing, bot="acme", message=InboundMessage(
            channel="web", external_id="back-again", conversation=ConversationRef(channel="web", chat="s-back"),
            sender=Sender(external_id="s-back", display_name="Ada Lovelace"), text="I'm back"))
        purge = asyncio.create_task(purge_expired(sessions, settings))
        await until_waiting_for_a_lock(engine)  # the purge has read the candidates and waits on the store's lock
        await storing.commit()
        await storing.close()
        report = await asyncio.wait_for(purge, 30)
        assert stored.conversation_id == old and report.conversations == 0
        assert await _count(sessions, Message, Message.id == stored.message_id) == 1
        assert await _count(sessions, Conversation, Conversation.id == old) == 1


async def test_retention_never_deadlocks_with_a_store_that_holds_the_contact(migrated_url) -> None:
    # A store updates the contact first, then inserts into the conversation. The purge used to delete the
    # conversation, then wait for the contact to delete it as an orphan, while the store waited for the
    # conversation: PostgreSQL aborted the store ("deadlock detected", a 500 to the webhook).
    async with _purge_rig(migrated_url) as (engine, sessions, settings):
        old = await _expired_web_conversation(sessions, "s-back", contacts_too=True)
        storing = sessions()
        await storing.begin()
        await repo.upsert_contact(storing, channel="web", external_id="s-back", display_name="Ada Lovelace")
        await storing.flush()  # the store holds the contact's row
        purge = asyncio.create_task(purge_expired(sessions, settings))
        # The purge waits on the contact (SQLite: on the store's write lock), or skips it and ends (PostgreSQL);
        # a fixed 1.5 s could end before it got that far on a loaded machine, the store then going first.
        await until_waiting_for_a_lock(engine, unless_done=purge)
        stored = await repo.store_inbound(storing, bot="acme", message=InboundMessage(
            channel="web", external_id="back-again", conversation=ConversationRef(channel="web", chat="s-back"),
            sender=Sender(external_id="s-back", display_name="Ada Lovelace"), text="I'm back"))
        await storing.commit()
        await storing.close()
        await asyncio.wait_for(purge, 30)
        assert stored.conversation_id == old
        assert await _count(sessions, Message, Message.id == stored.message_id) == 1


async def test_a_group_member_held_during_a_purge_is_purged_by_a_later_one(postgres_url) -> None:
    # The purge skips a contact another transaction holds (SKIP LOCKED, never a deadlock). It deleted the
    # group conversation all the same, and with it what made the member a candidate: no later purge looked
    # at them again, and their contact row stayed for good. (PostgreSQL: SQLite's one writer holds no row.)
    async with _purge_rig(postgres_url, migrate=True) as (_, sessions, settings):
        group = await _store(sessions, bot="acme", channel="telegram", user="first", chat="-100old")
        await _member_writes(sessions, bot="acme", chat="-100old", member="member", text="me too")
        long_ago = utcnow() - timedelta(days=45)
        await _age_everything(sessions, long_ago)
        holding = sessions()  # a store of the member's message elsewhere, which then fails and rolls back
        await holding.begin()
        await holding.execute(update(Contact).where(Contact.external_id == "member").values(display_name="M"))
        try:
            first = await asyncio.wait_for(purge_expired(sessions, settings), 30)
            assert first.conversations == 0  # kept whole, for the next purge, as a held contact's own are
        finally:
            await holding.rollback()
            await holding.close()
        await purge_expired(sessions, settings)  # the next day's
        assert await _count(sessions, Conversation, Conversation.id == group) == 0
        assert await _count(sessions, Contact, Contact.external_id.in_(["first", "member"])) == 0


async def test_forget_waits_for_a_store_of_the_contacts_message_instead_of_deadlocking(migrated_url) -> None:
    # The store holds the contact's row when `forget` starts; forget deleted the conversation, then waited
    # for the contact, while the store waited for the conversation: "deadlock detected" on PostgreSQL.
    async with _purge_rig(migrated_url) as (engine, sessions, _):
        gone = await _store(sessions, bot="acme", channel="telegram", user="4242", chat="4242")
        storing = sessions()
        await storing.begin()
        await repo.upsert_contact(storing, channel="telegram", external_id="4242", display_name="Ada Lovelace")
        await storing.flush()  # the store holds the contact's row
        forget = asyncio.create_task(forget_contact(sessions, channel="telegram", user="4242"))
        await until_waiting_for_a_lock(engine)  # forget waits on the contact the store holds
        await repo.store_inbound(storing, bot="acme", message=InboundMessage(
            channel="telegram", external_id="late", conversation=ConversationRef(channel="telegram", chat="4242"),
            sender=Sender(external_id="4242", display_name="Ada Lovelace"), text="one more thing"))
        await storing.commit()
        await storing.close()
        report = await asyncio.wait_for(forget, 30)
        assert report.conversations == 1 and report.messages == 4 and report.contacts == 1
        assert await _count(sessions, Message, Message.conversation_id == gone) == 0
        assert await _count(sessions, Contact, Contact.external_id == "4242") == 0

class _Index:
    """Records deletions the way QdrantIndex.delete_points receives them."""

    def __init__(self) -> None:
        self.deleted: dict[str, list[str]] = {}

    async def delete_points(self, bot: str, ids: list[str]) -> None:
        self.deleted.setdefault(bot, []).extend(ids)


async def test_retention_removed_source_chunks_are_deleted(migrated_url, tmp_path) -> None:
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(database_url=migrated_url, bots=[{"name": "acme", "sources": [
        {"name": "faq", "type": "directory", "path": str(tmp_path), "schedule": "0 3 * * *"}]}])
    try:
        async with sessions() as session, session.begin():
            session.add(Document(bot="acme", source="faq", doc_id="a.md", content_hash="1", chunk_ids=["c1"]))
            session.add(Document(bot="acme", source="old-blog", doc_id="b.md", content_hash="2", chunk_ids=["c2", "c3"]))
            session.add(Document(bot="gone-bot", source="x", doc_id="c.md", content_hash="3", chunk_ids=["c4"]))
        index = _Index()
        # `gateway ingest` asks for its config's bots only: a bot another config serves is left alone.
        scoped = await purge_removed_sources(sessions, settings, index=index, bots={"acme"})
        assert index.deleted == {"acme": ["c2", "c3"]} and scoped.by_source == {"acme/old-blog": 2}
        report = await purge_removed_sources(sessions, settings, index=index)
        assert index.deleted == {"acme": ["c2", "c3"], "gone-bot": ["c4"]}
        assert scoped.documents + report.documents == 2 and scoped.chunks + report.chunks == 3
        async with sessions() as session:
            left = [(d.bot, d.source) for d in (await session.execute(select(Document))).scalars()]
        assert left == [("acme", "faq")]
    finally:
        await engine.dispose()


async def test_a_removed_source_of_many_documents_is_deleted_in_parts(migrated_url, tmp_path, monkeypatch) -> None:
    """One DELETE named every document of the source: past 32,767 (a large crawled site) PostgreSQL refused
    it, and the rows stayed. `IDS_PER_STATEMENT` small here stands in for that size."""
    import gateway.retention as retention
    from tests.statement_log import StatementLog

    monkeypatch.setattr(retention, "IDS_PER_STATEMENT", 2, raising=False)
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(database_url=migrated_url, bots=[{"name": "acme"}])
    try:
        async with sessions() as session, session.begin():
            for n in range(5):
                session.add(Document(bot="acme", source="old-site", doc_id=f"p{n}", content_hash=str(n), chunk_ids=[f"c{n}"]))
        log = StatementLog(engine)
        report = await purge_removed_sources(sessions, settings, index=_Index())
        assert report.documents == 5 and log.statements.count("DELETE documents") == 3
        assert await _count(sessions, Document) == 0
    finally:
        await engine.dispose()


async def test_retention_waits_for_a_chat_move_instead_of_deadlocking(postgres_url) -> None:
    # A chat's move (storage/chat_moves.py) and every operator transition lock the escalation, then its
    # conversation. The purge locked the conversation, then waited for the escalation to delete it: each
    # held a row the other waited for, and PostgreSQL aborted one (the night's purge, or the move).
    async with _purge_rig(postgres_url, migrate=True) as (engine, sessions, settings):
        gone = await _expired_web_conversation(sessions, "s-old")
        moving = sessions()
        await moving.begin()
        await moving.execute(select(Escalation.id).where(Escalation.conversation_id == gone).with_for_update())
        purge = asyncio.create_task(purge_expired(sessions, settings))
        await until_waiting_for_a_lock(engine)
        await moving.execute(select(Conversation.id).where(Conversation.id == gone).with_for_update())
        await moving.commit()
        await moving.close()
        report = await asyncio.wait_for(purge, 30)
        assert report.conversations == 1 and report.escalations == 1
