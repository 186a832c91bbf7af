"""The knowledge index on qdrant-edge: Qdrant's in-process Rust engine, one shard per bot.

`qdrant.engine: edge` puts the index in `<qdrant.path>/edge/<collection>/`. Same layout and the
same answers as `QdrantIndex` (named dense vector, cosine, searched exactly; named BM25 vector with
the IDF modifier; the same payload), with the same methods, so ingest and search do not know which
engine they talk to. Why: Qdrant's local mode scores every point in Python (about 275 ms p95 for a
hybrid query over 10k chunks on 2 cores); edge answers the same query in about 5-12 ms
(`bench/edge.py`, bench/README.md).

Edge's API is synchronous: every call runs in a worker thread, one at a time per index. A second
process on the same folder gets `IndexBusy`, as with local mode.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import re
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np
import qdrant_edge as qe
from qdrant_client import models as qm

from gateway.errors import ConfigError, IndexBusy, RetrievalError
from rag import knowledge_index
from rag.knowledge_index import (
    DENSE,
    RRF_K,
    SENTENCES,
    SPARSE,
    ArmResults,
    IndexPoint,
    StoredVectors,
    collection_name,
    lacks_sentences,
    rrf,
    sentence_matrices,
    stored_vectors,
    vector_size_mismatch,
)
from rag.term_stats import TermStats, TermStatsCache

log = logging.getLogger(__name__)

EXACT = qe.SearchParams(exact=True)
"""Exact dense search: about 1 ms at 10k chunks, and no HNSW recall loss (bench/README.md)."""
T = TypeVar("T")


class EdgeIndex:
    """Async facade over one qdrant-edge shard per bot, under one folder this process holds."""

    def __init__(self, path: str | Path) -> None:
        self.root = Path(path) / "edge"
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.root / ".lock", "a+")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise IndexBusy(
                f"the Qdrant folder {path} is in use by another process (probably the running server). Run "
                "ingest through the server's admin API, stop the server first, or use a Qdrant server "
                "(qdrant.url) for concurrent access."
            ) from None
        self._shards: dict[str, qe.EdgeShard] = {}
        self._checked: set[str] = set()  # shards opened with a config (dense size and layout checked)
        self._without_sentences: set[str] = set()
        self._term_stats = TermStatsCache()
        self._serial = threading.Lock()

    async def close(self) -> None:
        """Flush and close every shard, then release the folder."""
        await self._term_stats.close()
        await self._run(self._close_all)
        self._lock_file.close()

    async def ping(self) -> None:
        """Raise `RetrievalError` unless the folder and every open shard answer."""
        if not self.root.is_dir():
            raise RetrievalError(f"qdrant-edge folder {self.root} is gone")
        await self._run(lambda: [shard.info() for shard in self._shards.values()])

    async def ensure_collection(self, bot: str, dim: int, *, model: str | None = None) -> None:
        """Open the bot's shard, creating it if missing; refuse a dense size that does not match (the
        embedding `model` that gives `dim` named in the error)."""
        await self._run(self._open, bot, dim, model)

    async def drop(self, bot: str) -> None:
        """Delete the bot's whole shard."""
        self._term_stats.invalidate(bot)
        await self._run(self._drop, bot)

    async def upsert(self, bot: str, points: list[IndexPoint], *, batch: int = 256) -> None:
        """Write points (id = chunk id), replacing any with the same id."""
        self._term_stats.invalidate(bot)
        for start in range(0, len(points), batch):
            operation = qe.UpdateOperation.upsert_points([_point(p) for p in points[start : start + batch]])
            await self._run(self._update, bot, operation)

    async def delete_points(self, bot: str, ids: list[str]) -> None:
        """Remove points by chunk id, `IDS_PER_DELETE` a call; unknown ids are ignored."""
        if ids and await self._exists(bot):
            self._term_stats.invalidate(bot)
            for start in range(0, len(ids), knowledge_index.IDS_PER_DELETE):
                part = list(ids[start : start + knowledge_index.IDS_PER_DELETE])
                await self._run(self._update, bot, qe.UpdateOperation.delete_points(part))

    async def count(self, bot: str) -> int:
        """Number of chunks in the bot's shard (0 when it does not exist)."""
        if not await self._exists(bot):
            return 0
        return await self._run(lambda: self._shards[bot].count(qe.CountRequest(exact=True)))

    async def present_ids(self, bot: str, ids: list[str], *, batch: int = 1024) -> set[str]:
        """Which of these chunk ids have a point, looked up by id `batch` at a time (ids only)."""
        if not ids or not await self._exists(bot):
            return set()
        found: set[str] = set()
        for start in range(0, len(ids), batch):
            part = list(ids[start : start + batch])
            records = await self._run(lambda part=part: self._shards[bot].retrieve(part, False, False))
            found.update(str(r.id) for r in records)  # edge gives UUID objects back
        return found

    async def point_ids(self, bot: str, source: str) -> set[str]:
        """The ids of the points one source of the bot wrote."""
        if not await self._exists(bot):
            return set()
        return await self._run(self._scan_ids, bot, source)

    async def hybrid_query(
        self, bot: str, dense: list[float], sparse: qm.SparseVector, *, prefetch: int, limit: int, rrf_k: int = RRF_K
    ) -> ArmResults:
        """Each arm's top `prefetch` in one batch, fused by `rrf` (as `QdrantIndex.hybrid_query`: the arms
        keep their own scores, which gate 1 needs; edge's in-engine fusion returns ranks only)."""
        if not await self._exists(bot):
            return ArmResults([], [], [])
        out: dict[str, Any] = {"with_payload": True, "with_vector": [SPARSE]}
        request = qe.QueryBatchRequest([
            qe.QueryRequest(limit=prefetch, query=qe.Query.Nearest(list(dense), using=DENSE), params=EXACT, **out),
            qe.QueryRequest(limit=prefetch, query=qe.Query.Nearest(_sparse(sparse), using=SPARSE), **out),
        ])
        by_dense, by_sparse = (
            [_scored(p) for p in arm] for arm in await self._run(lambda: self._shards[bot].query_batch(request))
        )
        return ArmResults(rrf([by_dense, by_sparse], limit=limit, k=rrf_k), by_dense, by_sparse)

    async def sentence_vectors(self, bot: str, ids: list[str]) -> dict[str, np.ndarray]:
        """Each listed chunk's sentence vectors (rows of unit vectors); chunks without any are left out."""
        if not ids or bot in self._without_sentences or not await self._exists(bot):
            return {}
        try:
            records = await self._run(lambda: self._shards[bot].retrieve(list(ids), False, [SENTENCES]))
        except RetrievalError as exc:
            if not lacks_sentences(exc, bot):
                raise
            self._without_sentences.add(bot)  # a shard from before sentence vectors, until its re-ingest
            return {}
        return sentence_matrices((str(r.id), r.vector) for r in records)

    async def vectors(self, bot: str, ids: list[str]) -> dict[str, StoredVectors]:
        """Each listed point's vectors as stored; points not there are left out."""
        if not ids or not await self._exists(bot):
            return {}
        records = await self._run(lambda: self._shards[bot].retrieve(list(ids), False, True))
        return stored_vectors((str(r.id), r.vector) for r in records)

    async def term_stats(self, bot: str) -> TermStats:
        """Per BM25 term id, how many chunks hold it (`TermStatsCache`)."""
        return await self._term_stats.get(bot, lambda: self._scan(bot))

    async def _scan(self, bot: str) -> TermStats:
        return await self._run(self._scan_terms, bot) if await self._exists(bot) else TermStats.count([])

    # -- in the worker thread -------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        def serial() -> T:
            with self._serial:
                return fn(*args)

        try:
            return await asyncio.to_thread(serial)
        except (ConfigError, IndexBusy):
            raise
        except Exception as exc:  # edge raises plain Exception for I/O and engine errors
            raise RetrievalError(f"qdrant-edge request failed: {exc}") from exc

    async def _exists(self, bot: str) -> bool:
        return bot in self._shards or await self._run(self._open, bot, None)

    def _folder(self, bot: str) -> Path:
        return self.root / collection_name(bot)

    def _open(self, bot: str, dim: int | None, model: str | None = None) -> bool:
        """Load or create the bot's shard; with `dim` None only an existing one is loaded. With `dim`,
        the shard is checked against the embedder's size and the current layout."""
        if bot in self._shards and (dim is None or bot in self._checked):
            return True
        if bot in self._shards:  # loaded by a search, without a config: check it now
            self._shards.pop(bot).close()
        folder = self._folder(bot)
        if not folder.exists():
            if dim is None:
                return False
            self._shards[bot] = qe.EdgeShard.create(str(folder), _config(dim))
            self._checked.add(bot)
            return True
        try:
            self._shards[bot] = qe.EdgeShard.load(str(folder), _config(dim) if dim is not None else None)
        except Exception as exc:
            if dim is None or "incompatible" not in str(exc).lower():
                raise
            if not _loads(folder, _config(dim, sentences=False)):
                held = re.search(r"expected vector size \d+, but got (\d+)", str(exc))  # qdrant-edge's words
                raise vector_size_mismatch(
                    f"shard {folder}", int(held.group(1)) if held else None, dim=dim, model=model,
                    rebuild=f"stop the gateway and delete the folder {folder} (each bot's under {self.root})",
                ) from None
            # A shard from before sentence vectors: start it again, empty, for a full re-ingest
            # (ingest embeds every recorded document again when the index is empty).
            log.warning("index.shard_recreated", extra={"bot": bot, "reason": "no sentence vectors; a full re-ingest follows"})
            shutil.rmtree(folder)
            self._without_sentences.discard(bot)
            self._shards[bot] = qe.EdgeShard.create(str(folder), _config(dim))
        if dim is not None:
            self._checked.add(bot)
        return True

    def _update(self, bot: str, operation: qe.UpdateOperation) -> None:
        self._shards[bot].update(operation)  # durable once it returns: edge writes its WAL first

    def _drop(self, bot: str) -> None:
        self._checked.discard(bot)
        self._without_sentences.discard(bot)
        shard = self._shards.pop(bot, None)
        if shard is not None:
            shard.close()
        shutil.rmtree(self._folder(bot), ignore_errors=True)

    def _scan_ids(self, bot: str, source: str) -> set[str]:
        only_source = qe.Filter(must=[qe.FieldCondition(key="source", match=qe.MatchValue(value=source))])
        ids: set[str] = set()
        offset = None
        while True:
            records, offset = self._shards[bot].scroll(
                qe.ScrollRequest(offset=offset, limit=1024, filter=only_source, with_payload=False, with_vector=False))
            ids.update(str(record.id) for record in records)  # edge gives UUID objects back
            if offset is None:
                return ids

    def _scan_terms(self, bot: str) -> TermStats:
        terms: list[list[int]] = []
        offset = None
        while True:
            records, offset = self._shards[bot].scroll(qe.ScrollRequest(offset=offset, limit=1024, with_vector=[SPARSE]))
            terms += [record.vector[SPARSE].indices for record in records]
            if offset is None:
                return TermStats.count(terms)

    def _close_all(self) -> None:
        for shard in self._shards.values():
            shard.close()
        self._shards.clear()


def _config(dim: int, *, sentences: bool = True) -> qe.EdgeConfig:
    vectors = {DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)}
    if sentences:
        vectors[SENTENCES] = qe.EdgeVectorParams(
            size=dim, distance=qe.Distance.Cosine, multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim)
        )
    return qe.EdgeConfig(vectors=vectors, sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)})


def _loads(folder: Path, config: qe.EdgeConfig) -> bool:
    """Whether the shard in `folder` opens with `config` (it is closed again at once)."""
    try:
        qe.EdgeShard.load(str(folder), config).close()
    except Exception:
        return False
    return True


def _sparse(vector: qm.SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(vector.indices), list(vector.values))


def _point(p: IndexPoint) -> qe.Point:
    vectors = p.vectors()
    vectors[DENSE], vectors[SPARSE] = list(p.dense), _sparse(p.sparse)
    return qe.Point(p.chunk_id, vectors, p.payload())


def _scored(p: Any) -> qm.ScoredPoint:
    """An edge hit as the qdrant-client point the rest of `rag` reads (ids come back as UUID objects)."""
    vector = p.vector.get(SPARSE) if p.vector else None
    sparse = {SPARSE: qm.SparseVector(indices=list(vector.indices), values=list(vector.values))} if vector else None
    return qm.ScoredPoint(id=str(p.id), version=p.version or 0, score=p.score, payload=p.payload, vector=sparse)

