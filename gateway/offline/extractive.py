"""Pick the sentences of the extracts that answer a question: scoring, selection and citation markers
(a whole section's steps or opening when the question asks for one: `gateway.offline.sections`).

Pure text work on OpenAI-style messages; the LiteLLM provider around it is `gateway.offline.provider`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from gateway.offline.extracts import PRONOUN, Candidate, Extract, parse_extracts, parse_fallback, terms
from gateway.offline.question_form import ASKING_WORDS, answer_kind, framing_of
from gateway.offline.sections import (
    MAX_ANSWER_CHARS,
    MAX_SENTENCES,
    first_passage_steps,
    section_of,
    steps_of,
    whole_section,
)

MIN_COVERAGE = 0.35
FOLLOW_RATIO = 0.75  # a further sentence must score this close to the best one, or it adds noise
ABOUT_PAGE_FACTOR = 0.4
# A sentence that gives the kind of answer asked for ("every few seconds" to "how often") outweighs
# one that only shares more of the question's words: the question's words name its subject, which
# the whole section shares.
ANSWER_KIND_FACTOR = 2.5
UBIQUITOUS_FACTOR = 0.15
MIN_DIRECT = 0.2
# Between sentences that carry the question about equally, the one from the better-ranked extract goes
# first: retrieval ranked the extracts on more than shared words (meaning, BM25, the priors). Each rank
# down costs 10% in the ordering only; the thresholds still read the sentence's own score.
RANK_DECAY = 0.9

# A line that describes its page ("How to create an account…", "This page explains…") is a table
# of contents, not an answer: it names every topic and answers none.
_ABOUT_PAGE = re.compile(
    r"^(?:how to\b|learn (?:how|about)\b|find out\b|(?:this|the following) (?:page|article|guide|section|document|"
    r"chapter|faq)\b|here (?:you|we)\b|(?:on|in) this (?:page|article|guide|section)\b)", re.I)


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def answer(messages: list[dict[str, Any]]) -> str:
    """The extractive answer to the last user message, or the fallback text."""
    system = "\n".join(_content(m) for m in messages if m.get("role") == "system")
    fallback = parse_fallback(system)
    question = next((_content(m) for m in reversed(messages) if m.get("role") == "user"), "")
    # "What references to refunds are there?" asks about refunds: no sentence need say "references".
    wanted = terms(question) - framing_of(question) or terms(question)
    extracts = parse_extracts(system)
    candidates = [Candidate(e, i, terms(s), _referent_terms(e, i)) for e in extracts for i, s in enumerate(e.sentences)]
    if not wanted or not candidates:
        return fallback
    # The bot's own instructions name its product and domain ("the assistant of Acme Notes"): every
    # question is about those words, so they are no evidence that a sentence answers this one.
    domain = terms(system.split("\n\nRules:", 1)[0]) if "\n\nRules:" in system else set()
    kind = answer_kind(question)
    quotable = wanted & set().union(*(c.terms | c.referent | c.section for c in candidates))
    scored = _score(candidates, wanted, _weights(wanted, extracts, candidates, domain=domain), kind, quotable)
    # A section need not be named after the product ("Exporting your data" answers "export my notes").
    named = wanted - domain or wanted
    in_order = [c for _, c in scored[:1]] + candidates  # the best sentence's section first, then retrieval order
    picked = (whole_section(in_order, named, question)
              or (scored and first_passage_steps(scored[0][1], candidates, named, question))
              or _best_sentences(scored, wanted, named, kind))
    return " ".join(_cite(text, n) for n, text in picked) if picked else fallback


def _score(candidates: list[Candidate], wanted: set[str], weight: dict[str, float],
           kind: re.Pattern[str] | None, quotable: set[str]) -> list[tuple[float, Candidate]]:
    """The sentences that carry some of the question, best first, with their scores. `quotable`: the
    question's words that some extract holds, in a sentence or a heading."""
    total = sum(weight.values())
    scored = []
    for c in candidates:
        direct = sum(weight[t] for t in wanted & (c.terms | c.referent))
        gives_kind = kind is not None and bool(kind.search(c.text))
        # A heading alone is not an answer: the sentence itself must carry some of the question, or,
        # in a section named after all of it, the kind of answer asked for ("Exporting your data":
        # "… ready within 24 hours"). Nor need it when, with its heading, it holds every word of the
        # question that the extracts hold at all: "Above the limit the API answers with 429", under
        # "Rate limits", answers "What happens when I hit the rate limit?" though "limit" is common.
        if direct < MIN_DIRECT * total and not (gives_kind and wanted <= c.section) \
                and not (direct and quotable <= c.terms | c.referent | c.section):
            continue
        # A heading counts twice: its words stand in, at half weight, for ones the sentence lacks,
        # and any match lifts the whole extract, so the section about the question wins ties.
        by_heading = sum(weight[t] for t in (wanted & c.section) - c.terms - c.referent) * 0.5
        heading_bonus = 1 + 0.25 * sum(weight[t] for t in wanted & c.section) / total
        score = (direct + by_heading) / total * heading_bonus
        if _ABOUT_PAGE.match(c.text):
            score *= ABOUT_PAGE_FACTOR
        if gives_kind:
            score *= ANSWER_KIND_FACTOR
        scored.append((score, c))
    scored.sort(key=lambda item: -item[0] * RANK_DECAY ** (item[1].extract.n - 1))  # see `RANK_DECAY`
    return scored


def _best_sentences(scored: list[tuple[float, Candidate]], wanted: set[str], named: set[str],
                    kind: re.Pattern[str] | None) -> list[tuple[int, str]]:
    """The best-scoring sentences (none when even the best carries too little of the question)."""
    if not scored or scored[0][0] < MIN_COVERAGE:
        return []
    best = scored[0][1]
    # "I forgot my password": the best sentence is step 1 of "Resetting a forgotten password", and one
    # step is half an answer. A step of a procedure about something else ("Deleting your account" for
    # "cancel my subscription") is quoted alone.
    if named & terms(section_of(best.extract, best.pos)) and len(steps := steps_of(best)) > 1:
        return steps
    if kind is not None and kind.search(best.text):
        # "How long does an export take?" is answered by durations; the steps beside them are not.
        scored = scored[:1] + [(score, c) for score, c in scored[1:] if kind.search(c.text)]
    return _select(scored, wanted)


def _referent_terms(e: Extract, i: int) -> frozenset[str]:
    """When the sentence opens with a pronoun, the terms of the sentence before it in its paragraph:
    "They take 5 to 10 business days" is about the refunds the sentence before names."""
    if PRONOUN.match(e.sentences[i]) and i and i < len(e.blocks) and e.blocks[i - 1] == e.blocks[i]:
        return frozenset(terms(e.sentences[i - 1]))
    return frozenset()


def _weights(wanted: set[str], extracts: list[Extract], candidates: list[Candidate], *,
             domain: set[str] = frozenset()) -> dict[str, float]:
    """How much each question term is worth as evidence.

    Rarer words weigh more (an IDF over the sentences given). A word no extract uses weighs like the
    commonest one: it cannot be quoted, and letting it dominate would refuse "how long do refunds
    take?" over "long". A word found in most extracts (the product's name, the topic every hit
    shares) tells the extracts apart no better than a stopword, so it is down-weighted again, as is
    a word of the bot's own instructions (`domain`). A word found in most extracts keeps its weight
    when no other word of the question (outside `domain`) is in them.
    """
    df: dict[str, int] = {}
    for c in candidates:
        for t in c.terms & wanted:
            df[t] = df.get(t, 0) + 1
    n = len(candidates)
    extract_terms = [set(e.heading_terms).union(*(c.terms for c in candidates if c.extract is e)) for e in extracts]
    half = len(extracts) / 2
    spread = {t: sum(t in ts for ts in extract_terms) for t in wanted}
    ubiquitous = {t for t in wanted if len(extracts) >= 3 and spread[t] > half}
    # Down-weighting only helps to tell the extracts apart by another word; when no other word of
    # the question is in them ("Explain the refund policy": no extract says "policy"), the common
    # word is all the evidence there is.
    if not any(df.get(t) and t not in ubiquitous and t not in domain for t in wanted):
        ubiquitous = set()
    out = {}
    for t in wanted:
        w = math.log(1 + n / ((df.get(t) or n) + 0.5))
        if t in ubiquitous:
            w *= max(UBIQUITOUS_FACTOR, (len(extracts) - spread[t]) / half)
        if t in domain:
            w *= UBIQUITOUS_FACTOR
        out[t] = w
    return out


def _select(scored: list[tuple[float, Candidate]], wanted: set[str]) -> list[tuple[int, str]]:
    """The answer's sentences: the best one, and the next ones only if they score nearly as well.

    A sentence from another extract must also bring a question word that the quoted ones (with
    their headings) do not cover yet: else it repeats the topic without answering anything more.

    A sentence that opens with a pronoun ("It costs $6") gets its subject: the sentence before it
    when that is quoted too, else the section's name ("Plus: It costs $6"), else it is left out.
    """
    best = scored[0][0]
    covered: set[str] = set()
    chosen: dict[tuple[int, int], str] = {}
    seen: set[str] = set()
    length = 0
    for rank, (score, c) in enumerate(scored):
        if rank and (score < max(MIN_COVERAGE, FOLLOW_RATIO * best) or len(chosen) >= MAX_SENTENCES):
            break
        text = c.text
        if text.lower() in seen:
            continue
        if rank and c.extract.n != scored[0][1].extract.n and not (wanted & c.terms) - covered:
            continue
        if PRONOUN.match(text) and (c.extract.n, c.pos - 1) not in chosen:
            if rank and (c.extract.n, _subject(c)) != (scored[0][1].extract.n, _subject(scored[0][1])):
                continue  # "It costs $12" from another section is about something else
            subject = _subject(c)
            before = _previous_in_block(c)
            if before is not None and not rank:
                chosen[(c.extract.n, c.pos - 1)] = before  # "Refunds go back to … They take 5 days."
                length += len(before)
            elif subject:
                text = f"{subject}: {text}"
            elif rank:
                continue  # "They take 5 days" from another section would be about something else
        if length + len(text) > MAX_ANSWER_CHARS:
            continue
        chosen[c.key] = text
        covered |= wanted & (c.terms | c.section)
        seen.add(c.text.lower())
        length += len(text)
    # Best extract first; within an extract, keep the text's own order so it reads naturally.
    order = {n: i for i, n in enumerate(dict.fromkeys(n for n, _ in chosen))}
    return [(n, chosen[(n, pos)]) for n, pos in sorted(chosen, key=lambda k: (order[k[0]], k[1]))]


def _previous_in_block(c: Candidate) -> str | None:
    """The sentence before `c` in its paragraph, which a leading pronoun refers to."""
    e, i = c.extract, c.pos
    if i and i < len(e.blocks) and e.blocks[i - 1] == e.blocks[i]:
        return e.sentences[i - 1]
    return None


def _subject(c: Candidate) -> str | None:
    """The section's name, when it reads as a subject ("Plus", "Team seats"), not as a title or question."""
    e, i = c.extract, c.pos
    name = (e.subjects[i] if i < len(e.subjects) else "").strip()
    words = name.split()
    if not words or len(words) > 4 or name.endswith("?") or words[0].lower() in ASKING_WORDS:
        return None
    return name


def _cite(sentence: str, n: int) -> str:
    """Put the marker before the closing punctuation: 'Refunds take 5 days [1].', '退款需要5天 [1]。'"""
    if sentence[-1] in ".!?؟۔।。！？":
        return f"{sentence[:-1].rstrip()} [{n}]{sentence[-1]}"
    return f"{sentence} [{n}]"

