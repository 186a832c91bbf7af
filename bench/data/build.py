"""Rebuild the eval sets in bench/data/ from the third-party fixtures (see SOURCES.md).

    .venv/bin/python -m bench.data.build [--fixtures ../shared/fixtures/rag]

Writes, for each set, `docs/` (Markdown) and `questions.jsonl` in DESIGN.md's eval format. Labels
are text spans copied from the corpus, never chunk ids:
- s10: the Galaxy S10 manual, one Markdown file per top-level chapter with the section hierarchy
  as headings; each section's PDF lines joined with spaces. Gold texts are the expert answer when
  it appears literally in the gold section, else the answer's sentences that do (preferring ones
  no unrelated section contains), else the longest span the answer shares with the section.
- smart_tv: the Smart TV / remote manual, the corpus reserved as unseen (nothing is tuned on it),
  one Markdown file per section (it has no hierarchy), its lines joined with spaces. Its questions
  were written blind by a helper (SOURCES.md); this only rebuilds the documents and checks them.
- stici: 20 web documents; the written answers are not extractive, so the gold texts are the
  document sentences that best support the answer (IDF-weighted word overlap with the answer),
  one for a single-passage question, up to three for a multi-passage one. The 40 no-answer
  questions become `{"question", "answerable": false}` lines.
Every gold text is checked to be a substring of the whitespace-collapsed, lower-cased corpus.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
from collections import Counter
from difflib import SequenceMatcher
from pathlib import Path

HERE = Path(__file__).parent
DEFAULT_FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "rag"
_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[a-z0-9)][.!?])(?=[A-Z])|\n+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_STOP = set(
    "a an the and or of to in on for with is are was were be been it its this that these those as at by from "
    "what which who whom how why when where do does did can could will would should may might i you he she they "
    "we my your their our his her them us there here not no yes if then than so into about up out over".split()
)
# Reviewed by hand where the word-overlap heuristic picked the wrong sentence (question → spans).
STICI_OVERRIDES = {
    "Who wrote 'Divine Rivals'?": ["divine rivals by rebecca ross"],
    "What is the syntax for pipe": ["pipe |> gleam’s pipe can pipe into anonymous functions"],
    "How much faster is the Tesla A100 compared to the Tesla V100?": ["se-resnext101: 1.43x"],
    "What did I drink at the pintxo bars?": ["having a glass of txakoli at each one"],
    "When did mushroom trees stop dropping wood?": ["mushroom trees no longer drop wood"],
}
# The written answer describes text the stored document does not contain (it is truncated).
STICI_EXCLUDED = {"What do the giants look like?"}
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " "})


def normalize(text: str) -> str:
    """Whitespace-collapsed, lower-cased: the form in which the eval contract matches gold texts."""
    return " ".join(text.split()).lower()


def _plain(text: str) -> str:
    return normalize(text.translate(_QUOTES))


def _slug(title: str) -> str:
    """A file name from a title: lower-case words joined by hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _check(rows: list[dict], corpus: str, name: str) -> None:
    for row in rows:
        for gold in row.get("gold_texts", []):
            if normalize(gold) not in corpus:
                raise SystemExit(f"{name}: gold text not in corpus: {gold!r}")


# ---------------------------------------------------------------------------- S10 manual


def build_s10(fixtures: Path, out: Path) -> None:
    """The S10 manual as Markdown chapters plus its 50 questions."""
    sections = json.loads((fixtures / "emanual_samsung" / "s10_manual_corpus.json").read_text(encoding="utf-8"))
    titles = {sid: s["title"].strip() for sid, s in sections.items()}
    chain = {sid: s["section_hierarchy"].split(">") for sid, s in sections.items()}
    body = {sid: " ".join(" ".join(s["text"][1:]).split()) for sid, s in sections.items()}
    docs = out / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for old in docs.glob("*.md"):
        old.unlink()
    chapters: dict[str, list[str]] = {}
    for sid in sections:  # the JSON is in document order (depth first)
        depth = min(len(chain[sid]), 6)
        part = f"{'#' * depth} {titles[sid]}\n\n{body[sid]}\n" if body[sid] else f"{'#' * depth} {titles[sid]}\n"
        chapters.setdefault(chain[sid][0], []).append(part)
    for number, (root, parts) in enumerate(chapters.items(), start=1):
        (docs / f"{number:02d}-{_slug(titles[root])}.md").write_text("\n".join(parts), encoding="utf-8")

    by_path = {">".join(titles[s] for s in chain[sid]): sid for sid in sections}
    plain = {sid: _plain(b) for sid, b in body.items()}
    rows = []
    with (fixtures / "emanual_samsung" / "s10_50_questions.csv").open(encoding="utf-8") as fh:
        for q in csv.DictReader(fh):
            sid = by_path.get(q["section_path"]) or _closest_section(q["section_path"], titles, chain)
            related = {sid, *chain[sid], *(o for o in sections if sid in chain[o])}
            rows.append({"question": q["question"].strip(), "gold_texts": _s10_golds(q["answer"], sid, plain, related)})
    corpus = normalize("\n".join(p.read_text(encoding="utf-8") for p in sorted(docs.glob("*.md"))))
    _check(rows, corpus, "s10")
    _write_jsonl(out / "questions.jsonl", rows)


def build_smart_tv(fixtures: Path, out: Path) -> None:
    """The Smart TV manual as one Markdown file per section; checks the hand-written questions against it."""
    sections = json.loads((fixtures / "emanual_samsung" / "smart_tv_remote_manual_corpus.json").read_text(encoding="utf-8"))
    docs = out / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for old in docs.glob("*.md"):
        old.unlink()
    for number, section in enumerate(sections.values()):  # the JSON is in document order
        title = section["title"].strip()
        body = " ".join(" ".join(section["text"]).split())
        (docs / f"{number:03d}-{_slug(title)[:60]}.md").write_text(f"# {title}\n\n{body}\n", encoding="utf-8")
    rows = [json.loads(line) for line in (out / "questions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    corpus = normalize("\n".join(p.read_text(encoding="utf-8") for p in sorted(docs.glob("*.md"))))
    _check(rows, corpus, "smart_tv")


def _closest_section(path: str, titles: dict[str, str], chain: dict[str, list[str]]) -> str:
    """A question path the manual's hierarchy lacks: same last title, most shared ancestors."""
    parts = path.split(">")
    candidates = [sid for sid in titles if titles[sid] == parts[-1]]
    if not candidates:
        raise SystemExit(f"s10: no section for {path!r}")
    return max(candidates, key=lambda sid: len({titles[s] for s in chain[sid]} & set(parts)))


def _s10_golds(answer: str, sid: str, plain: dict[str, str], related: set[str]) -> list[str]:
    """Spans of the gold section that carry the answer (see the module docstring)."""
    text = plain[sid]
    whole = _plain(answer)
    if whole and whole in text:
        return [whole]
    sentences = [_plain(s).strip(" .") for s in _SENTENCE.split(answer.translate(_QUOTES))]
    sentences = [s for s in sentences if len(s) >= 20 and s in text]
    distinctive = [s for s in sentences if not any(s in plain[o] for o in plain if o not in related)]
    if distinctive or sentences:
        return distinctive or sentences
    match = SequenceMatcher(None, whole, text, autojunk=False).find_longest_match(0, len(whole), 0, len(text))
    span = whole[match.a : match.a + match.size].strip(" .,")
    if len(span) < 25:
        raise SystemExit(f"s10: no usable gold span for section {sid}: {answer[:80]!r}")
    return [span]


# ---------------------------------------------------------------------------- STICI


def build_stici(fixtures: Path, out: Path) -> None:
    """20 web documents as Markdown, 80 answerable and 40 unanswerable questions."""
    csv.field_size_limit(1 << 30)
    root = fixtures / "single_topic_rag_eval"
    with (root / "documents.csv").open(encoding="utf-8") as fh:
        documents = {int(r["index"]): r for r in csv.DictReader(fh)}
    docs = out / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for old in docs.glob("*.md"):
        old.unlink()
    for index, row in documents.items():
        # The text is a page's extracted text: its first line is the page title.
        (docs / f"doc-{index:02d}.md").write_text(_as_markdown(row["text"]), encoding="utf-8")
    sentences = {i: _doc_sentences(r["text"]) for i, r in documents.items()}
    df = Counter(w for sents in sentences.values() for s in sents for w in set(_words(s)))
    n = sum(len(s) for s in sentences.values())
    idf = {w: math.log(n / c) for w, c in df.items()}
    rows: list[dict] = []
    for name, limit in (("single_passage_answer_questions.csv", 1), ("multi_passage_answer_questions.csv", 3)):
        with (root / name).open(encoding="utf-8") as fh:
            for q in csv.DictReader(fh):
                if q["question"].strip() in STICI_EXCLUDED:
                    continue
                golds = STICI_OVERRIDES.get(q["question"].strip()) or _support(q["question"], q["answer"], sentences[int(q["document_index"])], idf, limit=limit)
                rows.append({"question": q["question"].strip(), "gold_texts": golds})
    with (root / "no_answer_questions.csv").open(encoding="utf-8") as fh:
        rows.extend({"question": q["question"].strip(), "answerable": False} for q in csv.DictReader(fh))
    corpus = normalize("\n".join(p.read_text(encoding="utf-8") for p in sorted(docs.glob("*.md"))))
    _check(rows, corpus, "stici")
    _write_jsonl(out / "questions.jsonl", rows)


def _as_markdown(text: str) -> str:
    lines = text.strip().splitlines()
    title = lines[0].strip().lstrip("#").strip() if lines else "Untitled"
    # Escape line starts that Markdown would read as headings or rules, so the text stays prose.
    rest = [re.sub(r"^(\s*)(#|---|===)", r"\1\\\2", line) for line in lines[1:]]
    return f"# {title}\n\n" + "\n".join(rest).strip() + "\n"


def _doc_sentences(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        for s in re.split(r"(?<=[.!?])\s+", line.strip()):
            if len(s) >= 25:
                out.append(" ".join(s.split()))
    return out


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower().translate(_QUOTES)) if w not in _STOP]


def _support(question: str, answer: str, sentences: list[str], idf: dict[str, float], *, limit: int) -> list[str]:
    """The document sentences that best cover the answer's words (question words count less)."""
    want = Counter({w: idf.get(w, 0.0) for w in _words(answer)})
    for w in _words(question):
        want[w] = max(want[w], 0.3 * idf.get(w, 0.0))
    answer_words = _words(answer)
    answer_pairs = set(zip(answer_words, answer_words[1:]))
    chosen: list[str] = []
    covered: set[str] = set()
    for _ in range(limit):
        def gain(s: str) -> float:
            words = _words(s)
            fresh = set(words) - covered
            # Shared answer bigrams ("rebecca ross", "machine pistol") are far stronger evidence
            # than scattered words, so each one counts as much as its two words again.
            pairs = set(zip(words, words[1:])) & answer_pairs
            bonus = sum(want[a] + want[b] for a, b in pairs if a in fresh or b in fresh)
            return (sum(want[w] for w in fresh) + bonus) / (1 + 0.01 * len(s.split()))

        best = max((s for s in sentences if s not in chosen), key=gain, default=None)
        if best is None or gain(best) <= (0.35 * gain(chosen[0]) if chosen else 0.0):
            break
        chosen.append(best)
        covered |= set(_words(best))
    return [normalize(s) for s in chosen]


def main() -> None:
    """Build the sets from the fixtures folder."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    args = parser.parse_args()
    build_s10(args.fixtures, HERE / "s10")
    build_stici(args.fixtures, HERE / "stici")
    build_smart_tv(args.fixtures, HERE / "smart_tv")
    for name in ("s10", "stici", "smart_tv"):
        lines = (HERE / name / "questions.jsonl").read_text(encoding="utf-8").splitlines()
        print(f"{name}: {len(lines)} questions, {len(list((HERE / name / 'docs').glob('*.md')))} documents")


if __name__ == "__main__":
    main()
