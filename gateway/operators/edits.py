"""A customer's edit of a message they sent while a person holds the thread, as operators are shown it.

An edit that lands while its message is handled is stored as a message of its own, `meta.edit_of` naming
the one it edits (`gateway.edits_meanwhile`); the record of that one keeps the words it replaces. The Slack
thread posts it as "*Customer (edited):*" and the console as "Customer (edited)", each with those words, so
it reads as the correction it is and not as a second message.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from storage.models import Message


async def replaced_words(session: AsyncSession, message_id: object) -> str | None:
    """The words message `message_id` replaces when it is a customer's edit of an earlier one (`meta.edit_of`),
    else None (also when that one is gone: erased by `gateway forget` or retention)."""
    message = await session.get(Message, message_id) if isinstance(message_id, int) else None
    edit_of = (message.meta or {}).get("edit_of") if message is not None else None
    original = await session.get(Message, edit_of) if isinstance(edit_of, int) else None
    return (original.text or "") if original is not None else None
