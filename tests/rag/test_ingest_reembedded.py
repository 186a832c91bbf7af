"""A document embedded again with its content as it was (new embedding or chunking settings, chunks the index
lost) is `documents_reembedded`, not `documents_changed`: a model switch read as every document edited."""

from __future__ import annotations

from sqlalchemy import select, update

import rag.fingerprint
from gateway.cli_output import print_reports
from gateway.settings import SourceSettings
from rag.fingerprint import document_hash
from rag.ingest import Ingestor
from rag.sources import load_source
from storage.models import Document as DocumentRow
from tests.rag.kb import write_kb


async def test_ingest_counts_documents_embedded_again_under_new_settings_apart_from_the_edited_one(
        tmp_path, index, dense, sparse, sessions, monkeypatch, capsys):
    folder = write_kb(tmp_path / "kb")
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    first = await Ingestor(index, dense, sparse, sessions).ingest_source("acme", source)
    monkeypatch.setattr(rag.fingerprint, "CHUNKER_VERSION", "next")
    billing = folder / "billing.md"
    billing.write_text(billing.read_text().replace("five business days", "ten business days"))
    again = await Ingestor(index, dense, sparse, sessions).ingest_source("acme", source)
    assert (again.documents_new, again.documents_changed, again.documents_removed) == (0, 1, 0)
    assert again.documents_reembedded == first.documents - 1 > 0
    print_reports([again.as_dict()], as_json=False)
    assert capsys.readouterr().out.startswith(
        f"acme/docs: 1 document changed, {first.documents - 1} re-embedded (chunks: ")


async def test_ingest_counts_documents_whose_chunks_the_index_lost_as_re_embedded(
        tmp_path, index, dense, sparse, sessions):
    source = SourceSettings(name="docs", type="directory", path=str(write_kb(tmp_path / "kb")))
    ingestor = Ingestor(index, dense, sparse, sessions)
    first = await ingestor.ingest_source("acme", source)
    await index.drop("acme")
    again = await ingestor.ingest_source("acme", source)
    assert (again.documents_changed, again.documents_reembedded, again.updated) == (0, first.documents, first.added)


async def test_a_row_hashed_with_its_settings_as_before_is_unchanged_then_re_embedded_under_new_ones(
        tmp_path, index, dense, sparse, sessions, monkeypatch):
    """Rows stored before the content hash left the settings out keep their chunks, and are stamped anew."""
    folder = write_kb(tmp_path / "kb")
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    ingestor = Ingestor(index, dense, sparse, sessions)
    first = await ingestor.ingest_source("acme", source)
    loaded = await load_source(source)
    async with sessions() as session:
        for doc in loaded.documents:
            await session.execute(update(DocumentRow).where(DocumentRow.doc_id == doc.doc_id).values(
                content_hash=document_hash(ingestor._settings, doc), settings_hash=None))
        await session.commit()
    legacy = {row.content_hash for row in await _rows(sessions)}
    kept = await ingestor.ingest_source("acme", source)
    assert (kept.documents_changed, kept.documents_reembedded, kept.unchanged) == (0, 0, first.added)
    rows = await _rows(sessions)
    assert {row.settings_hash for row in rows} == {ingestor.settings_hash}
    assert legacy.isdisjoint(row.content_hash for row in rows)  # stamped anew, in the form without settings
    monkeypatch.setattr(rag.fingerprint, "CHUNKER_VERSION", "next")
    again = await Ingestor(index, dense, sparse, sessions).ingest_source("acme", source)
    assert (again.documents_changed, again.documents_reembedded) == (0, first.documents)


async def _rows(sessions) -> list[DocumentRow]:
    async with sessions() as session:
        return list((await session.scalars(select(DocumentRow).where(DocumentRow.bot == "acme"))).all())
