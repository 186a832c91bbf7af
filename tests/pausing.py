"""A session that stops once, mid-transaction, for a test to run another transaction against what it holds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy import Delete, Update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker


def locks_or_writes(statement, table: str) -> bool:
    """Whether `statement` writes `table`, or locks its rows (SELECT … FOR UPDATE [OF it])."""
    if isinstance(statement, Update | Delete):
        return statement.table.name == table
    lock = getattr(statement, "_for_update_arg", None)
    if lock is None:
        return False
    return any(getattr(t, "name", getattr(getattr(t, "table", None), "name", None)) == table
               for t in lock.of or statement.columns_clause_froms)


def pausing_sessions(engine, pause: Callable[[], Awaitable[None]], *, after_locking: str = "",
                     after_statement: int = 0) -> async_sessionmaker[AsyncSession]:
    """Sessions of `engine` whose transactions await `pause()` once in all: after the first statement that
    locks or writes the table `after_locking`, or after the `after_statement`-th statement (of any session)."""
    state = {"pause": pause, "statements": 0}

    class Pausing(AsyncSession):
        async def execute(self, statement, *args, **kwargs):
            result = await super().execute(statement, *args, **kwargs)
            state["statements"] += 1
            due = locks_or_writes(statement, after_locking) if after_locking else \
                state["statements"] == after_statement
            if due and state["pause"] is not None:
                pause_now, state["pause"] = state["pause"], None
                await pause_now()
            return result

    return async_sessionmaker(engine, class_=Pausing, expire_on_commit=False)
