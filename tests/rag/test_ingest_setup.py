"""The server, `gateway eval` and the benchmarks build their `Ingestor` with `ingestor_for`: `embedding:`'s chunk
sizes reach it (a benchmark built its own with None for the index, the sparse encoder and the store)."""

from __future__ import annotations

from gateway.settings import EmbeddingSettings
from rag.ingest_runs import IngestReport
from rag.ingest_setup import ingestor_for
from rag.sources import Document

TEXT = "\n\n".join(f"## Topic {i}\n\n" + " ".join(f"Sentence {j} of topic {i} says something about plans."
                                                 for j in range(30)) for i in range(6))


async def test_the_configured_chunk_sizes_make_the_chunks(index, dense, sparse, sessions):
    doc = Document("manual.md", "manual", None, TEXT, "markdown")
    default = ingestor_for(EmbeddingSettings(), index, dense, sparse, sessions)
    small = ingestor_for(EmbeddingSettings(max_chunk_tokens=64, chunk_text_tokens=64), index, dense, sparse, sessions)
    assert (default.max_tokens, default.text_tokens, small.max_tokens, small.text_tokens) == (256, 512, 64, 64)
    assert default.settings_hash != small.settings_hash
    big_chunks = default.chunk("acme", "kb", doc, IngestReport(bot="acme", source="kb"))
    small_chunks = small.chunk("acme", "kb", doc, IngestReport(bot="acme", source="kb"))
    assert big_chunks and small_chunks and len(small_chunks) > len(big_chunks)
    report = await small.ingest_documents("acme", "kb", [doc])
    assert report.added == len(small_chunks) and await index.count("acme") == len(small_chunks)
