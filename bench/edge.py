"""Hybrid-query latency: Qdrant local mode (our `QdrantIndex`) against qdrant-edge, on the same vectors.

    HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python -m bench.edge [--sets s10 stici] [--pad 10000]

Why: local mode scans the BM25 arm point by point in Python (~275 ms p95 at 10k chunks on 2 cores) and the
target is p95 < 150 ms; qdrant-edge (`qdrant-edge-py`, dev-only) is Qdrant's in-process Rust engine.
Per set, the "ours" chunks are ingested by `rag.ingest.Ingestor` into a temporary local-mode index, copied
point for point (dense, BM25 with the IDF modifier, payload) into an edge shard, and both are padded with
`bench.retrieval.padding_points`. Only the index call is timed (queries embedded beforehand), once per question
after a warm-up, at corpus size and padded; hits carry payload and BM25 vector, as `hybrid_query`'s do.
Edge runs as one `query` with two prefetches fused in-engine by `Fusion.Rrf(k=2)`, dense by HNSW (its default
once `optimize()` indexed the shard) or exact (brute force, as local mode), and as one `query_batch` of the two
arms + `rag.knowledge_index.rrf` (what `HybridSearch` needs: each arm's own scores). `parity` = questions whose top 10
matches local mode's: same ids in order / that or the same RRF score at every rank (the engines order tied
points differently, and the padding repeats each BM25 vector ~50 times).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import time
from importlib.metadata import version

import qdrant_edge as qe
from qdrant_client import models as qm

from bench.data import DATA
from bench.retrieval import _percentiles, machine, padding_points, scratch
from gateway.settings import EmbeddingSettings
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.eval import load_questions
from rag.index import QdrantIndex
from rag.ingest_setup import ingestor_for
from rag.knowledge_index import DENSE, RRF_K, SPARSE, collection_name, rrf
from rag.sources import load_directory

PREFETCH, LIMIT = 40, 10
EXACT = qe.SearchParams(exact=True)
OUT = {"with_payload": True, "with_vector": [SPARSE]}
Hits = list[tuple[str, float]]


async def copy_to_edge(index: QdrantIndex, bot: str, shard: qe.EdgeShard) -> int:
    """Upsert every point of the bot's local collection (vectors and payload as stored) into the shard."""
    records, _ = await index.client.scroll(collection_name(bot), limit=1_000_000, with_vectors=True, with_payload=True)
    shard.update(qe.UpdateOperation.upsert_points([
        qe.Point(str(r.id), {DENSE: r.vector[DENSE], SPARSE: qe.SparseVector(r.vector[SPARSE].indices,
                                                                             r.vector[SPARSE].values)}, r.payload)
        for r in records
    ]))
    shard.optimize()
    return len(records)


def edge_fused(shard: qe.EdgeShard, dv: list[float], sv: qe.SparseVector, *, exact: bool) -> Hits:
    """One edge call: dense and BM25 prefetches, RRF-fused in the engine (dense by HNSW unless `exact`)."""
    request = qe.QueryRequest(limit=LIMIT, query=qe.Fusion.Rrf(k=RRF_K), **OUT, prefetches=[
        qe.Prefetch(limit=PREFETCH, query=qe.Query.Nearest(dv, using=DENSE), params=EXACT if exact else None),
        qe.Prefetch(limit=PREFETCH, query=qe.Query.Nearest(sv, using=SPARSE)),
    ])
    return [(str(p.id), p.score) for p in shard.query(request)]


def edge_batch(shard: qe.EdgeShard, dv: list[float], sv: qe.SparseVector) -> Hits:
    """Both arms (dense exact) in one edge batch, converted to qdrant-client points and fused by
    `rag.knowledge_index.rrf`."""
    arms = shard.query_batch(qe.QueryBatchRequest([
        qe.QueryRequest(limit=PREFETCH, query=qe.Query.Nearest(dv, using=DENSE), params=EXACT, **OUT),
        qe.QueryRequest(limit=PREFETCH, query=qe.Query.Nearest(sv, using=SPARSE), **OUT),
    ]))
    lists = [[qm.ScoredPoint(id=str(p.id), version=p.version, score=p.score, payload=p.payload, vector={
        SPARSE: qm.SparseVector(indices=p.vector[SPARSE].indices, values=p.vector[SPARSE].values)}) for p in arm]
        for arm in arms]
    return [(str(p.id), p.score) for p in rrf(lists, limit=LIMIT)]


async def measure(index: QdrantIndex, bot: str, shard: qe.EdgeShard, dvs, svs, name: str, points: int) -> list[dict]:
    """Time each engine once per question (after one warm-up query); parity against local mode."""
    async def local(dv, sv, _) -> Hits:
        arms = await index.hybrid_query(bot, dv, sv, prefetch=PREFETCH, limit=LIMIT)
        return [(str(p.id), p.score) for p in arms.fused]

    engines = {
        "local mode": local,
        "edge fused, HNSW": lambda dv, _, esv: edge_fused(shard, dv, esv, exact=False),
        "edge fused, exact": lambda dv, _, esv: edge_fused(shard, dv, esv, exact=True),
        "edge batch+rrf, exact": lambda dv, _, esv: edge_batch(shard, dv, esv),
    }
    queries = [(dv, sv, qe.SparseVector(sv.indices, sv.values)) for dv, sv in zip(dvs, svs)]
    rows, truth = [], []
    for engine, fn in engines.items():
        hits, times = [], []
        for query in [queries[0], *queries]:
            t = time.perf_counter()
            out = fn(*query)
            hits.append(await out if inspect.isawaitable(out) else out)
            times.append(1000 * (time.perf_counter() - t))
        hits, times, truth = hits[1:], times[1:], truth or hits[1:]
        same = [[i for i, _ in a] == [i for i, _ in b] for a, b in zip(hits, truth)]
        tied = [s or all(abs(x - y) < 1e-4 for (_, x), (_, y) in zip(a, b)) for s, a, b in zip(same, hits, truth)]
        parity = "reference" if engine == "local mode" else f"{sum(same)} / {sum(tied)} of {len(truth)}"
        rows.append({"engine": engine, "set": name, "points": points, "times": times, "parity": parity})
    return rows


async def run(sets: list[str], pad: int) -> list[dict]:
    """Per set: ingest, copy to edge, measure; pad both engines, measure again."""
    dense, sparse = DenseEmbedder(), SparseEmbedder()
    padding = await padding_points(dense, sparse, total=pad)
    edge_config = qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=await dense.probe_dim(), distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
    )
    rows = []
    async with scratch("bench-edge-") as work:
        index = work.index
        for name in sets:
            bot, docs = f"edge-{name}", (await load_directory(DATA / name / "docs")).documents
            ingestor = ingestor_for(EmbeddingSettings(), index, dense, sparse, work.sessions)
            chunks = (await ingestor.ingest_documents(bot, "bench", docs)).added
            questions = [q.question for q in load_questions(DATA / name / "questions.jsonl")]
            dvs, svs = await dense.aembed_queries(questions), await sparse.aembed_queries(questions)
            shard = qe.EdgeShard.create(f"{work.folder}/edge-{name}", edge_config)
            rows += await measure(index, bot, shard, dvs, svs, name, await copy_to_edge(index, bot, shard))
            if pad > chunks:
                await index.upsert(bot, padding[: pad - chunks])
                rows += await measure(index, bot, shard, dvs, svs, name, await copy_to_edge(index, bot, shard))
            info = shard.info()
            print(f"  {name}: edge shard {info.points_count} points in {info.segments_count} segment(s), "
                  f"{info.indexed_vectors_count} vectors indexed", flush=True)
            shard.close()
            await index.drop(bot)
    return rows


def main() -> None:
    """Command-line entry point: prints a Markdown table."""
    parser = argparse.ArgumentParser(description="hybrid-query latency: Qdrant local mode vs qdrant-edge")
    parser.add_argument("--sets", nargs="+", default=["s10", "stici"])
    parser.add_argument("--pad", type=int, default=10_000, help="pad to this many points (0: corpus only)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    m, rows = machine(), asyncio.run(run(args.sets, args.pad))
    print(f"\nMeasured {m['date']} on {m['nproc']} CPU(s), {m['cpu']}, Python {m['python']}, qdrant-client "
          f"{version('qdrant-client')}, qdrant-edge-py {version('qdrant-edge-py')}; prefetch {PREFETCH} per arm, "
          f"top {LIMIT}, RRF k={RRF_K}; index call only, one pass per question.\n")
    print("| engine | set | points | n queries | p50 ms | p95 ms | parity |\n|---|---|---|---|---|---|---|")
    for r in rows:
        p50, p95 = _percentiles(r["times"])
        print(f"| {r['engine']} | {r['set']} | {r['points']} | {len(r['times'])} | {p50} | {p95} | {r['parity']} |")


if __name__ == "__main__":
    main()
