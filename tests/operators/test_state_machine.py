"""The handoff state machine on SQLite and PostgreSQL: transitions, their history, and claim races."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from gateway.errors import Conflict, NotFound
from gateway.escalation.handoff import Escalations
from gateway.events import ESCALATIONS_TOPIC, EventBus
from gateway.models import ConversationRef
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from storage import repositories as repo
from storage.engine import create_engine, session_factory
from storage.models import Conversation, EscalationEvent, Message


@pytest.fixture
async def world(migrated_url):
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(bots=[{"name": "acme"}, {"name": "other"}])
    bus = EventBus()
    metrics = Metrics()
    escalations = Escalations(sessions, settings=settings, bus=bus, metrics=metrics)
    yield sessions, escalations, bus, metrics
    await escalations.drain()
    await engine.dispose()


async def _conversation(sessions, *, bot: str = "acme", chat: str = "c1") -> int:
    async with sessions() as session, session.begin():
        conversation = await repo.get_or_create_conversation(
            session, bot=bot, ref=ConversationRef(channel="web", chat=chat), contact_id=None)
        return conversation.id


async def _open(sessions, escalations, conversation_id: int, reason: str = "customer asked"):
    async with sessions() as session, session.begin():
        conversation = await session.get(Conversation, conversation_id)
        return (await escalations.open_in(session, conversation=conversation, reason=reason)).id


async def _notices(sessions, *conversation_ids: int) -> dict[int, list[str]]:
    """Each conversation's system messages (what the customer was told), oldest first."""
    async with sessions() as session:
        return {cid: list((await session.execute(select(Message.text).where(
            Message.conversation_id == cid, Message.author == "system").order_by(Message.id))).scalars().all())
            for cid in conversation_ids}


async def _state(sessions, conversation_id: int) -> tuple[str, str | None]:
    async with sessions() as session:
        c = await session.get(Conversation, conversation_id)
        return c.state, c.assigned_operator


async def test_escalation_full_cycle_stores_every_transition(world):
    sessions, escalations, bus, metrics = world
    cid = await _conversation(sessions)
    async with bus.subscribe(ESCALATIONS_TOPIC) as queue:
        eid = await _open(sessions, escalations, cid)
        assert (await asyncio.wait_for(queue.get(), 5))["type"] == "opened"
    assert await _state(sessions, cid) == ("waiting", None)
    await escalations.claim(eid, operator="sam", bots=None)
    assert await _state(sessions, cid) == ("operator", "sam")
    resolved = await escalations.resolve(eid, operator="sam", bots=None, reason="answered the invoice question")
    assert resolved.state == "resolved" and resolved.resolved_at is not None
    assert await _state(sessions, cid) == ("bot", None)
    async with sessions() as session:
        events = (await session.execute(select(EscalationEvent).where(EscalationEvent.escalation_id == eid)
                                        .order_by(EscalationEvent.id))).scalars().all()
        notices = (await session.execute(select(Message.text).where(
            Message.conversation_id == cid, Message.author == "system"))).scalars().all()
    assert [(e.kind, e.from_state, e.to_state, e.actor) for e in events] == [
        ("opened", "bot", "waiting", "bot"), ("claimed", "waiting", "operator", "sam"),
        ("resolved", "operator", "bot", "sam")]
    assert events[2].reason == "answered the invoice question" and all(e.created_at for e in events)
    # one acknowledgement when opened (no reply said it this turn), one on the claim, one on hand-back
    assert len(notices) == 3 and "joined this conversation" in notices[1] and "back to the assistant" in notices[2]
    # One wait to a claim and one to a resolution observed (a sum of waits is >= 0 even when none was).
    observed = {name: metrics.registry.get_sample_value(f"gateway_escalation_{name}_seconds_count", {"bot": "acme"})
                for name in ("time_to_claim", "time_to_resolve")}
    assert observed == {"time_to_claim": 1, "time_to_resolve": 1}
    assert metrics.escalations.labels(bot="acme")._value.get() == 1


async def test_escalation_open_twice_reuses_the_open_one(world):
    sessions, escalations, _, _ = world
    cid = await _conversation(sessions)
    assert await _open(sessions, escalations, cid) == await _open(sessions, escalations, cid, reason="again")


async def test_escalation_concurrent_claims_exactly_one_wins(world):
    sessions, escalations, _, _ = world
    cid = await _conversation(sessions)
    eid = await _open(sessions, escalations, cid)
    operators = [f"op{i}" for i in range(6)]
    results = await asyncio.gather(*(escalations.claim(eid, operator=o, bots=None) for o in operators),
                                   return_exceptions=True)
    winners = [r for r in results if not isinstance(r, Exception)]
    losers = [r for r in results if isinstance(r, Conflict)]
    assert len(winners) == 1 and len(losers) == 5
    holder = winners[0].operator
    assert all(f"already claimed by {holder}" in str(e) for e in losers)
    assert await _state(sessions, cid) == ("operator", holder)
    async with sessions() as session:
        claims = (await session.execute(select(EscalationEvent).where(
            EscalationEvent.escalation_id == eid, EscalationEvent.kind == "claimed"))).scalars().all()
    assert len(claims) == 1


async def test_escalation_claim_of_never_escalated_conversation(world):
    sessions, escalations, _, _ = world
    cid = await _conversation(sessions)
    results = await asyncio.gather(*(escalations.claim_conversation(cid, operator=o, bots=None)
                                     for o in ("ana", "ben", "cy")), return_exceptions=True)
    winners = [r for r in results if not isinstance(r, Exception)]
    assert len(winners) == 1 and all(isinstance(r, Conflict) for r in results if r not in winners)
    assert winners[0].state == "claimed" and winners[0].reason == "taken over by an operator"
    assert await _state(sessions, cid) == ("operator", winners[0].operator)


async def test_escalation_holder_only_may_reply_or_resolve(world):
    sessions, escalations, _, _ = world
    cid = await _conversation(sessions)
    eid = await _open(sessions, escalations, cid)
    await escalations.claim(eid, operator="sam", bots=None)
    with pytest.raises(Conflict, match="already claimed by sam"):
        await escalations.reply(eid, operator="kim", text="hello", bots=None)
    with pytest.raises(Conflict):
        await escalations.resolve(eid, operator="kim", bots=None)
    await escalations.resolve(eid, operator="sam", bots=None)
    with pytest.raises(Conflict, match="already resolved"):
        await escalations.claim(eid, operator="sam", bots=None)
    # A reply that comes after the hand-back says who handed it back (it said only "already resolved").
    with pytest.raises(Conflict, match=f"escalation {eid} is already resolved by sam: the bot answers"):
        await escalations.reply(eid, operator="kim", text="one more thing", bots=None)


async def test_escalation_of_another_bot_is_not_found(world):
    sessions, escalations, _, _ = world
    eid = await _open(sessions, escalations, await _conversation(sessions, bot="other"))
    with pytest.raises(NotFound):
        await escalations.claim(eid, operator="sam", bots=["acme"])
    assert [e.id for e in await escalations.find(bots=["acme"])] == []
    assert [e.id for e in await escalations.find(bots=["other"], state="open")] == [eid]


async def test_escalation_notes_are_kept_in_order(world):
    sessions, escalations, _, _ = world
    eid = await _open(sessions, escalations, await _conversation(sessions))
    await escalations.add_note(eid, operator="sam", text="VIP customer", bots=None)
    await escalations.add_note(eid, operator="kim", text="refund approved", bots=None)
    escalation = await escalations.get(eid, bots=None)
    assert [(n["author"], n["text"]) for n in escalation.notes] == [("sam", "VIP customer"), ("kim", "refund approved")]


async def test_notes_written_at_once_are_all_kept(world):
    """Each note reads the list and writes it back: under the row lock (on SQLite, the write lock
    taken where FOR UPDATE is asked) none overwrites another. Without it SQLite kept 1-2 of 10."""
    sessions, escalations, _, _ = world
    eid = await _open(sessions, escalations, await _conversation(sessions))
    await asyncio.gather(*(escalations.add_note(eid, operator=f"op{i}", text=f"note {i}", bots=None) for i in range(10)))
    escalation = await escalations.get(eid, bots=None)
    assert sorted(n["text"] for n in escalation.notes) == sorted(f"note {i}" for i in range(10))


async def test_an_empty_unclaimed_or_resolved_message_tells_the_customer_nothing(migrated_url):
    """`""` says nothing, as for claimed_message; it used to store and send an empty message. The
    operators are still reminded."""
    from datetime import timedelta

    from gateway.models import utcnow
    from gateway.operators.reminders import HandoffReminders

    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    quiet = {"claimed_message": "", "unclaimed_message": " ", "resolved_message": "",
             "resolved_unclaimed_message": ""}
    settings = Settings(bots=[{"name": "acme"}, {"name": "quiet", "escalation": quiet}])
    escalations = Escalations(sessions, settings=settings, bus=EventBus())
    reminders = HandoffReminders(sessions, settings=settings, escalations=escalations)
    try:
        told, silent = await _conversation(sessions, bot="acme", chat="n1"), await _conversation(sessions, bot="quiet", chat="n2")
        ids = [await _open(sessions, escalations, cid) for cid in (told, silent)]
        assert sorted(await reminders.run_once(now=utcnow() + timedelta(hours=1))) == sorted(ids)
        for eid in ids:
            await escalations.resolve(eid, operator="sam", bots=None)
        notices = await _notices(sessions, told, silent)
    finally:
        await escalations.drain()
        await engine.dispose()
    acknowledgement = "I've asked a person from our team to take over. They'll reply here shortly."
    assert notices[told][0] == acknowledgement and notices[told][1].startswith("Sorry, everyone on our team is busy")
    assert notices[told][2].startswith("Our team closed your request for a person without joining") \
        and len(notices[told]) == 3
    assert notices[silent] == [acknowledgement]


async def test_handing_back_an_escalation_nobody_claimed_says_nobody_joined(migrated_url):
    """Resolved while nobody had claimed it: the customer was never told a person joined, so "Our team has
    handed this conversation back" was untrue; they get `resolved_unclaimed_message`. A claim released before
    the hand-back was a person who joined (the customer heard `claimed_message`): `resolved_message`."""
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(bots=[{"name": "acme", "escalation": {"claimed_message": "",
                                                              "resolved_unclaimed_message": "Nobody joined."}}])
    escalations = Escalations(sessions, settings=settings, bus=EventBus())
    try:
        never, released = await _conversation(sessions, chat="u1"), await _conversation(sessions, chat="u2")
        first, second = await _open(sessions, escalations, never), await _open(sessions, escalations, released)
        await escalations.claim(second, operator="sam", bots=None)
        await escalations.release(second, operator="sam", bots=None)
        for eid in (first, second):
            await escalations.resolve(eid, operator="sam", bots=None)
        notices = await _notices(sessions, never, released)
    finally:
        await escalations.drain()
        await engine.dispose()
    assert notices[never][1:] == ["Nobody joined."]
    assert notices[released][1:] == [Settings(bots=[{"name": "x"}]).bots[0].escalation.resolved_message]


async def test_taking_over_a_bot_conversation_tells_the_customer_unless_switched_off(migrated_url):
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(bots=[{"name": "acme"}, {"name": "quiet", "escalation": {"claimed_message": ""}}])
    escalations = Escalations(sessions, settings=settings, bus=EventBus())
    try:
        told = await _conversation(sessions, bot="acme", chat="t1")
        silent = await _conversation(sessions, bot="quiet", chat="t2")
        for cid in (told, silent):
            await escalations.claim_conversation(cid, operator="sam", bots=None)
        notices = await _notices(sessions, told, silent)
    finally:
        await escalations.drain()
        await engine.dispose()
    assert notices[told] == ["A person from our team has joined this conversation and will reply here."]
    assert notices[silent] == []


async def test_escalation_of_a_bot_removed_from_the_config_is_not_found(migrated_url):
    """A bot taken out of config.yaml while one of its escalations was open: after the restart its
    escalation was still listed to a `*` operator, and claiming, replying or resolving it was a 500
    (the bot's settings, for the customer's notice, were looked up and missing), while its detail was 404."""
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    before = Escalations(sessions, settings=Settings(bots=[{"name": "acme"}, {"name": "gone"}]), bus=EventBus())
    after = Escalations(sessions, settings=Settings(bots=[{"name": "acme"}]), bus=EventBus())
    try:
        gone_cid = await _conversation(sessions, bot="gone", chat="g1")
        gone = await _open(sessions, before, gone_cid)
        kept = await _open(sessions, before, await _conversation(sessions, bot="acme", chat="a1"))
        await before.drain()
        assert [e.id for e in await after.find(bots=None)] == [kept]
        assert [e.id for e in await after.find(bots=["acme", "gone"])] == [kept]
        for act in (lambda: after.get(gone, bots=None),
                    lambda: after.claim(gone, operator="sam", bots=None),
                    lambda: after.reply(gone, operator="sam", text="hello", bots=None),
                    lambda: after.add_note(gone, operator="sam", text="hello", bots=None),
                    lambda: after.resolve(gone, operator="sam", bots=None),
                    lambda: after.claim_conversation(gone_cid, operator="sam", bots=None)):
            with pytest.raises(NotFound):
                await act()
        assert await _state(sessions, gone_cid) == ("waiting", None)  # nothing changed
        assert (await after.claim(kept, operator="sam", bots=None)).state == "claimed"
    finally:
        await after.drain()
        await engine.dispose()


async def test_a_nul_in_a_reason_is_stored_without_it_not_a_500(world):
    """A reason is free text from the operator API (`{"reason": "a\\u0000b"}` is valid JSON) or the
    model's `escalate_to_human`: PostgreSQL refused the NUL, and claim, release and resolve were 500s."""
    sessions, escalations, _, _ = world
    cid = await _conversation(sessions)
    async with sessions() as session, session.begin():
        conversation = await session.get(Conversation, cid)
        eid = (await escalations.open_in(session, conversation=conversation, reason="model: re\x00fund")).id
    await escalations.claim(eid, operator="sam", bots=None, reason="mine\x00")
    await escalations.release(eid, operator="sam", bots=None, reason="lunch\x00")
    await escalations.claim(eid, operator="kim", bots=None)
    await escalations.resolve(eid, operator="kim", bots=None, reason="do\x00ne")
    assert (await escalations.get(eid, bots=None)).reason == "model: refund"
    reasons = [e.reason for e in await escalations.events(eid)]
    assert reasons == ["model: refund", "mine", "lunch", "", "done"]


async def test_every_escalation_log_line_names_its_conversation(world):
    """An operator follows a conversation through the log by its id: `escalation.opened` carried it, but
    the claim, reply, release, take-over and hand-back lines did not, so a grep by conversation_id lost
    the whole operator side."""
    import structlog

    sessions, escalations, _, _ = world
    cid = await _conversation(sessions)
    with structlog.testing.capture_logs() as logs:
        eid = await _open(sessions, escalations, cid)
        await escalations.claim(eid, operator="sam", bots=None)
        await escalations.reply(eid, operator="sam", bots=None, text="Looking into it.")
        await escalations.release(eid, operator="sam", bots=None)
        await escalations.claim(eid, operator="kim", bots=None)
        await escalations.claim(eid, operator="sam", bots=None, take_over=True)
        await escalations.resolve(eid, operator="sam", bots=None)
    lines = [e for e in logs if e["event"].startswith("escalation.")]
    assert [e["event"] for e in lines] == [
        "escalation.opened", "escalation.claimed", "escalation.reply", "escalation.released",
        "escalation.claimed", "escalation.taken_over", "escalation.resolved"]
    assert all(e.get("conversation_id") == cid and e.get("bot") == "acme" for e in lines), lines


async def test_an_escalation_rolled_back_with_its_turn_is_neither_logged_nor_counted(world):
    """The worker opens an escalation inside the turn's transaction; when that transaction fails (the
    database away at commit), the turn is taken again and escalates again. `escalation.opened` and the
    counter came before the commit, so one escalation was logged and counted twice, once under an id
    that was never stored."""
    import structlog

    sessions, escalations, _, metrics = world
    cid = await _conversation(sessions)
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(RuntimeError):
            async with sessions() as session, session.begin():
                conversation = await session.get(Conversation, cid)
                await escalations.open_in(session, conversation=conversation, reason="every model failed")
                raise RuntimeError("the commit never happens")
        assert [e for e in logs if e["event"] == "escalation.opened"] == []
        assert metrics.escalations.labels(bot="acme")._value.get() == 0
        eid = await _open(sessions, escalations, cid)
    [opened] = [e for e in logs if e["event"] == "escalation.opened"]
    assert opened["escalation_id"] == eid and opened["conversation_id"] == cid
    assert metrics.escalations.labels(bot="acme")._value.get() == 1
