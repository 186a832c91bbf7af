"""`gateway forget` of a group's member while the nightly purge deletes that group, on PostgreSQL (SQLite's
one writer holds no row): whichever statement either has reached when the other starts, one waits for the
other, never "deadlock detected"."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import delete, select, update

from gateway.models import utcnow
from gateway.retention import forget_contact, purge_expired
from storage.models import Contact, Conversation, DataDeletion, Escalation, ForgottenMessage, Message, RemovedChat
from tests.pausing import pausing_sessions
from tests.scale.test_forget_groups import _says
from tests.scale.test_retention import _age_everything, _count, _purge_rig
from tests.worker_rig import until_waiting_for_a_lock

STATEMENTS = 16  # more than either takes before it commits


async def _group_to_purge(sessions) -> int:
    """An expired group alice started and bob wrote in (an escalation open in it), and alice's own chat."""
    group = await _says(sessions, who="alice", chat="-100shop", text="where is my order")
    await _says(sessions, who="bob", chat="-100shop", text="mine too")
    await _says(sessions, who="alice", chat="alice", text="hello")
    async with sessions() as session, session.begin():
        session.add(Escalation(conversation_id=group, bot="acme", reason="asked for a human"))
        session.add(RemovedChat(bot="acme", channel="telegram", chat="alice"))
    await _age_everything(sessions, utcnow() - timedelta(days=45))
    return group


async def _empty(sessions) -> None:
    async with sessions() as session, session.begin():
        # The keys a forget keeps too: the next round's messages are the same, and a forgotten one is not stored again.
        for model in (Escalation, Message, Conversation, Contact, RemovedChat, DataDeletion, ForgottenMessage):
            await session.execute(delete(model))


@pytest.mark.parametrize("first", ["purge", "forget"])
async def test_forget_of_a_member_during_the_purge_of_their_group_never_deadlocks(postgres_url, first):
    other = "forget" if first == "purge" else "purge"
    async with _purge_rig(postgres_url, migrate=True) as (engine, sessions, settings):
        run = {"purge": lambda made: purge_expired(made, settings),
               "forget": lambda made: forget_contact(made, channel="telegram", user="alice")}
        for paused_after in range(1, STATEMENTS + 1):  # `first` stops after that statement, `other` runs meanwhile
            await _group_to_purge(sessions)
            second: list[asyncio.Task] = []

            async def the_other_meanwhile():
                second.append(asyncio.create_task(run[other](sessions)))
                await until_waiting_for_a_lock(engine, unless_done=second[0])

            try:
                await asyncio.wait_for(run[first](pausing_sessions(engine, the_other_meanwhile,
                                                                   after_statement=paused_after)), 30)
                if second:
                    await asyncio.wait_for(second[0], 30)
            finally:
                for task in second:
                    task.cancel()
            await purge_expired(sessions, settings)  # the next night's: what one kept for the other goes now
            assert [await _count(sessions, model) for model in (Conversation, Message, Contact, Escalation)] == \
                [0] * 4, f"{first} paused after statement {paused_after}"
            await _empty(sessions)


async def _expired_chat_of_alice(sessions) -> int:
    dm = await _says(sessions, who="alice", chat="alice", text="hello")
    await _age_everything(sessions, utcnow() - timedelta(days=45))
    return dm


async def test_forget_as_an_operator_takes_the_conversation_over_during_the_purge_never_deadlocks(postgres_url):
    # Forget locked the conversation's escalations (none yet), an operator opened one, the purge locked it, then
    # forget locked the conversation and waited to delete that escalation while the purge waited for the
    # conversation: "deadlock detected", forget aborted.
    async with _purge_rig(postgres_url, migrate=True) as (engine, sessions, settings):
        dm = await _expired_chat_of_alice(sessions)
        purging: list[asyncio.Task] = []
        purge_holds_it = asyncio.Event()

        async def purge_paused():
            purge_holds_it.set()
            await until_waiting_for_a_lock(engine)

        async def taken_over_meanwhile():
            async with sessions() as session, session.begin():
                session.add(Escalation(conversation_id=dm, bot="acme", reason="taken over by an operator"))
            purging.append(asyncio.create_task(purge_expired(pausing_sessions(engine, purge_paused, after_statement=1),
                                                             settings)))
            await purge_holds_it.wait()

        try:
            report = await asyncio.wait_for(forget_contact(pausing_sessions(
                engine, taken_over_meanwhile, after_statement=2), channel="telegram", user="alice"), 30)
            await asyncio.wait_for(purging[0], 30)
        finally:
            for task in purging:
                task.cancel()
        assert (report.conversations, report.escalations) == (1, 1)
        assert [await _count(sessions, model) for model in (Conversation, Escalation, Contact)] == [0] * 3


async def test_the_purge_as_an_operator_takes_the_conversation_over_and_replies_never_deadlocks(postgres_url):
    # The purge locked the conversation's escalations (none yet), an operator opened one and replied (its
    # escalation locked, then the conversation written), while the purge, holding the conversation, waited to
    # delete that escalation: "deadlock detected".
    async with _purge_rig(postgres_url, migrate=True) as (engine, sessions, settings):
        dm = await _expired_chat_of_alice(sessions)
        replying = sessions()

        async def taken_over_meanwhile():
            async with sessions() as session, session.begin():
                session.add(Escalation(conversation_id=dm, bot="acme", reason="taken over by an operator"))
            await replying.begin()
            await replying.execute(select(Escalation.id).where(Escalation.conversation_id == dm).with_for_update())

        try:
            purge = asyncio.create_task(purge_expired(pausing_sessions(engine, taken_over_meanwhile, after_statement=1),
                                                      settings))
            await until_waiting_for_a_lock(engine)
            await replying.execute(update(Conversation).where(Conversation.id == dm).values(state="operator"))
            await replying.commit()
            await asyncio.wait_for(purge, 30)
        finally:
            await replying.close()
        assert [await _count(sessions, model) for model in (Conversation, Escalation)] == [0, 0]
