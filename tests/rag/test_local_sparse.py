"""Local mode's faster BM25 scoring gives exactly qdrant-client's scores, and local mode uses it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm
from qdrant_client.local import local_collection

from rag import local_sparse
from rag.index import QdrantIndex
from rag.knowledge_index import SPARSE

S10_MANUAL = Path(__file__).parents[2] / "bench" / "data" / "s10" / "docs" / "03-apps.md"
QUERIES = [
    "How do I open the Email app?",
    "Where are the notifications on the always on display?",
    "NFC payment settings",
    "zebra quantum kettle",  # shares no term with the manual: every score is the no-overlap value
    "settings settings settings apps",
]


def _sorted(vector: qm.SparseVector) -> qm.SparseVector:
    """The vector with its terms in ascending order, as qdrant-client stores and queries them."""
    pairs = sorted(zip(vector.indices, vector.values))
    return qm.SparseVector(indices=[i for i, _ in pairs], values=[v for _, v in pairs])


def _bm25_vectors(sparse) -> list[qm.SparseVector]:
    paragraphs = [p for p in S10_MANUAL.read_text(encoding="utf-8").split("\n\n") if p.strip()][:400]
    return [_sorted(v) for v in sparse.embed_documents(paragraphs)]


def test_scores_are_bit_identical_to_qdrant_clients_on_real_bm25_vectors(sparse):
    vectors = _bm25_vectors(sparse)
    assert len(vectors) > 100
    for query in map(_sorted, sparse.embed_queries(QUERIES)):
        for empty_is_zero in (False, True):
            ours = local_sparse.calculate_distance_sparse(query, vectors, empty_is_zero=empty_is_zero)
            theirs = local_sparse.original()(query, vectors, empty_is_zero=empty_is_zero)
            assert ours.dtype == theirs.dtype == np.float32
            assert np.array_equal(ours, theirs)
    # Not a vacuous comparison: a query that shares common terms with the manual scores many paragraphs.
    common = _sorted(sparse.embed_queries(["settings settings settings apps"])[0])
    assert np.isfinite(local_sparse.calculate_distance_sparse(common, vectors)).sum() > 10


def test_a_term_past_the_end_of_a_vector_and_an_empty_vector():
    query = qm.SparseVector(indices=[2, 9, 40], values=[1.0, 2.0, 4.0])
    vectors = [
        qm.SparseVector(indices=[1, 2, 3], values=[1.5, 0.5, 9.0]),  # 2 matches, then every term is past the end
        qm.SparseVector(indices=[9, 40], values=[1.0, 0.25]),
        qm.SparseVector(indices=[], values=[]),
        qm.SparseVector(indices=[41], values=[3.0]),
    ]
    scores = local_sparse.calculate_distance_sparse(query, vectors)
    assert scores.tolist() == [0.5, 3.0, float("-inf"), float("-inf")]
    assert np.array_equal(scores, local_sparse.original()(query, vectors))


async def test_local_mode_scores_with_it_and_ranks_as_before(tmp_path, sparse):
    index = QdrantIndex(AsyncQdrantClient(path=str(tmp_path / "q")))
    try:
        assert local_collection.calculate_distance_sparse is local_sparse.calculate_distance_sparse
        await index.client.create_collection(
            "c", vectors_config={}, sparse_vectors_config={SPARSE: qm.SparseVectorParams(modifier=qm.Modifier.IDF)}
        )
        vectors = _bm25_vectors(sparse)
        await index.client.upsert("c", [qm.PointStruct(id=i, vector={SPARSE: v}) for i, v in enumerate(vectors)])
        query = sparse.embed_queries(["How do I open the Email app?"])[0]

        async def top() -> list[tuple[int, float]]:
            found = await index.client.query_points("c", query=query, using=SPARSE, limit=20)
            return [(p.id, p.score) for p in found.points]

        fast = await top()
        local_collection.calculate_distance_sparse = local_sparse.original()
        try:
            assert await top() == fast
        finally:
            local_sparse.install()
        assert len(fast) == 20
    finally:
        await index.close()


async def test_local_mode_works_off_the_event_loop(tmp_path):
    """Local mode computes in Python: each call runs in a worker thread (one at a time), so a search
    does not stall the process's webhooks, web chat and heartbeats (bench/loop_stall.py: the loop's
    longest stall during three hybrid queries at 10k chunks fell from 170 ms to 16 ms)."""
    import threading

    from gateway.settings import QdrantSettings
    from rag.index import LocalClientInThread

    index = QdrantIndex.from_settings(QdrantSettings(path=str(tmp_path / "q")))
    assert isinstance(index.client, LocalClientInThread)
    threads: list[int] = []
    real = index.client._client.collection_exists

    def recorded(name):
        threads.append(threading.get_ident())
        return real(name)

    index.client._client.collection_exists = recorded
    try:
        assert await index.count("acme") == 0
    finally:
        await index.close()
    assert threads and threading.get_ident() not in threads
