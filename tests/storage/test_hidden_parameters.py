"""A failing statement's error says what failed, never the values it was sent: those are customers' words
and phone numbers, and the error's text reaches the log, a span and a run's error list."""

from __future__ import annotations

import traceback

import pytest
from sqlalchemy.exc import IntegrityError

from storage.engine import create_engine, session_factory
from storage.models import Contact, Conversation, Message

WORDS = "my card number is 4111 1111 1111 1111"
PHONE = "whatsapp:+15550104567"


async def test_a_failing_statement_does_not_carry_its_parameters(migrated_url):
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    async with sessions() as session, session.begin():
        session.add(contact := Contact(channel="whatsapp", external_id=PHONE))
        await session.flush()
        session.add(chat := Conversation(bot="acme", channel="whatsapp", chat=PHONE, contact_id=contact.id))
        await session.flush()
        conversation_id = chat.id

    def _inbound() -> Message:
        return Message(conversation_id=conversation_id, bot="acme", channel="whatsapp", direction="in",
                       external_id="SM1", sender=PHONE, text=WORDS)

    async with sessions() as session, session.begin():
        session.add(_inbound())
    with pytest.raises(IntegrityError) as raised:  # the same delivery again: uq_messages_delivery
        async with sessions() as session, session.begin():
            session.add(_inbound())
    told = "".join(traceback.format_exception(raised.value))
    assert "INSERT INTO messages" in told  # still says which statement failed
    assert WORDS not in told and "4111" not in told
    assert "15550104567" not in told
    await engine.dispose()

