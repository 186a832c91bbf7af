"""How long the event loop stalls while the index searches in local mode (`python -m bench.loop_stall`).

Fills a local-mode collection with N random points (384-d dense, 20 BM25 terms each), then runs hybrid
queries while a ticker task asks to wake every 5 ms, and prints the query time and the ticker's longest
lateness: what every other request of the process waits while a search runs. Then `--burst` first
queries at once read the collection's BM25 term statistics (what a bot's first turns after a restart do).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time

import numpy as np
from qdrant_client import models as qm

from gateway.settings import QdrantSettings
from rag.index import QdrantIndex
from rag.knowledge_index import DENSE, SPARSE, collection_name

DIM = 384


async def measure(points: int, queries: int, burst: int) -> None:
    index = QdrantIndex.from_settings(QdrantSettings(path=tempfile.mkdtemp()))
    await index.ensure_collection("bench", DIM)
    rng, pick = np.random.default_rng(0), random.Random(0)
    vectors = rng.standard_normal((points, DIM)).astype(np.float32)
    for start in range(0, points, 1000):
        await index.client.upsert(collection_name("bench"), [
            qm.PointStruct(id=i, vector={DENSE: vectors[i].tolist(), SPARSE: qm.SparseVector(
                indices=sorted(pick.sample(range(5000), 20)), values=[1.0] * 20)}, payload={"text": "x"})
            for i in range(start, min(start + 1000, points))])
    late: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(0.005)
            late.append(time.perf_counter() - asked - 0.005)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    took = []
    for _ in range(queries):
        started = time.perf_counter()
        await index.hybrid_query("bench", rng.standard_normal(DIM).tolist(),
                                 qm.SparseVector(indices=[1, 2, 3], values=[1.0] * 3), prefetch=40, limit=10)
        took.append((time.perf_counter() - started) * 1000)
    queries_late, late[:] = max(late), []
    # A burst of first queries after a restart: each needs the bot's BM25 term statistics (a full scan).
    index._term_stats.invalidate("bench")
    started = time.perf_counter()
    await asyncio.gather(*(index.term_stats("bench") for _ in range(burst)))
    scan_s = time.perf_counter() - started
    stop.set()
    await task
    await index.close()
    print(f"{queries} hybrid queries over {points} points in local mode ({type(index.client).__name__}): "
          f"median {statistics.median(took):.1f} ms, max {max(took):.1f} ms; "
          f"event loop's longest stall {queries_late * 1000:.1f} ms")
    print(f"{burst} first queries' term statistics at once: {scan_s:.2f} s; event loop's longest stall "
          f"{max(late) * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--burst", type=int, default=10, help="first queries at once, reading term statistics")
    args = parser.parse_args()
    asyncio.run(measure(args.points, args.queries, args.burst))


if __name__ == "__main__":
    main()
