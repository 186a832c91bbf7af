"""Shared fixtures: the real embedders (loaded once per session), a temp SQLite store, an embedded index
(Qdrant local mode and qdrant-edge: every test that takes `index` runs on both)."""

from __future__ import annotations

import os

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gateway.settings import QdrantSettings  # noqa: E402
from rag.embeddings import DenseEmbedder, SparseEmbedder  # noqa: E402
from rag.index import open_index  # noqa: E402
from storage.engine import session_factory  # noqa: E402
from storage.models import Base  # noqa: E402


@pytest.fixture(scope="session")
def dense() -> DenseEmbedder:
    """The offline MiniLM int8 embedder; loading ONNX once keeps the suite fast."""
    return DenseEmbedder()


@pytest.fixture(scope="session")
def sparse() -> SparseEmbedder:
    """BM25 with the repo's stopword file."""
    return SparseEmbedder()


@pytest.fixture
async def sessions(tmp_path):
    """A real SQLite store in a temp file with every table created."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/store.db")
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    yield session_factory(engine)
    await engine.dispose()


@pytest.fixture(params=["local", "edge"])
async def index(request, tmp_path):
    """The embedded index in a temp folder, once per engine."""
    idx = open_index(QdrantSettings(path=str(tmp_path / "qdrant"), engine=request.param))
    yield idx
    await idx.close()
