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

EMBED_STEP = 16
"""Chunks embedded and written per step of a flush: the progress bar moves after each step, so a
manual of hundreds of chunks does not hold it still for a minute."""


async def write_points(
    index: KnowledgeIndex, dense: DenseEmbedder, sparse: SparseEmbedder, bot: str, source: str,
    chunks: list[tuple[Document, Chunk]], donors: dict[str, str], *, share: list[float], advance: Callable[[float], None],
) -> None:
    """Embed and write the chunks' points EMBED_STEP at a time (a donor's vectors reused: `reusing_points`),
    each step then told to `advance` as the sum of its chunks' `share`. Why in steps: one long document (a manual
    of thousands of chunks, each with its sentence vectors) never holds all its vectors in memory at once."""
    for start in range(0, len(chunks), EMBED_STEP):
        points, reused = await reusing_points(index, dense, sparse, bot, source, chunks[start : start + EMBED_STEP], donors)
        if reused:
            log.info("ingest.vectors_reused", extra={"bot": bot, "source": source, "chunks": reused})
        await index.upsert(bot, points)
        advance(sum(share[start : start + EMBED_STEP]))


async def index_points(
    dense: DenseEmbedder, sparse: SparseEmbedder, source: str, chunks: list[tuple[Document, Chunk]]
) -> list[IndexPoint]:
    """Index points for chunks: the dense vector (token-weighted mean of the windows), BM25, and
    one vector per sentence."""
    windows = [w for _, c in chunks for w in c.windows]
    window_vectors = iter(await dense.aembed_documents(windows))
    dense_vectors = [
        weighted_mean([next(window_vectors) for _ in c.windows], [dense.count_tokens(w) for w in c.windows])
        for _, c in chunks
    ]
    sparse_vectors = await sparse.aembed_documents([c.sparse_text or c.embed_text for _, c in chunks])
    # Each distinct sentence once: the overlap block repeats its sentences in the next chunk
    # (7% of STICI's sentences, 7% of S10's).
    distinct = list(dict.fromkeys(t for _, c in chunks for t in c.sentences))
    sentence_vector = dict(zip(distinct, await dense.aembed_documents(distinct)))
    return [
        IndexPoint(c.chunk_id, c.text, source, doc.doc_id, doc.title, c.heading_path, doc.url, d, sv,
                   [sentence_vector[t] for t in c.sentences])
        for (doc, c), d, sv in zip(chunks, dense_vectors, sparse_vectors)
    ]


async def reusing_points(
    index: KnowledgeIndex, dense: DenseEmbedder, sparse: SparseEmbedder, bot: str, source: str,
    chunks: list[tuple[Document, Chunk]], donors: dict[str, str],
) -> tuple[list[IndexPoint], int]:
    """`index_points`, except for a chunk with a donor (chunk id -> the id of the same chunk of a document with
    the same content: a file renamed or copied): the donor's vectors, read back from the index or embedded
    in this same call, are written under the chunk's own id and payload, not embedded again. A donor that
    is neither (the index no longer holds it) is embedded after all. A donor embedded in this call is never read
    back: the index holds its previous vectors (of another chunker or model) until this call's are written.
    Returns the points and how many were reused."""
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
    embedded = {p.chunk_id: p for p in await index_points(dense, sparse, source, fresh)} if fresh else {}
    points += embedded.values()
    for doc, c, donor in copies:
        p = embedded[donor]
        points.append(_point(source, doc, c, p.dense, p.sparse, p.sentences))
    return points, reused


def _point(source: str, doc: Document, c: Chunk, dense: list[float], sparse: qm.SparseVector,
           sentences: Sequence[Sequence[float]]) -> IndexPoint:
    """The chunk's point with vectors made for the same chunk of another document."""
    return IndexPoint(c.chunk_id, c.text, source, doc.doc_id, doc.title, c.heading_path, doc.url, dense, sparse, sentences)


def weighted_mean(vectors: list[list[float]], weights: list[int]) -> list[float]:
    """Unit-length mean of a chunk's window vectors, weighted by their token counts."""
    if len(vectors) == 1:
        return vectors[0]
    total = np.average(np.asarray(vectors, dtype=np.float64), axis=0, weights=weights)
    return (total / (np.linalg.norm(total) or 1.0)).tolist()
