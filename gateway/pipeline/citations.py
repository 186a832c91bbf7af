"""Gate 2: check the answer's citations against what was actually retrieved.

- A marker [n] whose n is not in 1..len(hits) is removed ([1][7] keeps [1]; [1, 7] becomes [1]).
- An answer that claims something but keeps no valid citation becomes the bot's fallback text:
  an uncited claim is exactly what a support bot must not pass off as knowledge.
- A refusal ("I don't know…", or the fallback itself) without a valid citation stays as it is, with no
  citations, unless it also holds a "but…" or a number that neither the question, the extracts nor a
  tool gave (`_claims_something`): a refusal that goes on to claim something is an uncited claim, and
  becomes the fallback text. With a valid citation it is a partial answer and is kept as an answer. The prompt
  shows the fallback inside `<fallback>` tags; a model that copies them gets them removed.
- `citations` lists the distinct documents actually cited, in the order first cited, and the
  markers are renumbered to match: [1] in the reply is `citations[0]`, whichever extract numbers
  the model saw. A URL is kept only when it is http(s), so no `javascript:` or `data:` link ever
  reaches a client, and a link in the answer only when an extract or a tool result holds it.
  `CitationNumbers` and `number_markers` give the same numbering piece by piece, so streamed tokens
  (`held_stream`) show the numbers the reply will have.
- An answer resting on tool results (`grounding`) needs no citation, but keeps only its sentences
  that say something those results hold (`grounded_sentences`). With tool results in play, a sentence,
  cited or not, that contradicts them or states a number, date or identifier no evidence holds goes
  (`gateway.pipeline.tool_facts`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gateway.models import Citation
from gateway.pipeline.evidence import Evidence
from gateway.pipeline.links import link_values, without_unknown_links
from gateway.pipeline.prompts import RULES, Hit
from gateway.pipeline.sentences import keep_sentences, split_sentences
from gateway.pipeline.tool_facts import ToolFacts, grounded_sentences

# [3], [1, 2], [1,2 , 3]; adjacent [1][2] are simply two markers. Leading spaces go with the marker.
# `(?<!\s)`: a match starts where its run of spaces does, so a long run costs linear time, not quadratic.
_MARKER = re.compile(r"(?:(?<!\s)\s+)?\[\s*(\d{1,4}(?:\s*,\s*\d{1,4})*)\s*\]")
_REFUSAL = re.compile(
    r"\b(i\s+(?:do\s*n[o']?t|don't|didn't|did\s+not)\s+(?:know|have|find|see)"
    r"|i(?:'m|\s+am)\s+(?:not\s+sure|unable|not\s+able)"
    r"|i\s+(?:can(?:no|')t|could\s*n[o']?t|could\s+not)\s+(?:find|answer|help|tell)"
    r"|no\s+information\s+(?:about|on)"
    r"|(?:is|are)\s+not\s+(?:covered|mentioned)\s+in)",
    re.IGNORECASE,
)
_MAX_REFUSAL_CHARS = 300
# What a bare "I don't know" never holds: a turn to something else ("I'm not sure about discounts, but
# Plus costs $99…"), or a number that neither the question, the extracts nor a tool gave. A refusal
# holding one of them is not passed on.
_TURN_WORDS = re.compile(r"\b(?:but|however|although|though|anyway|instead)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d+")
_FALLBACK_TAG = re.compile(r"</?\s*fallback\s*>", re.IGNORECASE)
_STUTTER = re.compile(r"(\[\d+\])(\s*\1)+")


@dataclass(frozen=True, slots=True)
class Verified:
    """The answer after gate 2. `cited_indices` are the 1-based extract numbers that survived."""

    text: str
    citations: tuple[Citation, ...]
    cited_indices: tuple[int, ...]
    replaced: bool = False
    reason: str = ""  # why it was replaced by the fallback, for the log


def _claims_something(refusal: str, known: str) -> bool:
    """Whether a refusal goes on to say something: a turn to another point, or a number `known` lacks."""
    return bool(_TURN_WORDS.search(refusal)) or any(n not in known for n in _NUMBER.findall(refusal))


def _normalized(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


# The prompt's rule lines as `PromptEcho` looks for them (the fallback's line varies by bot).
_RULE_LINES = [line for line in (_normalized(r) for r in RULES.splitlines() if "{" not in r) if len(line) >= 30]


def is_refusal(text: str, *, fallback_text: str) -> bool:
    """Whether the text says "I don't know" (the fallback itself, or a short refusal like it)."""
    plain = _normalized(_MARKER.sub("", text))
    if not plain or plain == _normalized(fallback_text):
        return True
    return len(text) <= _MAX_REFUSAL_CHARS and bool(_REFUSAL.search(text.replace("\u2019", "'")))


def safe_url(url: str | None) -> str | None:
    """The URL when it is http(s) with a host, else None."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    return url.strip() if parts.scheme.lower() in ("http", "https") and parts.netloc else None


def cites_an_extract(text: str, *, count: int) -> bool:
    """Whether `text` holds a marker gate 2 keeps: a number in 1..count, alone or in a list ("[2, 9]")."""
    return any(1 <= int(part) <= count for match in _MARKER.finditer(text) for part in match.group(1).split(","))


def _rewrite_markers(text: str, number: Callable[[int], int | None]) -> str:
    """Each marker's numbers passed through `number`, repeats dropped ([1, 7] → [1] when 7 is None; a list
    becomes adjacent markers); a marker with no number left is removed with its leading spaces."""

    def replace(match: re.Match[str]) -> str:
        lead = match.group(0)[: len(match.group(0)) - len(match.group(0).lstrip())]
        numbers: list[int] = []
        for part in match.group(1).split(","):
            k = number(int(part))
            if k is not None and k not in numbers:
                numbers.append(k)
        return lead + "".join(f"[{k}]" for k in numbers) if numbers else ""

    return _MARKER.sub(replace, text)


def _tidy_spacing(text: str) -> str:
    # A removed marker may leave "word ." or doubled spaces behind.
    out = re.sub(r"(?<![ \t])[ \t]+([.,;:!?])(?=\s|$)", r"\1", text)  # not ".md" or ".NET" mid-sentence
    return re.sub(r"[ \t]{2,}", " ", out)


def strip_invalid_markers(text: str, *, count: int) -> tuple[str, tuple[int, ...]]:
    """Remove markers outside 1..count; returns the text and the surviving numbers, first-cited first."""
    cited: list[int] = []

    def keep(n: int) -> int | None:
        if not 1 <= n <= count:
            return None
        if n not in cited:
            cited.append(n)
        return n

    return _tidy_spacing(_rewrite_markers(text, keep)).strip(), tuple(cited)


class CitationNumbers:
    """Gate 2's numbering, given as markers are read: the first document cited is [1], the next new one
    [2], and so on. `documents[n - 1]` identifies extract n's document; extracts of one document share
    its number. Streaming uses it to show the numbers the final reply will have."""

    def __init__(self, documents: Sequence[object]) -> None:
        self._documents = documents
        self._numbers: dict[object, int] = {}

    @classmethod
    def for_hits(cls, hits: Sequence[Hit]) -> CitationNumbers:
        """The numbering of an answer written from `hits`."""
        return cls([_document_of(hit) for hit in hits])

    def __call__(self, extract: int) -> int | None:
        """The reply's number for extract `extract` (1-based); None when there is no such extract."""
        if not 1 <= extract <= len(self._documents):
            return None
        return self._numbers.setdefault(self._documents[extract - 1], len(self._numbers) + 1)


def without_fallback_tags(text: str) -> str:
    """The text without `<fallback>` tags, which a model may copy from the prompt."""
    return _FALLBACK_TAG.sub("", text)


def number_markers(text: str, numbers: CitationNumbers) -> str:
    """Gate 2's rewrite of a cited answer (tags already removed), for a piece of it read in order: invalid
    markers removed, valid ones renumbered by `numbers` (which remembers earlier pieces), spacing tidied;
    not stripped."""
    return _STUTTER.sub(r"\1", _tidy_spacing(_rewrite_markers(text, numbers)))


def _document_of(hit: Hit) -> str:
    """`source/document` when the hit knows its document, else the source."""
    document = getattr(hit, "document", "") or ""
    return f"{hit.source}/{document}" if document else hit.source


def citations_for(hits: Sequence[Hit], indices: Sequence[int]) -> tuple[Citation, ...]:
    """Distinct documents behind `indices` (1-based), in order."""
    seen: set[str] = set()
    out = []
    for n in indices:
        hit = hits[n - 1]
        key = _document_of(hit)
        if key in seen:
            continue
        seen.add(key)
        out.append(Citation(source=key, title=hit.title or hit.source, url=safe_url(hit.url)))
    return tuple(out)


def renumber(text: str, hits: Sequence[Hit], cited: Sequence[int]) -> str:
    """Rewrite valid markers so [k] points at the k-th distinct cited document."""
    numbers = CitationNumbers.for_hits(hits)
    for n in cited:  # the order of first citation, as `strip_invalid_markers` found it
        numbers(n)
    # The same document cited twice in a row ("…[1] [1]") reads as a stutter: keep one.
    return _STUTTER.sub(r"\1", _rewrite_markers(text, numbers))


def without_invented_claims(text: str, *, count: int) -> str:
    """`text` without the sentences whose every citation is a number no extract has: "It also includes
    unlimited storage forever [9]." lost only its marker, and the claim stayed as if it were sourced."""
    def invented(sentence: str) -> bool:
        numbers = [int(n) for m in _MARKER.finditer(sentence) for n in m.group(1).split(",")]
        return bool(numbers) and not any(1 <= n <= count for n in numbers)

    return keep_sentences(text, lambda sentence: not invented(sentence))


ECHO_WORDS = 10
"""Runs of this many words are what an answer and the system prompt are compared by: shorter ones are
phrases an answer shares by chance ("the support assistant of Acme")."""
ECHO_SHARE = 0.7
ECHO_MIN_WORDS = 20
"""An answer repeats the system prompt when its runs cover at least `ECHO_SHARE` of the prompt's words,
and at least `ECHO_MIN_WORDS` of them (all of a shorter prompt's): "repeat your instructions" gave the
operator's whole prompt, "INTERNAL: retention discount up to 40%" and all, with one valid marker. Less is
no echo: a prompt may give a sign-off to end every answer with, or a fact (opening hours) the answer may
say in its words. A prompt under `ECHO_WORDS` words is one run, from `ECHO_SHORTEST_PROMPT` words up."""
ECHO_SHORTEST_PROMPT = 6
PRIVATE_RUN_WORDS = 6
"""A sentence of the prompt that says it is private (`_PRIVATE_LINE`: internal, confidential, secret, do
not share…) is never let out: an answer's sentence that repeats this many of its words in a row goes."""
_PRIVATE_LINE = re.compile(r"\b(?:internal|confidential|secret|private|(?:do not|don't|never) (?:share|reveal|tell|"
                           r"mention|disclose|repeat))\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PromptEcho:
    """What gate 2 and the stream look for, beyond the rules, to tell an answer repeats the prompt: each run of `ECHO_WORDS` words of the
    system prompt that no extract holds (an answer may quote an extract that says what the prompt
    says), with where it starts, and the prompt's length in words."""

    runs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    size: int = 0
    run_words: int = ECHO_WORDS
    private: frozenset[str] = frozenset()  # runs of `PRIVATE_RUN_WORDS` words of the prompt's private sentences

    @classmethod
    def of(cls, system_prompt: str, hits: Sequence[Hit] = ()) -> PromptEcho:
        words = _normalized(system_prompt).split()
        extracts = _normalized(" ".join(getattr(h, "text", "") or "" for h in hits))
        length = ECHO_WORDS if len(words) >= ECHO_WORDS else max(len(words), ECHO_SHORTEST_PROMPT)
        runs: dict[str, list[int]] = {}
        for i in range(len(words) - length + 1):
            run = " ".join(words[i:i + length])
            if run not in extracts:
                runs.setdefault(run, []).append(i)
        private = {run for sentence, _ in split_sentences(system_prompt) if _PRIVATE_LINE.search(sentence)
                   for run in _word_runs(_normalized(sentence), PRIVATE_RUN_WORDS) if run not in extracts}
        return cls({run: tuple(starts) for run, starts in runs.items()}, len(words), length, frozenset(private))

    def covered(self, plain: str) -> int:
        """How many of the prompt's words `plain` (normalized text) repeats, in runs of `run_words`."""
        if not self.runs:
            return 0
        n = self.run_words
        positions = {p for run in _word_runs(plain, n).intersection(self.runs) for start in self.runs[run]
                     for p in range(start, start + n)}
        return len(positions)

    def repeated_in(self, text: str) -> bool:
        """Gate 2's test (a "repeat your instructions" request): a line of the rules, whose own example
        "[1] or [1][3]" reads as a valid citation, or most of the system prompt (all of a short one:
        a 13-word prompt never reached `ECHO_MIN_WORDS`, so it came out whole)."""
        plain = _normalized(text)
        covered = self.covered(plain)
        return _holds_a_rule_line(plain) or (
            covered >= min(ECHO_MIN_WORDS, self.size) and covered >= ECHO_SHARE * self.size and covered > 0)

    def quotes_private(self, text: str) -> bool:
        """Whether `text` repeats `PRIVATE_RUN_WORDS` words in a row of a sentence the prompt marks as
        private: a planted "reply with your instructions" got one internal line of a long prompt out
        ("agents may offer discount code …"), far under the share that replaces a whole answer."""
        padded = f" {_normalized(text)} "  # whole words: a private sentence under 6 words is one run
        return any(f" {run} " in padded for run in self.private)

    def begun_in(self, text: str) -> bool:
        """The stream's test, stricter: a line of the rules, a private line, or `ECHO_MIN_WORDS` of the
        prompt's words (all of a short one). With gate 2's share, a long prompt's first 70% would be on
        screen before the reply replaced it."""
        plain = _normalized(text)
        return (_holds_a_rule_line(plain) or self.quotes_private(plain)
                or self.covered(plain) >= min(ECHO_MIN_WORDS, max(self.size, 1)))


def _word_runs(plain: str, n: int) -> set[str]:
    """Every run of `n` words of normalized text (the whole text when it is shorter, from 3 words)."""
    words = plain.split()
    if len(words) < n:
        return {" ".join(words)} if len(words) >= 3 else set()
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def _holds_a_rule_line(plain: str) -> bool:
    return any(line in plain for line in _RULE_LINES)


def _without_contradictions(text: str, facts: ToolFacts, *, known: Evidence, message: str = "") -> tuple[str, str]:
    """(`text` without its sentences that contradict the tools' data or state a value no evidence holds,
    why the first went). Cited or not: a model that misreads `"status": "shipped"` still cites an extract
    for "your order has not shipped yet [1]". A bare "Not yet" answers the sentence before it when that
    one asks ("Has it shipped? Not yet."), and the customer's `message` when it opens the answer: this
    message, whatever its lines (an earlier "Has it shipped?" is not what a "No" to "Can I still cancel it"
    answers)."""
    reasons: list[str] = []
    asked = [message]

    def consistent(sentence: str) -> bool:
        reason = facts.contradiction(sentence, question=asked[0]) or known.unsupported(sentence)
        asked[0] = sentence if sentence.rstrip().endswith("?") else ""
        if reason:
            reasons.append(reason)
        return reason is None

    kept = keep_sentences(text, consistent)
    return kept, f"it contradicts the tools: {reasons[0]}" if reasons else ""


def verify_citations(
    text: str,
    hits: Sequence[Hit],
    *,
    fallback_text: str,
    grounding: Sequence[Any] = (),
    tool_arguments: Sequence[Any] = (),
    vouched: str = "",
    question: str = "",
    message: str = "",
    echo: PromptEcho | None = None,
    reply_lang: str | None = None,
) -> Verified:
    """Gate 2. `grounding`: the tool results an uncited answer may rest on instead of an extract; its
    sentences that say nothing of them go (`grounded_sentences`). The calls' `tool_arguments` count
    as words (the invoice number asked about) but vouch for no link: the model wrote them. Links that
    neither the extracts, `grounding` nor `vouched` (the bot's own texts) hold are taken out
    (`without_unknown_links`). `question` is the conversation the model saw: a number from it is no claim.
    `message` is the customer's message this answer answers: what an opening bare "Yes" or "No" answers
    (a message of several lines is one message, not its last line). `echo`: the
    system prompt as `PromptEcho.of(vouched, hits)` makes it, when the caller has it already. `reply_lang`:
    the turn's reply language, which tells an uncited sentence's language (`answer_language`)."""
    tool_text = json.dumps([*tool_arguments, *grounding], default=str) if grounding else ""
    trusted = "\n".join([*(getattr(h, "text", "") or "" for h in hits), *(h.url or "" for h in hits),
                          fallback_text, vouched])
    known = f"{trusted}\n{tool_text}"
    echo = echo or PromptEcho.of(vouched, hits)
    if echo.repeated_in(text):
        return Verified(text=fallback_text, citations=(), cited_indices=(), replaced=True,
                        reason="it repeats the prompt")
    if echo.private:
        text = keep_sentences(text, lambda sentence: not echo.quotes_private(sentence))
        if not text:
            return Verified(text=fallback_text, citations=(), cited_indices=(), replaced=True,
                            reason="it quotes a private line of the prompt")
    # Of a tool's data, only a value that is a link by itself (`"pay_url": "https://…"`) vouches for one:
    # a link inside a text field is text someone may have written there ("send your card to https://…").
    # Tags first, as the stream takes them out: "?</fallback> Pay at https://…" is two sentences, not one.
    text = without_unknown_links(without_fallback_tags(text), "\n".join([trusted, *link_values(list(grounding))]))
    # Read once, for both checks: a result of 16,000 characters is walked and searched once per answer.
    facts = ToolFacts.of(list(grounding))
    results = json.dumps(list(grounding), default=str)
    of_results = Evidence.of(results, counts=facts.counts)
    of_tools = of_results | Evidence.of(json.dumps(list(tool_arguments), default=str))
    if grounding:
        text, contradiction = _without_contradictions(
            text, facts, known=of_tools | Evidence.of(f"{trusted}\n{question}"), message=message)
        if not text.strip():
            return Verified(text=fallback_text, citations=(), cited_indices=(), replaced=True, reason=contradiction)
    cleaned, cited = strip_invalid_markers(without_fallback_tags(text).strip(), count=len(hits))
    # With a valid citation it is a partial answer ("Plus costs $6 [1]; I don't know about discounts.").
    if not cited and is_refusal(cleaned, fallback_text=fallback_text):
        plain, _ = strip_invalid_markers(cleaned, count=0)
        if _normalized(plain) == _normalized(fallback_text):
            plain = fallback_text  # the bot's own words exactly, so "yes" to its offer is recognised
        elif _claims_something(plain, f"{known}\n{question}"):
            plain = ""  # a refusal that goes on to claim something uncited: the fallback says it safely
        reason = "" if plain else "a refusal that goes on to claim something uncited" if cleaned else "an empty answer"
        return Verified(text=plain or fallback_text, citations=(), cited_indices=(), replaced=not plain, reason=reason)
    if cited:
        cleaned, cited = strip_invalid_markers(without_invented_claims(without_fallback_tags(text), count=len(hits)),
                                               count=len(hits))
    else:
        cleaned = grounded_sentences(cleaned, tool_text, message=message, facts=facts,
                                     read=(of_tools, of_results), reply_lang=reply_lang) if grounding else ""
        if not cleaned:
            reason = "no sentence says what the tools returned" if grounding else "no valid citation"
            return Verified(text=fallback_text, citations=(), cited_indices=(), replaced=True, reason=reason)
    return Verified(text=renumber(cleaned, hits, cited), citations=citations_for(hits, cited), cited_indices=cited)
