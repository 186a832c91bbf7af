"""A source's document rows in the store, and what a row can hold: its key, cleaned text, URL, HTTP
validators and the settings its chunks were made with.

One odd document must not fail its source: NUL bytes (PostgreSQL refuses them) and lone surrogates
are cleaned, an id too long for its column becomes a stable prefix and hash, and a URL or validator
too long for its column is left out rather than cut into a wrong one. Rows are written in one
transaction, or one at a time when the store refuses that, so only the row it refuses fails.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from rag.chunking import Chunk
from rag.fingerprint import content_hash
from rag.sources import Document, Validators
from storage.models import Document as DocumentRow
from storage.text import storable_text

# Column sizes of `storage.models.Document`, read from the model so the two cannot drift apart.
DOC_ID_MAX = DocumentRow.__table__.c.doc_id.type.length
TITLE_MAX = DocumentRow.__table__.c.title.type.length
URL_MAX = DocumentRow.__table__.c.url.type.length


def store_key(doc_id: str) -> str:
    """The id a document is stored under: its own when it fits the column, else a prefix of it and
    its hash (stable from run to run, so the document is still found, updated and deleted)."""
    doc_id = storable_text(doc_id)
    if len(doc_id) <= DOC_ID_MAX:
        return doc_id
    digest = hashlib.sha256(doc_id.encode("utf-8")).hexdigest()
    return f"{doc_id[: DOC_ID_MAX - len(digest) - 1]}#{digest}"


def storable(doc: Document) -> Document:
    """The document with what goes to the store (and to the chunks) cleaned: see `storage.text.storable_text`."""
    return replace(doc, doc_id=store_key(doc.doc_id), title=storable_text(doc.title), text=storable_text(doc.text),
                   url=storable_text(doc.url) if doc.url else doc.url)


def url_of(doc: Document) -> str | None:
    """The URL as stored: one too long for its column is left out (a cut URL would be a wrong one;
    the chunks keep the whole URL for citations)."""
    return doc.url if doc.url and len(doc.url) <= URL_MAX else None


def validators_of(doc: Document) -> tuple[str | None, str | None, str | None]:
    """A document's HTTP validators and sitemap `<lastmod>` as stored: one too long for its column is dropped
    (that page is then fetched in full each time)."""
    etag = doc.etag if doc.etag and len(doc.etag) <= 512 else None
    last_modified = doc.last_modified if doc.last_modified and len(doc.last_modified) <= 64 else None
    return etag, last_modified, doc.lastmod if doc.lastmod and len(doc.lastmod) <= 64 else None


async def recorded_chunk_ids(sessions: async_sessionmaker[AsyncSession], bot: str, source: str | None = None) -> set[str]:
    """The distinct chunk ids the store records for the bot, over all its sources: the points its
    index should hold. With `source`, for that source only."""
    query = select(DocumentRow.chunk_ids).where(DocumentRow.bot == bot)
    if source is not None:
        query = query.where(DocumentRow.source == source)
    async with sessions() as session:
        found = await session.scalars(query)
        return {chunk_id for ids in found for chunk_id in ids or ()}


async def recorded_chunk_count(sessions: async_sessionmaker[AsyncSession], bot: str, source: str | None = None) -> int:
    """How many chunks `recorded_chunk_ids` names (the startup check compares it with the index's
    count; with `source`, a run's `total`)."""
    return len(await recorded_chunk_ids(sessions, bot, source))


class RowWrite(Protocol):
    """What a document's row is written from: the document, its hash, its chunks, its row if any."""

    doc: Document
    content_hash: str
    chunks: list[Chunk]
    row: DocumentRow | None


W = TypeVar("W", bound=RowWrite)


class DocumentRows:
    """The rows of one bot's source, as one ingest run reads, writes and deletes them."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], bot: str, source: str, settings_hash: str) -> None:
        self.sessions = sessions
        self.bot = bot
        self.source = source
        self.settings_hash = settings_hash

    async def load(self) -> dict[str, DocumentRow]:
        """doc_id -> row, for every document of the source."""
        async with self.sessions() as session:
            found = await session.scalars(
                select(DocumentRow).where(DocumentRow.bot == self.bot, DocumentRow.source == self.source))
            return {row.doc_id: row for row in found.all()}

    async def validators(self) -> Validators:
        """The HTTP validators and sitemap `<lastmod>` of the pages chunked under the current settings (any
        other page must be downloaded again to be re-chunked)."""
        columns = (DocumentRow.etag, DocumentRow.last_modified, DocumentRow.lastmod)
        async with self.sessions() as session:
            found = await session.execute(select(DocumentRow.doc_id, *columns).where(
                DocumentRow.bot == self.bot, DocumentRow.source == self.source,
                DocumentRow.settings_hash == self.settings_hash, or_(*(column.is_not(None) for column in columns))))
            return {doc_id: (etag, last_modified, lastmod) for doc_id, etag, last_modified, lastmod in found}

    async def write(self, writes: Sequence[W]) -> list[tuple[W, Exception]]:
        """Write the rows in one transaction; if the store refuses it, again one at a time. Returns the
        writes it refused, with why."""
        try:
            await self._write(writes)
            return []
        except Exception as exc:
            if len(writes) == 1:
                return [(writes[0], exc)]
        refused = []
        for w in writes:
            try:
                await self._write([w])
            except Exception as exc:
                refused.append((w, exc))
        return refused

    async def restamp(self, unchanged: list[tuple[DocumentRow, Document]]) -> None:
        """Unchanged documents with new HTTP validators or `<lastmod>`, or an older row (no settings stamp yet, a
        content hash that holds the settings, `rag.fingerprint`): its hash matched under the current settings, so
        its chunks were made under them; it is stored in the current form."""
        if not unchanged:
            return
        async with self.sessions() as session:
            for row, doc in unchanged:
                row = await session.merge(row)
                row.etag, row.last_modified, row.lastmod = validators_of(doc)
                row.settings_hash, row.content_hash = self.settings_hash, content_hash(doc)
            await session.commit()

    async def relisted(self, lastmods: dict[str, str]) -> None:
        """Store pages' sitemap `<lastmod>` as it is now: pages the server answered 304, so the content stored
        is theirs (only pages chunked under the current settings are asked conditionally)."""
        if not lastmods:
            return
        async with self.sessions() as session:
            for doc_id, lastmod in lastmods.items():
                await session.execute(update(DocumentRow).where(
                    DocumentRow.bot == self.bot, DocumentRow.source == self.source, DocumentRow.doc_id == store_key(doc_id),
                    DocumentRow.lastmod.is_distinct_from(lastmod)).values(lastmod=lastmod if len(lastmod) <= 64 else None))
            await session.commit()

    async def delete(self, rows: list[DocumentRow]) -> None:
        async with self.sessions() as session:
            for row in rows:
                await session.delete(await session.merge(row))
            await session.commit()

    async def _write(self, writes: Sequence[RowWrite]) -> None:
        async with self.sessions() as session:
            for w in writes:
                row = await session.merge(w.row) if w.row is not None else DocumentRow(
                    bot=self.bot, source=self.source, doc_id=w.doc.doc_id)
                row.content_hash = w.content_hash
                row.chunk_ids = [c.chunk_id for c in w.chunks]
                row.title = w.doc.title[:TITLE_MAX]
                row.url = url_of(w.doc)
                row.etag, row.last_modified, row.lastmod = validators_of(w.doc)
                row.settings_hash = self.settings_hash
                if w.row is None:
                    session.add(row)
            await session.commit()
