"""An edit that lands while its message is being answered (Inbox._revise, MessageHandler._finish): the
answer to the text as read goes out, and the edited text is answered next, once, as a message of its own."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from channels.shared_content import location_line
from gateway.bot_settings import RateLimitSettings
from gateway.models import ConversationRef, InboundMessage, Sender
from gateway.ratelimit import RateLimiter
from storage import repositories as repo
from storage.engine import create_engine
from storage.models import Message
from tests.worker_rig import EchoPipeline, build_worker, until_waiting_for_a_lock

TYPO = "How much does the Plsu plam cots?"
FIXED = "How much does the Plus plan cost?"
QUESTION = InboundMessage(channel="telegram", external_id="tg-1", sender=Sender("42"),
                          conversation=ConversationRef("telegram", chat="42"), text=TYPO)


async def _edited_mid_answer(url: str, *edits: str | None, question: InboundMessage = QUESTION,
                             limiter=None, edit_raw: dict | None = None) -> tuple[EchoPipeline, list, list[Message]]:
    """`question` answered by a worker while the customer edits it to each of `edits` in turn (None: deletes
    it; `edit_raw`, each edit's raw payload) as the model writes: what the pipeline read (and `commands`, each
    turn's), what was sent, and the inbound rows as stored."""
    engine, sessions, inbox, worker, adapter = build_worker(url, None, channels=("telegram",))
    worker.handler.rate_limiter = limiter

    class EditedWhileWriting(EchoPipeline):
        commands: list[str | None] = []

        async def handle(self, turn):
            self.commands.append(turn.command)
            if not self.seen:  # the question's turn
                for n, text in enumerate(edits):
                    await inbox.accept("acme", replace(question, external_id=f"edit-{n}", text=text or "", raw=edit_raw or {},
                                                       revises="tg-1", deleted=text is None))
                # A tool ran after the edits, and was saved on the message (`meta`, the tool journal).
                await turn.tool_journal.record("lookup", {}, result="ok", error=None, escalate=None)
            return await super().handle(turn)

    pipeline = worker.handler._pipeline = EditedWhileWriting(delay=0)
    await inbox.accept("acme", question)
    await worker.run_until_idle(timeout=30)
    async with sessions() as session:
        inbound = list((await session.execute(
            select(Message).where(Message.direction == "in").order_by(Message.id))).scalars())
    await engine.dispose()
    return pipeline, adapter.sent, inbound


async def test_an_edit_while_the_answer_is_written_is_answered_after_it(migrated_url):
    """It was applied to the row, then the row was marked done with the answer to the old text: the
    corrected question was never answered."""
    pipeline, sent, [question, edit] = await _edited_mid_answer(migrated_url, "How much?", FIXED)
    assert [text for _, text in pipeline.seen] == [TYPO, FIXED]  # the last edit, once
    assert [text for _, text in sent] == [f"echo: {TYPO}", f"echo: {FIXED}"]
    assert (question.text, question.status) == (TYPO, "done")  # the record shows what was answered
    assert (edit.text, edit.status, edit.meta["edit_of"]) == (FIXED, "done", question.id)
    assert edit.meta["platform_message_id"] == "tg-1" and "streamed" not in edit.meta and edit.attempts == 1


async def test_an_edit_back_to_the_text_answered_is_not_answered_again(migrated_url):
    pipeline, sent, [question] = await _edited_mid_answer(migrated_url, FIXED, TYPO)
    assert [text for _, text in sent] == [f"echo: {TYPO}"]
    assert question.status == "done"


async def test_a_deletion_while_the_answer_is_written_drops_the_answer(migrated_url):
    pipeline, sent, [question] = await _edited_mid_answer(migrated_url, None)
    assert sent == [] and question.status == "ignored"


async def test_an_edit_of_a_command_into_a_question_is_answered_as_a_question(migrated_url):
    """The edit queued after "/start"'s answer kept the original's `meta.command`: the question the
    customer turned it into got the greeting again. (A tool's journal, saved on the message after the edit,
    wrote back the command the turn had read.)"""
    start = replace(QUESTION, text="", raw={"command": "start"})
    pipeline, sent, [question, edit] = await _edited_mid_answer(migrated_url, FIXED, question=start)
    assert pipeline.commands == ["start", None]
    assert (question.text, question.meta["command"]) == ("", "start")  # the record shows what was answered
    assert edit.text == FIXED and "command" not in edit.meta


async def test_a_live_location_moved_while_it_is_answered_is_not_answered_again(migrated_url):
    """Each move of a Telegram live location is an edit (every few seconds, for up to 8 hours): a move landing
    while the answer was written was answered after it, and the next move during that answer again, a
    stream of "Shared location" answers. The move is no new question: the record takes the newest place,
    text and `meta.shared` alike, and nothing more is answered. (Its edits are moves as the parser flags them,
    `InboundMessage.live_location`.)"""
    here, there = {"latitude": 52.52, "longitude": 13.405}, {"latitude": 52.5163, "longitude": 13.3777}
    asked = replace(QUESTION, text=location_line(here), raw={"shared": {"location": here}}, live_location=True)
    pipeline, sent, [question] = await _edited_mid_answer(
        migrated_url, location_line(there), question=asked, edit_raw={"shared": {"location": there}})
    assert [text for _, text in pipeline.seen] == [location_line(here)] and len(sent) == 1
    assert (question.text, question.meta["shared"], question.status) == (location_line(there), {"location": there},
                                                                         "done")


async def test_an_edit_answered_after_its_message_is_not_counted_against_the_rate_limit(migrated_url):
    """It was one more message of the contact's: at one a minute, the corrected question got the notice."""
    limiter = RateLimiter({"acme": RateLimitSettings(per_contact_per_minute=1)})
    pipeline, sent, [question, edit] = await _edited_mid_answer(migrated_url, FIXED, limiter=limiter)
    assert [text for _, text in sent] == [f"echo: {TYPO}", f"echo: {FIXED}"]
    assert edit.error is None


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_an_edit_as_a_burst_s_answer_is_stored_does_not_deadlock(migrated_url, monkeypatch):
    """The answer's store locks the conversation, then the first piece, then each follower; the edit locked
    every pending message of the chat in the scan's order (the first piece, updated by its attempt count,
    last), then the conversation: each held what the other waited for, and PostgreSQL aborted one."""
    await _scanned_in_stored_order(migrated_url)
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, EchoPipeline(delay=0), channels=("telegram",))
    pieces = [replace(QUESTION, external_id=f"tg-{n}", text=text)
              for n, text in enumerate(("my order is late", "and nobody answers", "why?"))]
    accepted = [await inbox.accept("acme", piece) for piece in pieces]
    edit = replace(pieces[0], external_id="edit-0", text="my order 123 is late", revises="tg-0")
    get, editing = AsyncSession.get, []

    async def get_as_the_customer_edits(self, entity, ident, **kwargs):
        if entity is Message and ident == accepted[1].message_id and kwargs.get("with_for_update") and not editing:
            editing.append(asyncio.create_task(inbox.accept("acme", edit)))
            await until_waiting_for_a_lock(engine)  # the edit holds what it got, and waits for the rest
        return await get(self, entity, ident, **kwargs)

    monkeypatch.setattr(AsyncSession, "get", get_as_the_customer_edits)
    async with sessions() as session:
        first = await repo.next_pending(session, conversation_id=accepted[0].conversation_id)
    outcomes = await asyncio.gather(worker.handler.handle(first), return_exceptions=True)
    outcomes += await asyncio.gather(*editing, return_exceptions=True)  # started as the answer was stored
    await engine.dispose()
    assert not [o for o in outcomes if isinstance(o, BaseException)]
    assert [text for _, text in adapter.sent] == ["echo: my order is late\nand nobody answers\nwhy?"]


async def _scanned_in_stored_order(url: str) -> None:
    """The database reads the tables where their rows lie (no index scans): on a busy table an updated row moves
    to a later page, and comes after the rows stored since (a small table is read by its index, in id order)."""
    engine = create_engine(url)
    async with engine.begin() as connection:
        for plan in ("indexscan", "bitmapscan"):
            await connection.execute(text(f'ALTER DATABASE "{url.rsplit("/", 1)[1]}" SET enable_{plan} = off'))
    await engine.dispose()
