"""Retrieval evaluation, per DESIGN.md's eval contract.

The questions file is JSONL: `{"question", "gold_texts": [...]}` for an answerable question, or
`{"question", "answerable": false}`. A retrieved chunk is a hit when a whitespace-collapsed,
lower-cased gold text is a substring of its whitespace-collapsed, lower-cased content. It is also a
hit when the two match with Markdown's markup (and curly quotes, dashes, ligatures) left out of both
(`plain`): HTML and PDF pages are stored as Markdown, so a gold text copied from the page as a reader
sees it ("go to Settings → Billing") would otherwise never match the chunk that holds it ("go to
**Settings → Billing**"). A chunk's content is read with its own heading (the last of the heading
path it carries) before it.

Metrics (keys exactly as the contract names them):
- `recall@k`: share of answerable questions with a hit among the first k chunks of the ranking;
- `mrr`: mean of 1/rank of the first hit within the largest k (0 without one);
- `refusal_rate`: share of unanswerable questions that gate 1 refused;
- `false_refusal_rate`: share of answerable questions that gate 1 refused;
- `n_answerable`, `n_unanswerable`.

Recall and MRR rank what the search found before gate 1 (`SearchResult.candidates` when it
refused), so they measure retrieval; the gate is measured by the two refusal rates.
DIR is ingested into a throwaway Qdrant folder and SQLite file, removed afterwards. An answerable question
whose gold texts no document holds is an `EvalFileError` naming its line, before anything is embedded.

`evaluate` also keeps each question's outcome (rank, refused, the gate's inputs) and the files that
failed to load, so `gateway eval` can show which questions to look at.
"""

from __future__ import annotations

import html
import json
import re
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.errors import GatewayError
from gateway.settings import QdrantSettings, RetrievalSettings, Settings
from rag.decoding import NotTextError, decode_text
from rag.sources import Document, describe_skipped, load_directory

if TYPE_CHECKING:  # imported where used: a mistyped path is told without loading qdrant-client and fastembed
    from rag.embeddings import DenseEmbedder, SparseEmbedder
    from rag.search import Hit

EVAL_BOT = "eval"
GOLD_NOT_FOUND_SHOWN = 10


@dataclass(frozen=True)
class Question:
    """One line of the eval file."""

    question: str
    gold_texts: tuple[str, ...]
    answerable: bool
    where: str = ""  # "FILE:LINE" in the questions file


@dataclass(frozen=True)
class Outcome:
    """What the search did with one question."""

    question: Question
    rank: int | None  # of the first chunk holding a gold text (answerable questions), before the gate
    refused: bool
    best_dense_score: float | None
    lexical_coverage: float | None
    top_title: str | None  # where the search's first chunk comes from
    gold_in_documents: bool = True  # False: no document holds a gold text of it, so no search can hit it

    @property
    def wrong(self) -> bool:
        """A miss worth a look: an answerable question refused or without a hit, or an unanswerable
        one let through."""
        return (self.refused or self.rank is None) if self.question.answerable else not self.refused


@dataclass(frozen=True)
class EvalReport:
    metrics: dict[str, float | int]
    outcomes: list[Outcome]
    load_errors: list[tuple[str, str]]  # (file, error) of documents that did not load
    skipped: dict[str, int] = field(default_factory=dict)  # files of a type not read, by suffix
    gold_not_found: list[str] = field(default_factory=list)  # a line each (`gold_not_found_lines`), to show


def normalize(text: str) -> str:
    """Collapse whitespace and lower-case, as the contract defines a hit."""
    return " ".join(text.split()).lower()


# Markdown's markup, as `rag.html_text` and `rag.pdf` write it: links and images keep their text, line
# openers (headings, quotes, list items), table rules, backslash escapes, and emphasis, code and table marks
# go; so do HTML tags and comments written into Markdown, and entities (`&amp;`) read as their characters.
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_LINE_OPENER = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|>[ \t]*|[-*+][ \t]+|\d+[.)][ \t]+)+", re.M)
_TABLE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$", re.M)
_ESCAPE = re.compile(r"\\(?=[!-/:-@\[-`{-~])")  # Markdown escapes ASCII punctuation
_MARKS = re.compile(r"[*_`|~]+")
_TAG = re.compile(r"<!--.*?-->|</?[A-Za-z][^<>]*>", re.S)  # HTML inside Markdown: <kbd>Ctrl</kbd>, <br>
_BREAKING_TAG = re.compile(r"</?(?:br|p|div|li|tr|td|th|h[1-6]|hr|section|details|summary)\b[^<>]*>", re.I)
# Typography a labeller's keyboard does not type: curly quotes and dashes read as plain ones, a soft
# hyphen (a line-break hint in HTML and PDF text) as nothing. NFKC first: a PDF's "ﬁ" ligature is "fi".
_TYPOGRAPHY = str.maketrans({"‘": "'", "’": "'", "‚": "'", "′": "'", "“": '"', "”": '"', "„": '"', "″": '"',
                             "‐": "-", "‑": "-", "‒": "-", "–": "-", "—": "-", "−": "-", "\u00ad": None})


# A compound broken after its hyphen at a line end ("pop-" / "up menu") reads "pop- up" once lines are
# joined; the page shows "pop-up".
_BROKEN_COMPOUND = re.compile(r"(?<=[^\W\d_])- (?=[^\W\d_])")


def plain(text: str) -> str:
    """`normalize` of the text with its Markdown markup and typography left out: what a reader of the
    page sees, as they would type it."""
    text = _TAG.sub("", _BREAKING_TAG.sub(" ", text))
    text = _LINE_OPENER.sub("", _TABLE_RULE.sub("", _LINK.sub(r"\1", text)))
    text = html.unescape(_MARKS.sub("", _ESCAPE.sub("", text)))
    return _BROKEN_COMPOUND.sub("-", normalize(unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY)))


class EvalFileError(GatewayError):
    """The eval questions file is missing or a line breaks DESIGN.md's format."""


def load_questions(path: Path) -> list[Question]:
    """Parse the JSONL eval file; blank lines are skipped, a bad line names its number and what is wrong.

    A question is answerable with a non-empty `gold_texts`, or unanswerable with `"answerable": false`;
    a line with neither, or with both, is an error rather than a guess, since either guess skews the metrics.
    """
    try:
        # Decoded as knowledge files are (`rag.decoding`): Windows PowerShell's `>` and Notepad's "Unicode"
        # write UTF-16 with a byte-order mark, older editors windows-1252; UTF-8 alone refused both. Lines
        # end at "\n" only ("\r" is JSON white space): str.splitlines() also breaks at U+2028, U+2029 and
        # U+0085, which JSON allows unescaped inside a string (json.dumps(..., ensure_ascii=False) writes them).
        lines = decode_text(Path(path).read_bytes()).split("\n")
    except IsADirectoryError:
        raise EvalFileError(f"the questions file {path} is a folder: give the .jsonl file of questions (--docs takes "
                            "the folder of documents)") from None
    except OSError as exc:  # its strerror: str(exc) names the path a second time, as "[Errno 2] …: '…'"
        raise EvalFileError(f"cannot read the questions file {path}: {exc.strerror or exc}") from None
    except NotTextError as exc:
        raise EvalFileError(f"cannot read the questions file {path}: {exc}") from None
    questions = [_question(line, f"{path}:{number}") for number, line in enumerate(lines, start=1) if line.strip()]
    if not questions:
        raise EvalFileError(f"{path}: no questions in it")
    return questions


def _question(line: str, where: str) -> Question:
    try:
        item = json.loads(line)
    except ValueError as exc:
        # A JSON array, or objects spread over lines, broke at "[" or "{" with only "Expecting value".
        spread = line.strip() in ("[", "{", "[{") or line.strip().startswith("[{")
        hint = "; the file is JSONL: one whole JSON object a line, not an array or an object over lines" if spread else ""
        raise EvalFileError(f"{where}: not a JSON object ({exc}){hint}") from None
    if isinstance(item, list):
        raise EvalFileError(f"{where}: a JSON array, not an object; the file is JSONL: one whole JSON object a line")
    # A misspelt key ("gold_text", "query") is named: "needs gold_texts" alone sent the reader to check
    # a key the line seemed to have. Other keys (an id, a note) are allowed.
    others = sorted(set(item) - {"question", "gold_texts", "answerable"}) if isinstance(item, dict) else []
    has = f" (it has {', '.join(json.dumps(key) for key in others)})" if others else ""
    if not isinstance(item, dict) or not isinstance(item.get("question"), str) or not item["question"].strip():
        raise EvalFileError(f'{where}: needs a "question" string{has}')
    if not isinstance(item.get("answerable", True), bool):
        raise EvalFileError(f'{where}: "answerable" must be true or false (JSON booleans, not text or numbers)')
    if item.get("answerable", True) is False:
        if item.get("gold_texts"):  # which one is meant? either guess skews the metrics
            raise EvalFileError(f'{where}: says "answerable": false and gives "gold_texts"; drop one of them')
        return Question(item["question"], (), False, where)
    golds = item.get("gold_texts")
    if isinstance(golds, str) and golds.strip():
        raise EvalFileError(f'{where}: "gold_texts" is a string; write it as a list: [{json.dumps(golds)}]')
    if not isinstance(golds, list) or not golds or not all(isinstance(g, str) and g.strip() for g in golds):
        raise EvalFileError(f'{where}: an answerable question needs "gold_texts" (a non-empty list of texts){has}; '
                            'mark one without an answer "answerable": false')
    return Question(item["question"], tuple(golds), True, where)


def without_gold_in(questions: Sequence[Question], documents: Iterable[Document]) -> list[Question]:
    """The answerable questions none of whose gold texts any of `documents` holds (title and text, by the
    hit rule's two readings): no ranking can ever hit them, so they are a labelling error, not a miss."""
    texts = [f"{doc.title}\n\n{doc.text}" for doc in documents]
    # NUL keeps a gold text from matching across two documents; neither reading ever produces one.
    corpus, corpus_plain = "\0".join(map(normalize, texts)), "\0".join(map(plain, texts))
    return [q for q in questions if q.answerable and not any(
        normalize(g) in corpus or (plain(g) and plain(g) in corpus_plain) for g in q.gold_texts)]


def gold_not_found_lines(unfound: list[Question], docs_dir: Path, failed: list[tuple[str, str]],
                         skipped: dict[str, int]) -> list[str]:
    """A line for each of the first `GOLD_NOT_FOUND_SHOWN` questions no document holds a gold text of, and one
    that says what to do (and which files were not read, where the answer may have been)."""
    lines = [f"{q.where}: no gold text of {q.question!r} is in any document of {docs_dir}" for q in unfound]
    shown = lines[:GOLD_NOT_FOUND_SHOWN] + ([f"and {len(lines) - GOLD_NOT_FOUND_SHOWN} more"]
                                            if len(lines) > GOLD_NOT_FOUND_SHOWN else [])
    named = ", ".join(file for file, _ in failed[:3]) + (", …" if len(failed) > 3 else "")
    why = ([f"{len(failed)} file(s) failed to load: {named}"] if failed else []) + (
        [f"files of other types were not read: {describe_skipped(skipped)}"] if skipped else [])
    files = f" ({'; '.join(why)})" if why else ""
    return [*shown, f"no search can find these{files}, so each counts as a miss in the metrics: correct the text "
                    'as the document writes it, or mark the question "answerable": false']


def first_hit_rank(hits: Sequence[Hit], gold_texts: Iterable[str]) -> int | None:
    """1-based rank of the first chunk containing any gold text, as written or without markup (`plain`),
    or None. A chunk's content is read with its own heading before it, as the page shows them: a gold
    text copied across the two ("E-SYNC-409: conflicting edits The same note was changed …") is in the
    chunk that carries that heading."""
    golds = [(normalize(g), plain(g)) for g in gold_texts if g.strip()]
    for rank, hit in enumerate(hits, start=1):
        content = f"{hit.heading_path[-1]}\n\n{hit.text}" if getattr(hit, "heading_path", ()) else hit.text
        content, content_plain = normalize(content), plain(content)
        # A gold text made only of markup has no plain form, and "" is in every chunk.
        if any(g in content or (p and p in content_plain) for g, p in golds):
            return rank
    return None


async def evaluate(
    docs_dir: Path,
    questions_path: Path,
    *,
    k_values: Sequence[int] = (1, 3, 5, 10),
    settings: Settings | None = None,
    retrieval: RetrievalSettings | None = None,
    dense: DenseEmbedder | None = None,
    sparse: SparseEmbedder | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> EvalReport:
    """Ingest `docs_dir` into a throwaway index and run every question: the contract's metrics, each
    question's outcome and the files that failed to load. `progress(done, total, stage)` is told
    about each document ingested ("documents") and each question asked ("questions")."""
    settings = settings or Settings()
    if retrieval is None:
        retrieval = settings.bots[0].retrieval if settings.bots else RetrievalSettings()
    retrieval = retrieval.model_copy(update={"k": max(k_values)})
    questions = load_questions(questions_path)
    # The caller's own folder, often a folder of links to the documents: followed wherever they lead.
    loaded = await load_directory(Path(docs_dir), follow_symlinks_outside=True)
    # Misses by the contract's hit rule, yet a label to fix rather than retrieval to tune: named, and marked.
    unfound = without_gold_in(questions, loaded.documents) if loaded.documents else []

    from sqlalchemy.ext.asyncio import create_async_engine

    from rag.embeddings import DenseEmbedder, SparseEmbedder
    from rag.index import open_index
    from rag.ingest_setup import ingestor_for
    from rag.search import HybridSearch
    from storage.engine import session_factory
    from storage.models import Base

    dense = dense or DenseEmbedder.from_settings(settings.embedding)
    sparse = sparse or SparseEmbedder()

    with tempfile.TemporaryDirectory(prefix="gateway-eval-") as tmp:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp}/eval.db", hide_parameters=True)
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        index = open_index(QdrantSettings(path=f"{tmp}/qdrant", engine=settings.qdrant.engine))
        try:
            ingestor = ingestor_for(settings.embedding, index, dense, sparse, session_factory(engine))
            documents_done = (lambda done, total: progress(done, total, "documents")) if progress else None
            await ingestor.ingest_documents(EVAL_BOT, "eval", loaded.documents, progress=documents_done)
            search = HybridSearch(index, dense, sparse)
            outcomes: list[Outcome] = []
            for q in questions:
                result = await search.search(EVAL_BOT, [q.question], retrieval)
                ranked = result.hits or result.candidates
                rank = first_hit_rank(ranked, q.gold_texts) if q.answerable else None
                outcomes.append(Outcome(q, rank, result.refused, result.best_dense_score, result.lexical_coverage,
                                        ranked[0].title if ranked else None, gold_in_documents=q not in unfound))
                if progress:
                    progress(len(outcomes), len(questions), "questions")
        finally:
            await index.close()
            await engine.dispose()
    ranks = [o.rank for o in outcomes if o.question.answerable]
    false_refusals = sum(o.refused for o in outcomes if o.question.answerable)
    refusals = sum(o.refused for o in outcomes if not o.question.answerable)
    n_answerable = len(ranks)
    n_unanswerable = len(questions) - n_answerable
    metrics: dict[str, float | int] = {}
    for k in k_values:
        metrics[f"recall@{k}"] = _share(sum(1 for r in ranks if r is not None and r <= k), n_answerable)
    metrics["mrr"] = _share(sum(1.0 / r for r in ranks if r is not None), n_answerable)
    metrics["refusal_rate"] = _share(refusals, n_unanswerable)
    metrics["false_refusal_rate"] = _share(false_refusals, n_answerable)
    metrics["n_answerable"] = n_answerable
    metrics["n_unanswerable"] = n_unanswerable
    failed = [*loaded.errors, *loaded.refused]
    return EvalReport(metrics, outcomes, failed, dict(loaded.skipped),
                      gold_not_found_lines(unfound, Path(docs_dir), failed, loaded.skipped) if unfound else [])


def _share(part: float, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0
