"""`gateway forget` and the edits that come after it: an edit of a forgotten message must not store it again.

A private chat's edit of a message never stored is the question (its first delivery failed, `may_still_come`), and
so is a group member's edit that adds the bot's @mention: after a forget, the edit of one of the person's messages
found no message and was stored, with the text the forget had just erased."""

from __future__ import annotations

from sqlalchemy import func, select

from gateway.inbox import Inbox
from gateway.models import InboundMessage, utcnow
from gateway.retention import forget_contact
from storage.models import Contact, Message
from tests.storage.test_inbox import _parsed, _update

PERSON = "367699112"  # the sender (and private chat) of `_update`'s messages


async def _count(sessions, model) -> int:
    async with sessions() as session:
        return (await session.execute(select(func.count()).select_from(model))).scalar_one()


def _private_edit(update_id: int, text: str, *, date: int, message_id: int = 42) -> InboundMessage:
    message = _update(text, date=date, edit_date=date + 5, message_id=message_id)["message"]
    return _parsed({"update_id": update_id, "edited_message": message})


def _group(update_id: int, text: str, *, edit: bool) -> InboundMessage:
    mention = [{"type": "mention", "offset": 0, "length": len("@support_bot")}]
    message = _update(text, update_id=update_id, chat_type="supergroup", message_id=20, entities=mention,
                      **({"edit_date": 1700000060} if edit else {}))["message"]
    return _parsed({"update_id": update_id, ("edited_message" if edit else "message"): message})


async def test_an_edit_of_a_forgotten_private_message_does_not_store_it_again(sessions):
    inbox = Inbox(sessions)
    date = int(utcnow().timestamp()) - 60  # within NEVER_STORED_EDIT_WINDOW: an edit of a message never stored is a question
    await inbox.accept("acme", _parsed(_update("my card is 4111 1111", update_id=880001, date=date)))
    report = await forget_contact(sessions, channel="telegram", user=PERSON)
    assert report.messages == 1
    assert await inbox.accept("acme", _private_edit(880002, "my card is 4111 1111 1111", date=date)) is None
    assert (await _count(sessions, Message), await _count(sessions, Contact)) == (0, 0)
    # Another message of the chat, never stored, is still the question its edit asks.
    stored = await inbox.accept("acme", _private_edit(880003, "the price?", date=date, message_id=43))
    assert stored is not None and not stored.duplicate


async def test_an_edit_of_a_forgotten_group_message_does_not_store_it_again(sessions):
    inbox = Inbox(sessions)
    await inbox.accept("acme", _group(880011, "@support_bot my address is 1 Main St", edit=False))
    await forget_contact(sessions, channel="telegram", user=PERSON)
    assert await inbox.accept("acme", _group(880012, "@support_bot my address is 2 Main St", edit=True)) is None
    assert (await _count(sessions, Message), await _count(sessions, Contact)) == (0, 0)


async def test_forget_keeps_no_content_of_the_messages_it_remembers(sessions):
    """What forget keeps to know a message is gone holds nothing the person wrote, nor their id or the chat's."""
    from storage.models import ForgottenMessage

    await Inbox(sessions).accept("acme", _parsed(_update("my card is 4111", update_id=880021,
                                                         date=int(utcnow().timestamp()))))
    await forget_contact(sessions, channel="telegram", user=PERSON)
    async with sessions() as session:
        [row] = (await session.execute(select(ForgottenMessage))).scalars().all()
    assert set(ForgottenMessage.__table__.columns.keys()) == {"key", "forgotten_at"}
    assert len(row.key) == 64 and PERSON not in row.key  # a sha256, in hex


async def test_the_retention_job_drops_a_forgotten_messages_key_after_the_days_it_is_kept(sessions):
    from datetime import timedelta

    from storage.forgotten import FORGOTTEN_KEPT_DAYS, drop_old_forgotten, remember_forgotten, was_forgotten

    await Inbox(sessions).accept("acme", _parsed(_update("hi", update_id=880031, date=int(utcnow().timestamp()))))
    async with sessions() as session, session.begin():
        assert await remember_forgotten(session, Message.id.is_not(None)) == 1
    where = {"bot": "acme", "channel": "telegram", "chat": PERSON, "platform_message_id": "42"}
    async with sessions() as session, session.begin():
        assert await drop_old_forgotten(session, utcnow() + timedelta(days=FORGOTTEN_KEPT_DAYS - 1)) == 0
        assert await was_forgotten(session, **where)
        assert await drop_old_forgotten(session, utcnow() + timedelta(days=FORGOTTEN_KEPT_DAYS, hours=1)) == 1
        assert not await was_forgotten(session, **where)


async def test_the_scheduled_retention_run_drops_old_forgotten_keys_and_keeps_recent_ones(sessions):
    """`run_retention` is what drops them in production: a key older than `FORGOTTEN_KEPT_DAYS` goes, a newer stays."""
    from datetime import timedelta

    from sqlalchemy import update

    from gateway.retention import run_retention
    from gateway.settings import Settings
    from storage.forgotten import FORGOTTEN_KEPT_DAYS, forgotten_key
    from storage.models import ForgottenMessage

    inbox = Inbox(sessions)
    for update_id, message_id in ((880041, 50), (880042, 51)):
        await inbox.accept("acme", _parsed(_update("hi", update_id=update_id, message_id=message_id,
                                                   date=int(utcnow().timestamp()))))
    await forget_contact(sessions, channel="telegram", user=PERSON)
    old = forgotten_key("acme", "telegram", PERSON, "50")
    async with sessions() as session, session.begin():
        await session.execute(update(ForgottenMessage).where(ForgottenMessage.key == old).values(
            forgotten_at=utcnow() - timedelta(days=FORGOTTEN_KEPT_DAYS, hours=1)))
    await run_retention(sessions, Settings(bots=[{"name": "acme"}]), knowledge=None)
    async with sessions() as session:
        kept = (await session.execute(select(ForgottenMessage.key))).scalars().all()
    assert kept == [forgotten_key("acme", "telegram", PERSON, "51")]
