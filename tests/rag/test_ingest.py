"""Incremental ingest against real SQLite and both embedded engines; embed calls are counted."""

from __future__ import annotations

import pytest
from sqlalchemy import select

import rag.fingerprint
import rag.points
from gateway.settings import BotSettings, SourceSettings
from rag.ingest import Ingestor
from rag.sources import Document
from storage.models import Document as DocumentRow
from tests.rag.ingest_helpers import CountingEmbedder, point_documents, runs
from tests.rag.kb import write_kb


async def test_ingest_incremental_skips_unchanged_replaces_changed_removes_deleted(tmp_path, index, dense, sparse, sessions,
                                                                                monkeypatch):
    monkeypatch.setattr(rag.points, "SLICE_BATCHES", 1_000)  # a flush's windows in one call, its sentences in one
    folder = write_kb(tmp_path / "kb")
    counting = CountingEmbedder(dense)
    ingestor = Ingestor(index, counting, sparse, sessions)
    source = SourceSettings(name="docs", type="directory", path=str(folder))

    first = await ingestor.ingest_source("acme", source)
    total = await index.count("acme")
    windows, sentences = counting.calls  # one flush: the small kb's chunks are one window each
    assert first.status == "ok" and first.added == total == len(windows) > 0 and len(sentences) >= total
    assert (first.updated, first.deleted, first.unchanged) == (0, 0, 0)

    counting.calls.clear()
    second = await ingestor.ingest_source("acme", source, trigger="schedule")
    assert counting.embedded == []  # nothing re-embedded
    assert (second.added, second.updated, second.deleted, second.unchanged) == (0, 0, 0, total)

    billing = folder / "billing.md"
    billing.write_text(billing.read_text().replace("five business days", "ten business days"))
    (folder / "account.txt").unlink()
    third = await ingestor.ingest_source("acme", source)
    [window], sentences = counting.calls  # only the edited chunk, and its sentences
    assert "ten business days" in window and any("ten business days" in s for s in sentences)
    assert all(s in " ".join(window.split()) for s in sentences)
    assert third.updated == 1 and third.added == 0
    assert third.deleted == 1 + 1  # the stale billing chunk and account.txt's one chunk
    assert await index.count("acme") == total - 1
    docs = await point_documents(index, "acme")
    assert "account.txt" not in docs and docs.count("billing.md") == 2

    recorded = await runs(sessions)
    assert [r.status for r in recorded] == ["ok", "ok", "ok"]
    assert [r.trigger for r in recorded] == ["manual", "schedule", "manual"]
    assert (recorded[2].updated, recorded[2].deleted) == (1, 2) and recorded[2].duration_s >= 0
    async with sessions() as session:
        rows = (await session.scalars(select(DocumentRow).where(DocumentRow.bot == "acme"))).all()
    assert "account.txt" not in {r.doc_id for r in rows}
    assert sum(len(r.chunk_ids) for r in rows) == total - 1


async def test_a_new_chunker_version_embeds_again_the_chunks_whose_text_it_kept(tmp_path, index, dense, sparse, sessions,
                                                                                monkeypatch):
    # Chunk ids name the text; a chunker version that reads sentences otherwise (table rows, version 5)
    # keeps the ids but not the vectors, so every chunk is embedded again, once.
    folder = write_kb(tmp_path / "kb")
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    first = await Ingestor(index, dense, sparse, sessions).ingest_source("acme", source)
    ids = await _chunk_ids(sessions)

    monkeypatch.setattr(rag.fingerprint, "CHUNKER_VERSION", "next")
    counting = CountingEmbedder(dense)
    upgraded = Ingestor(index, counting, sparse, sessions)
    again = await upgraded.ingest_source("acme", source)
    assert (again.added, again.updated, again.deleted, again.unchanged) == (0, first.added, 0, 0)
    assert len(counting.calls[0]) == first.added and await index.count("acme") == first.added
    assert await _chunk_ids(sessions) == ids and await upgraded.index.present_ids("acme", sorted(ids)) == ids
    counting.calls.clear()
    settled = await upgraded.ingest_source("acme", source)
    assert counting.embedded == [] and settled.unchanged == first.added


async def _chunk_ids(sessions) -> set[str]:
    async with sessions() as session:
        return {i for ids in (await session.execute(select(DocumentRow.chunk_ids))).scalars() for i in ids}


async def test_ingest_bot_failing_source_recorded_others_continue(tmp_path, index, dense, sparse, sessions):
    folder = write_kb(tmp_path / "kb")
    bot = BotSettings(
        name="acme",
        sources=[
            SourceSettings(name="missing", type="directory", path=str(tmp_path / "nope")),
            SourceSettings(name="docs", type="directory", path=str(folder)),
        ],
    )
    reports = await Ingestor(index, dense, sparse, sessions).ingest_bot(bot)
    assert [r.status for r in reports] == ["failed", "ok"]
    assert "not found" in reports[0].errors[0]
    assert reports[1].added == await index.count("acme") > 0
    recorded = await runs(sessions)
    assert [(r.source, r.status) for r in recorded] == [("missing", "failed"), ("docs", "ok")]
    assert recorded[0].errors and "not found" in recorded[0].errors[0]


async def test_ingest_failed_document_keeps_its_chunks(tmp_path, index, dense, sparse, sessions):
    folder = write_kb(tmp_path / "kb")
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    ingestor = Ingestor(index, dense, sparse, sessions)
    await ingestor.ingest_source("acme", source)
    before = await index.count("acme")
    (folder / "billing.md").unlink()
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not a pdf")
    progress: list[tuple[int, int]] = []
    report = await ingestor.ingest_source("acme", source, progress=lambda done, total: progress.append((done, total)))
    assert report.status == "partial" and report.errors[0].startswith("broken.pdf")
    assert report.deleted == before - await index.count("acme") > 0  # billing.md removed, nothing else lost
    # What the run left as it was is unchanged: the counts add up to what the index holds.
    assert report.added + report.updated + report.unchanged == await index.count("acme")
    assert progress[-1][0] == progress[-1][1] == report.documents


async def test_ingest_re_embeds_when_the_index_lost_its_points(tmp_path, index, dense, sparse, sessions):
    # The store still records every document as indexed (a deleted folder, a switched engine).
    source = SourceSettings(name="docs", type="directory", path=str(write_kb(tmp_path / "kb")))
    counting = CountingEmbedder(dense)
    ingestor = Ingestor(index, counting, sparse, sessions)
    first = await ingestor.ingest_source("acme", source)
    await index.drop("acme")
    counting.calls.clear()
    again = await ingestor.ingest_source("acme", source)
    assert again.status == "ok" and again.unchanged == 0 and again.deleted == 0
    assert await index.count("acme") == first.added == len(counting.calls[0])
    assert "billing.md" in await point_documents(index, "acme")


async def test_a_long_document_is_embedded_and_written_a_slice_at_a_time(index, dense, sparse, sessions, monkeypatch):
    # Memory stays bounded by the slice, not by the document: five sections, slices of two.
    monkeypatch.setattr(rag.points, "EMBED_STEP", 2)
    text = "\n\n".join(f"# Section {i}\n\nSection {i} explains setting number {i} in plain words." for i in range(5))
    counting = CountingEmbedder(dense)
    shown: list[tuple[float, int, int]] = []  # (done, total, points in the index when it was shown)
    ingestor = Ingestor(index, counting, sparse, sessions)
    points = []

    def progress(done: float, total: int) -> None:
        shown.append((done, total, len(points)))

    upsert = index.upsert

    async def counted_upsert(bot, batch):
        await upsert(bot, batch)
        points.extend(batch)

    monkeypatch.setattr(index, "upsert", counted_upsert)
    docs = [Document("long.md", "Long", None, text, "markdown")]
    report = await ingestor.ingest_documents("acme", "kb", docs, progress=progress)
    assert report.added == 5 and await index.count("acme") == 5
    window_calls = counting.calls[0::2]  # each slice: its windows, then its sentences
    assert [len(call) for call in window_calls] == [2, 2, 1]
    assert [s for call in counting.calls[1::2] for s in call] == [f"Section {i} explains setting number {i} in plain words." for i in range(5)]
    # The bar is shown at 0 before anything is embedded (the sample's first slice took 27 s, the bar
    # absent all that while), moves as each slice's windows and sentences are embedded, and with each slice
    # written, and is full only once all of it is stored.
    assert shown == [(0.0, 1, 0), (0.16, 1, 0), (0.32, 1, 0), (0.4, 1, 2), (0.56, 1, 2), (0.72, 1, 2), (0.8, 1, 4),
                     (0.867, 1, 4), (0.933, 1, 4), (1.0, 1, 5)]


async def test_the_bar_moves_while_a_step_is_embedded_in_the_batches_one_call_would_make(index, dense, sparse, sessions,
                                                                                          monkeypatch):
    """A step of 64 chunks embedded about 9% faster than steps of 16 (bench/README.md: a larger pool pads the
    encoder's batches less), but then held the bar still for half a minute: a step's texts are embedded a few
    encoder batches at a time, in the order one call sorts them in, and the bar moves after each part."""
    monkeypatch.setattr(rag.points, "EMBED_STEP", 64)
    monkeypatch.setattr(rag.points, "SLICE_BATCHES", 1, raising=False)  # a part of one encoder batch: 8 texts
    text = "\n\n".join(f"# Section {i}\n\nSection {i} explains {'the setting ' * (i % 7)}number {i} in words."
                       for i in range(20))
    counting = CountingEmbedder(dense)
    shown: list[tuple[float, int]] = []  # (done, points in the index when it was shown)
    upsert, points = index.upsert, []

    async def counted_upsert(bot, batch):
        await upsert(bot, batch)
        points.extend(batch)

    monkeypatch.setattr(index, "upsert", counted_upsert)
    ingestor = Ingestor(index, counting, sparse, sessions)
    docs = [Document("long.md", "Long", None, text, "markdown")]
    report = await ingestor.ingest_documents("acme", "kb", docs, progress=lambda done, _: shown.append((done, len(points))))
    assert report.added == 20 and await index.count("acme") == 20
    # The windows, then the sentences, each in the one order by length that a single call sorts them in.
    assert [len(call) for call in counting.calls] == [8, 8, 4, 8, 8, 4]
    windows = [t for call in counting.calls[:3] for t in call]
    assert windows == sorted(windows, key=len) and len(set(windows)) == 20
    moving = [done for done, written in shown if written == 0]
    assert len(moving) == 7 and moving == sorted(moving) and moving[-1] < 1.0  # 0, then each part
    assert shown[-1] == (1.0, 20)  # full only once written


async def test_a_sentence_two_chunks_share_is_embedded_once_and_stored_with_both(index, dense, sparse, sessions):
    shared = "Refunds reach the original card within five business days."
    docs = [Document(f"{name}.md", name.title(), None, f"# {name.title()}\n\n{shared}\n\nThe {name} page says more about {name}.", "markdown")
            for name in ("billing", "returns")]
    counting = CountingEmbedder(dense)
    report = await Ingestor(index, counting, sparse, sessions).ingest_documents("acme", "kb", docs)
    assert report.added == 2
    sentence_calls = counting.calls[1::2]
    assert [text for call in sentence_calls for text in call].count(shared) == 1
    async with sessions() as session:
        ids = [i for row in (await session.scalars(select(DocumentRow))).all() for i in row.chunk_ids]
    stored = await index.sentence_vectors("acme", ids)
    (expected,) = dense.embed_documents([shared])
    for chunk_id in ids:  # both chunks carry the shared sentence's vector
        assert max(float(row @ expected) for row in stored[chunk_id]) > 0.999


async def test_a_source_that_suddenly_gives_nothing_keeps_its_documents(tmp_path, index, dense, sparse, sessions, caplog):
    """An empty folder is an unmounted volume or a failed sync far more often than a knowledge base meant
    to be wiped: it deleted every chunk, status ok. Some documents gone is still a deletion. The run's
    error says why they were kept; a warning about "an incomplete listing" (a child sitemap that
    failed), printed above it by `gateway ingest`, named a cause that was not there."""
    folder = write_kb(tmp_path / "kb")
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    ingestor = Ingestor(index, dense, sparse, sessions)
    first = await ingestor.ingest_source("acme", source)
    before = await index.count("acme")
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    files = sorted(folder.iterdir())
    for file in files:
        file.rename(moved / file.name)
    report = await ingestor.ingest_source("acme", source)
    assert report.status == "partial" and report.deleted == 0 and await index.count("acme") == before
    assert report.unchanged == before
    assert f"the source gave no documents; its {first.documents} documents were kept" in report.errors[0]
    assert not [r for r in caplog.records if r.getMessage() == "ingest.incomplete_listing_kept"]
    for file in files[1:]:
        (moved / file.name).rename(folder / file.name)
    partly = await ingestor.ingest_source("acme", source)
    assert partly.status == "ok" and partly.deleted > 0 and not partly.errors


async def test_a_first_run_of_an_empty_folder_fails_visibly_instead_of_reporting_ok(tmp_path, index, dense, sparse, sessions):
    """A wrong path or a folder of .docx files: an "ok" with 0 chunks would go unnoticed on a first deploy."""
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "notes.docx").write_bytes(b"PK not a loader's format")
    report = await Ingestor(index, dense, sparse, sessions).ingest_source("acme", SourceSettings(name="docs", type="directory", path=str(folder)))
    assert report.status == "failed" and report.added == 0
    assert report.errors == ["the source gave no documents, so nothing was ingested: check its path or URLs "
                             "(a directory takes Markdown, text, HTML and PDF files; it held .docx (1))"]
    assert (await runs(sessions))[-1].status == "failed"


async def test_chunks_an_error_kept_count_as_unchanged(tmp_path, index, dense, sparse, sessions):
    """A file that fails on re-ingest keeps its chunks; they were in no count, so the counts did not add
    up to what the index holds."""
    from tests.rag.pdfs import tiny_pdf

    folder = write_kb(tmp_path / "kb")
    (folder / "warranty.pdf").write_bytes(tiny_pdf("Warranty covers two years of repairs"))
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    ingestor = Ingestor(index, dense, sparse, sessions)
    await ingestor.ingest_source("acme", source)
    (folder / "warranty.pdf").write_bytes(b"%PDF-1.4 truncated by a failed upload")
    report = await ingestor.ingest_source("acme", source)
    assert report.status == "partial" and report.errors[0].startswith("warranty.pdf")
    assert report.deleted == 0 and report.added + report.updated + report.unchanged == await index.count("acme")


async def test_pages_kept_because_a_listing_was_incomplete_are_logged(index, dense, sparse, sessions, caplog):
    ingestor = Ingestor(index, dense, sparse, sessions)
    pages = [Document(f"https://help.example/{n}", n, None, f"# {n}\n\nAbout {n}.", "markdown") for n in ("a", "b")]
    await ingestor.ingest_documents("acme", "site", pages)
    report = await ingestor.ingest_documents("acme", "site", pages, delete_missing=False)
    assert report.unchanged == 2 and not [r for r in caplog.records if r.getMessage() == "ingest.incomplete_listing_kept"]
    report = await ingestor.ingest_documents("acme", "site", pages[:1], delete_missing=False)
    assert report.deleted == 0 and report.unchanged == 2
    [kept] = [r for r in caplog.records if r.getMessage() == "ingest.incomplete_listing_kept"]
    assert (kept.kept, kept.example) == (1, "https://help.example/b")


async def test_a_file_emptied_keeps_its_chunks_and_says_it_is_empty(tmp_path, index, dense, sparse, sessions):
    """An emptied Markdown or text file (a sync that truncated it) was left out without a word, and its
    chunks were deleted; an empty HTML file was already "the page is empty"."""
    folder = write_kb(tmp_path / "kb")
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    ingestor = Ingestor(index, dense, sparse, sessions)
    await ingestor.ingest_source("acme", source)
    before = await index.count("acme")
    (folder / "billing.md").write_text("")
    (folder / "notes.txt").write_text(" \n")
    (folder / "_index.md").write_text("---\ntitle: Section\n---\n")  # a site generator's section page: no error
    report = await ingestor.ingest_source("acme", source)
    empty = "the file is empty (nothing but white space)"
    assert sorted(report.errors) == [f"billing.md: {empty}", f"notes.txt: {empty}"]
    assert report.status == "partial" and report.deleted == 0 and await index.count("acme") == before


async def test_a_renamed_file_reuses_its_vectors_under_its_new_path(tmp_path, index, dense, sparse, sessions):
    """A file moved to another folder (same content, new path) was embedded again, chunk by chunk."""
    folder = write_kb(tmp_path / "kb")
    counting = CountingEmbedder(dense)
    ingestor = Ingestor(index, counting, sparse, sessions)
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    first = await ingestor.ingest_source("acme", source)
    (folder / "archive").mkdir()
    (folder / "billing.md").rename(folder / "archive" / "billing-2026.md")
    old = {row.doc_id: row for row in await _rows(sessions)}["billing.md"]
    before = await _points(index)
    counting.calls.clear()
    renamed = await ingestor.ingest_source("acme", source)
    assert counting.embedded == []  # the encoder was not called again
    count = len(old.chunk_ids)
    assert (renamed.status, renamed.added, renamed.deleted, renamed.updated) == ("ok", count, count, 0)
    rows = {row.doc_id: row for row in await _rows(sessions)}
    new = rows["archive/billing-2026.md"]
    assert "billing.md" not in rows and new.content_hash == old.content_hash
    after = await _points(index)
    assert len(after) == first.added and set(after).isdisjoint(old.chunk_ids)  # the old document's chunks are gone
    for new_id, old_id in zip(new.chunk_ids, old.chunk_ids, strict=True):
        (payload, vectors), (old_payload, old_vectors) = after[new_id], before[old_id]
        assert (payload["chunk_id"], payload["document"]) == (new_id, "archive/billing-2026.md")
        assert payload["text"] == old_payload["text"] and vectors.sparse == old_vectors.sparse
        assert vectors.dense == pytest.approx(old_vectors.dense, abs=1e-6)
        assert len(vectors.sentences) == len(old_vectors.sentences) > 0


@pytest.mark.parametrize("flush_chunks", [256, 1], ids=["one-flush", "a-flush-each"])
async def test_the_same_document_in_two_folders_is_embedded_once_and_each_copy_keeps_its_chunks(
        tmp_path, index, dense, sparse, sessions, monkeypatch, flush_chunks):
    """Two copies of a page (same content, two paths) in one run were both embedded, chunk by chunk."""
    monkeypatch.setattr(rag.ingest, "FLUSH_CHUNKS", flush_chunks)  # 1: the copy comes in a later flush
    folder = tmp_path / "kb"
    (folder / "archive").mkdir(parents=True)
    text = (write_kb(tmp_path / "all") / "billing.md").read_text()
    for name in ("billing.md", "archive/billing.md"):
        (folder / name).write_text(text)
    counting = CountingEmbedder(dense)
    ingestor = Ingestor(index, counting, sparse, sessions)
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    first = await ingestor.ingest_source("acme", source)
    assert counting.embedded and len(counting.embedded) == len(set(counting.embedded))  # each text once
    rows = {row.doc_id: row for row in await _rows(sessions)}
    original, copy = rows["billing.md"].chunk_ids, rows["archive/billing.md"].chunk_ids
    assert first.added == 2 * len(original) == await index.count("acme") and set(original).isdisjoint(copy)
    points = await _points(index)
    for copy_id, original_id in zip(copy, original, strict=True):
        (payload, vectors), (original_payload, original_vectors) = points[copy_id], points[original_id]
        assert (payload["document"], original_payload["document"]) == ("archive/billing.md", "billing.md")
        assert vectors.dense == pytest.approx(original_vectors.dense, abs=1e-6) and len(vectors.sentences) > 0
    (folder / "billing.md").unlink()  # deleting one copy leaves the other whole
    second = await ingestor.ingest_source("acme", source)
    assert (second.deleted, second.unchanged) == (len(original), len(copy))
    assert sorted(await _points(index)) == sorted(copy)


async def test_a_copy_of_a_page_embedded_again_under_new_settings_takes_its_new_vectors(
        tmp_path, index, dense, sparse, sessions, monkeypatch):
    """The page indexed under the previous chunker, its copy added in the run that embeds it again: the copy took
    the page's previous vectors, still in the index while the same batch embedded the new ones, and kept them."""
    folder = tmp_path / "kb"
    (folder / "copy").mkdir(parents=True)  # listed after the page
    text = (write_kb(tmp_path / "all") / "billing.md").read_text()
    (folder / "billing.md").write_text(text)
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    await Ingestor(index, dense, sparse, sessions).ingest_source("acme", source)
    (folder / "copy/billing.md").write_text(text)
    monkeypatch.setattr(rag.fingerprint, "CHUNKER_VERSION", "next")
    await Ingestor(index, Reversed(dense), sparse, sessions).ingest_source("acme", source)  # vectors of its own
    rows = {row.doc_id: row for row in await _rows(sessions)}
    points = await _points(index)
    for copy_id, original_id in zip(rows["copy/billing.md"].chunk_ids, rows["billing.md"].chunk_ids, strict=True):
        assert points[copy_id][1].dense == pytest.approx(points[original_id][1].dense, abs=1e-6)


class Reversed(CountingEmbedder):
    """The real embedder's vectors, each reversed: another model's, of the same size."""

    async def aembed_documents(self, texts):
        return [list(reversed(vector)) for vector in await super().aembed_documents(texts)]


async def _rows(sessions) -> list[DocumentRow]:
    async with sessions() as session:
        return list((await session.scalars(select(DocumentRow))).all())


async def _points(index) -> dict:
    """chunk id -> (payload, stored vectors) of every point (exact dense over the whole collection)."""
    from qdrant_client import models as qm

    arms = await index.hybrid_query("acme", [1.0] * 384, qm.SparseVector(indices=[1], values=[1.0]), prefetch=1000, limit=1)
    stored = await index.vectors("acme", [str(p.id) for p in arms.dense])
    return {str(p.id): (p.payload, stored[str(p.id)]) for p in arms.dense}
