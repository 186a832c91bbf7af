"""A customer's edit that landed while its message was being answered.

The inbox applies an edit to a message while it waits for its answer (`Inbox._revise`), and a message being
answered still waits: the turn read the text before the edit. The answer to what was read goes out, and the
record keeps what was answered; the edited text is stored as a message of its own, answered next, once
(`MessageHandler._finish` calls `queue_edits_made_meanwhile` in the answer's transaction).
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
        if piece is not None and _a_place_moved(text_meta, piece.meta):
            continue  # a live location's move is no new question: the record keeps the newest place
        if piece is not None and piece.status == status and piece.text != text:  # not deleted meanwhile
            # With the command and shared place the edit holds (`Inbox._revise`): "/start" edited into a
            # question is one; the record keeps what was answered.
            edit = await repo.add_edit_to_answer(session, of=piece, text=piece.text)
            piece.text = text
            piece.meta = message_meta.with_said(piece.meta, text_meta)
            edits.append((piece.id, edit.id))
    return edits


def _a_place_moved(answered_meta: dict, meta: dict | None) -> bool:
    """Whether a message read as sharing a place shares one still, only elsewhere: a Telegram live location
    moved (each move is an edit, every few seconds for hours), which answered after it would have been a
    stream of "Shared location" answers. (A location message holds no text of its own to edit.)"""
    def location(said: dict) -> object:
        return (said.get("shared") or {}).get("location")
    now = message_meta.said(meta)
    return location(answered_meta) is not None and location(now) is not None and answered_meta.get("command") == now.get("command")
