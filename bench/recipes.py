"""The three baseline recipes of issue 3, as common RAG tutorials build them.

- A: paragraphs packed to about 1,200 characters with a 200-character overlap; dense search only.
- B: split at `#`/`##` headings, then windows of about 1,000 characters with a 200 overlap; dense only.
- C: structure-aware chunks of up to 350 tokens with the heading carried in (our own chunker at
  350 tokens, no block overlap); dense top-50 plus BM25 top-50 fused by RRF with constant 60.

They use the same embedders and Qdrant layout as our pipeline, so only chunking and ranking differ.
None has a relevance gate of its own; `RecipeSearch` applies gate 1's dense rule (best dense cosine
of the returned chunks below the threshold → refused) so the refusal columns are comparable.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from qdrant_client import models as qm

from rag.chunking import chunk_document
from rag.embeddings import DenseEmbedder
from rag.index import QdrantIndex
from rag.knowledge_index import DENSE, SPARSE, IndexPoint, collection_name
from rag.sources import Document

RECIPE_NAMESPACE = uuid.UUID("0b7d2f6e-5a0c-4f1e-9d55-3c2b1a0e9f42")
RRF_K = 60
ARM_LIMIT = 50
_HEADING_12 = re.compile(r"^#{1,2}\s", re.MULTILINE)


@dataclass(frozen=True)
class RecipeChunk:
    """A baseline chunk: `text` is what a hit is judged on, `embed_text` what the encoders see."""

    document: str
    text: str
    embed_text: str


@dataclass(frozen=True)
class Recipe:
    """A named chunking rule plus its ranking mode (`dense` or `rrf`)."""

    name: str
    description: str
    mode: str

    def chunk(self, doc: Document, *, dense: DenseEmbedder) -> list[RecipeChunk]:
        """Chunks of one document under this recipe."""
        if self.name == "A":
            bodies = pack_paragraphs(doc.text, size=1200, overlap=200)
        elif self.name == "B":
            bodies = [w for section in split_headings(doc.text) for w in windows(section, size=1000, overlap=200)]
        else:
            chunks = chunk_document(
                doc.text,
                fmt=doc.format,
                title=doc.title,
                bot="recipe-c",
                source="bench",
                doc_id=doc.doc_id,
                count_tokens=dense.count_tokens,
                max_tokens=350,
                overlap=False,
            )
            return [RecipeChunk(doc.doc_id, c.text, c.embed_text) for c in chunks]
        return [RecipeChunk(doc.doc_id, b, b) for b in bodies if b.strip()]


RECIPES = (
    Recipe("A", "paragraphs packed to ~1200 chars, 200 overlap, dense only", "dense"),
    Recipe("B", "split at #/## then ~1000 chars, 200 overlap, dense only", "dense"),
    Recipe("C", "structure-aware <=350 tokens + heading, dense50 + BM25-50, RRF 60", "rrf"),
)


def pack_paragraphs(text: str, *, size: int, overlap: int) -> list[str]:
    """Blank-line paragraphs packed greedily to `size` chars; each chunk starts with the previous one's tail."""
    out: list[str] = []
    current = ""
    for para in (p.strip() for p in re.split(r"\n\s*\n", text)):
        if not para:
            continue
        for piece in windows(para, size=size, overlap=overlap) if len(para) > size else [para]:
            if current and len(current) + 2 + len(piece) > size:
                out.append(current)
                current = _tail(current, overlap) + "\n\n" + piece
            else:
                current = f"{current}\n\n{piece}" if current else piece
    if current:
        out.append(current)
    return out


def split_headings(text: str) -> list[str]:
    """Sections that start at each `#` or `##` heading (the heading line stays in its section)."""
    starts = [m.start() for m in _HEADING_12.finditer(text)]
    bounds = [0, *starts, len(text)] if not starts or starts[0] != 0 else [*starts, len(text)]
    return [text[a:b].strip() for a, b in zip(bounds, bounds[1:]) if text[a:b].strip()]


def windows(text: str, *, size: int, overlap: int) -> list[str]:
    """Character windows of about `size`, cut at whitespace, each overlapping the last by ~`overlap`."""
    text = text.strip()
    if len(text) <= size:
        return [text]
    out = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            cut = text.rfind(" ", start + size // 2, end)
            end = cut if cut > 0 else end
        out.append(text[start:end].strip())
        if end >= len(text):
            break
        nxt = end - overlap
        space = text.find(" ", nxt, end)
        start = space + 1 if space > 0 else nxt
    return out


def _tail(text: str, n: int) -> str:
    tail = text[-n:]
    space = tail.find(" ")
    return tail[space + 1 :] if 0 <= space < len(tail) - 1 else tail


def recipe_points(recipe: Recipe, chunks: list[RecipeChunk], dense: list[list[float]], sparse: list[qm.SparseVector]) -> list[IndexPoint]:
    """Index points for a recipe's chunks (ids are uuid5 of recipe, position and text)."""
    return [
        IndexPoint(
            str(uuid.uuid5(RECIPE_NAMESPACE, f"{recipe.name}\x1f{i}\x1f{c.text}")),
            c.text,
            "bench",
            c.document,
            c.document,
            (),
            None,
            d,
            s,
        )
        for i, (c, d, s) in enumerate(zip(chunks, dense, sparse))
    ]


@dataclass(frozen=True)
class RecipeHit:
    """A ranked chunk with its dense cosine (None when only BM25 found it)."""

    text: str
    dense_score: float | None


class RecipeSearch:
    """Top-k search for a recipe: dense only, or dense + BM25 fused by RRF (k=60) client-side."""

    def __init__(self, index: QdrantIndex, recipe: Recipe) -> None:
        self.index = index
        self.recipe = recipe

    async def search(self, bot: str, dense: list[float], sparse: qm.SparseVector, *, k: int) -> list[RecipeHit]:
        """The top `k` chunks, best first."""
        name = collection_name(bot)
        if self.recipe.mode == "dense":
            result = await self.index.client.query_points(name, query=dense, using=DENSE, limit=k, with_payload=["text"])
            return [RecipeHit(p.payload["text"], p.score) for p in result.points]
        by_dense, by_sparse = await self.index.client.query_batch_points(
            name,
            [
                qm.QueryRequest(query=dense, using=DENSE, limit=ARM_LIMIT, with_payload=["text"]),
                qm.QueryRequest(query=sparse, using=SPARSE, limit=ARM_LIMIT, with_payload=["text"]),
            ],
        )
        scores: dict[str, float] = {}
        texts: dict[str, str] = {}
        cosines = {str(p.id): p.score for p in by_dense.points}
        for ranked in (by_dense.points, by_sparse.points):
            for rank, p in enumerate(ranked, start=1):
                pid = str(p.id)
                scores[pid] = scores.get(pid, 0.0) + 1.0 / (RRF_K + rank)
                texts[pid] = p.payload["text"]
        top = sorted(scores, key=scores.__getitem__, reverse=True)[:k]
        return [RecipeHit(texts[pid], cosines.get(pid)) for pid in top]
