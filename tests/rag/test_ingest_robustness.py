"""One odd document fails alone, and every run ends with a final status (review finding 2).

The NUL and long-id cases are PostgreSQL's: SQLite stores both without complaint. The isolation
and final-status cases run on both databases, with the failure injected."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import event, select

from gateway.settings import BotSettings, QdrantSettings, SourceSettings
from rag.index import open_index
from rag.ingest import Ingestor
from rag.sources import Document
from storage.engine import create_engine, session_factory
from storage.models import Document as DocumentRow
from storage.models import IngestRun
from tests.conftest import upgrade
from tests.rag.ingest_helpers import point_documents, runs


@pytest.fixture
async def local_index(tmp_path):
    """One embedded engine is enough here: what is tested is the ingest, not the index."""
    idx = open_index(QdrantSettings(path=str(tmp_path / "qdrant")))
    yield idx
    await idx.close()


async def _sessions(url: str):
    await asyncio.to_thread(upgrade, url)
    engine = create_engine(url)
    return engine, session_factory(engine)


@pytest.fixture
async def pg_sessions(postgres_url):
    """Sessions on a fresh, migrated PostgreSQL database."""
    engine, sessions = await _sessions(postgres_url)
    yield sessions
    await engine.dispose()


@pytest.fixture
async def db_sessions(database_url):
    """Sessions on a migrated SQLite file, then on a fresh PostgreSQL database."""
    engine, sessions = await _sessions(database_url)
    yield sessions
    await engine.dispose()


async def _rows(sessions) -> dict[str, DocumentRow]:
    async with sessions() as session:
        return {r.doc_id: r for r in (await session.scalars(select(DocumentRow))).all()}


def _doc(doc_id: str, title: str, text: str, url: str | None = None) -> Document:
    return Document(doc_id=doc_id, title=title, url=url, text=text, format="markdown")


FINE = _doc("fine.md", "Fine doc", "# Fine doc\n\nBody text about sea lions and where they rest.")


async def test_postgres_nul_bytes_in_title_and_text_are_stripped_not_fatal(local_index, dense, sparse, pg_sessions):
    nul = _doc("nul.md", "Title with NUL \x00 inside", "# Title with NUL \x00 inside\n\nBody text about \x00 seals.")
    report = await Ingestor(local_index, dense, sparse, pg_sessions).ingest_documents("acme", "docs", [nul, FINE])
    assert report.status == "ok" and report.errors == []
    rows = await _rows(pg_sessions)
    assert set(rows) == {"nul.md", "fine.md"} and rows["nul.md"].title == "Title with NUL  inside"
    assert sorted(set(await point_documents(local_index, "acme"))) == ["fine.md", "nul.md"]
    assert [r.status for r in await runs(pg_sessions)] == ["ok"]


async def test_postgres_ids_and_urls_longer_than_their_columns_are_stored(local_index, dense, sparse, pg_sessions):
    long_url = "http://example.test/b.html?q=" + "a" * 2100  # over doc_id's 1024 and url's 2048
    page = _doc(long_url, "Walruses " * 80, "# Walruses\n\nWalruses haul out on ice floes in large groups.", long_url)
    ingestor = Ingestor(local_index, dense, sparse, pg_sessions)
    first = await ingestor.ingest_documents("acme", "site", [page, FINE])
    assert first.status == "ok" and first.errors == []
    rows = await _rows(pg_sessions)
    [key] = [k for k in rows if k != "fine.md"]
    assert len(key) == 1024 and key.startswith("http://example.test/b.html?q=aaa")
    assert rows[key].url is None and len(rows[key].title) == 512

    # The shortened id is stable: the next run finds the page unchanged instead of adding it again.
    again = await ingestor.ingest_documents("acme", "site", [page, FINE])
    assert (again.added, again.updated, again.deleted, again.unchanged) == (0, 0, 0, first.added)


async def test_a_document_the_store_refuses_fails_alone_and_leaves_no_points(local_index, dense, sparse, db_sessions,
                                                                            caplog):
    def refuse(_mapper, _connection, row):
        if row.doc_id == "bad.md":
            raise ValueError("the store refuses bad.md")

    bad = _doc("bad.md", "Bad", "# Bad\n\nWalruses use their tusks to pull themselves onto the ice.")
    other = _doc("other.md", "Other", "# Other\n\nPuffins nest in burrows on grassy cliffs by the sea.")
    event.listen(DocumentRow, "before_insert", refuse)
    try:
        report = await Ingestor(local_index, dense, sparse, db_sessions).ingest_documents("acme", "docs", [FINE, bad, other])
    finally:
        event.remove(DocumentRow, "before_insert", refuse)
    assert report.status == "partial"
    assert report.errors == ["bad.md: ValueError: the store refuses bad.md"]
    assert set(await _rows(db_sessions)) == {"fine.md", "other.md"}
    assert sorted(set(await point_documents(local_index, "acme"))) == ["fine.md", "other.md"]  # no orphans
    assert report.added == await local_index.count("acme")
    [run] = await runs(db_sessions)
    assert run.status == "partial" and run.errors == report.errors
    assert any(getattr(r, "document", None) == "bad.md" for r in caplog.records)  # logged with its id


async def test_an_unexpected_failure_ends_the_run_failed_and_later_sources_still_run(tmp_path, local_index, dense,
                                                                                    sparse, db_sessions, monkeypatch):
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.md").write_text(f"# {name}\n\nSea otters hold hands while they sleep ({name}).")
    upsert = local_index.upsert

    async def broken_upsert(bot, points, **kwargs):
        if points and points[0].source == "first":
            raise RuntimeError("index write failed")
        await upsert(bot, points, **kwargs)

    monkeypatch.setattr(local_index, "upsert", broken_upsert)
    bot = BotSettings(name="acme", sources=[SourceSettings(name=n, type="directory", path=str(tmp_path / n))
                                            for n in ("first", "second")])
    reports = await Ingestor(local_index, dense, sparse, db_sessions).ingest_bot(bot)
    assert [(r.source, r.status) for r in reports] == [("first", "failed"), ("second", "ok")]
    assert reports[0].errors == ["RuntimeError: index write failed"]
    recorded = await runs(db_sessions)
    assert [(r.source, r.status) for r in recorded] == [("first", "failed"), ("second", "ok")]
    assert recorded[0].errors == ["RuntimeError: index write failed"]


async def test_a_cancelled_ingest_is_recorded_as_failed_then_still_cancelled(tmp_path, local_index, dense, sparse,
                                                                            sessions, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nNarwhals have one long spiral tusk.")

    async def cancelled(*_args, **_kwargs):
        raise asyncio.CancelledError

    monkeypatch.setattr(local_index, "upsert", cancelled)
    source = SourceSettings(name="docs", type="directory", path=str(tmp_path / "docs"))
    with pytest.raises(asyncio.CancelledError):
        await Ingestor(local_index, dense, sparse, sessions).ingest_source("acme", source)
    async with sessions() as session:
        [run] = (await session.scalars(select(IngestRun))).all()
    assert run.status == "failed" and run.errors == ["cancelled before it finished"]


async def test_a_run_cut_short_counts_what_it_wrote_before(tmp_path, local_index, dense, sparse, sessions,
                                                           monkeypatch):
    """A run cancelled (a deploy) after a flush was recorded as 0 added: the chunks it wrote were never counted
    as added by any run, the next one finding them unchanged."""
    monkeypatch.setattr("rag.ingest.FLUSH_CHUNKS", 1)  # each document its own flush
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nNarwhals have one long spiral tusk.")
    (tmp_path / "docs" / "b.md").write_text("# B\n\nOkapis are related to giraffes.")
    upsert, calls = local_index.upsert, []

    async def second_cancelled(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise asyncio.CancelledError
        return await upsert(*args, **kwargs)

    monkeypatch.setattr(local_index, "upsert", second_cancelled)
    source = SourceSettings(name="docs", type="directory", path=str(tmp_path / "docs"))
    with pytest.raises(asyncio.CancelledError):
        await Ingestor(local_index, dense, sparse, sessions).ingest_source("acme", source)
    [run] = await runs(sessions)
    assert run.status == "failed" and run.errors == ["cancelled before it finished"]
    assert run.added == 1  # the first document's chunk, written and recorded
