"""Hybrid search (dense + BM25, fused by RRF in Qdrant) and gate 1, the relevance gate.

Per query, one Qdrant batch call returns the dense arm's and the sparse arm's top `prefetch`,
fused client-side by RRF exactly as Qdrant's `Fusion.RRF` (`rag.index.rrf`); the arms' lists
carry the real scores, so each hit says which arm found it and with what score.
Each query's fused list is then re-weighted by a mild length prior (`length_prior`): a chunk whose
content (heading path excluded) is under `SHORT_CONTENT_WORDS` words has its fused score scaled by
(words / SHORT_CONTENT_WORDS) ** `SHORT_CONTENT_EXPONENT`. Why: a parent section's intro (heading
path + a line) gets an inflated cosine from its matching heading and a BM25 boost from length
normalisation, so it outranks the sub-section that holds the answer. On the S10 set this moves
three answers from rank 2 to rank 1 (MRR 0.855 -> 0.885) and changes no STICI rank; any value in
20-40 words and exponents 0.1-0.5 gave 0.867-0.885 (bench/README.md). Gate 1 is unaffected: it
reads the arms' dense scores, not the fused ones.
Several queries (a follow-up rewritten into standalone queries) are fused again client-side by
RRF with the usual constant 60, after each query's own top hit, so no query is crowded out.

Gate 1 (no relevant chunk → the answer step gets no chunks):
- It looks at the BEST DENSE cosine across every hit of every query, not at the top fused hit,
  because RRF scores are ranks and say nothing about relevance.
- Below `retrieval.min_dense_score` the search is refused, unless a strong keyword hit overrides:
  one chunk from the BM25 arm contains at least `KEYWORD_MIN_COVERAGE` of the query's content
  terms (BM25 terms: stopwords dropped, stemmed), at least one of those shared terms is written
  like a literal in the query (has a digit or inner punctuation such as `E-1043` or `mo.ui.text`,
  or is capitalised other than as the first word, such as `Business Plus`) AND is rare in the
  bot's collection (in at most `max(KEYWORD_RARE_MIN_DF, KEYWORD_RARE_RATIO × chunks)` chunks),
  and the chunk's BM25 score is at least `retrieval.keyword_override_score`. An exact plan name, error
  code or menu path is exactly that: a rare literal token, which MiniLM embeds poorly, while an
  off-topic question shares at most common words with the knowledge base.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from qdrant_client import models as qm

from gateway.settings import RetrievalSettings
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.index import QdrantIndex

DEFAULT_MIN_DENSE_SCORE = 0.38
"""Gate-1 threshold for MiniLM int8 (cosine), with the keyword override below.

Chosen 2026-11-29 on ../shared/fixtures/rag as the lowest value that refuses >= 95% of
off-topic questions. Off-topic = each corpus asked the other's questions (50 S10 questions
against the 20 single_topic_rag_eval documents, 119 single_topic questions against the S10
manual). Re-checked 2026-11-30 with the current chunks (<=512 tokens, dense = mean of the
<=256-token windows), full gate incl. keyword override:

    threshold                        0.30   0.34   0.36   0.38   0.40
    off-topic refused (S10 q → STICI) 0.84   0.98   0.98   0.98   0.98
    off-topic refused (STICI q → S10) 0.88   0.94   0.96   0.97   0.97
    answerable refused, S10 (50)     0.00   0.02   0.02   0.04   0.04
    answerable refused, STICI (79)   0.15   0.20   0.28   0.32   0.37
    STICI's 40 on-topic unanswerable  0.30   0.40   0.47   0.47   0.53

0.36 would now pass the rule too, with one point of margin on two corpora; 0.38 is kept for
the margin on corpora we have not seen.
A dense threshold cannot meet the 3% false-refusal target on STICI: its questions are vague
("What are the key topics of this article?") and score 0.17-0.35 against the right chunk,
the same band as off-topic questions. Its own 40 unanswerables are on-topic (same documents)
and no similarity gate can separate them; they are for gate 2 / the answer step.
"""
KEYWORD_MIN_COVERAGE = 0.6
KEYWORD_RARE_MIN_DF = 3
KEYWORD_RARE_RATIO = 0.02
KEYWORD_CANDIDATES = 3
MULTI_QUERY_RRF_K = 60
SHORT_CONTENT_WORDS = 30
SHORT_CONTENT_EXPONENT = 0.25


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk, with the score each arm gave it (None where that arm missed it)."""

    chunk_id: str
    text: str
    source: str
    document: str
    title: str
    heading_path: tuple[str, ...]
    url: str | None
    dense_score: float | None
    sparse_score: float | None
    fused_score: float
    arms: tuple[str, ...]


@dataclass(frozen=True)
class SearchResult:
    """Hits in fused order; when `refused`, `hits` is empty and `candidates` shows what was found."""

    hits: tuple[Hit, ...]
    refused: bool
    reason: str
    best_dense_score: float | None
    keyword_override: bool = False
    candidates: tuple[Hit, ...] = field(default=())


class HybridSearch:
    """Dense + BM25 retrieval over one bot's collection, with gate 1."""

    def __init__(self, index: QdrantIndex, dense: DenseEmbedder, sparse: SparseEmbedder) -> None:
        self.index = index
        self.dense = dense
        self.sparse = sparse

    async def search(self, bot: str, queries: list[str], retrieval: RetrievalSettings) -> SearchResult:
        """Top `retrieval.k` chunks for the queries, or a refusal when nothing is relevant."""
        queries = list(dict.fromkeys(q.strip() for q in queries if q and q.strip()))
        if not queries:
            return SearchResult((), True, "empty query", None)
        dense_vectors = await self.dense.aembed_queries(queries)
        sparse_vectors = await self.sparse.aembed_queries(queries)
        per_query_limit = max(retrieval.k, min(retrieval.prefetch, 3 * retrieval.k)) if len(queries) > 1 else retrieval.k

        fused_lists: list[list[qm.ScoredPoint]] = []
        dense_scores: dict[str, float] = {}
        sparse_scores: dict[str, float] = {}
        sparse_top: list[tuple[int, qm.ScoredPoint]] = []
        for i, (dv, sv) in enumerate(zip(dense_vectors, sparse_vectors)):
            arms = await self.index.hybrid_query(bot, dv, sv, prefetch=retrieval.prefetch, limit=per_query_limit)
            fused_lists.append(arms.fused)
            for p in arms.dense:
                dense_scores[str(p.id)] = max(dense_scores.get(str(p.id), -1.0), p.score)
            for p in arms.sparse:
                sparse_scores[str(p.id)] = max(sparse_scores.get(str(p.id), 0.0), p.score)
            sparse_top.extend((i, p) for p in arms.sparse[:KEYWORD_CANDIDATES])

        hits = _fuse(fused_lists, dense_scores, sparse_scores, single=len(queries) == 1)[: retrieval.k]
        best = max(dense_scores.values(), default=None)
        if not hits:
            return SearchResult((), True, "the knowledge base has no chunks for this bot", best)
        if best is not None and best >= retrieval.min_dense_score:
            return SearchResult(tuple(hits), False, f"best dense score {best:.3f} >= {retrieval.min_dense_score}", best)
        override = await self._keyword_override(bot, queries, sparse_vectors, sparse_top, retrieval)
        if override:
            return SearchResult(tuple(hits), False, override, best, keyword_override=True)
        reason = f"best dense score {best if best is None else round(best, 3)} < {retrieval.min_dense_score} and no strong keyword hit"
        return SearchResult((), True, reason, best, candidates=tuple(hits))

    async def _keyword_override(
        self,
        bot: str,
        queries: list[str],
        sparse_vectors: list[qm.SparseVector],
        candidates: list[tuple[int, qm.ScoredPoint]],
        retrieval: RetrievalSettings,
    ) -> str | None:
        """A reason string when some BM25 hit passes the keyword rule in the module docstring."""
        # First the cheap checks on the candidates' payloads, then every document frequency that
        # could decide in one batch call (each is a scan of the collection in local mode).
        passing: list[tuple[int, set[int], set[int]]] = []
        for qi, point in candidates:
            if point.score < retrieval.keyword_override_score:
                continue
            query_terms = set(sparse_vectors[qi].indices)
            if not query_terms:
                continue
            payload = point.payload or {}
            chunk_text = " ".join([*payload.get("heading_path", []), payload.get("text", "")])
            shared = query_terms & self.sparse.terms(chunk_text)
            if len(shared) < KEYWORD_MIN_COVERAGE * len(query_terms):
                continue
            literal = shared & _literal_terms(queries[qi], self.sparse)
            if literal:
                passing.append((qi, shared, literal))
        if not passing:
            return None
        total = await self.index.count(bot)
        rare_cap = max(KEYWORD_RARE_MIN_DF, int(KEYWORD_RARE_RATIO * total))
        dfs = await self.index.document_frequencies(bot, sorted({t for *_, lit in passing for t in lit}), cap=rare_cap + 1)
        for qi, shared, literal in passing:
            for term in sorted(literal):
                if dfs[term] <= rare_cap:
                    return (
                        f"keyword override: a chunk holds {len(shared)}/{len(sparse_vectors[qi].indices)} query terms "
                        f"of {queries[qi]!r}, one of them in only {dfs[term]} chunk(s)"
                    )
        return None


_WORD = re.compile(r"[^\s?!,;:()\"']+")


def _literal_terms(query: str, sparse: SparseEmbedder) -> set[int]:
    """BM25 term ids of the query's literal-looking words: a digit, inner punctuation, or a capital
    letter anywhere but the first word (plan names, error codes, product and menu names)."""
    out: set[int] = set()
    for position, word in enumerate(_WORD.findall(query)):
        inner = word.strip(".-_/")
        if any(ch.isdigit() for ch in inner) or any(ch in ".-_/" for ch in inner) or (position and word[:1].isupper()) or (
            any(ch.isupper() for ch in word[1:])
        ):
            out |= sparse.terms(inner)
    return out


def length_prior(payload: dict) -> float:
    """Weight in (0, 1] for a chunk's fused score: 1 from `SHORT_CONTENT_WORDS` content words up,
    a mild penalty below (see the module docstring); the heading path does not count."""
    words = max(1, len(_CONTENT_WORD.findall(payload.get("text", ""))))
    return min(1.0, words / SHORT_CONTENT_WORDS) ** SHORT_CONTENT_EXPONENT


_CONTENT_WORD = re.compile(r"\w+")


def _fuse(
    fused_lists: list[list[qm.ScoredPoint]],
    dense_scores: dict[str, float],
    sparse_scores: dict[str, float],
    *,
    single: bool,
) -> list[Hit]:
    """Hits in fused order: Qdrant's RRF times the length prior for one query, client-side RRF
    across several (each query's list weighted first)."""
    scores: dict[str, float] = {}
    points: dict[str, qm.ScoredPoint] = {}
    # The length prior re-weights each query's fused list before anything else reads its order.
    fused_lists = [
        sorted(
            (p.model_copy(update={"score": p.score * length_prior(p.payload or {})}) for p in ranked),
            key=lambda p: p.score,
            reverse=True,
        )
        for ranked in fused_lists
    ]
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
                chunk_id=payload.get("chunk_id", pid),
                text=payload.get("text", ""),
                source=payload.get("source", ""),
                document=payload.get("document", ""),
                title=payload.get("title", ""),
                heading_path=tuple(payload.get("heading_path", [])),
                url=payload.get("url"),
                dense_score=dense_scores.get(pid),
                sparse_score=sparse_scores.get(pid),
                fused_score=scores[pid],
                arms=arms,
            )
        )
    return hits
