"""A shared live location's moves (Telegram edits of its message, `InboundMessage.live_location`): its record
takes the newest place, answered or not, and nothing is answered again."""

from __future__ import annotations

from sqlalchemy import update
from structlog.testing import capture_logs

from gateway.inbox import Inbox
from storage.models import Message
from tests.channels.telegram_helpers import _update
from tests.statement_log import StatementLog
from tests.storage.test_inbox import _count, _parsed

HERE, THERE = {"latitude": 52.52, "longitude": 13.405}, {"latitude": 52.5163, "longitude": 13.3777}


async def test_a_live_location_moved_while_its_message_waits_moves_its_shared_values_too(sessions):
    """Telegram sends each move of a live location as an edit of its message: the text took the new place, and
    `meta.shared` (what operators and tools read) kept the old one."""
    inbox = Inbox(sessions)
    stored = await inbox.accept("acme", _parsed(_update("", update_id=5001, location=HERE | {"live_period": 900})))
    moved = _update("", update_id=5002, location=THERE | {"live_period": 900}, edit_date=1700000030)["message"]
    assert await inbox.accept("acme", _parsed({"update_id": 5002, "edited_message": moved})) is None
    async with sessions() as session:
        message = await session.get(Message, stored.message_id)
    assert (message.text, message.meta["shared"]) == ("Shared location: (52.5163, 13.3777)", {"location": THERE})


async def test_a_live_location_moved_after_its_answer_moves_the_record_and_is_no_ignored_edit(sessions):
    """Once its message was answered, each move (every few seconds, for up to 8 hours) was logged at info as an
    edit "not answered again", and the record kept the place it had when answered. A move is no edit to answer:
    the record takes the newest place, nothing is stored to answer, and the log at info says nothing of it."""
    woken: list[int] = []
    inbox = Inbox(sessions, on_stored=woken.append)
    stored = await inbox.accept("acme", _parsed(_update("", update_id=5001, location=HERE | {"live_period": 900})))
    async with sessions() as session, session.begin():
        await session.execute(update(Message).where(Message.id == stored.message_id).values(status="done"))
    with capture_logs() as logs:
        for n in (1, 2):
            move = _update("", location=THERE | {"live_period": 900, "heading": n}, edit_date=1700000000 + 30 * n)
            assert await inbox.accept("acme", _parsed({"update_id": 5001 + n, "edited_message": move["message"]})) is None
    async with sessions() as session:
        message = await session.get(Message, stored.message_id)
    assert (message.text, message.meta["shared"], message.status) == ("Shared location: (52.5163, 13.3777)",
                                                                      {"location": THERE}, "done")
    assert await _count(sessions, Message) == 1 and woken == [stored.conversation_id]  # the question's only
    assert [e for e in logs if e["log_level"] != "debug"] == []


async def test_a_live_location_moved_after_its_answer_is_one_update(engine, sessions):
    """A move came every few seconds for hours, and one of a message long answered cost four statements: the
    message looked up, its conversation's row and its own locked, then updated. The locks keep a move in step
    with a turn reading the message, which only a pending message has: an answered one is updated in one
    statement, and still only by a newer move."""
    inbox = Inbox(sessions)
    stored = await inbox.accept("acme", _parsed(_update("", update_id=5001, location=HERE | {"live_period": 900})))
    async with sessions() as session, session.begin():
        await session.execute(update(Message).where(Message.id == stored.message_id).values(status="done"))
        before = (await session.get(Message, stored.message_id)).meta

    def move(update_id: int, place: dict, edit_date: int):
        message = _update("", location=place | {"live_period": 900}, edit_date=edit_date)["message"]
        return _parsed({"update_id": update_id, "edited_message": message})

    log = StatementLog(engine)
    assert await inbox.accept("acme", move(5003, THERE, 1700000060)) is None
    assert [s for s in log.statements if " " in s] == ["UPDATE messages"]
    await inbox.accept("acme", move(5002, HERE, 1700000030))  # delivered late: the record keeps the newer place
    async with sessions() as session:
        message = await session.get(Message, stored.message_id)
    assert (message.text, message.status) == ("Shared location: (52.5163, 13.3777)", "done")
    assert message.meta == before | {"shared": {"location": THERE}, "revision": [1700000060, 5003]}
