"""Ingest throughput against the embedding step (`python -m bench.embed_step`).

A full ingest of one eval set (`Ingestor.ingest_documents`: chunk, embed windows and sentences, BM25,
write to Qdrant local mode and SQLite in a temporary folder) with each `--steps` value as
`rag.points.EMBED_STEP` (chunks embedded and written per step of a flush), `--runs` times each,
interleaved (16, 64, 16, 64, ...) so that the machine's other work falls on both. The encoder is warmed up
first. Prints per run the chunks, seconds (and this process's CPU seconds, all threads: less moved by the
machine's other work than wall time), chunks/s, how many times the progress bar moved and the longest
wait between two of its moves (the first one included: the bar shows 0 at once), and a digest of every stored
dense and sentence vector (the same digest: the step changed no vector, so no ranking), then the median per step.

    HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python -m bench.embed_step \
        [--set s10] [--steps 16 64] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time

import rag.points
from bench._timing import Spread, timed
from bench.data import set_files
from bench.retrieval import machine, scratch
from gateway.observability.logs import configure_logging
from gateway.settings import EmbeddingSettings
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.ingest_setup import ingestor_for
from rag.sources import load_directory


async def one_run(dense: DenseEmbedder, sparse: SparseEmbedder, docs: list, step: int) -> dict[str, float]:
    """One full ingest into a fresh store and index with `EMBED_STEP = step`."""
    moves: list[float] = []
    rag.points.EMBED_STEP = step
    async with scratch("bench-embed-step-") as work:
        ingestor = ingestor_for(EmbeddingSettings(), work.index, dense, sparse, work.sessions)
        started = time.perf_counter()
        with timed() as took:
            report = await ingestor.ingest_documents("bench", "bench", docs,
                                                     progress=lambda done, total: moves.append(time.perf_counter()))
        ids = sorted(await work.index.point_ids("bench", "bench"))
        stored = await work.index.vectors("bench", ids)
        vectors = hashlib.sha256(repr([(i, stored[i].dense, stored[i].sentences) for i in ids]).encode()).hexdigest()[:12]
    gaps = [b - a for a, b in zip([started, *moves], moves)]
    return {"chunks": report.added, "s": took.wall_s, "cpu_s": took.cpu_s, "chunks_s": report.added / took.wall_s,
            "moves": len(moves), "longest_wait_s": max(gaps, default=took.wall_s), "vectors": vectors}


async def run(name: str, steps: list[int], runs: int) -> None:
    docs = (await load_directory(set_files(name)[0])).documents
    dense, sparse = DenseEmbedder(), SparseEmbedder()
    dense.embed_documents(["warm up the encoder"] * 16)
    sparse.embed_documents(["warm up"])
    info = machine()
    print(f"{info['date']}, {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}; set {name}, "
          f"{len(docs)} documents; encoder batch {dense.batch_size}")
    results: dict[int, list[dict[str, float]]] = {step: [] for step in steps}
    for i in range(runs):
        for step in steps:
            result = await one_run(dense, sparse, docs, step)
            results[step].append(result)
            print(f"run {i + 1} step {step}: {result['chunks']} chunks in {result['s']:.1f} s (CPU {result['cpu_s']:.1f} s) = "
                  f"{result['chunks_s']:.1f} chunks/s; bar moved {result['moves']} times, longest wait "
                  f"{result['longest_wait_s']:.1f} s; vectors {result['vectors']}", flush=True)
    for step, rows in results.items():
        rate, cpu, wait = (Spread.of(r[key] for r in rows) for key in ("chunks_s", "cpu_s", "longest_wait_s"))
        print(f"step {step}: median {rate.median:.1f} chunks/s over {len(rows)} runs (min {rate.min:.1f}, max "
              f"{rate.max:.1f}), CPU median {cpu.median:.1f} s; longest wait median {wait.median:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="s10")
    parser.add_argument("--steps", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    configure_logging(level="WARNING")  # not a line per flush
    asyncio.run(run(args.set, args.steps, args.runs))
