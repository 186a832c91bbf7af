"""BM25 term statistics of one bot's collection: how many chunks hold each term id, and a per-bot
cache of them. Gate 1's lexical coverage, the coverage prior and the keyword override read them."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

TERM_STATS_TTL_S = 300.0
"""How long a bot's BM25 term statistics are trusted when another process could have written
(a Qdrant server shared by replicas); this process's own writes refresh them at once."""


@dataclass(frozen=True)
class TermStats:
    """Document frequencies of the BM25 term ids in one bot's collection."""

    chunks: int
    df: dict[int, int]

    def idf(self, term: int) -> float:
        """BM25's idf, as Qdrant's IDF modifier computes it; a term the collection lacks gets the maximum."""
        df = self.df.get(term, 0)
        return math.log((self.chunks - df + 0.5) / (df + 0.5) + 1.0)

    @classmethod
    def count(cls, chunks_terms: Iterable[Iterable[int]]) -> "TermStats":
        """Document frequencies from each chunk's BM25 term ids."""
        df: dict[int, int] = {}
        chunks = 0
        for terms in chunks_terms:
            chunks += 1
            for term in terms:
                df[term] = df.get(term, 0) + 1
        return cls(chunks, df)


class TermStatsCache:
    """Per-bot `TermStats`, read by a full scan and kept until the index writes to that bot or
    `TERM_STATS_TTL_S` passes (another process may write to a shared server). Why cached: a
    per-query count would scan the whole collection once per query term.

    Past the TTL, queries keep getting the old statistics while one background scan refreshes them,
    so no query waits for a rescan of a large collection; only a bot's first query (or the first
    after this process wrote to it) scans inline, and queries that come while that scan runs wait for
    it rather than scan again. A failed refresh is logged and tried again by the next query."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: dict[str, tuple[float, TermStats]] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}
        self._scanning: dict[str, asyncio.Task[TermStats]] = {}  # a bot's first scan, shared by its waiters
        self._clock = clock

    def invalidate(self, bot: str) -> None:
        """Forget the bot's statistics (call on every write); a refresh under way is dropped, since
        it may have read the collection before the write."""
        self._entries.pop(bot, None)
        self._scanning.pop(bot, None)  # its waiters still get it; it is not kept
        task = self._refreshing.pop(bot, None)
        if task is not None:
            task.cancel()

    async def get(self, bot: str, scan: Callable[[], Awaitable[TermStats]]) -> TermStats:
        """The cached statistics (refreshed in the background once stale), or `scan()`'s fresh ones."""
        cached = self._entries.get(bot)
        if cached is None:
            # One scan for a burst of first queries (a restart under traffic): each ran its own, and
            # ten of them took 8 s at 10k chunks in local mode (bench/README.md, "first turns").
            task = self._scanning.get(bot)
            if task is None:
                task = self._scanning[bot] = asyncio.create_task(self._first_scan(bot, scan))
            return await asyncio.shield(task)  # a waiter cancelled leaves the scan to the others
        if self._clock() - cached[0] >= TERM_STATS_TTL_S and bot not in self._refreshing:
            self._refreshing[bot] = asyncio.create_task(self._refresh(bot, scan))
        return cached[1]

    async def close(self) -> None:
        """Stop refreshes under way (before the index they read is closed)."""
        tasks = list(self._refreshing.values()) + list(self._scanning.values())
        self._refreshing.clear()
        self._scanning.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _first_scan(self, bot: str, scan: Callable[[], Awaitable[TermStats]]) -> TermStats:
        return await self._scan_into(bot, scan, self._scanning)

    async def _refresh(self, bot: str, scan: Callable[[], Awaitable[TermStats]]) -> None:
        try:
            await self._scan_into(bot, scan, self._refreshing)
        except Exception as exc:  # keep serving the old statistics; the next query tries again
            log.warning("term_stats.refresh_failed", extra={"bot": bot, "error": str(exc)})

    async def _scan_into(self, bot: str, scan: Callable[[], Awaitable[TermStats]], running: dict) -> TermStats:
        """Run `scan` as the bot's task in `running`, keeping its result only while it still is (an
        `invalidate` meanwhile drops it: it may have read the collection before the write)."""
        me = asyncio.current_task()
        try:
            stats = await scan()
            if running.get(bot) is me:
                self._entries[bot] = (self._clock(), stats)
            return stats
        finally:
            if running.get(bot) is me:
                del running[bot]
