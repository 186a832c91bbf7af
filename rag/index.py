"""The Qdrant index: one collection per bot, a named dense vector, a named BM25 sparse vector and a
named multivector of the chunk's sentence vectors (MaxSim), read back for the top hits only.

The same code runs against Qdrant local mode (`qdrant.path`, the embedded default) and a Qdrant
server (`qdrant.url` + `api_key`). Because every bot has its own collection, a search for one bot
cannot return another bot's chunks, whatever the filters say.

Local mode holds an exclusive lock on its folder; a second process gets `IndexBusy` with a
message that says what to do.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import math
import threading
import time
from typing import Any

import numpy as np
from qdrant_client import AsyncQdrantClient, QdrantClient
from qdrant_client import models as qm
from qdrant_client.common.version_check import is_compatible
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from gateway.errors import ConfigError, IndexBusy, RetrievalError
from gateway.settings import QdrantSettings
from gateway.url_secrets import without_url_secrets
from rag import knowledge_index, local_sparse
from rag.knowledge_index import (
    DENSE,
    RRF_K,
    SENTENCES,
    SPARSE,
    ArmResults,
    IndexPoint,
    KnowledgeIndex,
    StoredVectors,
    collection_name,
    rrf,
    sentence_matrices,
    stored_vectors,
    vector_size_mismatch,
    warn_without_sentences,
)
from rag.term_stats import TermStats, TermStatsCache

log = logging.getLogger(__name__)

LAYOUT_RECHECK_S = 300.0
"""How long a collection read without sentence vectors is taken at its word. Why not for good: with a
shared server another replica's ingest rebuilds the collection, and this process should then rank
with the sentence prior again without a restart (the same period as the term statistics)."""


def open_index(settings: QdrantSettings) -> KnowledgeIndex:
    """The index `settings` describe: a Qdrant server, Qdrant local mode, or qdrant-edge in the folder."""
    if settings.engine == "edge":
        from rag.edge_index import EdgeIndex  # imported here: qdrant-edge loads only for the edge engine

        return EdgeIndex(settings.path or "")
    return QdrantIndex.from_settings(settings)


class LocalClientInThread:
    """Local mode's client with the async client's methods, each call run in a worker thread, one at a
    time. Why: local mode searches in pure Python and numpy (a hybrid query takes about 100 ms at 10k
    chunks), and `AsyncQdrantClient(path=...)` does that work on the event loop, which stalled every
    webhook, web chat request and lease heartbeat of the process meanwhile. One at a time, as they ran
    on the loop: the local collection's structures take no lock of their own."""

    def __init__(self, client: QdrantClient) -> None:
        self._client = client
        self._serial = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            def serial() -> Any:
                with self._serial:
                    return method(*args, **kwargs)

            return await asyncio.to_thread(serial)

        return call


class QdrantIndex:
    """Thin async wrapper over `AsyncQdrantClient` (a server) or `LocalClientInThread` (local mode)
    with the gateway's collection layout."""

    def __init__(self, client: AsyncQdrantClient | LocalClientInThread, *, url: str | None = None) -> None:
        local_sparse.install()  # local mode's BM25 scoring, 10x faster with the same scores; idle on a server
        self.client = client
        self.url = url  # the server's, None in local mode
        self._known: set[str] = set()  # collections seen to exist
        self._checked: set[str] = set()  # ... and checked against the embedder and the layout
        self._has_sentences: dict[str, bool] = {}  # bot -> its collection's layout has sentence vectors
        self._layout_read_at: dict[str, float] = {}  # bot -> when that was read, by `clock`
        self.clock = time.monotonic  # a test moves it past LAYOUT_RECHECK_S
        self._term_stats = TermStatsCache()

    @classmethod
    def from_settings(cls, settings: QdrantSettings) -> "QdrantIndex":
        """Connect to a server when `url` is set, else open the local folder `path`."""
        if settings.url:
            # check_compatibility=False: `check_server_version` does it, asynchronously and with the URL
            # in its message. The client's own check sends a blocking request from a thread at
            # construction and, with the server down, only warns "Failed to obtain server version".
            client = AsyncQdrantClient(url=settings.url, api_key=settings.api_key, timeout=math.ceil(settings.timeout),
                                       check_compatibility=False)
            return cls(client, url=settings.url)
        if not settings.path:
            raise ConfigError("qdrant", "set qdrant.path (local mode) or qdrant.url (server)")
        try:
            return cls(LocalClientInThread(QdrantClient(path=settings.path)))
        except RuntimeError as exc:
            if "already accessed" in str(exc):
                raise IndexBusy(
                    f"the Qdrant folder {settings.path} is in use by another process (probably the running "
                    "server). Run ingest through the server's admin API, stop the server first, or use a "
                    "Qdrant server (qdrant.url) for concurrent access."
                ) from None
            raise

    async def close(self) -> None:
        """Release the client (and local mode's folder lock)."""
        await self._term_stats.close()
        await self.client.close()

    async def ping(self) -> None:
        """Raise `RetrievalError` unless Qdrant answers."""
        await self._call(self.client.get_collections())

    async def check_server_version(self) -> str | None:
        """For a Qdrant server: log, and return, why this client may not work with it (its version is a
        major or more than one minor release away, qdrant-client's own rule, or it does not answer);
        None when it is compatible, and always in local mode."""
        if self.url is None:
            return None
        client_version = importlib.metadata.version("qdrant-client")
        try:
            server_version = (await self.client.info()).version
        except Exception as exc:  # a down server is reported here and by /readyz, and must not stop the start
            problem = (f"the Qdrant server at {self.url} does not answer ({type(exc).__name__}); searches get the "
                       "search-down reply and ingests fail until it does")
        else:
            if is_compatible(client_version, server_version):
                return None
            problem = (f"the Qdrant server at {self.url} runs {server_version}, and qdrant-client {client_version} "
                       "supports servers of its own major version within one minor release: upgrade one of them")
        log.warning("qdrant.server_check_failed", extra={"problem": problem})
        return problem

    async def ensure_collection(self, bot: str, dim: int, *, model: str | None = None) -> None:
        """Create the bot's collection if missing; refuse a dense size that does not match (the embedding
        `model` that gives `dim` named in the error).

        A collection from before sentence vectors is dropped and created again, empty: ingest then
        sees an empty index and embeds every recorded document again (`rag.ingest`)."""
        name = collection_name(bot)
        if name in self._checked:  # not `_known`: a search may have seen it exist without checking it
            return
        if await self.client.collection_exists(name):
            info = await self.client.get_collection(name)
            vectors = info.config.params.vectors
            existing = vectors[DENSE].size if isinstance(vectors, dict) and DENSE in vectors else None
            if existing != dim:
                raise vector_size_mismatch(f"collection {name}", existing, dim=dim, model=model,
                                           rebuild=self._rebuild_hint(name))
            if SENTENCES in vectors:
                self._known.add(name)
                self._checked.add(name)
                self._has_sentences[bot] = True
                return
            log.warning("index.collection_recreated", extra={"bot": bot, "reason": "no sentence vectors; a full re-ingest follows"})
            await self.drop(bot)
        await self.client.create_collection(
            name,
            vectors_config={
                DENSE: qm.VectorParams(size=dim, distance=qm.Distance.COSINE),
                SENTENCES: qm.VectorParams(
                    size=dim,
                    distance=qm.Distance.COSINE,
                    multivector_config=qm.MultiVectorConfig(comparator=qm.MultiVectorComparator.MAX_SIM),
                    hnsw_config=qm.HnswConfigDiff(m=0),  # only read back by id, never searched: no graph
                ),
            },
            sparse_vectors_config={SPARSE: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
        )
        self._known.add(name)
        self._checked.add(name)
        self._has_sentences[bot] = True

    def _rebuild_hint(self, name: str) -> str:
        """How the user empties the index for a new embedding model: local mode's folder holds every bot's
        collections, and a server's are deleted one by one."""
        if self.url is None:
            return "stop the gateway and point qdrant.path at a new folder"
        base = without_url_secrets(self.url).rstrip("/")
        return (f"delete each bot's collection on the Qdrant server (`curl -X DELETE {base}/collections/{name}`, "
                "with an `api-key` header when it needs one)")

    async def drop(self, bot: str) -> None:
        """Delete the bot's whole collection."""
        self._known.discard(collection_name(bot))
        self._checked.discard(collection_name(bot))
        self._has_sentences.pop(bot, None)
        self._term_stats.invalidate(bot)
        await self.client.delete_collection(collection_name(bot))

    async def upsert(self, bot: str, points: list[IndexPoint], *, batch: int = 256) -> None:
        """Write points (id = chunk id), replacing any with the same id."""
        name = collection_name(bot)
        self._term_stats.invalidate(bot)
        for start in range(0, len(points), batch):
            structs = [
                qm.PointStruct(id=p.chunk_id, vector=p.vectors(), payload=p.payload())
                for p in points[start : start + batch]
            ]
            await self._call(self.client.upsert(name, points=structs, wait=True))

    async def delete_points(self, bot: str, ids: list[str]) -> None:
        """Remove points by chunk id, `IDS_PER_DELETE` a call; unknown ids are ignored."""
        if ids and await self._exists(bot):
            self._term_stats.invalidate(bot)
            for start in range(0, len(ids), knowledge_index.IDS_PER_DELETE):
                part = list(ids[start : start + knowledge_index.IDS_PER_DELETE])
                await self._call(
                    self.client.delete(collection_name(bot), points_selector=qm.PointIdsList(points=part), wait=True))

    async def count(self, bot: str) -> int:
        """Number of chunks in the bot's collection (0 when it does not exist)."""
        if not await self._exists(bot):
            return 0
        return (await self._call(self.client.count(collection_name(bot), exact=True))).count

    async def present_ids(self, bot: str, ids: list[str], *, batch: int = 1024) -> set[str]:
        """Which of these chunk ids have a point, looked up by id `batch` at a time (ids only: no
        payload, no vectors). Ingest asks when the point count says recorded chunks are missing."""
        if not ids or not await self._exists(bot):
            return set()
        found: set[str] = set()
        for start in range(0, len(ids), batch):
            records = await self._call(self.client.retrieve(
                collection_name(bot), ids=list(ids[start : start + batch]), with_payload=False, with_vectors=False))
            found.update(str(r.id) for r in records)
        return found

    async def point_ids(self, bot: str, source: str) -> set[str]:
        """The ids of the points one source of the bot wrote (filtered by their `source` field, ids only)."""
        only_source = qm.Filter(must=[qm.FieldCondition(key="source", match=qm.MatchValue(value=source))])
        ids: set[str] = set()
        offset = None
        while await self._exists(bot):
            points, offset = await self._call(self.client.scroll(
                collection_name(bot), scroll_filter=only_source, limit=1024, offset=offset,
                with_payload=False, with_vectors=False))
            ids.update(str(point.id) for point in points)
            if offset is None:
                break
        return ids

    async def hybrid_query(
        self, bot: str, dense: list[float], sparse: qm.SparseVector, *, prefetch: int, limit: int, rrf_k: int = RRF_K
    ) -> ArmResults:
        """Each arm's top `prefetch` in one batch call, fused client-side by RRF (constant `rrf_k`) into the top `limit`.
        Points carry their payload and their BM25 vector (gate 1 reads which query terms they hold).

        Why not Qdrant's own `FusionQuery`: it returns ranks only, so the arms' real scores needed a
        second pass over the collection. One batch of the two arms is one scan of each (half the
        time in pure-Python local mode) and `rrf` gives the same ranks as Qdrant's fusion.
        """
        if not await self._exists(bot):
            return ArmResults([], [], [])
        requests = [
            qm.QueryRequest(query=dense, using=DENSE, limit=prefetch, with_payload=True, with_vector=[SPARSE]),
            qm.QueryRequest(query=sparse, using=SPARSE, limit=prefetch, with_payload=True, with_vector=[SPARSE]),
        ]
        by_dense, by_sparse = await self._call(self.client.query_batch_points(collection_name(bot), requests))
        return ArmResults(rrf([by_dense.points, by_sparse.points], limit=limit, k=rrf_k), by_dense.points, by_sparse.points)

    async def term_stats(self, bot: str) -> TermStats:
        """Per BM25 term id, how many chunks hold it (`TermStatsCache`; a scan takes about a second at
        10k chunks in local mode)."""
        return await self._term_stats.get(bot, lambda: self._scan_terms(bot))

    async def sentence_vectors(self, bot: str, ids: list[str]) -> dict[str, np.ndarray]:
        """Each listed chunk's sentence vectors (rows of unit vectors); chunks without any are left out,
        and so is a collection from before sentence vectors (until its re-ingest)."""
        if not ids or not await self._exists(bot) or not await self._has_sentence_vectors(bot):
            return {}
        records = await self._call(
            self.client.retrieve(collection_name(bot), ids=list(ids), with_payload=False, with_vectors=[SENTENCES])
        )
        return sentence_matrices((str(r.id), r.vector) for r in records)

    async def vectors(self, bot: str, ids: list[str]) -> dict[str, StoredVectors]:
        """Each listed point's vectors as stored; points not there are left out."""
        if not ids or not await self._exists(bot):
            return {}
        records = await self._call(
            self.client.retrieve(collection_name(bot), ids=list(ids), with_payload=False, with_vectors=True)
        )
        return stored_vectors((str(r.id), r.vector) for r in records)

    async def _has_sentence_vectors(self, bot: str) -> bool:
        """Whether the bot's collection has the `SENTENCES` vector, read from its layout
        (`ensure_collection` records it too); a "no" is read again after `LAYOUT_RECHECK_S`. Why
        read: local mode silently returns points without a vector the collection lacks, and a server
        refuses the request."""
        known = self._has_sentences.get(bot)
        if known or (known is False and self.clock() - self._layout_read_at[bot] < LAYOUT_RECHECK_S):
            return known
        vectors = (await self._call(self.client.get_collection(collection_name(bot)))).config.params.vectors
        self._has_sentences[bot] = isinstance(vectors, dict) and SENTENCES in vectors
        self._layout_read_at[bot] = self.clock()
        if not self._has_sentences[bot]:
            warn_without_sentences(bot)
        return self._has_sentences[bot]

    async def _scan_terms(self, bot: str) -> TermStats:
        vectors: list[qm.SparseVector] = []
        offset = None
        while await self._exists(bot):
            points, offset = await self._call(self.client.scroll(
                collection_name(bot), limit=1024, offset=offset, with_payload=False, with_vectors=[SPARSE]))
            vectors += [point.vector[SPARSE] for point in points if isinstance(point.vector, dict)]
            if offset is None:
                break
        # In a worker thread: counting 10k chunks' terms held the event loop for about a second.
        return await asyncio.to_thread(TermStats.count, [v.indices for v in vectors])

    async def _exists(self, bot: str) -> bool:
        name = collection_name(bot)
        if name in self._known:
            return True
        if await self._call(self.client.collection_exists(name)):
            self._known.add(name)
            return True
        return False

    @staticmethod
    async def _call(awaitable):  # type: ignore[no-untyped-def]
        try:
            return await awaitable
        except (ResponseHandlingException, UnexpectedResponse, ConnectionError) as exc:
            raise RetrievalError(f"Qdrant request failed: {exc}") from exc
