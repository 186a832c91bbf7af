"""Sentence vectors: split at ingest, stored as a Qdrant multivector, read back as a ranking prior."""

from __future__ import annotations

import logging
import shutil
import time

import numpy as np
import pytest
import qdrant_edge as qe
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm
from sqlalchemy import select

import rag.search
from gateway.settings import QdrantSettings, RetrievalSettings, SourceSettings
from rag.chunking import MAX_SENTENCES, chunk_document, split_sentences
from rag.edge_index import _config
from rag.index import LAYOUT_RECHECK_S, QdrantIndex, open_index
from rag.ingest import Ingestor
from rag.knowledge_index import DENSE, SPARSE, collection_name
from rag.search import HybridSearch, _weigh, best_sentence_scores, sentence_prior
from rag.sources import Document, load_directory
from rag.tables import text_and_tables
from storage.models import Document as DocumentRow
from tests.rag.kb import write_kb

EMAIL_GUIDE = """# Phone guide

## Email

Manage all your mail accounts in one place. Sync schedules can be set per account, signatures can be
edited, and the inbox can be sorted by date, sender or size. To read your mail, launch the Email app
from the Apps screen. Spam filters move unwanted mail aside, and attachments are saved in the
Downloads folder. Each account keeps its own notification sound and vibration pattern.

## Send an email to a group

Choose contacts from a group and send them an email message together. From Contacts, tap a group,
then tap More options and Send email. Select the group members you want, and tap Done to open a new
email message addressed to every one of them.

## Add an email account

Add email accounts to read and send email on your device. From Email, tap Add account, enter your
email address and password, and tap Sign in. For a company email account, ask your administrator for
the server settings.
"""


def test_split_sentences_cuts_at_sentence_ends_and_lines_and_drops_labels(dense):
    text = "Tap Settings to open it. Then choose Display: Screen timeout.\n- Pick a time you like\n- OK\n\nNote:"
    assert split_sentences(text, count_tokens=dense.count_tokens, max_tokens=256) == (
        "Tap Settings to open it.",
        "Then choose Display:",
        "- Pick a time you like",
    )
    # A text with no piece of three words still gives itself.
    assert split_sentences("Hello there.", count_tokens=dense.count_tokens, max_tokens=256) == ("Hello there.",)


def test_a_table_row_is_one_sentence_read_with_its_header(dense):
    # Alone, "| Largest attachment | 25 MB | 250 MB | 1 GB |" says nothing of whose each size is; and
    # the colons of "Free: 25 MB" must end no sentence.
    text = ("Limits per plan:\n\n| | Free | Plus |\n|---|---|---|\n| Largest attachment | 25 MB | 250 MB |\n"
            "| Version history | 7 days | 1 year |\n\nUpgrade any time.")
    assert split_sentences(text, count_tokens=dense.count_tokens, max_tokens=256) == (
        "Limits per plan:",
        "Largest attachment; Free: 25 MB; Plus: 250 MB",
        "Version history; Free: 7 days; Plus: 1 year",
        "Upgrade any time.",
    )
    # Inside a code fence, a line that starts with "|" is code, not a table.
    fenced = "```\n| not | a table |\n```"
    assert text_and_tables(fenced) == [fenced]
    assert text_and_tables("no table here") == ["no table here"]


async def test_a_table_row_read_with_its_header_lifts_its_chunk(tmp_path, index, dense, sparse, sessions):
    from tests.conftest import HELP_CENTER

    # The help center's price table holds the gold row; before rows were read with their header
    # the table ranked 6th for this question (bench/README.md).
    docs = [d for d in (await load_directory(HELP_CENTER)).documents]
    await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "kb", docs)
    result = await HybridSearch(index, dense, sparse).search(
        "acme", ["how much is plus if i pay for a whole year"], RetrievalSettings(k=5))
    assert "Plan comparison" in [h.heading_path[-1] for h in result.hits[:3]]


def test_split_sentences_fits_the_encoder_and_keeps_every_word_of_many_sentences(dense):
    run_on = " ".join(f"word{i}" for i in range(600))
    pieces = split_sentences(run_on, count_tokens=dense.count_tokens, max_tokens=64)
    assert len(pieces) > 1 and all(dense.count_tokens(p) <= 64 for p in pieces)
    assert " ".join(pieces).split() == run_on.split()
    many = " ".join(f"Step {i} is done here." for i in range(3 * MAX_SENTENCES))
    packed = split_sentences(many, count_tokens=dense.count_tokens, max_tokens=256)
    assert len(packed) <= MAX_SENTENCES and all(dense.count_tokens(p) <= 256 for p in packed)
    assert " ".join(packed).split() == many.split()


def test_chunks_carry_their_sentences(dense):
    chunks = chunk_document(EMAIL_GUIDE, fmt="markdown", title="Phone guide", bot="b", source="s", doc_id="d",
                            count_tokens=dense.count_tokens)
    email = next(c for c in chunks if c.heading_path[-1] == "Email")
    assert "To read your mail, launch the Email app from the Apps screen." in email.sentences
    flat = " ".join(email.text.split())
    assert all(s in flat for s in email.sentences)


def test_sentence_prior_weighs_by_the_best_sentence_and_leaves_chunks_without_any_alone():
    assert sentence_prior(1.0) == 1.0 and 0 < sentence_prior(0.2) < sentence_prior(0.6) < 1.0
    query = [1.0, 0.0]
    scores = best_sentence_scores(query, {"a": np.array([[0.0, 1.0], [0.6, 0.8]], dtype=np.float32)})
    assert scores == {"a": pytest.approx(0.6)}
    a = qm.ScoredPoint(id="a", version=0, score=1.0, payload={"text": " ".join(["w"] * 40)})
    b = qm.ScoredPoint(id="b", version=0, score=0.9, payload={"text": " ".join(["w"] * 40)})
    ranked = _weigh([a, b], coverage_of={}, sentence_of={"a": 0.3, "b": 0.9})
    assert [str(p.id) for p in ranked] == ["b", "a"]
    # A chunk written before sentence vectors existed keeps its fused score (weight 1).
    assert [p.score for p in _weigh([a], coverage_of={"a": 1.0}, sentence_of={})] == [pytest.approx(1.0)]


async def test_ingest_stores_each_chunks_sentence_vectors(tmp_path, index, dense, sparse, sessions):
    docs = [Document("guide.md", "Phone guide", None, EMAIL_GUIDE, "markdown")]
    await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "kb", docs)
    result = await HybridSearch(index, dense, sparse).search("acme", ["read my mail"], RetrievalSettings(k=3))
    stored = await index.sentence_vectors("acme", [h.chunk_id for h in result.hits])
    assert set(stored) == {h.chunk_id for h in result.hits}
    query = dense.embed_queries(["read my mail"])[0]
    for hit in result.hits:
        sentences = split_sentences(hit.text, count_tokens=dense.count_tokens, max_tokens=dense.max_tokens)
        assert stored[hit.chunk_id].shape == (len(sentences), dense.dim)
        assert np.allclose(np.linalg.norm(stored[hit.chunk_id], axis=1), 1.0, atol=1e-3)
        expected = max(float(np.dot(query, v)) for v in dense.embed_documents(list(sentences)))
        assert best_sentence_scores(query, stored)[hit.chunk_id] == pytest.approx(expected, abs=1e-3)


async def test_sentence_prior_lifts_the_section_whose_one_sentence_answers(index, dense, sparse, sessions, monkeypatch):
    # "Email" says it in one sentence among unrelated ones ("launch the Email app"); its neighbours
    # use the query's words throughout. Without the prior it ranks last.
    docs = [Document("guide.md", "Phone guide", None, EMAIL_GUIDE, "markdown")]
    await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "kb", docs)
    search = HybridSearch(index, dense, sparse)

    async def order() -> list[str]:
        result = await search.search("acme", ["open email"], RetrievalSettings(k=3))
        return [h.heading_path[-1] for h in result.hits]

    with_prior = await order()
    monkeypatch.setattr(rag.search, "SENTENCE_PRIOR_WEIGHT", 0.0)
    without = await order()
    assert without.index("Email") == 2
    assert with_prior.index("Email") < with_prior.index("Add an email account")


@pytest.mark.parametrize("engine", ["local", "edge"])
async def test_an_index_from_before_sentence_vectors_is_rebuilt_by_the_next_ingest(tmp_path, engine, dense, sparse, sessions, caplog):
    settings = QdrantSettings(path=str(tmp_path / "qdrant"), engine=engine)
    source = SourceSettings(name="docs", type="directory", path=str(write_kb(tmp_path / "kb")))
    index = open_index(settings)
    first = await Ingestor(index, dense, sparse, sessions).ingest_source("acme", source)
    await index.close()
    await _replace_with_old_layout(settings, dense.dim)

    index = open_index(settings)
    try:
        # Upgraded code, old index: search still answers (without the sentence prior) ...
        with caplog.at_level(logging.WARNING):
            before = await HybridSearch(index, dense, sparse).search("acme", ["refund"], RetrievalSettings(k=3))
        assert before.hits or before.refused
        assert [r.bot for r in caplog.records if r.getMessage() == "index.no_sentence_vectors"]  # the operator is told
        # ... and the next ingest, even after that search opened the index, rebuilds it.
        again = await Ingestor(index, dense, sparse, sessions).ingest_source("acme", source)
        assert again.status == "ok" and again.unchanged == 0
        assert await index.count("acme") == first.added
        async with sessions() as session:
            ids = [i for row in (await session.scalars(select(DocumentRow))).all() for i in row.chunk_ids]
        assert set(await index.sentence_vectors("acme", ids)) == set(ids)
    finally:
        await index.close()


async def test_a_layout_without_sentence_vectors_is_read_again_after_a_while(tmp_path, dense, sparse, sessions):
    # Two processes on one shared server, here two indexes on one client: the first reads the old
    # layout, then the second's ingest rebuilds the collection.
    settings = QdrantSettings(path=str(tmp_path / "qdrant"))
    source = SourceSettings(name="docs", type="directory", path=str(write_kb(tmp_path / "kb")))
    first = open_index(settings)
    await Ingestor(first, dense, sparse, sessions).ingest_source("acme", source)
    await first.close()
    await _replace_with_old_layout(settings, dense.dim)
    client = AsyncQdrantClient(path=settings.path)
    reader, writer = QdrantIndex(client), QdrantIndex(client)
    try:
        assert await reader.sentence_vectors("acme", ["00000000-0000-4000-8000-000000000001"]) == {}
        await Ingestor(writer, dense, sparse, sessions).ingest_source("acme", source)
        ids = [str(p.id) for p in (await client.scroll(collection_name("acme"), limit=3))[0]]
        assert await reader.sentence_vectors("acme", ids) == {}  # its answer holds for a while ...
        now = time.monotonic()
        reader.clock = lambda: now + LAYOUT_RECHECK_S + 1
        assert set(await reader.sentence_vectors("acme", ids)) == set(ids)  # ... then it reads again
    finally:
        await client.close()


async def _replace_with_old_layout(settings: QdrantSettings, dim: int) -> None:
    """Put the layout of an older version in place: dense + BM25 only, one stray point."""
    point_id, dense, sparse = "00000000-0000-4000-8000-000000000001", [1.0] + [0.0] * (dim - 1), ([1], [1.0])
    if settings.engine == "edge":
        folder = f"{settings.path}/edge/{collection_name('acme')}"
        shutil.rmtree(folder)
        shard = qe.EdgeShard.create(folder, _config(dim, sentences=False))
        shard.update(qe.UpdateOperation.upsert_points([qe.Point(point_id, {DENSE: dense, SPARSE: qe.SparseVector(*sparse)}, {})]))
        shard.close()
        return
    client = AsyncQdrantClient(path=settings.path)
    name = collection_name("acme")
    await client.delete_collection(name)
    await client.create_collection(
        name,
        vectors_config={DENSE: qm.VectorParams(size=dim, distance=qm.Distance.COSINE)},
        sparse_vectors_config={SPARSE: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
    )
    await client.upsert(name, [qm.PointStruct(id=point_id, vector={DENSE: dense, SPARSE: qm.SparseVector(indices=sparse[0], values=sparse[1])})])
    await client.close()


async def test_a_small_k_keeps_the_top_of_the_re_ordered_list_not_of_rrf(index, dense, sparse, sessions):
    # The priors re-order the fused top RERANK_DEPTH, then k are kept: k=3 gives k=10's first three.
    docs = [Document("guide.md", "Phone guide", None, EMAIL_GUIDE, "markdown")]
    await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "kb", docs)
    limits: list[int] = []
    original = index.hybrid_query

    async def recording(*args, **kwargs):
        limits.append(kwargs["limit"])
        return await original(*args, **kwargs)

    index.hybrid_query = recording
    search = HybridSearch(index, dense, sparse)
    for question in ("open email", "add an account", "email a group of contacts"):
        top3 = (await search.search("acme", [question], RetrievalSettings(k=3))).hits
        top10 = (await search.search("acme", [question], RetrievalSettings(k=10))).hits
        assert [h.chunk_id for h in top3] == [h.chunk_id for h in top10[:3]]
    assert set(limits) == {rag.search.RERANK_DEPTH}
