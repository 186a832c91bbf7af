"""Incremental ingest: load a source, chunk, embed only what changed, keep Qdrant and the store in step.

Per document, hashes of its content (`rag.fingerprint`: text, title, URL, format) and of the settings (chunking,
embedding model) are kept in `storage.models.Document`. The same → skipped without chunking or embedding; new content
(`documents_changed`) or settings (`documents_reembedded`) → re-chunked, chunks whose (stable) id already exists
kept, only new chunks embedded and written, and chunks no longer produced deleted. Besides:
- a new document with the content of one already indexed (a renamed file), or of one met earlier in the
  same run (the same page in two folders), takes that one's vectors under its own chunk ids and payload:
  nothing is embedded again, and each keeps its own chunks (deleting one copy leaves the other's). The title is
  part of the content: it roots the heading path, which every window and the BM25 text hold, so copies titled
  by their different file names are embedded each (only their sentence vectors come out the same; README.md);
- a document the source no longer yields has all its chunks deleted, but not by a run of pages that loaded none; one
  whose fetch failed this run keeps its chunks: a flaky page must not empty the knowledge base;
- a fetched page keeps its HTTP validators (ETag, Last-Modified) for the next run's conditional fetch: a 304
  keeps its chunks without downloading it (unless they are missing from the index: then it is fetched whole).

A document counts as unchanged only if its hash matches AND its recorded chunks are in the index.
The index can lack them: its folder was lost or the engine switched (an empty index), or a run was
killed midway through embedding them again (a partly rebuilt one). Such a document is re-chunked and
its missing chunks embedded and written again (`updated`; `documents_reembedded`), the ones present are kept.
An index that lacks some may also hold chunks the store no longer records (an older copy of the
index: the engine switched back, a restored backup); those are deleted at the end of the run
(counted as `deleted`). See `rag.index_check`.

A new chunk is embedded as its windows (averaged into its dense vector), its BM25 text and each of its
sentences (the `sentences` multivector for the ranking prior in `rag.search`): see `rag.points`.

Chunk counts in `IngestReport`: `added` (of new documents), `updated` (written for changed ones), `deleted`,
`unchanged`. Every run is recorded (`storage.models.IngestRun`) and ends ok, partial or failed, whatever went wrong.

One bad document fails alone: what the store cannot hold is cleaned first (NUL bytes, which
PostgreSQL refuses; an id, title or URL longer than its column), and a document that still cannot
be chunked or written is that run's error, keeps its old chunks and leaves no new points behind.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.errors import IN_RUN_ERRORS
from gateway.settings import BotSettings, SourceSettings
from rag.chunking import Chunk, chunk_document
from rag.document_rows import DocumentRows, recorded_chunk_count, storable, store_key, validators_of
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.fingerprint import chunk_settings, content_hash, digest, document_hash
from rag.index_check import check_index, delete_unrecorded, unrecorded_if_cancelled
from rag.ingest_progress import DocumentProgress, Progress
from rag.ingest_runs import IngestReport, describe, record_run, start_run, start_run_through_cancel
from rag.knowledge_index import KnowledgeIndex
from rag.points import write_points
from rag.sources import Document, Validators, describe_skipped, load_source
from storage.models import Document as DocumentRow

log = logging.getLogger(__name__)

FLUSH_CHUNKS = 256
TEXT_TOKENS = 512
"""Default chunk size (heading path + text, MiniLM word pieces), twice the encoder's 256: the
dense vector is the mean of the chunk's ≤256-token windows, BM25 and the answer step get all of
it. Chosen on bench/ (s10, stici) among 256/384/512 × first-window/mean: see bench/README.md."""

@dataclass
class _Pending:
    doc: Document
    content_hash: str
    chunks: list[Chunk]
    new: list[Chunk]
    stale: list[str]
    row: DocumentRow | None
    donor: list[str] | None = None  # the chunk ids of a document of the same content (renamed, or a copy)
    reembedded: bool = False  # its content as its row has it: embedded again for other settings or lost chunks


class Ingestor:
    """Runs ingests for bots and sources against one index, embedder pair and store."""

    def __init__(
        self,
        index: KnowledgeIndex,
        dense: DenseEmbedder,
        sparse: SparseEmbedder,
        sessions: async_sessionmaker[AsyncSession],
        *,
        max_chunk_tokens: int = 256,
        text_tokens: int = TEXT_TOKENS,
        base_dir: Path | None = None,
    ) -> None:
        self.index = index
        self.dense = dense
        self.sparse = sparse
        self.sessions = sessions
        self.max_tokens = min(max_chunk_tokens, dense.max_tokens)
        self.text_tokens = max(text_tokens, self.max_tokens)
        self.base_dir = base_dir
        self._settings = chunk_settings(dense.model, self.max_tokens, self.text_tokens)
        self.settings_hash = digest(self._settings)
        """What a document's chunks depend on besides its content; stored per document."""
        self._writing = asyncio.Lock()
        """Held while a source's loaded documents are chunked, embedded and written: sources load (fetch,
        parse) side by side, and the encoder, the index and the store serve one source at a time."""

    async def ingest_bot(
        self, bot: BotSettings, *, sources: list[str] | None = None, trigger: str = "manual", progress: Progress | None = None
    ) -> list[IngestReport]:
        """Ingest each of the bot's sources (or the named ones); one failing source never stops the rest."""
        return [await self.ingest_source(bot.name, source, trigger=trigger, progress=progress)
                for source in bot.sources if sources is None or source.name in sources]

    async def ingest_source(
        self, bot: str, source: SourceSettings, *, trigger: str = "manual", progress: Progress | None = None,
        fetch_progress: Progress | None = None,
    ) -> IngestReport:
        """Load one source and ingest it incrementally; `fetch_progress` counts its pages as they are
        fetched (urls and sitemap sources), `progress` its documents as they are stored.

        Never raises for a failure of the source, the index or the store: the run is recorded and
        reported as `failed` with its error, so the caller goes on with its next source. A
        cancellation is recorded the same way, then re-raised.
        """
        started = time.perf_counter()
        try:
            run_id, cancelled = await start_run_through_cancel(self.sessions, bot, source.name, trigger=trigger)
        except Exception as exc:  # the store refuses even the run row: nothing to record it in
            return await self._failed(bot, source.name, exc, trigger=trigger, started=started, run_id=None, record=False)
        if cancelled is not None:  # a stop as the row was written: recorded as cancelled, not left `running`
            return await self._failed(bot, source.name, cancelled, trigger=trigger, started=started, run_id=run_id,
                                      record=run_id is not None)
        try:
            validators = await self._validators(bot, source.name) if source.type != "directory" else {}
            loaded = await load_source(source, base_dir=self.base_dir, validators=validators, progress=fetch_progress)
        except BaseException as exc:  # a broken source is recorded and logged; the scheduler keeps running
            return await self._failed(bot, source.name, exc, trigger=trigger, started=started, run_id=run_id)
        # A refused symlink is an error whose chunks go (kept, they would go on serving what it pointed to).
        errors = [f"{doc_id}: {message}" for doc_id, message in [*loaded.errors, *loaded.refused]]
        counted: list[IngestReport] = []  # the run's counts so far, when it is cut short
        try:
            async with self._writing:
                # A page answered 304 whose sitemap <lastmod> moved: the new one is its, so it is not asked for next time.
                await self._rows(bot, source.name).relisted({p: loaded.lastmods[p] for p in loaded.not_modified if p in loaded.lastmods})
                return await self.ingest_documents(
                    bot,
                    source.name,
                    loaded.documents,
                    failed_ids={doc_id for doc_id, _ in loaded.errors},
                    not_modified=set(loaded.not_modified),
                    delete_missing=not loaded.listing_incomplete,
                    gone=bool(loaded.gone or loaded.refused),
                    errors=errors,
                    skipped=loaded.skipped,
                    trigger=trigger,
                    progress=progress,
                    started=started,
                    run_id=run_id,
                    counted=counted, folder_listing=source.type == "directory",
                )
        except BaseException as exc:  # index or store down, or a bug: the run must not stay `running`
            return await self._failed(bot, source.name, exc, trigger=trigger, started=started, run_id=run_id,
                                      errors=errors, counted=counted[0] if counted else None)

    async def _failed(
        self, bot: str, source: str, exc: BaseException, *, trigger: str, started: float, run_id: int | None,
        errors: list[str] | None = None, record: bool = True, counted: IngestReport | None = None,
    ) -> IngestReport:
        """Record a run that `exc` ended as failed and return its report; re-raise a cancellation. `counted`: what
        the run wrote before (its chunks are in the index: no later run counts them as added)."""
        report = counted or IngestReport(bot, source, errors=list(errors or []))
        report.errors.append(describe(exc))
        report.status = "failed"
        report.duration_s = time.perf_counter() - started
        log.warning("ingest.source_failed", extra={"bot": bot, "source": source, "error": report.errors[-1],
                                                   IN_RUN_ERRORS: True})
        if record:
            try:
                await self._record(report, trigger=trigger, run_id=run_id)
            except Exception:  # the store itself is down; the log line above is all that is left
                log.exception("ingest.run_not_recorded", extra={"bot": bot, "source": source})
        if not isinstance(exc, Exception):  # cancelled (shutdown, Ctrl-C): recorded, and still cancelled
            raise exc
        return report

    async def ingest_documents(
        self,
        bot: str,
        source: str,
        documents: list[Document],
        *,
        failed_ids: set[str] | None = None,
        delete_missing: bool = True,
        not_modified: set[str] | None = None,
        gone: bool = False,
        errors: list[str] | None = None,
        skipped: dict[str, int] | None = None,
        trigger: str = "manual",
        progress: Progress | None = None,
        started: float | None = None,
        run_id: int | None = None,
        counted: list[IngestReport] | None = None,
        folder_listing: bool = False,
    ) -> IngestReport:
        """Ingest already-loaded documents as the full content of `source` (others get deleted, unless
        `delete_missing` is False: the listing is known to be incomplete, or none loaded and it is no `folder_listing`).
        `not_modified` pages (a 304 to a conditional fetch) keep their chunks and count as unchanged.
        A source that gives nothing at all keeps its documents, unless pages said they are `gone` (410).
        A document that cannot be chunked or stored is an error of the run and keeps its old chunks.
        `skipped` (a directory's files of types no loader takes, by suffix) is named when nothing else came."""
        started = time.perf_counter() if started is None else started
        if run_id is None:
            run_id = await start_run(self.sessions, bot, source, trigger=trigger)
        documents = [storable(doc) for doc in documents]
        not_modified = {store_key(doc_id) for doc_id in not_modified or ()}
        report = IngestReport(bot, source, documents=len(documents) + len(not_modified), errors=list(errors or []))
        if counted is not None:  # the caller records a run cut short with what it wrote so far
            counted.append(report)
        failed_ids = {store_key(doc_id) for doc_id in failed_ids or ()}
        loader_failures = bool(failed_ids)
        await self.index.ensure_collection(bot, await self.dense.probe_dim(), model=self.dense.model)
        rows = await self._rows(bot, source).load()
        incomplete_listing = not delete_missing  # said below; a source that gave nothing says so itself
        gave_nothing = not (documents or not_modified or failed_ids or gone)
        # A first run that gives nothing, and no error: most often a wrong path, or files no loader takes. Said.
        empty_first_run = gave_nothing and not rows and not report.errors
        if empty_first_run:
            held = f"; it held {describe_skipped(skipped)}" if skipped else ""
            report.errors.append("the source gave no documents, so nothing was ingested: check its path or URLs "
                                 f"(a directory takes Markdown, text, HTML and PDF files{held})")
        if delete_missing and rows and failed_ids and not (documents or not_modified or gone or folder_listing):
            # Every page failed (a new URL mistyped, the site down): unlisted ones kept; a folder's deleted file is gone.
            delete_missing = False
            if kept := len(rows.keys() - failed_ids):  # said, or they went on answering with no word of it
                report.errors.append(f"no page loaded, so the {kept} documents no longer listed were kept until one does")
        if delete_missing and rows and gave_nothing:
            # Nothing at all where documents were: an unmounted volume, a folder emptied by a failed
            # sync, a robots.txt that now disallows every page, far more often than a knowledge base
            # meant to be wiped. Removing the source from the config deletes its chunks (`gateway ingest`).
            delete_missing = False
            report.errors.append(f"the source gave no documents; its {len(rows)} documents were kept (take the "
                                 "source out of the config to delete them)")
        # Chunks the store records but the index lacks (folder deleted, engine switched, rebuild killed): embedded again.
        check = await check_index(self.index, self.sessions, bot, source, rows)
        absent, indexed = check.absent, check.indexed
        lost = {doc_id for doc_id, row in rows.items() if not absent.isdisjoint(row.chunk_ids)}
        if absent and not indexed:
            log.warning("ingest.index_empty", extra={"bot": bot, "source": source, "documents": len(rows)})
        elif absent:
            log.warning("ingest.points_missing", extra={
                "bot": bot, "source": source, "missing": len(absent), "documents": len(lost), "indexed": indexed,
                "recorded": sum(len(row.chunk_ids) for row in rows.values())})
        pending: list[_Pending] = []
        # A 304 page keeps its chunks as they are. `_validators` sends none for a page with missing
        # chunks, so such a page comes back in full and is embedded again below.
        seen = {doc_id for doc_id in not_modified if doc_id in rows}
        report.unchanged += sum(len(rows[doc_id].chunk_ids) for doc_id in seen)
        revalidated: list[tuple[DocumentRow, Document]] = []  # unchanged content, new validators or settings stamp
        bad: set[str] = set()  # documents of this run that could not be chunked or stored
        # Same content, same settings, points all there: a renamed (or copied) file reuses its vectors.
        donors = {r.content_hash: r.chunk_ids for r in rows.values()
                  if r.settings_hash == self.settings_hash and absent.isdisjoint(r.chunk_ids)}
        tally = DocumentProgress(progress, len(documents))
        for doc in documents:
            if doc.doc_id in seen:
                tally.advance(1)
                continue
            seen.add(doc.doc_id)
            row = rows.get(doc.doc_id)
            doc_hash, former_hash = content_hash(doc), document_hash(self._settings, doc)
            former = row is not None and row.content_hash == former_hash  # an older row's, which held the settings
            same_content = former or (row is not None and row.content_hash == doc_hash)
            if same_content and (former or row.settings_hash == self.settings_hash) and doc.doc_id not in lost:
                report.unchanged += len(row.chunk_ids)
                tally.advance(1)
                if former or (row.etag, row.last_modified, row.lastmod, row.settings_hash) != (
                        *validators_of(doc), self.settings_hash):
                    revalidated.append((row, doc))
            # In a thread: a long document takes a while to chunk (its tokens are counted), and ingest
            # runs inside the server, whose event loop must keep answering meanwhile.
            elif (chunks := await asyncio.to_thread(self.chunk, bot, source, doc, report)) is None:
                bad.add(doc.doc_id)
                tally.advance(1)
            else:
                old = set(row.chunk_ids) - absent if row else set()  # what the index holds of the document
                ids = {c.chunk_id for c in chunks}
                # A chunk id names the chunk's text, not how it was embedded: under other settings (a
                # chunker version that reads its sentences otherwise, another model) a kept id is stale too.
                kept = old if row is not None and row.settings_hash == self.settings_hash else set()
                pending.append(_Pending(doc, doc_hash, chunks, [c for c in chunks if c.chunk_id not in kept],
                                        sorted(old - ids), row, donors.get(doc_hash) or donors.get(former_hash),
                                        reembedded=same_content))
                donors.setdefault(doc_hash, [c.chunk_id for c in chunks])  # for a copy later in the run
                if sum(len(p.new) for p in pending) >= FLUSH_CHUNKS:
                    bad |= await self._flush(bot, source, pending, report, tally)
                    pending = []
        bad |= await self._flush(bot, source, pending, report, tally)
        await self._rows(bot, source).restamp(revalidated)
        missing = [r for d, r in rows.items() if d not in seen and d not in failed_ids]
        if delete_missing:
            await self._delete_gone_documents(bot, source, missing, report)
        elif incomplete_listing and missing:
            # Said with how many and one of them: it was said on every run a child sitemap failed, also with none kept.
            log.warning("ingest.incomplete_listing_kept",
                        extra={"bot": bot, "source": source, "kept": len(missing), "example": missing[0].doc_id})
        if check.held and (leftovers := await delete_unrecorded(self.index, self.sessions, bot, check.held)):
            report.deleted += leftovers
            log.warning("ingest.leftovers_deleted", extra={"bot": bot, "source": source, "deleted": leftovers})
        # What an error left as it was counts as unchanged, so that added + updated + unchanged is what
        # the index holds of the source: a page that failed, a document that could not be stored.
        kept = [row for doc_id, row in rows.items()
                if doc_id not in seen and (doc_id in failed_ids or not delete_missing) or doc_id in bad]
        report.unchanged += sum(len(row.chunk_ids) for row in kept)
        if report.errors:
            stored = len(documents) > len(bad) or not_modified
            report.status = "partial" if stored or not (loader_failures or bad or empty_first_run) else "failed"
        report.duration_s = time.perf_counter() - started
        await self._record(report, trigger=trigger, run_id=run_id)
        log.info("ingest.done", extra={"bot": bot, "source": source, **report.as_dict()})
        return report

    def chunk(self, bot: str, source: str, doc: Document, report: IngestReport) -> list[Chunk] | None:
        """The document's chunks (bench/ingest_large_file times this), or None (its error recorded) when it fails."""
        try:
            return chunk_document(
                doc.text,
                fmt=doc.format,
                title=doc.title,
                bot=bot,
                source=source,
                doc_id=doc.doc_id,
                count_tokens=self.dense.count_tokens,
                max_tokens=self.max_tokens,
                text_tokens=self.text_tokens,
            )
        except Exception as exc:  # one odd document must not cost the rest of its source
            report.document_failed(doc.doc_id, exc)
            return None

    async def _flush(self, bot: str, source: str, pending: list[_Pending], report: IngestReport,
                     tally: DocumentProgress) -> set[str]:
        """Embed the new chunks of pending documents, write them, then update the store. Returns the
        ids of the documents the store refused (each recorded as an error, its new points removed)."""
        if not pending:
            return set()
        # Points first, then the store: a crash in between only costs a re-embed next run.
        new = [(p.doc, c) for p in pending for c in p.new]
        share = [1 / len(p.new) for p in pending for _ in p.new]  # of its document, per chunk
        # The same content gives the same chunks in the same order: each takes its donor's vectors.
        donors = {c.chunk_id: old for p in pending if p.donor and len(p.donor) == len(p.chunks)
                  for c, old in zip(p.chunks, p.donor)}
        async with unrecorded_if_cancelled(self.index, self.sessions, bot, frozenset(c.chunk_id for _, c in new)):
            await write_points(self.index, self.dense, self.sparse, bot, source, new, donors, share=share,
                               advance=tally.advance)
        await self.index.delete_points(bot, [i for p in pending for i in p.stale])
        refused = await self._rows(bot, source).write(pending)
        for p, exc in refused:
            report.document_failed(p.doc.doc_id, exc)
        # A refused document keeps its old row: its new points would be orphans nothing deletes.
        await self.index.delete_points(bot, [c.chunk_id for p, _ in refused for c in p.new])
        failed = {p.doc.doc_id for p, _ in refused}
        if nothing_to_embed := sum(1 for p in pending if not p.new):
            tally.advance(nothing_to_embed)  # done once stored
        for p in pending:
            if p.doc.doc_id in failed:
                continue
            report.document_stored(new=p.row is None, reembedded=p.reembedded, chunks=len(p.chunks), written=len(p.new),
                                   stale=len(p.stale))
        return failed

    def _rows(self, bot: str, source: str) -> DocumentRows:
        return DocumentRows(self.sessions, bot, source, self.settings_hash)

    async def _validators(self, bot: str, source: str) -> Validators:
        """The HTTP validators of this source's fetched pages, for conditional fetches. None for a
        page whose chunks the index lacks (none at all when it is empty), and none for a page chunked
        under other settings: those pages must be downloaded again to be re-embedded."""
        rows = self._rows(bot, source)
        validators = await rows.validators()
        if not validators:
            return {}
        stored = await rows.load()
        absent = (await check_index(self.index, self.sessions, bot, source, stored, list_held=False)).absent
        return {doc_id: pair for doc_id, pair in validators.items()
                if doc_id not in stored or absent.isdisjoint(stored[doc_id].chunk_ids)}

    async def _record(self, report: IngestReport, *, trigger: str, run_id: int | None) -> None:
        """The run into the store, with its `total`: what the source holds after it (a failed run's
        counts are all 0, and the chunks it had are kept)."""
        report.total = await recorded_chunk_count(self.sessions, report.bot, source=report.source)
        await record_run(self.sessions, report, trigger=trigger, run_id=run_id)

    async def _delete_gone_documents(self, bot: str, source: str, gone: list[DocumentRow], report: IngestReport) -> None:
        if not gone:
            return
        ids = [i for row in gone for i in row.chunk_ids]
        await self.index.delete_points(bot, ids)
        await self._rows(bot, source).delete(gone)
        report.deleted, report.documents_removed = report.deleted + len(ids), report.documents_removed + len(gone)
