"""Is the index what the store records? Ingest asks before it skips a document as unchanged.

The store (`documents.chunk_ids`) says which chunks each document has in the index. The index can
disagree with it in two ways:
- it LACKS recorded chunks: its folder was lost, a rebuild was killed midway, points were deleted by
  hand, or it is an empty index of another engine (`qdrant.engine` switched);
- it also HOLDS chunks the store no longer records: it is an older copy of the index. Switching
  `qdrant.engine` back to the engine used before finds that engine's index as it was left, and a
  Qdrant folder or snapshot restored from a backup is the same case. Its point count can even equal
  the store's, so a count alone does not tell.

So a run looks its source's recorded ids up by id (ids only: no payload, no vectors), and when some
are missing from an index that is not empty, or the index holds more points than the store records
chunks for the bot, or the store records none of the source's (a first run killed midway), it also lists
the ids of the points its source wrote, so that the chunks of edits
and deletions it missed are removed at the end of the run (`delete_unrecorded`), once the store holds
what this run wrote. Only its own source's: runs of one source never overlap (a lock per source, shared
by every process on PostgreSQL), while another source's run, in another process, may have written
points it has not recorded yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from rag.document_rows import recorded_chunk_ids
from rag.knowledge_index import KnowledgeIndex
from storage.models import Document as DocumentRow


@dataclass(frozen=True)
class IndexCheck:
    """What the index lacks of a source's recorded chunks, and the source's points when it may hold leftovers."""

    absent: set[str]
    """Recorded chunk ids of the documents with no point in the index."""
    indexed: int
    """The index's point count for the bot."""
    held: frozenset[str] = frozenset()
    """The ids of the source's points when the index may hold leftovers (module docstring; else empty):
    those the store does not record by the end of the run are deleted."""


async def check_index(
    index: KnowledgeIndex, sessions: async_sessionmaker[AsyncSession], bot: str, source: str,
    rows: dict[str, DocumentRow], *, list_held: bool = True,
) -> IndexCheck:
    """The `IndexCheck` of one source's rows against the bot's index; `list_held=False` when only
    `absent` is wanted (no listing of the source's points)."""
    recorded = {chunk_id for row in rows.values() for chunk_id in row.chunk_ids}
    if not recorded:
        # Nothing recorded, yet the source may have points: its first run was killed after writing some and
        # before recording any document. Such a point of a page edited or deleted meanwhile stayed for good.
        indexed = await index.count(bot) if list_held else 0
        return IndexCheck(set(), indexed, frozenset(await index.point_ids(bot, source)) if indexed else frozenset())
    indexed = await index.count(bot)
    if indexed == 0:
        return IndexCheck(recorded, 0)
    absent = recorded - await index.present_ids(bot, sorted(recorded))
    if not list_held:
        return IndexCheck(absent, indexed)
    # More points than recorded chunks: leftovers of a run that re-embedded the missing chunks and
    # died before it deleted them (or another process's run, mid-write: its points are not listed).
    if not absent and indexed <= len(await recorded_chunk_ids(sessions, bot)):
        return IndexCheck(absent, indexed)
    return IndexCheck(absent, indexed, frozenset(await index.point_ids(bot, source)))


async def delete_unrecorded(
    index: KnowledgeIndex, sessions: async_sessionmaker[AsyncSession], bot: str, held: frozenset[str]
) -> int:
    """Delete the points of `held` (one source's, listed before the run) that no document of the bot
    records now; how many. Only those still there count: the run itself deleted the chunks its edits
    replaced."""
    unrecorded = sorted(held - await recorded_chunk_ids(sessions, bot))
    leftovers = sorted(await index.present_ids(bot, unrecorded)) if unrecorded else []
    await index.delete_points(bot, leftovers)
    return len(leftovers)


@asynccontextmanager
async def unrecorded_if_cancelled(
    index: KnowledgeIndex, sessions: async_sessionmaker[AsyncSession], bot: str, written: frozenset[str]
) -> AsyncIterator[None]:
    """Delete the points of `written` that the store does not record when the block is cancelled (Ctrl-C,
    SIGTERM, a server's stop): left, searches found them until the next run of their source deleted them.
    Only around writing them: once the old points are deleted, they are all the index holds of their documents
    (deleted too, those were answered in neither version), and a row commit cut short may still land."""
    try:
        yield
    except asyncio.CancelledError:
        # Its failure (the store gone as the server stops) must not replace the cancellation, which records
        # the run as cut short: the next run of the source deletes the points it left.
        with suppress(Exception):
            await delete_unrecorded(index, sessions, bot, written)
        raise
