"""Retrieval benchmark: our pipeline against recipes A, B and C, side by side in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.retrieval [--sets s10 stici help_center help_center_holdout smart_tv] [--pad 10000]
        [--engine local|edge] [--json FILE]

Same corpora (bench/data/<set>/docs; the help-center sets ask examples/help-center), same questions, same embedders (MiniLM int8 + BM25), Qdrant
local mode in a temporary folder. Per system and set it prints recall@1/3/5/10, MRR, gate-1 refusal
and false-refusal rates, chunk count, ingest chunks/s and query p50/p95 (question text → ranked
chunks, query embedding included) at the corpus size and with the collection padded to `--pad`
chunks. Padding = the reserved smart_tv manual (never used for tuning; filler here) plus
jittered copies of its vectors; quality is measured before padding, latency after too.
`--engine edge` runs our pipeline on qdrant-edge (`qdrant.engine: edge`) instead of Qdrant local mode;
the recipes always run on local mode.
Off-topic refusal: each set's collection is also asked every other set's questions whose documents
differ (a different domain), and the share that gate 1 refuses is reported.
Recipes have no gate: a dense-only rule (best dense cosine of the returned chunks below
`RECIPE_MIN_DENSE_SCORE`, the dense-only bar calibrated the same way as gate 1) is applied to them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.data import DATA, set_files
from bench.recipes import RECIPES, Recipe, RecipeSearch, recipe_points
from gateway.settings import EmbeddingSettings, QdrantSettings, RetrievalSettings
from rag.chunking import chunk_document
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.eval import first_hit_rank, load_questions
from rag.index import QdrantIndex, open_index
from rag.knowledge_index import IndexPoint
from rag.search import HybridSearch
from rag.sources import load_directory

SMART_TV = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "rag" / "emanual_samsung" / "smart_tv_remote_manual_corpus.json"
K_VALUES = (1, 3, 5, 10)
RECIPE_MIN_DENSE_SCORE = 0.38
"""Dense cosine alone (no lexical credit, no keyword override): the lowest bar that refuses >= 95%
of off-topic questions on both sets, which is how gate 1 was calibrated before it had lexical credit."""


@dataclass
class Row:
    """One system on one set."""

    system: str
    set: str
    chunks: int = 0
    ingest_s: float = 0.0
    reingest_s: float | None = None
    ranks: list[int | None] = field(default_factory=list)
    false_refusals: int = 0
    refusals: int = 0
    n_unanswerable: int = 0
    offtopic_refusals: int = 0
    n_offtopic: int = 0
    latency_ms: list[float] = field(default_factory=list)
    latency_pad_ms: list[float] = field(default_factory=list)
    padded_to: int = 0

    def metrics(self) -> dict[str, float | int | str | None]:
        """The printed columns."""
        n = len(self.ranks) or 1
        out: dict[str, float | int | str | None] = {"system": self.system, "set": self.set}
        for k in K_VALUES:
            out[f"recall@{k}"] = round(sum(1 for r in self.ranks if r is not None and r <= k) / n, 3)
        out["mrr"] = round(sum(1 / r for r in self.ranks if r) / n, 3)
        out["refusal_rate"] = round(self.refusals / self.n_unanswerable, 3) if self.n_unanswerable else None
        out["false_refusal_rate"] = round(self.false_refusals / n, 3)
        out["offtopic_refusal_rate"] = round(self.offtopic_refusals / self.n_offtopic, 3) if self.n_offtopic else None
        out["chunks"] = self.chunks
        out["ingest_chunks_per_s"] = round(self.chunks / self.ingest_s, 1) if self.ingest_s else None
        out["reingest_pct"] = round(100 * self.reingest_s / self.ingest_s, 2) if self.reingest_s is not None else None
        out["p50_ms"], out["p95_ms"] = _percentiles(self.latency_ms)
        out["p50_pad_ms"], out["p95_pad_ms"] = _percentiles(self.latency_pad_ms)
        out["padded_to"] = self.padded_to
        return out


def _percentiles(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    ordered = sorted(values)
    return round(statistics.median(ordered), 1), round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1)


def machine() -> dict[str, str | int]:
    """What the numbers were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count() or 0,
        "cpu": cpu,
        "python": platform.python_version(),
    }


async def padding_points(
    dense: DenseEmbedder, sparse: SparseEmbedder, *, total: int, base_limit: int = 200, seed: int = 7
) -> list[IndexPoint]:
    """`total` filler points: up to `base_limit` smart_tv manual chunks, then jittered copies of their vectors."""
    if total <= 0:
        return []
    sections = json.loads(SMART_TV.read_text(encoding="utf-8"))
    base = []
    for sid, s in sections.items():
        text = " ".join(" ".join(s["text"][1:]).split())
        if text:
            base += chunk_document(text, fmt="text", title=s["title"], bot="pad", source="pad", doc_id=sid, count_tokens=dense.count_tokens)
    base = base[: min(total, base_limit)]
    dvs = await dense.aembed_documents([c.embed_text for c in base])
    svs = await sparse.aembed_documents([c.embed_text for c in base])
    flat = iter(await dense.aembed_documents([t for c in base for t in c.sentences]))
    sentence_vectors = [[next(flat) for _ in c.sentences] for c in base]
    rng = random.Random(seed)
    points = []
    for i in range(total):
        j = i % len(base)
        vector = dvs[j] if i < len(base) else _jitter(dvs[j], rng)
        points.append(IndexPoint(f"00000000-0000-4000-8000-{i:012d}", base[j].text, "padding", "smart_tv", "padding", (), None,
                                 vector, svs[j], sentence_vectors[j]))
    return points


def _jitter(vector: list[float], rng: random.Random, sigma: float = 0.03) -> list[float]:
    noisy = [x + rng.gauss(0.0, sigma) for x in vector]
    norm = sum(x * x for x in noisy) ** 0.5
    return [x / norm for x in noisy]


async def bench_ours(index, sessions, dense, sparse, name, docs, questions, retrieval, padding, offtopic=(), system="ours") -> Row:
    """Our pipeline: rag ingest (incremental), hybrid search, gate 1."""
    from rag.ingest_setup import ingestor_for

    row = Row(system, name)
    bot = f"ours-{name}"
    ingestor = ingestor_for(EmbeddingSettings(), index, dense, sparse, sessions)
    started = time.perf_counter()
    report = await ingestor.ingest_documents(bot, "bench", docs)
    row.ingest_s = time.perf_counter() - started
    row.chunks = report.added
    started = time.perf_counter()
    again = await ingestor.ingest_documents(bot, "bench", docs)
    row.reingest_s = time.perf_counter() - started
    assert again.unchanged == row.chunks and again.added == again.updated == 0, again
    search = HybridSearch(index, dense, sparse)
    await search.search(bot, ["warm up"], retrieval)
    for q in questions:
        t = time.perf_counter()
        result = await search.search(bot, [q.question], retrieval)
        row.latency_ms.append(1000 * (time.perf_counter() - t))
        if q.answerable:
            row.ranks.append(first_hit_rank(result.hits or result.candidates, q.gold_texts))
            row.false_refusals += result.refused
        else:
            row.n_unanswerable += 1
            row.refusals += result.refused
    for question in offtopic:
        row.n_offtopic += 1
        row.offtopic_refusals += (await search.search(bot, [question], retrieval)).refused
    if padding:
        await index.upsert(bot, padding[: max(0, len(padding) - row.chunks)])
        row.padded_to = await index.count(bot)
        for q in questions:
            t = time.perf_counter()
            await search.search(bot, [q.question], retrieval)
            row.latency_pad_ms.append(1000 * (time.perf_counter() - t))
    await index.drop(bot)
    return row


async def bench_recipe(index, dense, sparse, recipe: Recipe, name, docs, questions, retrieval, padding, offtopic=()) -> Row:
    """One baseline recipe: chunk, embed, write, then search with the shared dense gate rule."""
    row = Row(f"recipe {recipe.name}", name)
    bot = f"recipe{recipe.name.lower()}-{name}"
    started = time.perf_counter()
    chunks = [c for doc in docs for c in recipe.chunk(doc, dense=dense)]
    texts = [c.embed_text for c in chunks]
    dvs = await dense.aembed_documents(texts)
    # Dense-only recipes would not compute BM25; it is written anyway (same layout) but not timed.
    row.ingest_s = time.perf_counter() - started
    t = time.perf_counter()
    svs = await sparse.aembed_documents(texts)
    sparse_s = time.perf_counter() - t
    if recipe.mode == "rrf":
        row.ingest_s += sparse_s
    await index.ensure_collection(bot, dense.dim)
    t = time.perf_counter()
    await index.upsert(bot, recipe_points(recipe, chunks, dvs, svs))
    row.ingest_s += time.perf_counter() - t
    row.chunks = len(chunks)
    search = RecipeSearch(index, recipe)
    k = max(K_VALUES)

    async def one(question: str):
        dv = (await dense.aembed_queries([question]))[0]
        sv = (await sparse.aembed_queries([question]))[0] if recipe.mode == "rrf" else None
        return await search.search(bot, dv, sv, k=k)

    def refused(hits) -> bool:
        best = max((h.dense_score for h in hits if h.dense_score is not None), default=None)
        return best is None or best < RECIPE_MIN_DENSE_SCORE

    await one("warm up")
    for q in questions:
        t = time.perf_counter()
        hits = await one(q.question)
        row.latency_ms.append(1000 * (time.perf_counter() - t))
        if q.answerable:
            row.ranks.append(_rank([h.text for h in hits], q.gold_texts))
            row.false_refusals += refused(hits)
        else:
            row.n_unanswerable += 1
            row.refusals += refused(hits)
    for question in offtopic:
        row.n_offtopic += 1
        row.offtopic_refusals += refused(await one(question))
    if padding:
        await index.upsert(bot, padding[: max(0, len(padding) - row.chunks)])
        row.padded_to = await index.count(bot)
        for q in questions:
            t = time.perf_counter()
            await one(q.question)
            row.latency_pad_ms.append(1000 * (time.perf_counter() - t))
    await index.drop(bot)
    return row


def _rank(texts: list[str], golds) -> int | None:
    from rag.eval import normalize

    wanted = [normalize(g) for g in golds if g.strip()]
    for rank, text in enumerate(texts, start=1):
        if any(g in normalize(text) for g in wanted):
            return rank
    return None


@dataclass
class Scratch:
    """A throwaway workspace: its folder, a conversation store with the schema, and a local-mode index."""

    folder: str
    sessions: Any
    index: QdrantIndex


@asynccontextmanager
async def scratch(prefix: str) -> AsyncIterator[Scratch]:
    """A `Scratch` in a temporary folder, closed and removed afterwards (what every benchmark ingests into)."""
    from qdrant_client import AsyncQdrantClient
    from sqlalchemy.ext.asyncio import create_async_engine

    from storage.engine import session_factory
    from storage.models import Base

    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        store = create_async_engine(f"sqlite+aiosqlite:///{folder}/bench.db", hide_parameters=True)
        async with store.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        index = QdrantIndex(AsyncQdrantClient(path=f"{folder}/qdrant"))
        try:
            yield Scratch(folder, session_factory(store), index)
        finally:
            await index.close()
            await store.dispose()


async def run(
    sets: list[str], *, pad: int, pad_base: int = 200, data: Path = DATA, systems: list[str] | None = None, engine: str = "local"
) -> dict:
    """Run every system on every set; returns machine info, settings and one row per (system, set)."""
    info = machine()
    retrieval = RetrievalSettings(k=max(K_VALUES))
    dense, sparse = DenseEmbedder(), SparseEmbedder()
    padding = await padding_points(dense, sparse, total=pad, base_limit=pad_base)
    rows: list[Row] = []
    counts = {}
    async with scratch("bench-retrieval-") as work:
        index = work.index
        ours_index = index if engine == "local" else open_index(QdrantSettings(path=f"{work.folder}/ours", engine=engine))
        ours_name = "ours" if engine == "local" else f"ours ({engine})"
        files = {name: set_files(name, data) for name in sets}
        questions_by_set = {name: load_questions(files[name][1]) for name in sets}
        try:
            for name in sets:
                docs = (await load_directory(files[name][0])).documents
                questions = questions_by_set[name]
                # Another corpus's questions: a set that asks the same documents is not off-topic.
                offtopic = [q.question for other, qs in questions_by_set.items()
                            if files[other][0] != files[name][0] for q in qs]
                counts[name] = {"documents": len(docs), "questions": len(questions), "unanswerable": sum(not q.answerable for q in questions)}
                if systems is None or "ours" in systems:
                    rows.append(await bench_ours(ours_index, work.sessions, dense, sparse, name, docs, questions, retrieval, padding, offtopic, ours_name))
                    _progress(rows[-1])
                for recipe in RECIPES:
                    if systems is None or recipe.name in systems:
                        rows.append(await bench_recipe(index, dense, sparse, recipe, name, docs, questions, retrieval, padding, offtopic))
                        _progress(rows[-1])
        finally:
            if ours_index is not index:
                await ours_index.close()
    return {
        "machine": info,
        "settings": {"k": retrieval.k, "prefetch": retrieval.prefetch, "min_dense_score": retrieval.min_dense_score,
                     "lexical_credit": retrieval.lexical_credit, "pad_to": pad, "engine": engine},
        "sets": counts,
        "rows": [r.metrics() for r in rows],
        "ranks": {f"{r.system}/{r.set}": r.ranks for r in rows},
    }


def _progress(row: Row) -> None:
    print(f"  done: {row.system} on {row.set}", flush=True)


COLUMNS = (
    ("set", "set"), ("system", "system"), ("recall@1", "R@1"), ("recall@3", "R@3"), ("recall@5", "R@5"),
    ("recall@10", "R@10"), ("mrr", "MRR"), ("refusal_rate", "refuse"), ("false_refusal_rate", "false ref."),
    ("offtopic_refusal_rate", "off-topic refused"),
    ("chunks", "chunks"), ("ingest_chunks_per_s", "chunks/s"), ("reingest_pct", "re-ingest %"),
    ("p50_ms", "p50 ms"), ("p95_ms", "p95 ms"), ("p50_pad_ms", "p50 ms @pad"), ("p95_pad_ms", "p95 ms @pad"),
)


def render(result: dict) -> str:
    """The result as a Markdown table with its header lines."""
    m, s = result["machine"], result["settings"]
    lines = [
        f"Measured {m['date']} on {m['nproc']} CPU(s), {m['cpu']}, Python {m['python']}; ours on {s.get('engine', 'local')}, recipes on Qdrant local mode.",
        "Sets: " + ", ".join(f"{k} ({v['documents']} docs, {v['questions']} questions, {v['unanswerable']} unanswerable)" for k, v in result["sets"].items()),
        f"k={s['k']}, prefetch={s['prefetch']}, gate 1 min_dense_score={s['min_dense_score']} lexical_credit={s['lexical_credit']} "
        f"(recipes: dense-only bar {RECIPE_MIN_DENSE_SCORE}); off-topic = the other sets' questions; "
        f"each question run once per size; '@pad' = collection padded to {s['pad_to']} chunks.",
        "",
        "| " + " | ".join(h for _, h in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for row in result["rows"]:
        lines.append("| " + " | ".join("n/a" if row.get(k) is None else str(row.get(k)) for k, _ in COLUMNS) + " |")
    return "\n".join(lines)


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="retrieval benchmark: our pipeline vs recipes A-C")
    parser.add_argument("--sets", nargs="+", default=["s10", "stici"])
    parser.add_argument("--pad", type=int, default=10_000, help="pad each collection to this many chunks for latency (0: skip)")
    parser.add_argument("--pad-base", type=int, default=200, help="real smart_tv chunks embedded for padding; the rest are jittered copies")
    parser.add_argument("--systems", nargs="+", help="subset of: ours A B C")
    parser.add_argument("--engine", choices=["local", "edge"], default="local", help="our pipeline's index engine")
    parser.add_argument("--json", type=Path, help="also write the full result (with per-question ranks) here")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    result = asyncio.run(run(args.sets, pad=args.pad, pad_base=args.pad_base, systems=args.systems, engine=args.engine))
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print(render(result))
    print(f"\nwall time {result['wall_s']} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
