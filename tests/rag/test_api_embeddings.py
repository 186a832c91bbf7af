"""`embedding.model: litellm/<model>`: an API embedding model through the real LiteLLM, against the
local OpenAI-compatible fake (tests/fakes/openai_server.py), end to end through ingest and search."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.errors import ConfigError, EmbeddingError
from gateway.settings import QdrantSettings, RetrievalSettings
from rag.embeddings import DenseEmbedder
from rag.index import open_index
from rag.ingest import Ingestor
from rag.search import HybridSearch
from rag.sources import load_directory
from tests.fakes.openai_server import EMBEDDING_DIM, FakeOpenAI
from tests.rag.kb import TARGET_CODE, write_kb


@pytest.fixture
def api_embedder(monkeypatch):
    """A DenseEmbedder on `litellm/openai/fake-embed`, the base URL from LiteLLM's usual environment."""
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
        yield server, DenseEmbedder("litellm/openai/fake-embed", batch_size=8)


async def test_api_embedder_batches_requests_and_returns_unit_vectors(api_embedder):
    server, embedder = api_embedder
    texts = [f"text number {i} about refunds" for i in range(21)]
    vectors = await embedder.aembed_documents(texts)
    assert len(vectors) == 21 and embedder.dim == EMBEDDING_DIM
    assert np.allclose(np.linalg.norm(np.asarray(vectors), axis=1), 1.0)  # the fake's are 3x too long
    sizes = [len(r.body["input"]) for r in server.requests_for("fake-embed")]
    assert sizes == [8, 8, 5]
    # Input order is kept: the same text gives the same vector wherever it sits in a batch.
    again = await embedder.aembed_documents([texts[20], texts[0]])
    assert np.allclose(again, [vectors[20], vectors[0]])
    assert np.allclose(embedder.embed_queries(["text number 3 about refunds"]), [vectors[3]])


async def test_ingest_and_search_with_an_api_embedding_model(tmp_path, api_embedder, index, sparse, sessions):
    server, embedder = api_embedder
    docs = (await load_directory(write_kb(tmp_path / "kb"))).documents
    report = await Ingestor(index, embedder, sparse, sessions).ingest_documents("acme", "kb", docs)
    assert report.added > 0 and server.requests_for("fake-embed")
    hits = (await HybridSearch(index, embedder, sparse).search("acme", [f"What does {TARGET_CODE} mean?"], RetrievalSettings(k=3))).hits
    assert hits and TARGET_CODE in hits[0].text
    stored = await index.sentence_vectors("acme", [hits[0].chunk_id])
    assert stored[hits[0].chunk_id].shape[1] == EMBEDDING_DIM


async def test_a_provider_that_cannot_be_reached_is_one_error_naming_the_model(monkeypatch):
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/v1")  # nothing listens there
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    embedder = DenseEmbedder("litellm/openai/fake-embed")
    with pytest.raises(EmbeddingError, match="the embedding model litellm/openai/fake-embed failed: .*Connection error"):
        await embedder.aembed_queries(["hello"])
    with pytest.raises(EmbeddingError, match="litellm/openai/fake-embed"):
        embedder.embed_documents(["hello"])



@pytest.mark.parametrize("engine", ["local", "edge"])
async def test_ingest_with_a_model_of_another_vector_size_names_the_model_and_what_to_do(
        tmp_path, api_embedder, dense, sparse, sessions, engine):
    """`embedding.model` changed after an ingest: the error named the two sizes, not the model that gives the
    new one, and said to "drop the collection", which no command does."""
    docs = (await load_directory(write_kb(tmp_path / "kb"))).documents
    settings = QdrantSettings(path=str(tmp_path / "qdrant"), engine=engine)
    index = open_index(settings)
    try:
        assert (await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "kb", docs)).added > 0
    finally:
        await index.close()
    index = open_index(settings)  # the next run, with the model changed in the file
    try:
        with pytest.raises(ConfigError) as caught:
            await Ingestor(index, api_embedder[1], sparse, sessions).ingest_documents("acme", "kb", docs)
    finally:
        await index.close()
    said = str(caught.value)
    assert said.startswith("embedding.model: "), said
    assert f"'litellm/openai/fake-embed' gives {EMBEDDING_DIM}-d vectors" in said and "384-d" in said, said
    assert "set embedding.model back" in said and "`gateway ingest`" in said, said
    assert ("point qdrant.path at a new folder" in said if engine == "local"
            else f"delete the folder {tmp_path / 'qdrant' / 'edge' / 'kb_acme'}" in said), said
