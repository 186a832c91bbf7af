"""Edits of a waiting message handled out of order (a retry, two webhooks at once, two replicas): each is ordered
by its own date (`InboundMessage.revision`), so the newest text stands, as Telegram's `edit_date` already did
(tests/storage/test_inbox.py)."""

from __future__ import annotations

from channels.discord_parse import classify_gateway_message, revision_of
from gateway.inbox import Inbox
from gateway.models import InboundMessage
from storage.engine import create_engine, session_factory
from storage.models import Message
from tests.channels.slack_helpers import make_adapter


async def _in_order_applied(migrated_url: str, original: InboundMessage, *edits: InboundMessage) -> tuple[str, str]:
    """Store `original`, hand it `edits` in that order: its (text, status) then."""
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    inbox = Inbox(sessions)
    stored = await inbox.accept("acme", original)
    for edit in edits:
        assert await inbox.accept("acme", edit) is None
    async with sessions() as session:
        message = await session.get(Message, stored.message_id)
    await engine.dispose()
    return message.text, message.status


async def test_a_slack_edit_handled_after_a_newer_one_does_not_undo_it(migrated_url):
    """Slack's `message_changed` carried no order: of two edits of a waiting message handled out of order, the older
    one, handled last, put back the text the member had replaced. Each is ordered by its own `edited.ts`, as the
    edited `app_mention` already was."""
    adapter = make_adapter()
    original = {"type": "message", "channel": "D1", "channel_type": "im", "user": "U1", "text": "teh price?",
                "ts": "1700000001.000100"}

    def parsed(event_id: str, event: dict) -> InboundMessage:
        [message] = adapter.parse_payload({"type": "event_callback", "team_id": "T1", "event_id": event_id,
                                           "event": event}).messages
        return message

    def edit(event_id: str, text: str, edited_ts: str) -> InboundMessage:
        return parsed(event_id, {"type": "message", "subtype": "message_changed", "channel": "D1", "hidden": True,
                                 "ts": edited_ts, "previous_message": original,
                                 "message": {**original, "text": text, "edited": {"user": "U1", "ts": edited_ts}}})

    newer, older = edit("Ev3", "the price of the Plus plan?", "1700000090.000200"), edit("Ev2", "the price?",
                                                                                        "1700000060.000100")
    assert await _in_order_applied(migrated_url, parsed("Ev1", original), newer, older) == (
        "the price of the Plus plan?", "pending")


async def test_a_discord_edit_handled_after_a_newer_one_does_not_undo_it(migrated_url):
    """A Discord MESSAGE_UPDATE carried no order either: each is ordered by its `edited_timestamp`."""
    payload = {"id": "1500000000000000091", "type": 0, "channel_id": "1600000000000000091", "content": "teh price?",
               "timestamp": "2026-11-29T10:00:00+00:00", "mentions": [], "attachments": [], "flags": 0,
               "author": {"id": "1300000000000000077", "username": "bo", "global_name": "Bob", "bot": False}}

    def edit(text: str, edited_at: str) -> InboundMessage:
        return revision_of(int(payload["id"]), int(payload["channel_id"]),
                           {**payload, "content": text, "edited_timestamp": edited_at},
                           event="MESSAGE_UPDATE", bot_user_id="999")

    newer = edit("the price of the Plus plan?", "2026-11-29T10:01:30.000200+00:00")
    older = edit("the price?", "2026-11-29T10:01:00+00:00")
    original = classify_gateway_message(payload, bot_user_id="999")
    assert await _in_order_applied(migrated_url, original, newer, older) == ("the price of the Plus plan?", "pending")
