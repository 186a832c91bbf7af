"""A removed source's chunks leave the index a part at a time, on both embedded engines."""

from __future__ import annotations

from gateway.retention import purge_removed_sources
from gateway.settings import Settings
from rag import knowledge_index
from rag.index import QdrantIndex
from rag.ingest import Ingestor
from rag.sources import load_directory
from tests.rag.kb import write_kb

LIMIT = 2  # ids a delete call may name here; a large crawled site's source is 100,000


async def test_a_removed_sources_chunks_are_deleted_a_bounded_part_at_a_time(
        tmp_path, dense, sparse, sessions, index, monkeypatch):
    # One call named every chunk id of the source: for a crawled site of 100,000 chunks a request of
    # megabytes, which a Qdrant server refuses past its body limit, so the purge failed on every run.
    docs = (await load_directory(write_kb(tmp_path / "kb"))).documents
    report = await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "old-kb", docs)
    assert report.added > LIMIT * 2
    monkeypatch.setattr(knowledge_index, "IDS_PER_DELETE", LIMIT, raising=False)
    sizes: list[int] = []
    if isinstance(index, QdrantIndex):  # local mode: each call's ids
        delete = index.client.delete
        index.client.delete = lambda *args, **kwargs: (sizes.append(len(kwargs["points_selector"].points)),
                                                       delete(*args, **kwargs))[1]
    else:  # edge: each update it runs (its operations do not show their ids)
        update = index._update
        index._update = lambda bot, operation: (sizes.append(LIMIT), update(bot, operation))[1]
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/unused.db", bots=[{"name": "acme"}])
    purged = await purge_removed_sources(sessions, settings, index=index)
    assert purged.chunks == report.added and await index.count("acme") == 0
    assert max(sizes) <= LIMIT and len(sizes) == -(-report.added // LIMIT)
