"""An edit that lands while its message is being answered (Inbox._revise, MessageHandler._finish): the
answer to the text as read goes out, and the edited text is answered next, once, as a message of its own."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import select

from gateway.models import ConversationRef, InboundMessage, Sender
from storage.models import Message
from tests.worker_rig import EchoPipeline, build_worker

TYPO = "How much does the Plsu plam cots?"
FIXED = "How much does the Plus plan cost?"
QUESTION = InboundMessage(channel="telegram", external_id="tg-1", sender=Sender("42"),
                          conversation=ConversationRef("telegram", chat="42"), text=TYPO)


async def _edited_mid_answer(url: str, *edits: str | None) -> tuple[EchoPipeline, list, list[Message]]:
    """QUESTION answered by a worker while the customer edits it to each of `edits` in turn (None: deletes
    it) as the model writes: what the pipeline read, what was sent, and the inbound rows as stored."""
    engine, sessions, inbox, worker, adapter = build_worker(url, None, channels=("telegram",))

    class EditedWhileWriting(EchoPipeline):
        async def handle(self, turn):
            if turn.text == TYPO:
                for n, text in enumerate(edits):
                    await inbox.accept("acme", replace(QUESTION, external_id=f"edit-{n}", text=text or "",
                                                       revises="tg-1", deleted=text is None))
            return await super().handle(turn)

    pipeline = worker.handler._pipeline = EditedWhileWriting(delay=0)
    await inbox.accept("acme", QUESTION)
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
