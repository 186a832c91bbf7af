"""Index points for new chunks: what ingest writes to the index for each chunk.

A chunk becomes one dense vector (the token-weighted mean of its ≤256-token windows, so a long
chunk is not judged by its first window alone), its BM25 vector, and one dense vector per
sentence (the `sentences` multivector behind the ranking prior in `rag.search`). Kept apart from
`rag.ingest`, which only decides which chunks are new; written a step of chunks at a time
(`write_points`). A chunk whose document has the content of one
already indexed (a renamed file), or of one embedded earlier in the same run (the same page in two
folders), takes that document's vectors instead of being embedded again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
from qdrant_client import models as qm

from rag.chunking import Chunk
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.knowledge_index import IndexPoint, KnowledgeIndex
from rag.sources import Document

log = logging.getLogger(__name__)

EMBED_STEP = 64
"""Chunks embedded and written per step of a flush (memory stays bounded by the step, not by a manual
of thousands of chunks). Not smaller: each step's texts are sorted by length into the encoder's batches,
and steps of 16 padded them more, ingesting about 9% slower (bench/README.md, `bench.embed_step`)."""
SLICE_BATCHES = 2
"""A step's windows, then its sentences, are embedded this many encoder batches at a time, and the progress
bar moves after each part: a step of 64 chunks (about 400 texts) held it still for half a minute, and parts
of 8 batches (64 windows of up to 256 tokens) for 8-12 s under load. The parts follow the order by length
that one call sorts the texts in (`rag.embeddings`), so the encoder sees the same batches, and gives the
same vectors, as with one call."""


async def write_points(
    index: KnowledgeIndex, dense: DenseEmbedder, sparse: SparseEmbedder, bot: str, source: str,
    chunks: list[tuple[Document, Chunk]], donors: dict[str, str], *, share: list[float], advance: Callable[[float], None],
) -> None:
    """Embed and write the chunks' points EMBED_STEP at a time (a donor's vectors reused: `reusing_points`),
    each step then told to `advance` as the sum of its chunks' `share`. Why in steps: one long document (a manual
    of thousands of chunks, each with its sentence vectors) never holds all its vectors in memory at once."""
    for start in range(0, len(chunks), EMBED_STEP):
        step = _StepProgress(sum(share[start : start + EMBED_STEP]), advance)
        points, reused = await reusing_points(index, dense, sparse, bot, source, chunks[start : start + EMBED_STEP],
                                              donors, progress=step.embedded)
        if reused:
            log.info("ingest.vectors_reused", extra={"bot": bot, "source": source, "chunks": reused})
        await index.upsert(bot, points)
        step.written()


class _StepProgress:
    """A step's share of its documents, told as its texts are embedded, its last part once it is written
    (a document is done once its points are)."""

    def __init__(self, share: float, advance: Callable[[float], None]) -> None:
        self.share, self.advance, self.told = share, advance, 0.0

    def embedded(self, done: int, total: int) -> None:
        part = self.share * done / (total + 1)
        self.advance(part - self.told)
        self.told = part

    def written(self) -> None:
        self.advance(self.share - self.told)


async def index_points(
    dense: DenseEmbedder, sparse: SparseEmbedder, source: str, chunks: list[tuple[Document, Chunk]],
    progress: Callable[[int, int], None] | None = None,
) -> list[IndexPoint]:
    """Index points for chunks: the dense vector (token-weighted mean of the windows), BM25, and
    one vector per sentence; `progress` is told (texts embedded, texts) after each part (`SLICE_BATCHES`)."""
    windows = [w for _, c in chunks for w in c.windows]
    # Each distinct sentence once: the overlap block repeats its sentences in the next chunk
    # (7% of STICI's sentences, 7% of S10's).
    distinct = list(dict.fromkeys(t for _, c in chunks for t in c.sentences))
    count = _Count(len(windows) + len(distinct), progress)
    window_vectors = iter(await _embed_in_parts(dense, windows, count))
    dense_vectors = [
        weighted_mean([next(window_vectors) for _ in c.windows], [dense.count_tokens(w) for w in c.windows])
        for _, c in chunks
    ]
    sparse_vectors = await sparse.aembed_documents([c.sparse_text or c.embed_text for _, c in chunks])
    sentence_vector = dict(zip(distinct, await _embed_in_parts(dense, distinct, count)))
    return [
        IndexPoint(c.chunk_id, c.text, source, doc.doc_id, doc.title, c.heading_path, doc.url, d, sv,
                   [sentence_vector[t] for t in c.sentences])
        for (doc, c), d, sv in zip(chunks, dense_vectors, sparse_vectors)
    ]


async def reusing_points(
    index: KnowledgeIndex, dense: DenseEmbedder, sparse: SparseEmbedder, bot: str, source: str,
    chunks: list[tuple[Document, Chunk]], donors: dict[str, str], *, progress: Callable[[int, int], None] | None = None,
) -> tuple[list[IndexPoint], int]:
    """`index_points`, except for a chunk with a donor (chunk id -> the id of the same chunk of a document with
    the same content: a file renamed or copied): the donor's vectors, read back from the index or embedded
    in this same call, are written under the chunk's own id and payload, not embedded again. A donor that
    is neither (the index no longer holds it) is embedded after all. A donor embedded in this call is never read
    back: the index holds its previous vectors (of another chunker or model) until this call's are written.
    `progress` is `index_points`'. Returns the points and how many were reused."""
    here = {c.chunk_id for _, c in chunks}
    wanted = [donor for _, c in chunks if (donor := donors.get(c.chunk_id)) is not None and donor not in here]
    stored = await index.vectors(bot, wanted) if wanted else {}
    points, fresh, copies = [], [], []
    for doc, c in chunks:
        donor = donors.get(c.chunk_id, "")
        if donor in here and donor not in donors:  # its donor is embedded below
            copies.append((doc, c, donor))
        elif (v := stored.get(donor)) is not None:
            points.append(_point(source, doc, c, v.dense, v.sparse, v.sentences))
        else:
            fresh.append((doc, c))
    reused = len(points) + len(copies)
    embedded = {p.chunk_id: p for p in await index_points(dense, sparse, source, fresh, progress)} if fresh else {}
    points += embedded.values()
    for doc, c, donor in copies:
        p = embedded[donor]
        points.append(_point(source, doc, c, p.dense, p.sparse, p.sentences))
    return points, reused


def _point(source: str, doc: Document, c: Chunk, dense: list[float], sparse: qm.SparseVector,
           sentences: Sequence[Sequence[float]]) -> IndexPoint:
    """The chunk's point with vectors made for the same chunk of another document."""
    return IndexPoint(c.chunk_id, c.text, source, doc.doc_id, doc.title, c.heading_path, doc.url, dense, sparse, sentences)


class _Count:
    """Texts embedded so far of a step's `total`, told to `progress`."""

    def __init__(self, total: int, progress: Callable[[int, int], None] | None) -> None:
        self.total, self.progress, self.done = total, progress, 0

    def add(self, texts: int) -> None:
        self.done += texts
        if self.progress is not None:
            self.progress(self.done, self.total)


async def _embed_in_parts(dense: DenseEmbedder, texts: list[str], count: _Count) -> list[list[float]]:
    """`dense.aembed_documents(texts)`, asked `SLICE_BATCHES` batches at a time in the order by length that
    one call sorts them in (so the same batches), `count` told after each part."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    size = max(1, dense.batch_size * SLICE_BATCHES)
    vectors: list[list[float]] = [[] for _ in texts]
    for start in range(0, len(order), size):
        part = order[start : start + size]
        for i, vector in zip(part, await dense.aembed_documents([texts[i] for i in part])):
            vectors[i] = vector
        count.add(len(part))
    return vectors


def weighted_mean(vectors: list[list[float]], weights: list[int]) -> list[float]:
    """Unit-length mean of a chunk's window vectors, weighted by their token counts."""
    if len(vectors) == 1:
        return vectors[0]
    total = np.average(np.asarray(vectors, dtype=np.float64), axis=0, weights=weights)
    return (total / (np.linalg.norm(total) or 1.0)).tolist()
