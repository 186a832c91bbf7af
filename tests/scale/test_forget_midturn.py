"""`gateway forget` while the contact's message is being answered: the turn in hand ends quietly, nothing is
sent to the forgotten person, and the worker goes on with the others."""

from __future__ import annotations

import structlog
from sqlalchemy import func, select

from gateway.pipeline import PipelineResult
from gateway.retention import forget_contact
from storage.models import Contact, Conversation, Message
from tests.worker_rig import EchoPipeline, build_worker, chat_message


class ForgetMidTurn(EchoPipeline):
    """Answers as EchoPipeline does, but alice's turn asks for her data to be erased while the model writes."""

    sessions = None

    async def handle(self, turn):
        if turn.text.startswith("alice"):
            await forget_contact(self.sessions, channel="web", user="alice")
            return PipelineResult(reply="your order ships tomorrow, alice")
        return await super().handle(turn)


async def test_a_contact_forgotten_while_their_message_is_answered_gets_nothing_and_nothing_crashes(migrated_url):
    pipeline = ForgetMidTurn()
    engine, sessions, inbox, worker, adapter = build_worker(migrated_url, pipeline)
    pipeline.sessions = sessions
    try:
        await inbox.accept("acme", chat_message("alice", 0))
        await inbox.accept("acme", chat_message("bob", 0))
        with structlog.testing.capture_logs() as logs:
            await worker.run_until_idle(timeout=30)
        assert [text for _, text in adapter.sent] == ["echo: bob #0"]
        assert [e["event"] for e in logs if e["log_level"] in ("error", "critical", "exception")] == []
        async with sessions() as session:
            left = [(await session.execute(select(func.count()).select_from(model).where(where))).scalar_one()
                    for model, where in ((Conversation, Conversation.chat == "alice"),
                                         (Message, Message.text.contains("alice")),
                                         (Contact, Contact.external_id == "alice"))]
        assert left == [0, 0, 0]
    finally:
        await engine.dispose()
