"""A customer's edit that landed while its message was being answered.

The inbox applies an edit to a message while it waits for its answer (`Inbox._revise`), and a message being
answered still waits: the turn read the text before the edit. The answer to what was read goes out, and the
record keeps what was answered; the edited text is stored as a message of its own, answered next, once
(`MessageHandler._finish` calls `queue_edits_made_meanwhile` in the answer's transaction). A live location's
moves are no such edits (`InboundMessage.live_location`): its record keeps the newest place.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from storage import message_meta
from storage import repositories as repo
from storage.models import Message


async def queue_edits_made_meanwhile(session: AsyncSession, answered: tuple[tuple[int, str, dict], ...], *,
                                     status: str) -> list[tuple[int, int]]:
    """For each piece answered, `(id, text, said meta)` as the turn read it, now marked `status`: one edited
    since gets back what was answered, and its edit is stored to answer next. (piece id, edit id) of each."""
    edits: list[tuple[int, int]] = []
    for piece_id, text, text_meta in answered:
        piece = await session.get(Message, piece_id)
        if piece is None or (piece.meta or {}).get("live_location"):
            continue  # its text changes only as its place moves (`Inbox._move_place`): the record keeps the newest
        if piece.status == status and piece.text != text:  # not deleted meanwhile
            # With the command and shared place the edit holds (`Inbox._revise`): "/start" edited into a
            # question is one; the record keeps what was answered.
            edit = await repo.add_edit_to_answer(session, of=piece, text=piece.text)
            piece.text = text
            piece.meta = message_meta.with_said(piece.meta, text_meta)
            edits.append((piece.id, edit.id))
    return edits

