"""What decides whether a document's chunks can be kept: a hash of the document's own content (text,
title, URL, format) and one of the settings its chunks were made under (the chunker's version, the
embedding model, the two token budgets). `rag.ingest` stores both per document; a new content hash means
the document is chunked again (`documents_changed`), and other settings alone mean it is chunked and
every kept chunk embedded again (`documents_reembedded`).

Rows stored before held `document_hash`, the content hashed together with the settings: one that still
matches under the current settings is unchanged (and stored anew in the current form); under other
settings it cannot tell whether its content changed, and counts as changed, once.
"""

from __future__ import annotations

import hashlib

from rag.sources import Document

# 5: a table row is one sentence, read with its header (`rag.tables`);
# 4: a token count has a length floor (`rag.chunking.MAX_CHARS_PER_TOKEN`);
# 3: HTML comments and data: URIs dropped, fences nested in list items and quotes kept whole.
CHUNKER_VERSION = "5"
"""Bump when chunking changes, so the next ingest re-chunks every document."""


def chunk_settings(model: str, max_tokens: int, text_tokens: int) -> tuple[str, ...]:
    """What a document's chunks depend on besides its content (read when an `Ingestor` is made)."""
    return (CHUNKER_VERSION, model, str(max_tokens), str(text_tokens))


def content_hash(doc: Document) -> str:
    """The hash of the document's own content, stored per document: the same hash, the same content."""
    return digest((doc.format, doc.title, doc.url or "", doc.text))


def document_hash(settings: tuple[str, ...], doc: Document) -> str:
    """The content hash with those settings, as rows stored it before `content_hash` (still recognised)."""
    return digest((*settings, doc.format, doc.title, doc.url or "", doc.text))


def digest(parts: tuple[str, ...]) -> str:
    """sha256 over the parts, each ended by a unit separator (so no two splits of one text collide)."""
    hashed = hashlib.sha256()
    for part in parts:
        hashed.update(part.encode("utf-8", "surrogatepass"))
        hashed.update(b"\x1f")
    return hashed.hexdigest()
