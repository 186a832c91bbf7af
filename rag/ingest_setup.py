"""The one way to make an `Ingestor` from the config: the server (`gateway.knowledge`), `gateway eval` and the
benchmarks (bench/) build it alike, so a benchmark times the chunk sizes a deployment ingests with."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.settings import EmbeddingSettings
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.ingest import Ingestor
from rag.knowledge_index import KnowledgeIndex


def ingestor_for(embedding: EmbeddingSettings, index: KnowledgeIndex, dense: DenseEmbedder, sparse: SparseEmbedder,
                 sessions: async_sessionmaker[AsyncSession]) -> Ingestor:
    """An `Ingestor` with `embedding`'s chunk sizes (`max_chunk_tokens`, `chunk_text_tokens`)."""
    return Ingestor(index, dense, sparse, sessions, max_chunk_tokens=embedding.max_chunk_tokens,
                    text_tokens=embedding.chunk_text_tokens)
