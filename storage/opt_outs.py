"""WhatsApp opt-outs, one per (bot, contact): a STOP is said to one business number, so to one bot.

A contact is shared by the bots (one per channel and user id); a STOP on it silenced the customer for every
bot, and a START to one re-enabled all. The STOP's row names its bot; bot `EVERY_BOT` is one carried over from
before (migration 0017) with no bot to give it, which holds for all of them until a START to any.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Select, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from storage.models import Contact, OptOut
from storage.upsert import insert_ignore

EVERY_BOT = ""


def _for(bot, contact_id):
    return (OptOut.contact_id == contact_id) & or_(OptOut.bot == bot, OptOut.bot == EVERY_BOT)


def opted_out_since(bot, contact_id):
    """When `contact_id` opted out of `bot` (values or columns of the enclosing query), else NULL: a scalar subquery."""
    return select(func.min(OptOut.opted_out_at)).where(_for(bot, contact_id)).scalar_subquery()


def with_opt_out(query: Select, *, bot, contact_id) -> Select:
    """`query` with a last column: when `contact_id` opted out of `bot` (columns of `query`), else NULL. Outer
    joins (each finds one row at most), so that it stays a read of `query`'s own table."""
    mine, every = aliased(OptOut), aliased(OptOut)
    return query.outerjoin(mine, (mine.contact_id == contact_id) & (mine.bot == bot)).outerjoin(
        every, (every.contact_id == contact_id) & (every.bot == EVERY_BOT)).add_columns(
        func.coalesce(mine.opted_out_at, every.opted_out_at))


def kept_for_opt_out():
    """Contacts (of the enclosing query) with a STOP to any bot: what `gateway forget` and the purge keep of them."""
    return select(OptOut.contact_id).where(OptOut.contact_id == Contact.id).exists()


def first_opt_out():
    """The contact's (of the enclosing query) earliest STOP: all the date that is kept of one forgotten."""
    return select(func.min(OptOut.opted_out_at)).where(OptOut.contact_id == Contact.id).scalar_subquery()


async def opted_out_at(session: AsyncSession, *, bot: str, contact_id: int) -> datetime | None:
    """When the contact opted out of `bot` (STOP), or None."""
    return await session.scalar(select(opted_out_since(bot, contact_id)))


async def opt_out(session: AsyncSession, *, bot: str, contact_id: int, at: datetime) -> bool:
    """Record the contact's STOP to `bot` (a repeated STOP keeps the first); True when it is new."""
    result = await session.execute(insert_ignore(session, OptOut, {"contact_id": contact_id, "bot": bot,
                                                                   "opted_out_at": at}, ["contact_id", "bot"]))
    await _mirror(session, contact_id)
    return bool(result.rowcount)


async def opt_in(session: AsyncSession, *, bot: str, contact_id: int) -> None:
    """The contact's START to `bot`: its STOP goes, and a STOP of before 0017 that held for every bot."""
    await session.execute(delete(OptOut).where(_for(bot, contact_id)).execution_options(synchronize_session=False))
    await _mirror(session, contact_id)


async def _mirror(session: AsyncSession, contact_id: int) -> None:
    """`contacts.opted_out_at` as a gateway older than 0017 reads it: their earliest STOP to any bot, else NULL."""
    await session.execute(update(Contact).where(Contact.id == contact_id).values(
        stopped_any_bot_at=select(func.min(OptOut.opted_out_at)).where(OptOut.contact_id == contact_id)
        .scalar_subquery()).execution_options(synchronize_session=False))
