"""Hybrid search over real Qdrant local mode: arms, RRF, gate 1 with its keyword override, isolation."""

from __future__ import annotations

import pytest
from qdrant_client import models as qm

from gateway.errors import IndexBusy
from gateway.settings import QdrantSettings, RetrievalSettings
from rag.gate import (
    DEFAULT_LEXICAL_CREDIT,
    DEFAULT_MIN_DENSE_SCORE,
    lexical_coverage,
    subject_terms,
    unknown_to_encoder,
)
from rag.index import open_index
from rag.ingest import Ingestor
from rag.knowledge_index import collection_name
from rag.query_words import word_parts
from rag.search import SHORT_CONTENT_WORDS, HybridSearch, _fuse, _weigh, coverage_prior, length_prior
from rag.sources import Document, load_directory
from rag.term_stats import TermStats
from tests.rag.kb import TARGET_CODE, write_kb

RETRIEVAL = RetrievalSettings(k=3)


def test_gate_defaults_are_the_calibrated_values():
    # The README and rag/gate.py document this calibration; a new default needs a new calibration.
    assert (DEFAULT_MIN_DENSE_SCORE, DEFAULT_LEXICAL_CREDIT) == (0.46, 0.20)
    assert (RETRIEVAL.min_dense_score, RETRIEVAL.lexical_credit) == (0.46, 0.20)


@pytest.fixture
async def kb(tmp_path, index, dense, sparse, sessions):
    """The sample knowledge base ingested for bot `acme`; yields the search."""
    docs = (await load_directory(write_kb(tmp_path / "kb"))).documents
    await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "kb", docs)
    return HybridSearch(index, dense, sparse)


async def test_hybrid_search_finds_exact_error_code_dense_alone_misses(kb, index, dense, sparse):
    arms = await index.hybrid_query(
        "acme", dense.embed_queries([TARGET_CODE])[0], sparse.embed_queries([TARGET_CODE])[0], prefetch=40, limit=3
    )
    dense_top = arms.dense[0].id
    result = await kb.search("acme", [TARGET_CODE], RETRIEVAL.model_copy(update={"min_dense_score": -1.0}))
    top = result.hits[0]
    assert top.document == f"sync/{TARGET_CODE.lower()}.md"
    assert top.chunk_id != dense_top  # the dense arm ranked another chunk first
    assert "sparse" in top.arms and top.sparse_score and top.sparse_score > 0


@pytest.mark.parametrize("index", ["local"], indirect=True)  # compares with qdrant-client's own fusion
async def test_hybrid_query_client_rrf_ranks_like_qdrant_fusion(kb, index, dense, sparse):
    for question in ["What does the Business Plus plan cost?", TARGET_CODE, "how do I reset my password"]:
        dv, sv = dense.embed_queries([question])[0], sparse.embed_queries([question])[0]
        arms = await index.hybrid_query("acme", dv, sv, prefetch=8, limit=6)
        qdrant = await index.client.query_points(
            collection_name("acme"),
            prefetch=[qm.Prefetch(query=dv, using="dense", limit=8), qm.Prefetch(query=sv, using="bm25", limit=8)],
            query=qm.FusionQuery(fusion=qm.Fusion.RRF),
            limit=6,
        )
        assert [str(p.id) for p in arms.fused] == [str(p.id) for p in qdrant.points]
        assert [p.score for p in arms.fused] == pytest.approx([p.score for p in qdrant.points])
        assert all(p.score <= 1.0 for p in arms.dense) and arms.fused[0].payload["text"]


async def test_the_rrf_constant_is_a_per_bot_setting(kb, index, dense, sparse, monkeypatch):
    question = "What does the Business Plus plan cost?"
    dv, sv = dense.embed_queries([question])[0], sparse.embed_queries([question])[0]
    for k in (2, 60):
        arms = await index.hybrid_query("acme", dv, sv, prefetch=8, limit=6, rrf_k=k)
        ranks = [{str(p.id): rank for rank, p in enumerate(arm, start=1)} for arm in (arms.dense, arms.sparse)]
        for point in arms.fused:
            held = [arm[str(point.id)] for arm in ranks if str(point.id) in arm]
            assert point.score == pytest.approx(sum(1.0 / (rank + k - 1) for rank in held))
    asked: list[int] = []
    real = index.hybrid_query

    async def spy(*args, **kwargs):
        asked.append(kwargs["rrf_k"])
        return await real(*args, **kwargs)

    monkeypatch.setattr(index, "hybrid_query", spy)
    await kb.search("acme", [question], RETRIEVAL.model_copy(update={"rrf_k": 60}))
    await kb.search("acme", [question], RETRIEVAL)
    assert asked == [60, 2]  # the bot's own constant, else Qdrant's default
    with pytest.raises(ValueError):
        RetrievalSettings(rrf_k=0)


async def test_search_hit_reports_arms_and_scores(kb):
    result = await kb.search("acme", ["What does the Business Plus plan cost?"], RETRIEVAL)
    top = result.hits[0]
    assert not result.refused
    assert top.document == "billing.md" and top.heading_path == ("Billing", "Plans")
    assert top.arms == ("dense", "sparse")
    assert top.dense_score is not None and top.dense_score > 0.5
    assert top.fused_score > 0 and result.best_dense_score == pytest.approx(top.dense_score)
    assert len(result.hits) == RETRIEVAL.k


async def test_a_query_with_a_lone_surrogate_is_searched_not_a_crash(kb):
    # "\ud800" is valid JSON (an eval file, an API caller); the tokenizer raised a TypeError on it.
    result = await kb.search("acme", ["What does the Business Plus plan cost?\ud800"], RETRIEVAL)
    assert not result.refused and result.hits[0].document == "billing.md"
    assert (await kb.search("acme", ["\ud800\x00"], RETRIEVAL)).refused


async def test_gate_refuses_off_topic_query(kb):
    result = await kb.search("acme", ["What is the capital of France?"], RETRIEVAL)
    assert result.refused and result.hits == ()
    assert result.candidates  # what was found is still visible for logs and eval
    assert result.best_dense_score < RETRIEVAL.min_dense_score
    assert result.lexical_coverage == 0.0  # none of its words is in the knowledge base
    assert "no strong keyword hit" in result.reason


async def test_gate_lexical_coverage_lowers_the_bar_for_a_terse_on_topic_question(kb):
    # MiniLM scores a two-word question low even against the chunk that holds both words.
    terse = await kb.search("acme", ["Starter seats"], RETRIEVAL)
    assert terse.best_dense_score < RETRIEVAL.min_dense_score
    assert terse.lexical_coverage == 1.0 and not terse.refused and not terse.keyword_override
    assert terse.hits[0].heading_path == ("Billing", "Plans")
    dense_only = await kb.search("acme", ["Starter seats"], RETRIEVAL.model_copy(update={"lexical_credit": 0.0}))
    assert dense_only.refused


def test_lexical_coverage_weighs_query_terms_by_idf_and_counts_unknown_terms():
    stats = TermStats(chunks=100, df={1: 90, 2: 2})  # term 1 common, term 2 rare, term 3 not in the KB

    def chunk(*terms: int) -> qm.ScoredPoint:
        return qm.ScoredPoint(id=1, version=0, score=1.0, vector={"bm25": qm.SparseVector(indices=list(terms), values=[1.0] * len(terms))})

    query = qm.SparseVector(indices=[1, 2], values=[1.0, 1.0])
    assert lexical_coverage(query, [chunk(1, 2)], stats) == pytest.approx(1.0)
    rare_only, common_only = lexical_coverage(query, [chunk(2)], stats), lexical_coverage(query, [chunk(1)], stats)
    assert rare_only > 0.8 > 0.2 > common_only > 0
    assert lexical_coverage(query, [chunk(1), chunk(2)], stats) == rare_only  # one chunk must hold the words
    foreign = qm.SparseVector(indices=[1, 3], values=[1.0, 1.0])
    assert lexical_coverage(foreign, [chunk(1)], stats) < common_only * 1.5  # the unknown word weighs most
    assert lexical_coverage(qm.SparseVector(indices=[], values=[]), [chunk(1)], stats) == 0.0


async def test_gate_coverage_leaves_out_the_words_that_frame_a_question(kb):
    # "references" is in no chunk, so it would weigh most and pull the coverage of a question about
    # refunds down; it frames the question and names nothing the answer must hold.
    framed = await kb.search("acme", ["What references to refunds are there?"], RETRIEVAL)
    assert framed.lexical_coverage == 1.0 and not framed.refused
    assert framed.hits[0].heading_path == ("Billing", "Refunds")
    # "What happens if/when …" is a question's form in every domain, not its subject.
    happens = await kb.search("acme", ["What happens with refunds?"], RETRIEVAL)
    assert happens.lexical_coverage == 1.0 and not happens.refused
    # Framing words lend nothing to an off-topic subject.
    off_topic = await kb.search("acme", ["What does the article say about the Eiffel Tower?"], RETRIEVAL)
    assert off_topic.refused and off_topic.lexical_coverage == 0.0


def test_subject_terms_drop_framing_terms_but_never_the_whole_query():
    query = qm.SparseVector(indices=[1, 2, 3], values=[0.5, 1.0, 1.5])
    assert subject_terms(query, frozenset({2})) == qm.SparseVector(indices=[1, 3], values=[0.5, 1.5])
    assert subject_terms(query, frozenset({1, 2, 3})) is query  # a question made only of framing words
    assert subject_terms(query, frozenset()) is query


async def test_term_stats_follow_the_index_writes(kb, index, dense, sparse, sessions):
    before = await index.term_stats("acme")
    term = next(iter(sparse.embed_queries(["zeppelin"])[0].indices))
    assert before.chunks > 0 and term not in before.df
    extra = Document("zeppelin.md", "Zeppelin", None, "# Zeppelin\n\nThe zeppelin add-on syncs airship logs.", "markdown")
    await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "extra", [extra])
    after = await index.term_stats("acme")
    assert after.chunks == before.chunks + 1 and after.df[term] == 1


async def test_gate_keyword_override_lets_exact_code_through(kb):
    strict = RETRIEVAL.model_copy(update={"min_dense_score": 0.5, "lexical_credit": 0.0})
    result = await kb.search("acme", [TARGET_CODE], strict)
    assert result.best_dense_score < strict.min_dense_score
    assert not result.refused and result.keyword_override
    assert result.hits[0].document == f"sync/{TARGET_CODE.lower()}.md"
    # A common word shared with the knowledge base is not enough to override.
    common = await kb.search("acme", ["sync app banner"], strict.model_copy(update={"min_dense_score": 0.99}))
    assert common.refused and not common.keyword_override


async def test_gate_keyword_override_lets_a_name_the_encoder_does_not_know_through(kb, index, dense, sparse, sessions):
    founders = Document(
        "team.md", "Team", None,
        "# Team\n\n## Founders\n\nThe sync engine was first written by Wrzesniewski, over one long winter.", "markdown",
    )
    await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "team", [founders])
    strict = RETRIEVAL.model_copy(update={"min_dense_score": 0.99, "lexical_credit": 0.0})
    assert dense.word_pieces("Wrzesniewski") >= 3 and dense.word_pieces("Starter") == 1
    # The chunk holds only the name, not "known": too little of the query for the coverage rule.
    name = await kb.search("acme", ["What is Wrzesniewski known for?"], strict)
    assert not name.refused and name.keyword_override and "does not know" in name.reason
    assert name.hits[0].document == "team.md"
    # A word the encoder knows whole, or a name the knowledge base lacks, is no such evidence.
    for question in ["What is Starter known for?", "What is Przybylski known for?"]:
        result = await kb.search("acme", [question], strict)
        assert result.refused and not result.keyword_override, question


def test_word_parts_split_at_inner_punctuation():
    assert word_parts("E-SYNC-409") == ["E", "SYNC", "409"]
    assert word_parts("mo.ui.text") == ["mo", "ui", "text"] and word_parts("x86_64/arm") == ["x86", "64", "arm"]
    assert word_parts("Karpathy") == ["Karpathy"]


def test_a_compound_of_known_words_is_no_word_the_encoder_does_not_know(dense):
    for word in ["Karpathy", "BM25", "E-SYNC-409", "HDMI-CEC", "Wrzesniewski"]:
        assert unknown_to_encoder(word, dense), word
    # on - screen is three pieces, but two words MiniLM knows whole; 2fa is two pieces in all.
    for word in ["on-screen", "wi-fi", "built-in", "mo.ui.text", "2fa", "Starter"]:
        assert not unknown_to_encoder(word, dense), word


async def test_a_rare_compound_of_common_words_does_not_override_the_gate(kb, index, dense, sparse, sessions):
    reader = Document("reader.md", "Reader", None, "# Reader\n\n## Reading mode\n\nLong notes open in the on-screen reader.",
                      "markdown")
    await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "reader", [reader])
    strict = RETRIEVAL.model_copy(update={"min_dense_score": 0.99, "lexical_credit": 0.0})
    # A TV question that shares only "on-screen" with a notes app's help center (the unseen Smart TV
    # set against the demo's help center let it through as "a word the encoder does not know").
    result = await kb.search("acme", ["can i dictate into the remote instead of typing on the on-screen keyboard"], strict)
    assert result.refused and not result.keyword_override, result.reason


async def test_search_fuses_several_queries(kb):
    result = await kb.search("acme", ["how do I reset my password", "Business Plus plan price"], RETRIEVAL)
    documents = [h.document for h in result.hits]
    assert "account.txt" in documents and "billing.md" in documents


async def test_a_passage_kept_twice_takes_one_place_in_the_hits(tmp_path, index, dense, sparse, sessions):
    refunds = "# Refunds\n\n## Timing\n\nRefunds are processed within five business days.\n\n## Cards\n\n" \
              "Card payments are refunded to the same card."
    docs = [Document("refunds.md", "Refunds", None, refunds, "markdown"),
            Document("old/refunds.md", "Refunds", None, refunds.replace("same card", "same  Card"), "markdown"),
            Document("billing.md", "Billing", None, "# Billing\n\nInvoices are emailed every month.", "markdown")]
    await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "kb", docs)
    search = HybridSearch(index, dense, sparse)
    result = await search.search("acme", ["how long do refunds take"], RETRIEVAL.model_copy(update={"k": 5}))
    texts = [" ".join(h.text.split()).lower() for h in result.hits]
    assert len(texts) == len(set(texts)) == 3  # both refund sections once each (either copy), then billing
    assert "refunds are processed within five business days." in texts[0]


def test_a_section_repeated_with_other_page_numbers_is_one_passage():
    from rag.search import Hit, distinct

    def hit(pid: str, heading: str, text: str) -> Hit:
        return Hit(pid, text, "s", "d", "Manual", ("Manual", heading), None, 0.5, None, 0.1, ("dense",))

    body = ("When the TV is in Ambient Mode, press the Home button to return to the TV mode. "
            "The screen dims after ten minutes and the TV turns off after two hours without input.")
    first = hit("a", "Screen states", f"{body}\n- 11 -")
    copy = hit("b", "Screen states", f"- 58 -\n{body}")  # the same section in another chapter
    other = hit("c", "Screen states", "Art mode shows paintings while the TV is off and a motion sensor is on.")
    elsewhere = hit("d", "Energy saving", f"{body}\n- 90 -")  # the same words under another heading: kept
    assert [h.chunk_id for h in distinct([first, copy, other, elsewhere])] == ["a", "c", "d"]
    assert [h.chunk_id for h in distinct([first, copy, other, elsewhere], limit=2)] == ["a", "c"]  # k distinct ones


async def test_search_one_collection_per_bot(kb, index, dense, sparse, sessions):
    other = Document("rockets.md", "Rockets", None, "# Rockets\n\nGlobex ships rockets to the moon every week.", "markdown")
    await Ingestor(index, dense, sparse, sessions).ingest_documents("globex", "kb", [other])
    assert collection_name("acme") != collection_name("globex")
    open_gate = RETRIEVAL.model_copy(update={"min_dense_score": -1.0, "k": 20})
    acme = await kb.search("acme", ["Globex rockets to the moon"], open_gate)
    assert acme.hits and all(h.document != "rockets.md" for h in acme.hits)
    globex = await kb.search("globex", ["how do I reset my password"], open_gate)
    assert [h.document for h in globex.hits] == ["rockets.md"]


async def test_search_unknown_bot_is_refused_not_an_error(kb):
    result = await kb.search("nobody", ["reset password"], RETRIEVAL)
    assert result.refused and result.hits == ()


@pytest.mark.parametrize("engine", ["local", "edge"])
async def test_index_busy_when_local_folder_is_held(tmp_path, engine):
    settings = QdrantSettings(path=str(tmp_path / "held"), engine=engine)
    first = open_index(settings)
    try:
        with pytest.raises(IndexBusy, match="in use by another process"):
            open_index(settings)
    finally:
        await first.close()
    await (open_index(settings)).close()  # released on close


def _point(pid: int, score: float, words: int) -> qm.ScoredPoint:
    text = " ".join(["word"] * words)
    return qm.ScoredPoint(id=pid, version=0, score=score, payload={"text": text, "heading_path": ["Doc", str(pid)]})


def test_length_prior_penalises_only_short_content_mildly():
    assert length_prior({"text": " ".join(["w"] * SHORT_CONTENT_WORDS)}) == 1.0
    assert length_prior({"text": " ".join(["w"] * 300)}) == 1.0
    short = length_prior({"text": "Configure the display."})
    assert 0.5 < short < 0.8
    assert length_prior({"text": ""}) > 0


def test_fuse_ranks_sub_section_above_near_tied_short_intro():
    # RRF (k=2): a short parent intro first by dense, second by BM25; its sub-section first by BM25,
    # third by dense. Unweighted the intro wins (1.5 vs 1.33).
    intro, sub = _point(1, 1.0 + 1 / 2, words=12), _point(2, 1.0 + 1 / 3, words=60)
    hits = _fuse([_weigh([intro, sub], coverage_of={"1": 1.0, "2": 1.0}, sentence_of={})], {"1": 0.65, "2": 0.60}, {"1": 9.4, "2": 10.5}, single=True)
    assert [h.heading_path[-1] for h in hits] == ["2", "1"]
    assert hits[1].dense_score == 0.65 and hits[0].fused_score == pytest.approx(4 / 3)


def test_fuse_keeps_a_clearly_stronger_short_chunk_first():
    short, long = _point(1, 2.0, words=12), _point(2, 1 / 3 + 1 / 5, words=60)
    hits = _fuse([_weigh([short, long], coverage_of={"1": 1.0, "2": 1.0}, sentence_of={})], {"1": 0.7}, {"2": 5.0}, single=True)
    assert [h.heading_path[-1] for h in hits] == ["1", "2"]


def test_coverage_prior_ranks_the_chunk_holding_all_query_words_above_a_near_tie():
    # Near-tied in RRF; the second holds every query term, the first half of the idf mass.
    partial, full = _point(1, 1.0 + 1 / 3, words=60), _point(2, 1.0 + 1 / 4, words=60)
    hits = _fuse([_weigh([partial, full], coverage_of={"1": 0.5, "2": 1.0}, sentence_of={})], {"1": 0.6, "2": 0.55}, {"1": 8.0, "2": 9.0}, single=True)
    assert [h.heading_path[-1] for h in hits] == ["2", "1"]
    assert coverage_prior(1.0) == 1.0 and 0 < coverage_prior(0.0) < coverage_prior(0.5) < 1.0
    # A clearly stronger chunk keeps its place.
    strong = _point(1, 2.5, words=60)
    hits = _fuse([_weigh([strong, full], coverage_of={"1": 0.5, "2": 1.0}, sentence_of={})], {"1": 0.7}, {"2": 9.0}, single=True)
    assert [h.heading_path[-1] for h in hits] == ["1", "2"]


def test_identifier_words_are_codes_versions_and_acronyms_not_capitalised_words():
    from rag.query_words import identifier_words, literal_words

    assert identifier_words("E-SYNC-409 what does it mean") == ["E-SYNC-409"]
    assert identifier_words("my 2fa code keeps getting rejected") == ["2fa"]
    assert identifier_words("What are the benefits of NFC and payment?") == ["NFC"]
    assert identifier_words("What changed in v1.5.7?") == ["v1.5.7"]
    # Capitalised words are literal to gate 1's keyword override, but name no one section.
    question = "Are my notes stored in Europe or in the US on the Team plan?"
    assert {"Europe", "US", "Team"} <= set(literal_words(question))
    assert identifier_words(question) == []


async def test_the_section_named_by_an_error_code_ranks_above_a_section_quoting_it(
        tmp_path, index, dense, sparse, sessions, monkeypatch):
    import rag.search
    from tests.conftest import HELP_CENTER

    # The help center quotes E-SYNC-409 as an example in "Speeding things up" (contact-support.md);
    # the section about it is "E-SYNC-409: conflicting edits" (troubleshooting-sync.md).
    docs = (await load_directory(HELP_CENTER)).documents
    await Ingestor(index, dense, sparse, sessions).ingest_documents("acme", "kb", docs)
    search = HybridSearch(index, dense, sparse)

    async def first_heading() -> str:
        return (await search.search("acme", ["E-SYNC-409 what does it mean"], RETRIEVAL)).hits[0].heading_path[-1]

    assert await first_heading() == "E-SYNC-409: conflicting edits"
    monkeypatch.setattr(rag.search, "NAMED_SECTION_FACTOR", 1.0)  # without the prior, the quote wins
    assert await first_heading() == "Speeding things up"


def test_weigh_lifts_a_named_section_by_the_named_section_factor():
    from rag.search import NAMED_SECTION_FACTOR

    quote, named = _point(1, 1.0, words=60), _point(2, 0.6, words=60)
    coverage = {"1": 1.0, "2": 1.0}
    assert [str(p.id) for p in _weigh([quote, named], coverage_of=coverage, sentence_of={})] == ["1", "2"]
    weighed = _weigh([quote, named], coverage_of=coverage, sentence_of={}, named={"2"})
    assert [str(p.id) for p in weighed] == ["2", "1"]
    assert weighed[0].score == pytest.approx(0.6 * NAMED_SECTION_FACTOR)
