"""Hybrid search (dense + BM25 from Qdrant, fused by RRF) and gate 1, the relevance gate.

Per query, one Qdrant batch call returns the dense arm's and the sparse arm's top `prefetch`,
fused client-side by RRF exactly as Qdrant's `Fusion.RRF` (`rag.knowledge_index.rrf`); the arms' lists
carry the real scores, so each hit says which arm found it and with what score.
Each query's fused top max(k, RERANK_DEPTH) is then re-weighted by four priors and re-sorted, and the
top k kept.
- A mild length prior (`length_prior`): a chunk whose
content (heading path excluded) is under `SHORT_CONTENT_WORDS` words has its fused score scaled by
(words / SHORT_CONTENT_WORDS) ** `SHORT_CONTENT_EXPONENT`. Why: a parent section's intro (heading
path + a line) gets an inflated cosine from its matching heading and a BM25 boost from length
normalisation, so it outranks the sub-section that holds the answer. On the S10 set this moves
three answers from rank 2 to rank 1 (MRR 0.855 -> 0.885) and changes no STICI rank; any value in
20-40 words and exponents 0.1-0.5 gave 0.867-0.885 (bench/README.md).
- A coverage prior (`coverage_prior`): the fused score is scaled by
  ((COVERAGE_PRIOR_FLOOR + c) / (COVERAGE_PRIOR_FLOOR + 1)) ** COVERAGE_PRIOR_EXPONENT, where c is
  the share of the query's BM25 idf mass the chunk holds (`term_coverage`, framing words left
  out). Why: RRF only sees ranks, so a chunk that holds one rare query word high in BM25 and sits
  mid-list in dense ties with the chunk that holds all of them. On S10 this moves MRR 0.885 ->
  0.907 and STICI 0.623 -> 0.638; floors 0.05-0.2 with exponents 0.5-1 gave 0.905-0.909 / 0.628-0.638 (bench/README.md).
- A sentence prior (`sentence_prior`): the fused score is scaled by
  exp(SENTENCE_PRIOR_WEIGHT × (s − 1)), where s is the best cosine between the query and one of the
  chunk's sentences (their vectors are stored at ingest as a Qdrant multivector and read back for
  the top k only). Why: a chunk's one dense vector averages all of its sentences, so the section whose
  one sentence says exactly what was asked ("Launch the Email app") loses to one that mentions the
  query's words throughout. On S10 this moves MRR 0.907 -> 0.927 and STICI 0.638 -> 0.659;
  weights 2-5 gave 0.917-0.928 / 0.652-0.660 (bench/README.md). A chunk without sentence vectors
  (written by an older version, before its re-ingest) gets 1. A table row is one sentence, read with
  its header (`rag.tables`): a row alone does not say whose each cell is.
- A named-section prior: when the query holds an identifier (`rag.query_words.identifier_words`: an
  error code, a version, an acronym such as `E-SYNC-409`, `2fa` or `NFC`), a chunk whose own heading
  holds all of its BM25 terms has its fused score scaled by `NAMED_SECTION_FACTOR`. Why: a help
  center names a section after each code and also quotes codes as examples elsewhere ("quote the
  code, for example E-SYNC-409"), and the example, with its short sentence that matches the query
  well, outranked the section about the code. On the four tuning sets it moved four answers to
  rank 1 and none down (S10 0.927 -> 0.937, help center 0.837 -> 0.857, its holdout 0.919 -> 0.930,
  STICI unchanged); factors 1.5-3 and looser word rules are in bench/README.md.
Gate 1 (rag/gate.py, where its rules and calibration are) is unaffected by all four: it reads the
arms' dense scores and the coverage, not the fused scores. (The best sentence cosine did not separate
answerable from off-topic questions better than the chunk cosine: bench/README.md.)
A hit that copies an earlier one (the same text, or the same heading with nearly the same words) is
left out (`distinct`): a passage kept twice takes one place.
Several queries (a follow-up rewritten into standalone queries) are fused again client-side by
RRF with the usual constant 60, after each query's own top hit, so no query is crowded out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
from qdrant_client import models as qm

from gateway.settings import RetrievalSettings
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.framing import GATE_FRAMING_WORDS
from rag.gate import (
    COVERAGE_CANDIDATES,
    KEYWORD_CANDIDATES,
    keyword_override,
    lexical_coverage,
    subject_terms,
    term_coverage,
)
from rag.knowledge_index import ChunkPayload, KnowledgeIndex
from rag.query_words import identifier_words
from storage.text import storable_text

COVERAGE_PRIOR_FLOOR = 0.1
COVERAGE_PRIOR_EXPONENT = 0.75
MULTI_QUERY_RRF_K = 60
SHORT_CONTENT_WORDS = 30
SHORT_CONTENT_EXPONENT = 0.25
SENTENCE_PRIOR_WEIGHT = 4.0
RERANK_DEPTH = 10
"""How many fused hits per query the priors re-order before the top k is kept. With the default k=5
and a depth of 5 instead, recall@5 fell from 0.98 to 0.96 on S10 and from 0.81 to 0.785 on STICI."""
NAMED_SECTION_FACTOR = 2.0
"""How much a chunk whose heading names an identifier of the query is lifted (module docstring):
1.5 moved fewer answers up, 3 moved two down (bench/README.md)."""


@dataclass(frozen=True)
class Hit(ChunkPayload):
    """One retrieved chunk, with the score each arm gave it (None where that arm missed it)."""

    dense_score: float | None
    sparse_score: float | None
    fused_score: float
    arms: tuple[str, ...]


@dataclass(frozen=True)
class SearchResult:
    """Hits in fused order; when `refused`, `hits` is empty and `candidates` shows what was found.
    `best_dense_score` and `lexical_coverage` are the gate-1 inputs of the query that came closest."""

    hits: tuple[Hit, ...]
    refused: bool
    reason: str
    best_dense_score: float | None
    keyword_override: bool = False
    candidates: tuple[Hit, ...] = field(default=())
    lexical_coverage: float | None = None


class HybridSearch:
    """Dense + BM25 retrieval over one bot's collection, with gate 1."""

    def __init__(self, index: KnowledgeIndex, dense: DenseEmbedder, sparse: SparseEmbedder) -> None:
        self.index = index
        self.dense = dense
        self.sparse = sparse
        self._framing_terms = frozenset().union(*(sparse.terms(word) for word in GATE_FRAMING_WORDS))

    def _named_sections(self, query: str, points: list[qm.ScoredPoint]) -> set[str]:
        """Ids of the points whose own heading holds every BM25 term of one of the query's identifiers."""
        identifiers = [terms for terms in map(self.sparse.terms, identifier_words(query)) if terms]
        if not identifiers:
            return set()
        named = set()
        for point in points:
            path = (point.payload or {}).get("heading_path") or []
            heading = self.sparse.terms(path[-1]) if path else set()
            if any(terms <= heading for terms in identifiers):
                named.add(str(point.id))
        return named

    async def search(self, bot: str, queries: list[str], retrieval: RetrievalSettings) -> SearchResult:
        """Top `retrieval.k` chunks for the queries, or a refusal when nothing is relevant."""
        # A lone surrogate (valid in JSON: an eval file, an API caller) has no UTF-8 form, and the
        # tokenizer raised a TypeError on it; `storable_text` makes it U+FFFD, as the inbox does.
        queries = list(dict.fromkeys(storable_text(q).strip() for q in queries if q and q.strip()))
        if not queries:
            return SearchResult((), True, "empty query", None)
        dense_vectors = await self.dense.aembed_queries(queries)
        sparse_vectors = await self.sparse.aembed_queries(queries)
        # The BM25 arm searches with every term; coverage and the keyword rule weigh only the subject's.
        subject_vectors = [subject_terms(sv, self._framing_terms) for sv in sparse_vectors]
        # The priors re-order at least the fused top RERANK_DEPTH even when k is smaller, so a
        # bot's top 5 is the benchmark's top 5 (measured at k=10), not a re-ordered RRF top 5.
        depth = max(retrieval.k, RERANK_DEPTH)
        per_query_limit = max(depth, min(retrieval.prefetch, 3 * retrieval.k)) if len(queries) > 1 else depth

        fused_lists: list[list[qm.ScoredPoint]] = []
        dense_scores: dict[str, float] = {}
        sparse_scores: dict[str, float] = {}
        sparse_top: list[tuple[int, qm.ScoredPoint]] = []
        evidence: list[tuple[float, float]] = []  # per query: (best dense cosine, lexical coverage)
        stats = await self.index.term_stats(bot)
        for i, (dv, sv, subject) in enumerate(zip(dense_vectors, sparse_vectors, subject_vectors)):
            # The priors only re-order RRF's top hits: lifting candidates from further down cost STICI
            # recall@10 (0.873 -> 0.848) and bought nothing (bench/README.md).
            arms = await self.index.hybrid_query(bot, dv, sv, prefetch=retrieval.prefetch, limit=per_query_limit,
                                                 rrf_k=retrieval.rrf_k)
            sentences = await self.index.sentence_vectors(bot, [str(p.id) for p in arms.fused])
            fused_lists.append(_weigh(
                arms.fused,
                coverage_of={str(p.id): term_coverage(subject, p, stats) for p in arms.fused},
                sentence_of=best_sentence_scores(dv, sentences),
                named=self._named_sections(queries[i], arms.fused),
            ))
            for p in arms.dense:
                dense_scores[str(p.id)] = max(dense_scores.get(str(p.id), -1.0), p.score)
            for p in arms.sparse:
                sparse_scores[str(p.id)] = max(sparse_scores.get(str(p.id), 0.0), p.score)
            sparse_top.extend((i, p) for p in arms.sparse[:KEYWORD_CANDIDATES])
            if arms.dense:
                gate_candidates = arms.dense[:COVERAGE_CANDIDATES] + arms.sparse[:COVERAGE_CANDIDATES]
                evidence.append((arms.dense[0].score, lexical_coverage(subject, gate_candidates, stats)))

        hits = distinct(_fuse(fused_lists, dense_scores, sparse_scores, single=len(queries) == 1), limit=retrieval.k)
        best = max(dense_scores.values(), default=None)
        if not hits:
            return SearchResult((), True, "the knowledge base has no chunks for this bot", best)
        # The query that came closest to the bar speaks for the search.
        dense_best, coverage = max(evidence, key=lambda e: e[0] + retrieval.lexical_credit * e[1])
        bar = f"{dense_best:.3f} + {retrieval.lexical_credit} x coverage {coverage:.2f}"
        if dense_best + retrieval.lexical_credit * coverage >= retrieval.min_dense_score:
            return SearchResult(tuple(hits), False, f"best dense {bar} >= {retrieval.min_dense_score}", best, lexical_coverage=coverage)
        override = keyword_override(queries, subject_vectors, sparse_top, stats, retrieval,
                                    sparse=self.sparse, dense=self.dense)
        if override:
            return SearchResult(tuple(hits), False, override, best, keyword_override=True, lexical_coverage=coverage)
        reason = f"best dense {bar} < {retrieval.min_dense_score} and no strong keyword hit"
        return SearchResult((), True, reason, best, candidates=tuple(hits), lexical_coverage=coverage)


def distinct(hits: list[Hit], *, limit: int | None = None) -> list[Hit]:
    """The hits without copies of an earlier one: the same text (case and spacing aside), or the same
    section heading with nearly the same words (`NEAR_COPY_OVERLAP`: a manual that repeats a section in
    two chapters differs only in its page numbers and line breaks). Why: a knowledge base often holds a
    passage twice (a page exported as .md and .html, a v1 and a v2 folder, a repeated section), and the
    copies would fill the top k with one passage, so the answer step saw fewer different ones. Stops
    once `limit` hits are kept."""
    kept: list[tuple[str, str, frozenset[str]]] = []  # (text, heading, words) of each hit kept
    out: list[Hit] = []
    for hit in hits:
        if limit is not None and len(out) >= limit:
            break
        text = " ".join(hit.text.split()).lower()
        heading = hit.heading_path[-1].lower() if hit.heading_path else ""
        words = frozenset(_CONTENT_WORD.findall(text))
        if any(text == t or (heading == h and _overlap(words, w) >= NEAR_COPY_OVERLAP) for t, h, w in kept):
            continue
        kept.append((text, heading, words))
        out.append(hit)
    return out


NEAR_COPY_OVERLAP = 0.85
"""Share of their distinct words (Jaccard) two chunks under the same heading need to be one passage. Of
the 30 pairs of sections sharing a title in the Smart TV manual (`shared/fixtures`), 15 are copies with
other page numbers and line breaks (overlap 0.885–1.0) and 15 are other sections (0.05–0.54)."""


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def length_prior(payload: dict) -> float:
    """Weight in (0, 1] for a chunk's fused score: 1 from `SHORT_CONTENT_WORDS` content words up,
    a mild penalty below (see the module docstring); the heading path does not count."""
    words = max(1, len(_CONTENT_WORD.findall(payload.get("text", ""))))
    return min(1.0, words / SHORT_CONTENT_WORDS) ** SHORT_CONTENT_EXPONENT


_CONTENT_WORD = re.compile(r"\w+")


def _weigh(
    fused: list[qm.ScoredPoint], *, coverage_of: dict[str, float], sentence_of: dict[str, float],
    named: set[str] | frozenset[str] = frozenset(),
) -> list[qm.ScoredPoint]:
    """One query's RRF list re-weighted by the four priors (module docstring) and re-sorted; `named`
    holds the ids of the chunks whose heading names an identifier of the query."""

    def weight(p: qm.ScoredPoint) -> float:
        pid = str(p.id)
        sentence = sentence_prior(sentence_of[pid]) if pid in sentence_of else 1.0
        named_section = NAMED_SECTION_FACTOR if pid in named else 1.0
        return length_prior(p.payload or {}) * coverage_prior(coverage_of.get(pid, 0.0)) * sentence * named_section

    weighted = (p.model_copy(update={"score": p.score * weight(p)}) for p in fused)
    return sorted(weighted, key=lambda p: p.score, reverse=True)


def best_sentence_scores(query: list[float], sentences: dict[str, np.ndarray]) -> dict[str, float]:
    """Per chunk, the best cosine between the (unit) query vector and one of its (unit) sentence vectors."""
    q = np.asarray(query, dtype=np.float32)
    return {pid: float((matrix @ q).max()) for pid, matrix in sentences.items() if len(matrix)}


def sentence_prior(best_sentence: float) -> float:
    """Weight in (0, 1] for a chunk's fused score from its best sentence's cosine (module docstring)."""
    return math.exp(SENTENCE_PRIOR_WEIGHT * (min(best_sentence, 1.0) - 1.0))


def coverage_prior(coverage: float) -> float:
    """Weight in (0, 1] for a chunk's fused score from its query-term coverage (module docstring)."""
    return ((COVERAGE_PRIOR_FLOOR + coverage) / (COVERAGE_PRIOR_FLOOR + 1.0)) ** COVERAGE_PRIOR_EXPONENT


def _fuse(
    fused_lists: list[list[qm.ScoredPoint]],
    dense_scores: dict[str, float],
    sparse_scores: dict[str, float],
    *,
    single: bool,
) -> list[Hit]:
    """Hits in fused order: each query's weighted list (`_weigh`) as is for one query, client-side
    RRF across several."""
    scores: dict[str, float] = {}
    points: dict[str, qm.ScoredPoint] = {}
    for ranked in fused_lists:
        for rank, point in enumerate(ranked):
            pid = str(point.id)
            points.setdefault(pid, point)
            scores[pid] = point.score if single else scores.get(pid, 0.0) + 1.0 / (MULTI_QUERY_RRF_K + rank + 1)
    ordered = sorted(scores, key=lambda pid: scores[pid], reverse=True)
    if not single:
        # RRF rewards chunks that sit mid-list for every query over one query's clear winner;
        # each query's own top hit goes first so no query's answer is crowded out.
        leaders = list(dict.fromkeys(str(ranked[0].id) for ranked in fused_lists if ranked))
        ordered = leaders + [pid for pid in ordered if pid not in leaders]
    hits = []
    for pid in ordered:
        payload = points[pid].payload or {}
        arms = tuple(arm for arm, table in (("dense", dense_scores), ("sparse", sparse_scores)) if pid in table)
        hits.append(
            Hit(
                **ChunkPayload.fields_from(payload, pid),
                dense_score=dense_scores.get(pid),
                sparse_score=sparse_scores.get(pid),
                fused_score=scores[pid],
                arms=arms,
            )
        )
    return hits
