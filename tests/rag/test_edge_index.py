"""qdrant-edge as the embedded engine: what differs from local mode (the shared behaviour runs in
test_search.py and test_ingest.py on both engines)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from pydantic import ValidationError

from gateway.app import create_app
from gateway.errors import ConfigError
from gateway.settings import QdrantSettings, RetrievalSettings, load_settings
from rag.index import open_index
from rag.ingest import Ingestor
from rag.search import HybridSearch
from rag.sources import load_directory
from tests.conftest import upgrade, write_config
from tests.rag.kb import write_kb


def test_edge_engine_needs_a_folder_and_no_server():
    with pytest.raises(ValidationError, match="engine 'edge' is embedded"):
        QdrantSettings(engine="edge", url="http://qdrant:6333")
    with pytest.raises(ValidationError, match="engine 'edge' is embedded"):
        QdrantSettings(engine="edge", path=None)


async def test_edge_index_survives_a_restart_and_keeps_search_results(tmp_path, dense, sparse, sessions):
    settings = QdrantSettings(path=str(tmp_path / "qdrant"), engine="edge")
    docs = (await load_directory(write_kb(tmp_path / "kb"))).documents
    index = open_index(settings)
    report = await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "kb", docs)
    question = ["What does the Business Plus plan cost?"]
    before = await HybridSearch(index, dense, sparse).search("acme", question, RetrievalSettings(k=3))
    await index.close()

    reopened = open_index(settings)
    try:
        assert await reopened.count("acme") == report.added
        after = await HybridSearch(reopened, dense, sparse).search("acme", question, RetrievalSettings(k=3))
        assert [h.chunk_id for h in after.hits] == [h.chunk_id for h in before.hits]
        assert after.hits[0].heading_path == ("Billing", "Plans") and after.hits[0].arms == ("dense", "sparse")
    finally:
        await reopened.close()


async def test_edge_refuses_a_shard_of_another_vector_size(tmp_path):
    settings = QdrantSettings(path=str(tmp_path / "qdrant"), engine="edge")
    index = open_index(settings)
    await index.ensure_collection("acme", 384)
    await index.close()
    index = open_index(settings)
    try:
        with pytest.raises(ConfigError, match="embedding.model"):
            await index.ensure_collection("acme", 768)
    finally:
        await index.close()


async def test_gateway_answers_from_an_edge_index_end_to_end(tmp_path, help_center_bot):
    """`qdrant.engine: edge` through the real app: ingest, /readyz, and a cited web-chat answer."""
    settings = load_settings(write_config(tmp_path, bots=[help_center_bot], qdrant={"path": str(tmp_path / "q"), "engine": "edge"}))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        reports = await app.state.services.knowledge.ingest()
        assert reports and all(r.status == "ok" for r in reports)
        assert (tmp_path / "q" / "edge" / "kb_acme").is_dir()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway.test", timeout=60) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 200 and ready.json()["checks"]["qdrant"] == "ok"
            body = (await http.post("/v1/bots/acme/chat", json={"session_id": "e-1", "text": "How much does the Plus plan cost?"})).json()
    assert "$" in body["reply"] and body["citations"]
