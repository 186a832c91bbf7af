"""Transactions PostgreSQL aborted to break a deadlock or a serialization conflict, run again.

Two writers taking the same rows in opposite orders (a customer's next message and a late delivery
receipt, both about one contact and one message) make PostgreSQL abort one of them with SQLSTATE
40P01. The aborted side has changed nothing, so running its transaction again is safe; left alone, it
answered the webhook 500, and Twilio, which does not retry a status callback or (by default) a
message webhook, lost what it carried.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from sqlalchemy.exc import DBAPIError

log = structlog.get_logger("gateway.storage")

T = TypeVar("T")

RETRYABLE_SQLSTATES = ("40P01", "40001")
"""deadlock_detected, serialization_failure: the transaction was rolled back and may simply run again."""
ATTEMPTS = 4


def aborted_for_conflict(exc: BaseException) -> bool:
    """Whether `exc` is PostgreSQL's abort of a transaction that met another one (nothing was written)."""
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return str(state or "") in RETRYABLE_SQLSTATES


async def run_again_on_conflict(work: Callable[[], Awaitable[T]], *, what: str) -> T:
    """`await work()`, run again (up to ATTEMPTS in all) when PostgreSQL aborted it for a conflict.

    `work` must open and commit its own transaction, so each attempt starts from what is committed."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await work()
        except DBAPIError as exc:
            if attempt == ATTEMPTS or not aborted_for_conflict(exc):
                raise
            log.warning("db.conflict_retried", what=what, attempt=attempt,
                        sqlstate=getattr(exc.orig, "sqlstate", None))
            # A short, random pause: the two sides met once and would meet again if both ran at once.
            await asyncio.sleep(random.uniform(0.005, 0.05) * attempt)
    raise AssertionError("unreachable")
