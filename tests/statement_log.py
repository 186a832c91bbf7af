"""Every SQL statement and transaction an engine runs, labelled by verb and table (tests and bench/)."""

from __future__ import annotations

import collections
import re

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

_TABLE = re.compile(r"^\s*(?:(INSERT)\s+INTO|(UPDATE)|(DELETE)\s+FROM|(SELECT)\b.*?\bFROM)\s+\"?(\w+)", re.I | re.S)


def label(statement: str) -> str:
    """'SELECT messages', 'UPDATE conversations', … (the first table named; the verb alone otherwise)."""
    match = _TABLE.match(statement)
    if match is None:
        return statement.split(None, 1)[0].upper() if statement.strip() else "?"
    verb = next(v for v in match.groups()[:4] if v)
    return f"{verb.upper()} {match.group(5)}"


class StatementLog:
    """Listens on `engine`: `statements` (labels, in order) and `transactions` (BEGINs) since the last `clear`.

    A statement is one round trip to the server (asyncpg's first use of a statement on a connection adds a
    prepare), and so are a transaction's BEGIN and its COMMIT or ROLLBACK."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.statements: list[str] = []
        self.sql: list[str] = []
        self.transactions = 0
        sync = engine.sync_engine
        event.listen(sync, "before_cursor_execute", self._statement)
        event.listen(sync, "begin", self._begin)

    def _statement(self, _conn, _cursor, statement, _parameters, _context, _executemany) -> None:
        self.statements.append(label(statement))
        self.sql.append(statement)

    def _begin(self, _conn) -> None:
        self.transactions += 1

    def clear(self) -> None:
        self.statements, self.sql, self.transactions = [], [], 0

    def counts(self) -> collections.Counter[str]:
        return collections.Counter(self.statements)

    @property
    def round_trips(self) -> int:
        """Statements plus each transaction's BEGIN and its end."""
        return len(self.statements) + 2 * self.transactions
