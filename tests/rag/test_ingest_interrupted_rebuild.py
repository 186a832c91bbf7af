"""Recorded chunks the index lacks are embedded again: after a rebuild killed midway, after points lost
from a complete index, for unchanged and changed documents, for conditionally fetched pages, and at
start; and an older copy of the index (the engine switched back) is brought up to date. A complete index
costs no embedding and no listing of the collection. Real SQLite and both embedded engines."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy import select

import rag.ingest
import rag.points
from gateway.scheduler import IngestScheduler
from gateway.settings import QdrantSettings, SourceSettings
from rag.index import open_index
from rag.ingest import Ingestor
from rag.ingest_runs import INTERRUPTED, start_run
from storage.models import Document as DocumentRow
from tests.rag.ingest_helpers import CountingEmbedder, Site, open_knowledge, page_html, point_documents, runs
from tests.rag.kb import TARGET_CODE, write_kb


async def recorded(sessions, bot: str = "acme") -> dict[str, list[str]]:
    """doc_id -> the chunk ids the store records for it."""
    async with sessions() as session:
        rows = (await session.scalars(select(DocumentRow).where(DocumentRow.bot == bot))).all()
    return {row.doc_id: list(row.chunk_ids) for row in rows}


async def assert_all_indexed(index, sessions) -> int:
    """Every recorded chunk has its point, and the index holds nothing else; returns how many."""
    ids = {i for chunk_ids in (await recorded(sessions)).values() for i in chunk_ids}
    assert await index.present_ids("acme", sorted(ids)) == ids
    assert await index.count("acme") == len(ids)
    return len(ids)


def embedded_windows(counting: CountingEmbedder) -> list[str]:
    """The chunk texts embedded (each flush sends its windows, then its sentences; the sample kb's chunks
    are one window each)."""
    return [text for call in counting.calls[0::2] for text in call]


class DiesAfter:
    """Lets the index's first `n` upserts through, then fails like a process killed mid-rebuild."""

    def __init__(self, index, n: int) -> None:
        self.index, self.left, self.upsert = index, n, index.upsert

    async def __call__(self, bot, points, **kwargs):
        if self.left == 0:
            raise RuntimeError("killed")
        self.left -= 1
        await self.upsert(bot, points, **kwargs)


class CountingLookups:
    """Counts the index's lookups by id (`present_ids`)."""

    def __init__(self, index) -> None:
        self.calls: list[int] = []
        self.inner = index.present_ids

    async def __call__(self, bot, ids, **kwargs):
        self.calls.append(len(ids))
        return await self.inner(bot, ids, **kwargs)


async def test_a_rebuild_killed_midway_is_finished_by_the_next_ingest(tmp_path, index, dense, sparse, sessions, monkeypatch, caplog):
    # The reviewer's case: a full KB, the index folder lost, the rebuild killed after its first flush.
    monkeypatch.setattr(rag.ingest, "FLUSH_CHUNKS", 2)  # several flushes from the small sample kb
    source = SourceSettings(name="docs", type="directory", path=str(write_kb(tmp_path / "kb")))
    counting = CountingEmbedder(dense)
    ingestor = Ingestor(index, counting, sparse, sessions)
    first = await ingestor.ingest_source("acme", source)
    total = first.added
    assert first.status == "ok" and total > 4

    await index.drop("acme")  # a lost volume: the store still records every document
    monkeypatch.setattr(index, "upsert", DiesAfter(index, 1))
    killed = await ingestor.ingest_source("acme", source)
    assert killed.status == "failed" and "killed" in killed.errors[-1]
    written = await index.count("acme")
    assert 0 < written < total  # a partly rebuilt index
    await start_run(sessions, "acme", "docs", trigger="manual")  # and the row a kill -9 leaves `running`
    monkeypatch.undo()  # the real upsert, and the normal flush size

    counting.calls.clear()
    with caplog.at_level(logging.WARNING, logger="rag.ingest"):
        resumed = await ingestor.ingest_source("acme", source)
    assert resumed.status == "ok"
    assert (resumed.added, resumed.updated, resumed.deleted, resumed.unchanged) == (0, total - written, 0, written)
    assert len(embedded_windows(counting)) == total - written  # only the missing chunks are embedded
    assert await assert_all_indexed(index, sessions) == total
    [missing] = [r for r in caplog.records if r.getMessage() == "ingest.points_missing"]
    assert (missing.missing, missing.indexed, missing.recorded) == (total - written, written, total)

    # Searchable again: every document is back, and the error-code page a search needs is found.
    assert sorted(set(await point_documents(index, "acme"))) == sorted(await recorded(sessions))
    [dense_query], [sparse_query] = dense.embed_queries([TARGET_CODE]), sparse.embed_queries([TARGET_CODE])
    arms = await index.hybrid_query("acme", dense_query, sparse_query, prefetch=40, limit=3)
    target = f"sync/{TARGET_CODE.lower()}.md"
    assert arms.sparse[0].payload["document"] == target and target in [p.payload["document"] for p in arms.fused]

    statuses = [(r.status, r.errors) for r in (await runs(sessions))]
    assert statuses[-2] == ("interrupted", [INTERRUPTED]) and statuses[-1][0] == "ok"

    counting.calls.clear()
    again = await ingestor.ingest_source("acme", source)
    assert counting.calls == [] and (again.updated, again.unchanged) == (0, total)


async def test_points_lost_from_unchanged_and_changed_documents_are_written_again(tmp_path, index, dense, sparse, sessions, caplog):
    # Not only a rebuild: any recorded chunk without its point makes its document count as changed,
    # and a changed document's kept chunks are written again when the index lacks them.
    folder = write_kb(tmp_path / "kb")
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    counting = CountingEmbedder(dense)
    ingestor = Ingestor(index, counting, sparse, sessions)
    total = (await ingestor.ingest_source("acme", source)).added
    chunks = await recorded(sessions)
    plans, _refunds = chunks["billing.md"]
    [account] = chunks["account.txt"]
    await index.delete_points("acme", [plans, account])
    billing = folder / "billing.md"
    billing.write_text(billing.read_text().replace("five business days", "ten business days"))

    counting.calls.clear()
    with caplog.at_level(logging.WARNING, logger="rag.ingest"):
        report = await ingestor.ingest_source("acme", source)
    # billing.md: its edited chunk and its lost one; account.txt: its lost one. The old refunds chunk goes.
    assert (report.added, report.updated, report.deleted, report.unchanged) == (0, 3, 1, total - 3)
    windows = embedded_windows(counting)
    assert len(windows) == 3 and any("ten business days" in w for w in windows)
    assert any("Starter plan" in w for w in windows) and any("reset your password" in w for w in windows)
    assert await assert_all_indexed(index, sessions) == total
    [missing] = [r for r in caplog.records if r.getMessage() == "ingest.points_missing"]
    assert (missing.missing, missing.documents) == (2, 2)


async def test_an_unchanged_complete_corpus_embeds_nothing_and_lists_nothing(tmp_path, index, dense, sparse, sessions, monkeypatch):
    # The check must stay cheap: the source's ids looked up by id (about 60 ms for 10k in local mode),
    # never the whole collection listed.
    source = SourceSettings(name="docs", type="directory", path=str(write_kb(tmp_path / "kb")))
    counting = CountingEmbedder(dense)
    ingestor = Ingestor(index, counting, sparse, sessions)
    total = (await ingestor.ingest_source("acme", source)).added
    lookups = CountingLookups(index)
    monkeypatch.setattr(index, "present_ids", lookups)
    monkeypatch.setattr(index, "point_ids", lambda bot: pytest.fail("the whole collection was listed"))
    counting.calls.clear()
    for _ in range(2):
        report = await ingestor.ingest_source("acme", source)
        assert report.status == "ok" and (report.added, report.updated, report.deleted, report.unchanged) == (0, 0, 0, total)
    assert counting.calls == [] and lookups.calls == [total, total]


async def test_an_older_copy_of_the_index_is_brought_up_to_date(tmp_path, dense, sparse, sessions):
    # Switching qdrant.engine back (or restoring an old backup of the folder) finds an index as it was
    # left: with as many points as the store records chunks, but of another version of the documents.
    # It used to pass as complete: everything "unchanged", the edited text never searchable, a deleted
    # document's chunks still answered from.
    folder = write_kb(tmp_path / "kb")
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    settings = {engine: QdrantSettings(path=str(tmp_path / "qdrant"), engine=engine) for engine in ("local", "edge")}
    local = open_index(settings["local"])
    total = (await Ingestor(local, dense, sparse, sessions).ingest_source("acme", source)).added
    await local.close()

    edge = open_index(settings["edge"])  # another engine: an empty index, so everything is embedded again
    ingest_on_edge = Ingestor(edge, dense, sparse, sessions)
    assert (await ingest_on_edge.ingest_source("acme", source)).updated == total
    billing = folder / "billing.md"
    billing.write_text(billing.read_text().replace("five business days", "ten business days"))
    [account] = (await recorded(sessions))["account.txt"]
    (folder / "account.txt").unlink()
    edited = await ingest_on_edge.ingest_source("acme", source)
    assert (edited.updated, edited.deleted) == (1, 2)  # the refunds chunk replaced, account.txt's gone
    await edge.close()

    local = open_index(settings["local"])  # back: the local index still holds the first version
    try:
        stale = await local.present_ids("acme", [account])
        assert stale == {account}
        counting = CountingEmbedder(dense)
        back = await Ingestor(local, counting, sparse, sessions).ingest_source("acme", source)
        # The edited chunk embedded again; the old refunds chunk and account.txt's deleted as leftovers.
        assert (back.added, back.updated, back.deleted) == (0, 1, 2)
        assert any("ten business days" in w for w in embedded_windows(counting))
        assert await assert_all_indexed(local, sessions) == total - 1
        assert await local.present_ids("acme", [account]) == set()
    finally:
        await local.close()


async def test_another_sources_missing_points_cost_this_source_nothing(tmp_path, index, dense, sparse, sessions, monkeypatch):
    # The count is per bot, the lookup per source: a gap in one source re-embeds that source's chunks only.
    kb = write_kb(tmp_path / "kb")
    other = tmp_path / "other"
    other.mkdir()
    (other / "shipping.md").write_text("# Shipping\n\nParcels leave the warehouse within two days.\n")
    docs = SourceSettings(name="docs", type="directory", path=str(kb))
    extra = SourceSettings(name="extra", type="directory", path=str(other))
    counting = CountingEmbedder(dense)
    ingestor = Ingestor(index, counting, sparse, sessions)
    total = (await ingestor.ingest_source("acme", docs)).added + (await ingestor.ingest_source("acme", extra)).added
    await index.delete_points("acme", (await recorded(sessions))["shipping.md"])
    lookups = CountingLookups(index)
    monkeypatch.setattr(index, "present_ids", lookups)

    counting.calls.clear()
    unaffected = await ingestor.ingest_source("acme", docs)
    assert counting.calls == [] and unaffected.unchanged == total - 1 and unaffected.updated == 0
    restored = await ingestor.ingest_source("acme", extra)
    assert (restored.updated, restored.unchanged) == (1, 0) and len(embedded_windows(counting)) == 1
    assert await assert_all_indexed(index, sessions) == total


async def test_a_page_whose_points_are_missing_is_fetched_in_full_not_conditionally(index, dense, sparse, sessions):
    # A 304 would keep chunks that are not there: such a page's validators are not sent.
    site = Site()
    async with site.serving() as base:
        site.pages = {
            "/billing": ('"v1"', None, page_html("Billing", "Invoices are sent on the first day of the month.")),
            "/refunds": ('"r1"', None, page_html("Refunds", "Refunds reach the card in five days.")),
        }
        source = SourceSettings(name="site", type="urls", urls=[f"{base}/billing", f"{base}/refunds"])
        counting = CountingEmbedder(dense)
        ingestor = Ingestor(index, counting, sparse, sessions)
        first = await ingestor.ingest_source("acme", source)
        billing = (await recorded(sessions))[f"{base}/billing"]
        await index.delete_points("acme", billing[:1])

        site.log.clear()
        counting.calls.clear()
        again = await ingestor.ingest_source("acme", source)
        assert sorted(site.log) == [("/billing", 200), ("/refunds", 304)] and site.conditional == ["/refunds"]
        assert again.status == "ok" and (again.updated, again.unchanged) == (1, first.added - 1)
        assert len(embedded_windows(counting)) == 1
        assert await assert_all_indexed(index, sessions) == first.added


async def test_the_startup_ingest_resumes_a_partly_rebuilt_collection(tmp_path):
    # A rebuild killed midway, then a restart: the bot would answer from part of its knowledge base
    # until its cron (Mondays at 04:00). A complete collection is left alone.
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b", "c"):
        (docs / f"{name}.md").write_text(f"# {name.upper()}\n\nThe answer to {name} is forty-two.\n")
    bot = {"name": "acme", "channels": {"web": {}}, "sources": [
        {"name": "good", "type": "directory", "path": str(docs), "schedule": "0 4 * * 1"}]}
    async with open_knowledge(tmp_path, bot) as (settings, sessions, knowledge):
        await knowledge.ingest_source("acme", "good", trigger="cli")
        await knowledge.index.delete_points("acme", (await recorded(sessions))["b.md"])
        assert await knowledge.index.count("acme") == 2
        for _ in range(2):  # the second start finds the collection complete
            scheduler = IngestScheduler(settings, knowledge=knowledge)
            scheduler.start()
            await scheduler._first_ingest
            scheduler.shutdown()
        assert await assert_all_indexed(knowledge.index, sessions) == 3
        recorded_runs = await runs(sessions)
    assert [(r.trigger, r.status, r.updated) for r in recorded_runs] == [("cli", "ok", 0), ("startup", "ok", 1)]


class PausingIndex:
    """Another process's view of the index: it pauses after its first upsert, before its rows are written."""

    def __init__(self, inner) -> None:
        self.inner, self.written, self.release = inner, asyncio.Event(), asyncio.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def upsert(self, bot, points, **kwargs):
        await self.inner.upsert(bot, points, **kwargs)
        self.written.set()
        await self.release.wait()


async def test_another_processs_unrecorded_points_are_no_leftovers(tmp_path, index, dense, sparse, sessions):
    # With a Qdrant server and PostgreSQL, a source's run may overlap another source's run in another
    # process (review): its points written, its rows not yet. They are that source's, never this one's leftovers.
    (tmp_path / "faq").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "faq" / "a.md").write_text("# Refunds\n\nRefunds take five business days.\n")
    (tmp_path / "docs" / "b.md").write_text("# Export\n\nExport your notes from the File menu.\n")
    faq = SourceSettings(name="faq", type="directory", path=str(tmp_path / "faq"))
    docs = SourceSettings(name="docs", type="directory", path=str(tmp_path / "docs"))
    here = Ingestor(index, dense, sparse, sessions)
    await here.ingest_source("acme", faq)
    await here.ingest_source("acme", docs)

    (tmp_path / "docs" / "c.md").write_text("# Sharing\n\nShare a notebook from the Share button.\n")
    pausing = PausingIndex(index)
    there = asyncio.create_task(Ingestor(pausing, dense, sparse, sessions).ingest_source("acme", docs))
    await pausing.written.wait()  # c.md's points written, its row not yet: more points than recorded chunks
    unchanged = await here.ingest_source("acme", faq)
    pausing.release.set()
    added = await there
    assert (unchanged.deleted, added.added) == (0, 1)
    await assert_all_indexed(index, sessions)


async def test_a_first_run_killed_midway_leaves_no_points_after_the_next_run(tmp_path, index, dense, sparse, sessions,
                                                                             monkeypatch):
    """A source's first run killed after writing some points, before recording any document: with nothing
    recorded for the source, the next run looked for no leftovers, so a page edited (or deleted) meanwhile kept
    its old chunk in the index for good, nothing recording it, and search still returned it."""
    monkeypatch.setattr(rag.points, "EMBED_STEP", 1)
    folder = tmp_path / "kb"
    folder.mkdir()
    page = folder / "refunds.md"
    page.write_text("# Refunds\n\nRefunds take five business days.\n\n# Cards\n\nCards are charged monthly.\n")
    source = SourceSettings(name="docs", type="directory", path=str(folder))
    ingestor = Ingestor(index, dense, sparse, sessions)
    monkeypatch.setattr(index, "upsert", DiesAfter(index, 1))
    killed = await ingestor.ingest_source("acme", source)
    assert killed.status == "failed" and await index.count("acme") == 1 and await recorded(sessions) == {}
    monkeypatch.undo()  # the real upsert, and the normal step

    page.write_text(page.read_text().replace("five business days", "ten business days"))
    again = await ingestor.ingest_source("acme", source)
    assert again.status == "ok" and again.added == 2
    assert await assert_all_indexed(index, sessions) == 2  # the killed run's point of the old text is gone
    assert not any("five business days" in text for text in await _texts(index))


async def _texts(index) -> list[str]:
    from qdrant_client import models as qm

    arms = await index.hybrid_query("acme", [1.0] * 384, qm.SparseVector(indices=[1], values=[1.0]), prefetch=1000, limit=1)
    return [p.payload["text"] for p in arms.dense]
