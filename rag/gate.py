"""Gate 1, the relevance gate: is anything in the knowledge base about this question?

- It looks at the BEST DENSE cosine across every hit of a query, not at the top fused hit,
  because RRF scores are ranks and say nothing about relevance.
- The bar is `retrieval.min_dense_score`, lowered by `retrieval.lexical_credit` × the query's
  LEXICAL COVERAGE: the largest share of the query's BM25 idf mass that one candidate chunk (each
  arm's top `COVERAGE_CANDIDATES`) holds; a query term the knowledge base lacks has the highest
  idf, so an off-topic question's foreign words pull its coverage down. Why: MiniLM gives short or
  vague on-topic questions ("Who was Duke Stelmane?", "What can moss be used for?") cosines as low
  as off-topic ones, but their words are all in one chunk; off-topic questions share only some
  common words with the knowledge base. Words that frame the question rather than name its subject
  (`FRAMING_WORDS`: "mentioned", "references", "compare") are left out of the coverage. A query
  passes when `best dense + lexical_credit × coverage >= min_dense_score`; with several queries,
  when any does.
- Below the bar the search is refused, unless a strong keyword hit overrides:
  one chunk from the BM25 arm contains at least `KEYWORD_MIN_COVERAGE` of the query's subject
  terms (BM25 terms: stopwords and framing words dropped, stemmed), at least one of those shared
  terms is written like a literal in the query (has a digit or inner punctuation such as `E-1043`
  or `mo.ui.text`, or is capitalised other than as the first word, such as `Business Plus`) AND is
  rare in the bot's collection (in at most `max(KEYWORD_RARE_MIN_DF, KEYWORD_RARE_RATIO × chunks)`
  chunks), and the chunk's BM25 score is at least `retrieval.keyword_override_score`. An exact
  plan name, error code or menu path is exactly that: a rare literal token, which MiniLM embeds
  poorly, while an off-topic question shares at most common words with the knowledge base.
- A name the encoder does not know also overrides, however few of the query's other words the chunk
  holds: a literal-looking word that is one BM25 term, that the encoder's vocabulary splits into at
  least `UNKNOWN_WORD_MIN_PIECES` word pieces (`Karpathy` → ka ##rp ##athy, `BM25` → b ##m ##25; the
  vocabulary holds common English words whole, so `on-screen`, two of them, is known:
  `unknown_to_encoder`), and that a BM25 top hit holds while it is rare in
  the bot's collection. Why: "What is Karpathy known for?" shares only the name with its chunk
  (coverage 1 of 2 terms) and MiniLM scores it 0.21, yet a word that is rare in English and present
  in this knowledge base says the question is about it. Names shared by chance are common words
  ("Alan Wake 2", "step 5") or several terms ("version 1.5.7"), which this rule skips.
"""

from __future__ import annotations

from qdrant_client import models as qm

from gateway.settings import RetrievalSettings
from rag.embeddings import DenseEmbedder, SparseEmbedder
from rag.knowledge_index import SPARSE
from rag.query_words import literal_words, word_parts
from rag.term_stats import TermStats

# The defaults live in `RetrievalSettings` (the config schema); they are named here to carry their calibration.
DEFAULT_MIN_DENSE_SCORE: float = RetrievalSettings.model_fields["min_dense_score"].default
"""Gate-1 bar for MiniLM int8 (cosine), 0.46, when no chunk holds the query's words; see the calibration
in `DEFAULT_LEXICAL_CREDIT`."""
DEFAULT_LEXICAL_CREDIT: float = RetrievalSettings.model_fields["lexical_credit"].default
"""How far full lexical coverage lowers the gate-1 bar (to 0.46 - 0.20 = 0.26).

Calibrated 2026-11-30 on ../shared/fixtures/rag, full gate incl. keyword override and framing words
(re-measured at 15:05 UTC with `FRAMING_WORDS`, which moved only the STICI and injection rows).
Off-topic = each corpus asked the other's questions (50 S10 questions against the 20
single_topic_rag_eval documents, 119 single_topic questions against the S10 manual); the
prompt-injection fixture strings are shown for information (they are not questions about anything):

    min_dense_score (lexical_credit 0.20)   0.40   0.42   0.44   0.46   0.48   0.50 | 0.38, credit 0 (before)
    off-topic refused (S10 q → STICI)       0.86   0.90   0.96   0.98   0.98   0.98 | 0.98
    off-topic refused (STICI q → S10)       0.93   0.96   0.97   0.97   0.97   0.98 | 0.97
    answerable refused, S10 (50)            0.00   0.00   0.00   0.00   0.00   0.00 | 0.04
    answerable refused, STICI (79)          0.06   0.09   0.10   0.10   0.16   0.22 | 0.32
    STICI's 40 on-topic unanswerable        0.18   0.28   0.30   0.33   0.35   0.43 | 0.47
    injection strings (124) → S10           0.72   0.76   0.80   0.82   0.85   0.89 | 0.81
    injection strings (124) → STICI         0.71   0.78   0.81   0.85   0.90   0.94 | 0.85

Rule: the lowest false refusals that keep >= 95% off-topic refusals on both corpora, with a point
of margin. For each credit, the best bar (before the unknown-word override): 0.10 → 0.39 (STICI
false refusals 19%), 0.15 → 0.42 (16.5%), 0.20 → 0.44-0.46 (16.5%), 0.25 → 0.47 (16.5%), 0.30 →
0.52 (16.5%); 0.20 with 0.46 is the middle of that plateau with 97-98% off-topic refusals (0.44
would leave 96%). With that override: 0.15 → 0.42 (13.9%), 0.20 → 0.44-0.46 (13.9%), 0.25 → 0.48
(13.9%, 96% off-topic). With framing words too: 0.15 → 0.42 (11.4%, 96%), 0.20 → 0.44-0.46
(10.1%), 0.25 → 0.48 (10.1%, 96%), 0.30 → 0.52 (10.1%, 96%): the same plateau, so the values stay.
Still above the 3% target on STICI (8 of 79): its questions are vague ("Where is broadcasting
used?", "Do I have to do something all by myself to be acknowledged for it?") and score 0.13-0.35
against the right chunk, the band of off-topic questions; four of them score under 0.22, below even
the 0.26 the bar comes down to when one chunk holds all of a question's words. Its own
40 unanswerables are on-topic (same documents); no similarity gate can separate them, they are for
gate 2 and the answer step.
"""
COVERAGE_CANDIDATES = 10
KEYWORD_MIN_COVERAGE = 0.6
KEYWORD_RARE_MIN_DF = 3
KEYWORD_RARE_RATIO = 0.02
KEYWORD_CANDIDATES = 3
UNKNOWN_WORD_MIN_PIECES = 3
"""On 2026-11-30 this let through 2 more of STICI's 79 answerable questions and no off-topic one
(2 pieces: the same; without the literal-looking condition, a lowercase word such as "opacity" let
an off-topic question through): bench/README.md."""


def keyword_override(
    queries: list[str],
    subject_vectors: list[qm.SparseVector],
    candidates: list[tuple[int, qm.ScoredPoint]],
    stats: TermStats,
    retrieval: RetrievalSettings,
    *,
    sparse: SparseEmbedder,
    dense: DenseEmbedder,
) -> str | None:
    """A reason string when some BM25 top hit passes the keyword rule or the unknown-word rule
    (module docstring); None when none does."""
    rare_cap = max(KEYWORD_RARE_MIN_DF, int(KEYWORD_RARE_RATIO * stats.chunks))
    literal = [_literal_terms(query, sparse) for query in queries]
    unknown = [_unknown_words(query, sparse, dense) for query in queries]
    for qi, point in candidates:
        if point.score < retrieval.keyword_override_score:
            continue
        query_terms = set(subject_vectors[qi].indices)
        if not query_terms:
            continue
        shared = query_terms & _chunk_terms(point)
        if len(shared) >= KEYWORD_MIN_COVERAGE * len(query_terms):
            for term in sorted(shared & literal[qi]):
                if stats.df.get(term, 0) <= rare_cap:
                    return (
                        f"keyword override: a chunk holds {len(shared)}/{len(query_terms)} query terms "
                        f"of {queries[qi]!r}, one of them in only {stats.df.get(term, 0)} chunk(s)"
                    )
        for term, word in sorted(unknown[qi].items()):
            if term in shared and stats.df.get(term, 0) <= rare_cap:
                return (
                    f"keyword override: {word!r}, a word the encoder does not know, "
                    f"is in a top BM25 hit and in only {stats.df.get(term, 0)} chunk(s)"
                )
    return None


def subject_terms(query: qm.SparseVector, framing: frozenset[int]) -> qm.SparseVector:
    """The query's BM25 vector without its `FRAMING_WORDS` terms; the whole query when nothing else is left."""
    kept = [(term, weight) for term, weight in zip(query.indices, query.values) if term not in framing]
    if not kept or len(kept) == len(query.indices):
        return query
    return qm.SparseVector(indices=[t for t, _ in kept], values=[w for _, w in kept])


def term_coverage(query: qm.SparseVector, point: qm.ScoredPoint, stats: TermStats) -> float:
    """The share of the query's BM25 idf mass that the chunk holds (0 for a query without terms)."""
    weights = [(term, stats.idf(term)) for term in query.indices]
    total = sum(w for _, w in weights)
    held = _chunk_terms(point)
    return sum(w for term, w in weights if term in held) / total if total else 0.0


def lexical_coverage(query: qm.SparseVector, candidates: list[qm.ScoredPoint], stats: TermStats) -> float:
    """Gate 1's lexical coverage: the largest share of the query's idf mass that ONE candidate holds."""
    return max((term_coverage(query, point, stats) for point in candidates), default=0.0)


def _chunk_terms(point: qm.ScoredPoint) -> set[int]:
    """The BM25 term ids of a chunk, from the sparse vector the arms return with each point."""
    vector = point.vector.get(SPARSE) if isinstance(point.vector, dict) else None
    return set(getattr(vector, "indices", ()))


def _literal_terms(query: str, sparse: SparseEmbedder) -> set[int]:
    """BM25 term ids of the query's literal-looking words."""
    return set().union(*(sparse.terms(word) for word in literal_words(query)))


def _unknown_words(query: str, sparse: SparseEmbedder, dense: DenseEmbedder) -> dict[int, str]:
    """BM25 term id → word, for the query's literal-looking words that are one BM25 term and that the
    encoder does not know (`unknown_to_encoder`)."""
    out: dict[int, str] = {}
    for word in literal_words(query):
        terms = sparse.terms(word)
        if len(terms) == 1 and unknown_to_encoder(word, dense):
            out[next(iter(terms))] = word
    return out


def unknown_to_encoder(word: str, dense: DenseEmbedder) -> bool:
    """Whether the encoder's vocabulary lacks `word`: its parts between inner punctuation take at least
    `UNKNOWN_WORD_MIN_PIECES` word pieces in all, and one part is not a whole piece. Why per part: a
    compound of words the encoder knows (`on-screen` → on - screen, `wi-fi`, `set-top`) is no name it
    has never seen, and counting its hyphen as a piece let "… typing on the on-screen keyboard", a TV
    question, through to a notes app's help center; `E-SYNC-409` (… 40 ##9) and `HDMI-CEC` stay unknown."""
    pieces = [dense.word_pieces(part) for part in word_parts(word)]
    return sum(pieces) >= UNKNOWN_WORD_MIN_PIECES and max(pieces, default=0) > 1
