"""What a document's row in the store can hold: its key, cleaned text, URL and HTTP validators.

One odd document must not fail its source: NUL bytes (PostgreSQL refuses them) and lone surrogates
are cleaned, an id too long for its column becomes a stable prefix and hash, and a URL or validator
too long for its column is left out rather than cut into a wrong one.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from rag.sources import Document
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


def validators_of(doc: Document) -> tuple[str | None, str | None]:
    """A document's HTTP validators as stored: one too long for its column is dropped (that page is
    then fetched in full each time)."""
    etag = doc.etag if doc.etag and len(doc.etag) <= 512 else None
    last_modified = doc.last_modified if doc.last_modified and len(doc.last_modified) <= 64 else None
    return etag, last_modified
