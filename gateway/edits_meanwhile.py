"""A customer's edit that landed while its message was being answered.

The inbox applies an edit to a message while it waits for its answer (`Inbox._revise`), and a message being
answered still waits: the turn read the text before the edit. The answer to what was read goes out, and the
record keeps what was answered; the edited text is stored as a message of its own, answered next, once
(`MessageHandler._finish` calls `queue_edits_made_meanwhile` in the answer's transaction). A live location's
moves are no such edits (`InboundMessage.live_location`): its record keeps the newest place.

A deletion takes the waiting message back (`TAKEN_BACK`), and a turn's answer to it is dropped. A message
relayed as it is (an operator's Slack thread reply, `ThreadRelay.intercept`) cannot be dropped once the relay
began: its deletion meanwhile is stored the same way, with `meta.deleted`, and passed on after it.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from storage import message_meta
from storage import repositories as repo
from storage.models import Message

TAKEN_BACK = "deleted by the customer before it was answered"
"""The `error` of a message its sender deleted while it waited (`Inbox._revise`), marked `ignored`."""


def taken_back(message: Message) -> bool:
    """Whether `message` was deleted by its sender while it waited for its answer."""
    return message.status == "ignored" and message.error == TAKEN_BACK


async def queue_edits_made_meanwhile(session: AsyncSession, answered: tuple[tuple[int, str, dict], ...], *,
                                     status: str, deleted: tuple[int, ...] = ()) -> list[tuple[int, int, str]]:
    """For each piece answered, `(id, text, said meta)` as the turn read it, now marked `status`: one edited
    since gets back what was answered, and its edit is stored to answer next; for each of `deleted` (relayed,
    and taken back meanwhile) its deletion is stored to pass on. (piece id, new message's id, "edit" or
    "deletion") of each."""
    edits: list[tuple[int, int, str]] = []
    for piece_id, text, text_meta in answered:
        piece = await session.get(Message, piece_id)
        if piece is not None and piece_id in deleted:
            deletion = await repo.add_edit_to_answer(session, of=piece, text="")
            deletion.meta = {**deletion.meta, "deleted": True}
            piece.text = text  # what was relayed, whatever an edit before the deletion made it
            edits.append((piece.id, deletion.id, "deletion"))
            continue
        if piece is None or (piece.meta or {}).get("live_location"):
            continue  # its text changes only as its place moves (`Inbox._move_place`): the record keeps the newest
        if piece.status == status and piece.text != text:  # not deleted meanwhile
            # With the command and shared place the edit holds (`Inbox._revise`): "/start" edited into a
            # question is one; the record keeps what was answered.
            edit = await repo.add_edit_to_answer(session, of=piece, text=piece.text)
            piece.text = text
            piece.meta = message_meta.with_said(piece.meta, text_meta)
            edits.append((piece.id, edit.id, "edit"))
    return edits

