"""Ingest time against the size of one Markdown file (`python -m bench.ingest_large_file`).

A reviewer saw one 15 MB file (under the 20 MB cap) take minutes. This generates one realistic Markdown
file of each `--mb` size (seeded: headings, paragraphs, lists, hard-wrapped lines, lines of 40-120
sentences, code fences, tables, quotes; words drawn from examples/help-center) and times, `--runs` times
each, chunking it as ingest does (`Ingestor.chunk`, ingest's own call and sizes); with `--full`
also a whole ingest of it (`Ingestor.ingest_documents`: chunk, embed windows and sentences, BM25, write to
Qdrant local mode and SQLite in a temporary folder). Prints seconds, MB/s and chunks per run, then the
median per size: time that grows in step with the size is linear (MB/s stays level).

    HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python -m bench.ingest_large_file \\
        [--mb 0.25 0.5 1 2] [--runs 3] [--full]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
from pathlib import Path

from bench._timing import timed
from bench.retrieval import machine, scratch
from gateway.observability.logs import configure_logging
from gateway.settings import EmbeddingSettings
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.ingest import Ingestor
from rag.ingest_runs import IngestReport
from rag.ingest_setup import ingestor_for
from rag.sources import Document

HELP_CENTER = Path(__file__).resolve().parent.parent / "examples" / "help-center"


def markdown(size: int, *, seed: int = 7) -> str:
    """A Markdown file of `size` characters, the same for the same seed."""
    words = sorted(set(re.findall(r"[A-Za-z][a-z']+", " ".join(p.read_text() for p in HELP_CENTER.glob("*.md")))))
    rnd = random.Random(seed)

    def sentence(lo: int = 6, hi: int = 22) -> str:
        picked = [rnd.choice(words) for _ in range(rnd.randint(lo, hi))]
        return " ".join([picked[0].capitalize(), *picked[1:]]) + rnd.choice(".....?!:")

    blocks: list[str] = []
    length = section = 0
    while length < size:
        r = rnd.random()
        if r < 0.06:
            section += 1
            block = f"{'#' * rnd.choice([1, 2, 2, 3, 3, 4])} {sentence(2, 6)[:-1]} {section}"
        elif r < 0.55:
            block = " ".join(sentence() for _ in range(rnd.randint(2, 8)))
        elif r < 0.70:
            block = "\n".join(f"{rnd.choice(['-', '*', '1.'])} {sentence(4, 16)}" for _ in range(rnd.randint(2, 9)))
        elif r < 0.76:  # a long line
            block = " ".join(sentence() for _ in range(rnd.randint(40, 120)))
        elif r < 0.80:
            block = "```python\n" + "\n".join(f"x_{i} = compute('{rnd.choice(words)}')  # {sentence(3, 8)}"
                                              for i in range(rnd.randint(3, 40))) + "\n```"
        elif r < 0.83:
            block = "| name | plan | limit |\n|---|---|---|\n" + "\n".join(
                f"| {rnd.choice(words)} | {rnd.choice(words)} | {rnd.randint(1, 999)} MB |" for _ in range(rnd.randint(2, 30)))
        elif r < 0.86:
            block = f"> {sentence()} {sentence()}"
        else:  # hard-wrapped lines
            block = "\n".join(sentence(4, 12) for _ in range(rnd.randint(2, 6)))
        blocks.append(block)
        length += len(block) + 2
    return "\n\n".join(blocks)[:size]


def chunk(text: str, ingestor: Ingestor) -> list:
    """Its chunks as ingest makes them: ingest's own call, on an `Ingestor` built as the server builds it (its
    chunk sizes from `embedding:`; repeating them here let the two drift)."""
    report = IngestReport(bot="bench", source="bench")
    chunks = ingestor.chunk("bench", "bench", _document(text), report)
    if chunks is None:
        raise RuntimeError(f"chunking failed: {report.errors}")
    return chunks


def _document(text: str) -> Document:
    return Document("manual.md", "manual", None, text, "markdown")


async def full_ingest(text: str, dense: DenseEmbedder, sparse: SparseEmbedder) -> float:
    async with scratch("bench-large-file-") as work:
        with timed() as took:
            await ingestor_for(EmbeddingSettings(), work.index, dense, sparse, work.sessions).ingest_documents(
                "bench", "bench", [_document(text)])
    return took.wall_s


async def run(sizes: list[float], runs: int, full: bool) -> None:
    dense, sparse = DenseEmbedder(), SparseEmbedder()
    dense.embed_documents(["warm up the encoder"] * 16)
    info = machine()
    print(f"{info['date']}, {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}; {runs} runs a size")
    async with scratch("bench-large-file-chunking-") as work:  # chunking alone writes to neither
        chunker = ingestor_for(EmbeddingSettings(), work.index, dense, sparse, work.sessions)
        for mb in sizes:
            await one_size(mb, runs, full, chunker)


async def one_size(mb: float, runs: int, full: bool, chunker: Ingestor) -> None:
    """`runs` timings of one generated file of `mb` MB, then their median."""
    text = markdown(int(mb * 1_000_000))
    chunking, whole = [], []
    for i in range(runs):
        with timed() as took:
            chunks = chunk(text, chunker)
        chunking.append(took.wall_s)
        line = f"{mb:g} MB run {i + 1}: {len(chunks)} chunks, chunking {took.wall_s:.1f} s ({mb / took.wall_s:.3f} MB/s)"
        if full:
            whole.append(await full_ingest(text, chunker.dense, chunker.sparse))
            line += f", full ingest {whole[-1]:.1f} s ({mb / whole[-1]:.4f} MB/s)"
        print(line, flush=True)
    median = statistics.median(chunking)
    summary = f"{mb:g} MB: chunking median {median:.1f} s = {mb / median:.3f} MB/s"
    if whole:
        summary += f"; full ingest median {statistics.median(whole):.1f} s = {mb / statistics.median(whole):.4f} MB/s"
    print(summary, flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[0.25, 0.5, 1, 2])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="also time a whole ingest (embedding dominates)")
    args = parser.parse_args()
    configure_logging(level="WARNING")
    asyncio.run(run(args.mb, args.runs, args.full))
