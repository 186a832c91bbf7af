"""What both index engines share: the named vectors, the point written per chunk, the
`KnowledgeIndex` protocol that ingest and search are written against, and the helpers both engines
use (client-side RRF, sentence vectors read back, the collection name per bot).

Why its own module: `QdrantIndex` (`rag.index`) and `EdgeIndex` (`rag.edge_index`) both build on
it, and ingest and search need no engine to name these types.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np
from qdrant_client import models as qm

from gateway.errors import ConfigError
from gateway.settings import RetrievalSettings
from gateway.url_secrets import without_url_secrets
from rag.term_stats import TermStats

log = logging.getLogger(__name__)

DENSE = "dense"
SPARSE = "bm25"
SENTENCES = "sentences"
IDS_PER_DELETE = 1024
"""Points removed per delete call: a removed source of a large crawled site is 100,000 chunk ids, one request
of megabytes (a Qdrant server refuses a body past its limit, and the purge failed every run)."""
RRF_K: int = RetrievalSettings.model_fields["rrf_k"].default
"""RRF's constant when a bot sets none (`retrieval.rrf_k`): Qdrant's own, 2, which ranked best of 1-60 on
the four tuning sets with the priors on (bench/README.md)."""


@dataclass(frozen=True)
class ChunkPayload:
    """What the index stores beside a chunk's vectors, and so what a search hit carries back."""

    chunk_id: str
    text: str
    source: str
    document: str
    title: str
    heading_path: tuple[str, ...]
    url: str | None

    def payload(self) -> dict[str, object]:
        """The stored form: these fields, the heading path as a list."""
        stored: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(ChunkPayload)}
        stored["heading_path"] = list(self.heading_path)
        return stored

    @staticmethod
    def fields_from(payload: dict[str, Any], point_id: str) -> dict[str, Any]:
        """The fields as keyword arguments, read back from a stored payload (point id for a missing chunk id)."""
        return {
            "chunk_id": payload.get("chunk_id", point_id),
            "text": payload.get("text", ""),
            "source": payload.get("source", ""),
            # A page's URL as configured may carry the gateway's credential (`?access_token=…`): what a hit
            # shows the model, the customer's citation and the operator's passages goes without it.
            "document": without_url_secrets(payload.get("document", "")),
            "title": payload.get("title", ""),
            "heading_path": tuple(payload.get("heading_path", [])),
            "url": without_url_secrets(url) if (url := payload.get("url")) else url,
        }


@dataclass(frozen=True)
class IndexPoint(ChunkPayload):
    """One chunk ready for the index: its payload fields and both vectors."""

    dense: list[float]
    sparse: qm.SparseVector
    sentences: Sequence[Sequence[float]] = ()  # one unit vector per sentence of the chunk

    def vectors(self) -> dict[str, object]:
        """The named vectors to write; a point without sentence vectors has no `SENTENCES` entry."""
        out: dict[str, object] = {DENSE: self.dense, SPARSE: self.sparse}
        if len(self.sentences):
            out[SENTENCES] = [list(v) for v in self.sentences]
        return out


@dataclass(frozen=True)
class ArmResults:
    """What one hybrid query returned: the RRF-fused list and each arm's own ranked list."""

    fused: list[qm.ScoredPoint]
    dense: list[qm.ScoredPoint]
    sparse: list[qm.ScoredPoint]


def rrf(ranked: list[list[qm.ScoredPoint]], *, limit: int, k: int = RRF_K) -> list[qm.ScoredPoint]:
    """Reciprocal rank fusion, exactly as Qdrant's `Fusion.RRF`: score = sum of 1 / (rank + k - 1)
    over the lists (rank from 1); ties keep first-seen order. Returns new points, arms untouched."""
    scores: dict[str, float] = {}
    first: dict[str, qm.ScoredPoint] = {}
    for points in ranked:
        for rank, point in enumerate(points, start=1):
            pid = str(point.id)
            first.setdefault(pid, point)
            scores[pid] = scores.get(pid, 0.0) + 1.0 / (rank + k - 1)
    ordered = sorted(scores, key=scores.__getitem__, reverse=True)[:limit]
    return [first[pid].model_copy(update={"score": scores[pid]}) for pid in ordered]


def lacks_sentences(exc: Exception, bot: str) -> bool:
    """Whether `exc` says the collection has no `SENTENCES` vector (written by an older version);
    logged once per bot, since search then ranks without the sentence prior until a re-ingest."""
    if "not existing vector name" not in str(exc).lower():
        return False
    warn_without_sentences(bot)
    return True


def warn_without_sentences(bot: str) -> None:
    """Tell the operator that the bot's index predates sentence vectors (search ranks without that
    prior); each index says it when it reads such a layout, not on every search."""
    log.warning("index.no_sentence_vectors", extra={"bot": bot, "hint": "run `gateway ingest` to rebuild it"})


def sentence_matrices(records: Iterable[tuple[str, object]]) -> dict[str, np.ndarray]:
    """(id, named vectors) pairs as id → matrix of the point's sentence vectors, skipping points without."""
    out: dict[str, np.ndarray] = {}
    for pid, vectors in records:
        rows = vectors.get(SENTENCES) if isinstance(vectors, dict) else None
        if rows:
            out[pid] = np.asarray(rows, dtype=np.float32)
    return out


@dataclass(frozen=True)
class StoredVectors:
    """A point's vectors as the index holds them, to write again under another id (a renamed document)."""

    dense: list[float]
    sparse: qm.SparseVector
    sentences: list[list[float]]


def stored_vectors(records: Iterable[tuple[str, object]]) -> dict[str, StoredVectors]:
    """(id, named vectors) pairs as id → `StoredVectors`, skipping a point without its dense or BM25 vector.
    The BM25 vector is qdrant-client's `SparseVector` or qdrant-edge's (both have indices and values)."""
    out: dict[str, StoredVectors] = {}
    for pid, vectors in records:
        if not isinstance(vectors, dict) or vectors.get(DENSE) is None or vectors.get(SPARSE) is None:
            continue
        sparse = vectors[SPARSE]
        out[pid] = StoredVectors([float(x) for x in vectors[DENSE]],
                                 qm.SparseVector(indices=list(sparse.indices), values=list(sparse.values)),
                                 [[float(x) for x in row] for row in vectors.get(SENTENCES) or []])
    return out


class KnowledgeIndex(Protocol):
    """What ingest and search need from an index; `rag.index.QdrantIndex` and `rag.edge_index.EdgeIndex` provide it."""

    async def close(self) -> None: ...
    async def ping(self) -> None: ...
    async def ensure_collection(self, bot: str, dim: int, *, model: str | None = None) -> None: ...
    async def drop(self, bot: str) -> None: ...
    async def upsert(self, bot: str, points: list[IndexPoint], *, batch: int = 256) -> None: ...
    async def delete_points(self, bot: str, ids: list[str]) -> None: ...
    async def count(self, bot: str) -> int: ...
    async def present_ids(self, bot: str, ids: list[str]) -> set[str]: ...
    async def point_ids(self, bot: str, source: str) -> set[str]: ...
    async def hybrid_query(
        self, bot: str, dense: list[float], sparse: qm.SparseVector, *, prefetch: int, limit: int, rrf_k: int = RRF_K
    ) -> ArmResults: ...
    async def term_stats(self, bot: str) -> TermStats: ...
    async def sentence_vectors(self, bot: str, ids: list[str]) -> dict[str, np.ndarray]: ...
    async def vectors(self, bot: str, ids: list[str]) -> dict[str, StoredVectors]: ...


def collection_name(bot: str) -> str:
    """The collection that holds one bot's knowledge base."""
    return f"kb_{bot}"


def vector_size_mismatch(what: str, held: int | None, *, dim: int, model: str | None, rebuild: str) -> ConfigError:
    """The error of an index `what` whose dense vectors (`held` dimensions, None when unknown) are not the
    `dim` the embedding `model` gives: `embedding.model` was changed after an ingest. It named the two sizes
    alone and said to "drop the collection", which no command does; `rebuild` says how, for this engine."""
    held_size = f"{held}-d vectors" if held else "vectors of another size"
    named = f"embedding.model {model!r}" if model else "the configured embedding.model"
    return ConfigError(
        "embedding.model",
        f"{what} holds {held_size}, from the embedding model it was built with, and {named} gives {dim}-d vectors, "
        "so its chunks can neither be searched nor added to. Either set embedding.model back to the model the "
        f"index was built with, or build the index again with the new one: {rebuild}, then run `gateway ingest`, "
        "which embeds every document of every bot again (they share embedding.model)",
    )
