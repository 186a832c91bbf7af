"""What a stored message's `meta` keeps from the platform (`inbound_meta`), and the part of it that an edit of
the text changes (`said`, `with_said`): the command it is, what it shares."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, or_

from gateway.models import InboundMessage
from storage.models import Message
from storage.text import storable_json


def inbound_meta(message: InboundMessage) -> dict[str, Any]:
    """What the reply needs from the raw payload: the platform message id to answer, a command, what was
    shared (a location), and who sent it (a conversation's contact is its first sender; in a shared thread
    others write too)."""
    meta: dict[str, Any] = {"sender": message.sender.external_id}
    platform_id = message.raw.get("message_id") if isinstance(message.raw, dict) else None
    meta["platform_message_id"] = str(platform_id) if platform_id is not None else message.external_id
    command = message.raw.get("command") if isinstance(message.raw, dict) else None
    if isinstance(command, str):
        meta["command"] = command[:32]
    payload = message.raw.get("start_payload") if isinstance(message.raw, dict) else None
    if isinstance(payload, str) and payload:  # a Telegram deep link's: where the customer came from
        meta["start_payload"] = payload[:64]
    shared = message.raw.get("shared") if isinstance(message.raw, dict) else None
    if isinstance(shared, dict):  # what a shared location or contact card held (channels/whatsapp_media.py)
        meta["shared"] = shared
    interaction = message.raw.get("interaction") if isinstance(message.raw, dict) else None
    if isinstance(interaction, dict):  # a Discord `/ask`'s token, for its answer after a restart: a credential
        meta["interaction"] = interaction
    if message.needs_reply:
        meta["needs_reply"] = True
    if message.sequence is not None:
        meta["sequence"] = message.sequence
    if message.live_location:  # its text changes only as the place moves, which no one answers
        meta["live_location"] = True
    if message.revision is not None:  # stored from an edit: a later edit of it must be newer (`Inbox._revise`)
        meta["revision"] = list(message.revision)
    revises = message.raw.get("revises") if isinstance(message.raw, dict) else None
    if isinstance(revises, str):  # an edit stored as a message (`InboundMessage.stored_if_answered`)
        meta["revises"], meta["deleted"] = revises, bool(message.raw.get("deleted"))
    # The raw payload is as the platform sent it (a form field may hold NUL): PostgreSQL's jsonb, which the
    # one-statement merge of a key casts `meta` to (storage/meta_keys.py), refuses what its json took.
    return storable_json(meta)


def first_stored_edit_key(chat: str, platform_message_id: str) -> str:
    """The delivery key of a message stored from an edit because its first version never was: one per
    platform message (ids are per chat), whichever of its edits and redeliveries comes first. The first
    version's own delivery, retried after it, is its duplicate (`repositories.store_inbound`)."""
    return f"edit-of:{chat}:{platform_message_id}"


SAID_META = ("command", "shared")  # what meta says of the text: the bot command it is, what it shares


def said(meta: dict[str, Any] | None) -> dict[str, Any]:
    """The part of `meta` an edit of the text changes (`SAID_META`)."""
    return {k: v for k, v in (meta or {}).items() if k in SAID_META}


def with_said(meta: dict[str, Any] | None, text_meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` holding what `text_meta` says of a text (its command, what it shares; none it lacks): "/start"
    edited into a question is no command, a live location moved shares its new place."""
    return {k: v for k, v in (meta or {}).items() if k not in SAID_META} | said(text_meta)


PLATFORM_META = ("sender", "platform_message_id", "command", "start_payload", "shared", "needs_reply",
                  "sequence", "revision", "live_location", "traceparent")
"""What `inbound_meta` (and the inbox) keep on a message from the platform; the rest of `meta` is what
attempts at answering it did (a streamed draft, tool runs), which a message of its own starts without."""


def stored_sender():
    """An inbound message's sender: its column, or the `meta.sender` alone that a gateway older than 0016
    stores it with (one still running on this schema: a rollback, a replica not yet replaced)."""
    return func.coalesce(Message.sender, Message.meta["sender"].as_string())


def sent_by(user: str):
    """Inbound messages `user` sent, their sender in the column or in `meta` alone (`stored_sender`), written so
    that each half is served by an index (`ix_messages_sender`, `ix_messages_sender_unknown`)."""
    return (Message.direction == "in") & or_(
        Message.sender == user, Message.sender.is_(None) & (Message.meta["sender"].as_string() == user))
