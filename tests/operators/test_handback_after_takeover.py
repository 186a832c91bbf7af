"""An operator takes a conversation (POST /v1/conversations/{id}/claim) while the bot answers the customer's
question: the bot's draft is dropped. Handed back without an operator's reply, the question is answered by
the bot, once; unless it was itself the customer's request for a person (SQLite and PostgreSQL)."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
from sqlalchemy import select

from gateway.delivery.outbox import Outbox
from gateway.escalation.handback import DRAFT_DROPPED
from gateway.escalation.handoff import Escalations
from gateway.events import EventBus
from gateway.models import ConversationRef, InboundMessage, Sender
from gateway.pipeline.core import PipelineResult
from gateway.settings import BotSettings, Settings
from gateway.worker import Worker
from storage.engine import create_engine, session_factory
from storage.models import Conversation, Message
from tests.worker_rig import RecordingAdapter, chat_message, worker_settings


class TakenOverWhileAnswering:
    """The first turn: kim takes the conversation while the model writes. Then it answers 'echo: <text>'."""

    def __init__(self, *, asks_for_a_person: bool = False, takes_over: bool = True,
                 resolved_while_relayed: bool = False, first_reply: str | None = None) -> None:
        self.escalations: Escalations | None = None
        self.asks_for_a_person = asks_for_a_person
        self.takes_over = takes_over
        self.resolved_while_relayed = resolved_while_relayed  # kim hands back while the worker relays it
        self.handed_back = False
        self.turns: list[str] = []
        self.first_reply = first_reply  # the bot's reply to an earlier message (`_run`'s `earlier`), not counted

    async def handle(self, turn) -> PipelineResult:
        if turn.state != "bot":
            if self.resolved_while_relayed:
                self.resolved_while_relayed, self.handed_back = False, True
                escalation = (await self.escalations.find(bots=None))[0]
                await self.escalations.resolve(escalation.id, operator="kim", bots=None)
            return PipelineResult(reply=None, answered=False)
        if self.first_reply is not None:
            reply, self.first_reply = self.first_reply, None
            return PipelineResult(reply=reply, answered=False)
        self.turns.append(turn.text)
        if len(self.turns) == 1 and self.takes_over:
            await self.escalations.claim_conversation(turn.conversation_id, operator="kim", bots=None)
            if self.asks_for_a_person:
                return PipelineResult(reply="A person will be with you.", escalate="customer asked: 'a human'",
                                      trigger="customer_asked", answered=False)
        return PipelineResult(reply=f"echo: {turn.text}")


@contextlib.asynccontextmanager
async def _rig(url: str, pipeline: TakenOverWhileAnswering, settings: Settings, channel: str):
    """(sessions, escalations, worker, inbox) on the database at `url`: the worker runs `pipeline`, its escalations
    its hooks, and sends acme's `channel` replies to a recording adapter."""
    engine = create_engine(url)
    sessions = session_factory(engine)
    bus = EventBus()
    escalations = Escalations(sessions, settings=settings, bus=bus)
    pipeline.escalations = escalations
    outbox = Outbox(sessions, adapters={("acme", channel): RecordingAdapter()}, bus=bus)
    worker = Worker(sessions, settings, pipeline=pipeline, outbox=outbox, bus=bus, lease_seconds=5,
                    poll_interval=0.05, concurrency=4, on_escalate=escalations.open_in,
                    on_handoff_message=escalations.customer_message)
    from gateway.inbox import Inbox

    try:
        yield sessions, escalations, worker, Inbox(sessions, on_stored=worker.notify)
    finally:
        await engine.dispose()


async def _settled(sessions, escalations: Escalations, worker: Worker, accepted) -> tuple[list[Message], Conversation]:
    """After the hand-back: the worker's hook for `accepted`, late, then the worker until idle. The conversation's
    messages, in order, and the conversation."""
    await escalations.customer_message(accepted.message_id)  # the worker's hook, late: never a second answer
    await worker.run_until_idle(timeout=20)
    await escalations.drain()
    async with sessions() as session:
        rows = (await session.execute(select(Message).where(
            Message.conversation_id == accepted.conversation_id).order_by(Message.id))).scalars().all()
        return rows, await session.get(Conversation, accepted.conversation_id)


async def _run(url: str, pipeline: TakenOverWhileAnswering, steps, text: str | None = None,
               settings: Settings | None = None) -> tuple[list[Message], Conversation, list]:
    """The customer's message, taken over while answered; then `steps(escalations, escalation_id)`; then the
    worker again. (The customer's messages, the bot's replies in order, the conversation.) With the pipeline's
    `first_reply`, an earlier message of theirs, answered with it, comes first."""
    pipeline_first_reply = pipeline.first_reply
    async with _rig(url, pipeline, settings or worker_settings(), "web") as (sessions, escalations, worker, inbox):
        if pipeline.first_reply is not None:
            await inbox.accept("acme", chat_message("takeover", 0))
            await worker.run_until_idle(timeout=20)
        message = chat_message("takeover", 1)
        accepted = await inbox.accept("acme", dataclasses.replace(message, text=text) if text else message)
        if not pipeline.takes_over:  # before the worker read it
            await escalations.claim_conversation(accepted.conversation_id, operator="kim", bots=None)
        await worker.run_until_idle(timeout=20)
        escalation = (await escalations.find(bots=None))[0]
        assert escalation.operator == "kim" and escalation.state == ("resolved" if pipeline.handed_back else "claimed")
        await steps(escalations, escalation.id)
        rows, conversation = await _settled(sessions, escalations, worker, accepted)
    return ([m for m in rows if m.direction == "in"], conversation,
            [(m.author, m.text, m.reply_to_id) for m in rows
             if m.direction == "out" and m.author != "system" and m.text != pipeline_first_reply])


async def test_a_question_taken_over_and_handed_back_unanswered_is_answered_by_the_bot_once(migrated_url):
    async def hand_back(escalations, eid):
        await escalations.resolve(eid, operator="kim", bots=None)
        await escalations.resolve(eid, operator="kim", bots=None)  # a double press

    pipeline = TakenOverWhileAnswering()
    inbound, conversation, replies = await _run(migrated_url, pipeline, hand_back)
    assert conversation.state == "bot"
    assert replies == [("bot", "echo: takeover #1", inbound[0].id)]
    assert pipeline.turns == ["takeover #1", "takeover #1"] and inbound[0].status == "done"
    assert DRAFT_DROPPED not in (inbound[0].meta or {})  # the mark went with the requeue


async def test_a_question_taken_over_before_the_bot_began_and_handed_back_while_relayed_is_answered(migrated_url):
    """The hand-back commits while the worker relays the message to the operator: the worker finishes it with
    the thread the bot's again, and its hook (not the resolve, which saw it pending) requeues it."""
    async def nothing(escalations, eid):
        pass

    pipeline = TakenOverWhileAnswering(takes_over=False, resolved_while_relayed=True)
    inbound, conversation, replies = await _run(migrated_url, pipeline, nothing)
    assert conversation.state == "bot" and pipeline.turns == ["takeover #1"]
    assert replies == [("bot", "echo: takeover #1", inbound[0].id)]


async def test_a_question_taken_over_before_the_bot_began_and_handed_back_is_answered_once(migrated_url):
    """Taken while it waited for the worker (a chat platform waits seconds for the customer's pause)."""
    async def hand_back(escalations, eid):
        await escalations.resolve(eid, operator="kim", bots=None)

    pipeline = TakenOverWhileAnswering(takes_over=False)
    inbound, _, replies = await _run(migrated_url, pipeline, hand_back)
    assert replies == [("bot", "echo: takeover #1", inbound[0].id)] and pipeline.turns == ["takeover #1"]


async def test_a_question_taken_over_released_then_resolved_unanswered_is_answered_by_the_bot(migrated_url):
    async def release_then_resolve(escalations, eid):
        await escalations.release(eid, operator="kim", bots=None)
        await escalations.resolve(eid, operator="sam", bots=None)

    inbound, _, replies = await _run(migrated_url, TakenOverWhileAnswering(), release_then_resolve)
    assert replies == [("bot", "echo: takeover #1", inbound[0].id)]


async def test_a_question_taken_over_and_answered_by_the_operator_is_not_answered_again(migrated_url):
    async def reply_then_resolve(escalations, eid):
        await escalations.reply(eid, operator="kim", text="Kim here: done.", bots=None)
        await escalations.resolve(eid, operator="kim", bots=None)

    _, _, replies = await _run(migrated_url, TakenOverWhileAnswering(), reply_then_resolve)
    assert [(author, text) for author, text, _ in replies] == [("operator", "Kim here: done.")]


async def test_a_request_for_a_person_taken_over_and_handed_back_is_not_asked_again(migrated_url):
    """Its dropped draft escalated: answered again, it would open an escalation of its own."""
    async def hand_back(escalations, eid):
        await escalations.resolve(eid, operator="kim", bots=None)

    pipeline = TakenOverWhileAnswering(asks_for_a_person=True)
    _, conversation, replies = await _run(migrated_url, pipeline, hand_back)
    assert replies == [] and pipeline.turns == ["takeover #1"] and conversation.state == "bot"


async def test_a_request_for_a_person_taken_over_before_the_bot_began_and_handed_back_is_not_asked_again(
        migrated_url):
    """No draft to tell it by (the bot never read it): the bot's own phrases do. Answered after the hand-back,
    it opened an escalation again, the one the operator had just closed."""
    async def hand_back(escalations, eid):
        await escalations.resolve(eid, operator="kim", bots=None)

    pipeline = TakenOverWhileAnswering(takes_over=False)
    inbound, conversation, replies = await _run(migrated_url, pipeline, hand_back, text="Can I talk to a human?")
    assert replies == [] and pipeline.turns == [] and conversation.state == "bot"
    assert DRAFT_DROPPED not in (inbound[0].meta or {})


async def test_a_long_message_naming_a_person_only_in_its_middle_taken_before_the_bot_began_is_answered(
        migrated_url):
    """The hand-back reads a request for a person as a turn does (gateway.pipeline.core.person_asked_for): of a
    message past the question limit, its first and last 4000 characters. The whole text was read, so a phrase in
    its middle, which the bot reads as no request (too long), left the message unanswered after the hand-back."""
    async def hand_back(escalations, eid):
        await escalations.resolve(eid, operator="kim", bots=None)

    text = f"{'word ' * 900}Can I talk to a human? {'more ' * 900}".strip()
    pipeline = TakenOverWhileAnswering(takes_over=False)
    inbound, conversation, replies = await _run(migrated_url, pipeline, hand_back, text=text)
    assert replies == [("bot", f"echo: {text}", inbound[0].id)] and conversation.state == "bot"


async def test_a_yes_to_the_offer_of_a_person_taken_over_before_the_bot_began_and_handed_back_is_not_answered(
        migrated_url):
    """The bot's last reply offered a person (its `fallback_text`, a question): the customer's "yes" accepts it, as
    a turn reads it (gateway.pipeline.core.accepts_offer). Taken before the bot read it, then handed back, it was
    answered: the turn opened an escalation again, the one the operator had just closed."""
    async def hand_back(escalations, eid):
        await escalations.resolve(eid, operator="kim", bots=None)

    offer = "I don't know that one. Would you like me to get a person from our team?"
    settings = Settings(bots=[BotSettings(name="acme", fallback_text=offer)])
    pipeline = TakenOverWhileAnswering(takes_over=False, first_reply=offer)
    inbound, conversation, replies = await _run(migrated_url, pipeline, hand_back, text="yes", settings=settings)
    assert replies == [] and pipeline.turns == [] and conversation.state == "bot"
    assert inbound[1].status == "done" and DRAFT_DROPPED not in (inbound[1].meta or {})


@pytest.mark.parametrize("takes_over", [True, False], ids=["while_answering", "before_the_bot_began"])
async def test_a_question_sent_in_pieces_taken_over_and_handed_back_is_answered_whole_once(migrated_url, takes_over):
    """A burst (gateway/burst.py) taken over: each piece is marked (`draft_dropped`), while answered (the pieces
    the turn joined) or before the bot began (each relayed alone). The hand-back requeued only the last piece:
    the bot answered "the Plus plan cost?" alone. Now the whole burst goes back, and is answered once, joined."""
    pipeline = TakenOverWhileAnswering(takes_over=takes_over)
    inbound, _, replies = await _burst_handed_back(migrated_url, pipeline, ("How much does", "the Plus plan cost?"))
    joined = "How much does\nthe Plus plan cost?"
    assert replies == [(f"echo: {joined}", inbound[0].id)]
    assert pipeline.turns == ([joined, joined] if takes_over else [joined])
    assert all(m.status == "done" and DRAFT_DROPPED not in (m.meta or {}) for m in inbound)


@pytest.mark.parametrize("pieces", [("I want to talk to a human", "it's urgent"), ("Yes", "a person would be great")],
                         ids=["request", "yes_to_the_offer"])
async def test_a_request_for_a_person_sent_in_pieces_taken_before_the_bot_began_is_not_answered_after_it(
        migrated_url, pieces):
    """Each piece of a burst relayed alone was read alone for a request for a person (or a yes to the bot's offer of
    one): the first was one, the second ("it's urgent") was not, so it was marked to answer, and after the hand-back
    the bot answered it alone. The turn reads the burst joined (`gateway.burst`), and so does the hand-back now."""
    offer = "I don't know that one. Would you like me to get a person from our team?"
    settings = Settings(bots=[BotSettings(name="acme", fallback_text=offer)], worker={"burst_seconds": 0.5})
    pipeline = TakenOverWhileAnswering(takes_over=False, first_reply=offer)
    inbound, conversation, replies = await _burst_handed_back(migrated_url, pipeline, pieces, settings=settings)
    assert replies == [] and pipeline.turns == [] and conversation.state == "bot"
    assert [m.status for m in inbound] == ["done"] * 3


async def _burst_handed_back(url: str, pipeline: TakenOverWhileAnswering, pieces: tuple[str, ...],
                             settings: Settings | None = None) -> tuple[list[Message], Conversation, list]:
    """The customer's burst `pieces` on Telegram, taken over (`pipeline.takes_over`: while answered, else before the
    bot began), then handed back: (the customer's messages, the conversation, the bot's replies (text, reply_to_id)
    but the pipeline's `first_reply`, answered to an earlier message of theirs first)."""
    first_reply = pipeline.first_reply

    def piece(n: int, text: str) -> InboundMessage:
        return InboundMessage(channel="telegram", external_id=f"tg-{n}", sender=Sender("42"), sequence=n,
                              conversation=ConversationRef("telegram", chat="42"), text=text, raw={"message_id": n})

    async with _rig(url, pipeline, settings or worker_settings(burst_seconds=0.5), "telegram") as (
            sessions, escalations, worker, inbox):
        if first_reply is not None:
            await inbox.accept("acme", piece(0, "Can I pay by cheque?"))
            await worker.run_until_idle(timeout=20)
        for n, text in enumerate(pieces, start=1):
            accepted = await inbox.accept("acme", piece(n, text))
        if not pipeline.takes_over:
            await escalations.claim_conversation(accepted.conversation_id, operator="kim", bots=None)
        await worker.run_until_idle(timeout=20)
        escalation = (await escalations.find(bots=None))[0]
        await escalations.resolve(escalation.id, operator="kim", bots=None)
        rows, conversation = await _settled(sessions, escalations, worker, accepted)
    return ([m for m in rows if m.direction == "in"], conversation,
            [(m.text, m.reply_to_id) for m in rows if m.direction == "out" and m.author == "bot" and m.text != first_reply])
