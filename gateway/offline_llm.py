"""The offline extractive responder: the default "model", which needs no key and no network.

It is a LiteLLM custom provider (`offline/extractive`), so the pipeline calls it exactly as it
calls a hosted model. It reads the numbered extracts out of the system prompt (the format of
`gateway.pipeline.prompts`), scores every sentence against the customer's last message (content
words, stopwords removed, light stemming, rarer words weigh more, a matching heading helps), and
answers by quoting the 1-3 best sentences with their [n] markers. Without extracts, or without a
decent overlap, it answers with the bot's fallback text, which the rules carry in a <fallback> tag.

It never calls tools, and it reports approximate token usage (about 4 characters a token).
"""

from __future__ import annotations

import asyncio

import html
import math
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import litellm
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import GenericStreamingChunk, ModelResponse

from gateway.pipeline.prompts import EXTRACT_TAG, FALLBACK_TAG

PROVIDER = "offline"
MODEL = "offline/extractive"
"""The LiteLLM model string; `gateway.settings.OFFLINE_MODEL` is the name bots use for it."""

DEFAULT_FALLBACK = "I don't know the answer to that."
MIN_COVERAGE = 0.35
MAX_SENTENCES = 3
MAX_ANSWER_CHARS = 700
MAX_LIST_CHARS = 400  # a sentence ending in ":" takes its list along only if the two stay readable
FOLLOW_RATIO = 0.75  # a further sentence must score this close to the best one, or it adds noise
ABOUT_PAGE_FACTOR = 0.4
UBIQUITOUS_FACTOR = 0.15
MIN_DIRECT = 0.2

_EXTRACT = re.compile(rf"<{EXTRACT_TAG}\s+([^>]*)>\n?(.*?)\n?</{EXTRACT_TAG}>", re.S)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_FALLBACK = re.compile(rf"<{FALLBACK_TAG}>(.*?)</{FALLBACK_TAG}>", re.S)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_MD_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_ITEM = re.compile(r"^\s*(?:[-*+]\s+|\d+[.)]\s+)")
_TERMINAL = re.compile(r"[.!?:;][\"')\]*_]*$")
# Words a sentence cannot end on: an extract whose last words are these was cut by the chunker.
_DANGLING = frozenset(
    """a an the and or but nor of to in on at by for from with without per as than into onto via see
    your our their its his her my this that these those is are was were be can will would should may""".split()
)
_PRONOUN = re.compile(r"^(?:it|its|they|their|this|these|that|those|he|she)\b", re.I)
# Addresses are not words: "support@acme.example" must not match a question about support.
_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|\b[a-z][a-z0-9+.-]*://\S+|\b(?:[a-z0-9-]+\.)+[a-z]{2,}(?:/\S*)?")
# A line that describes its page ("How to create an account…", "This page explains…") is a table
# of contents, not an answer: it names every topic and answers none.
_ABOUT_PAGE = re.compile(
    r"^(?:how to\b|learn (?:how|about)\b|find out\b|(?:this|the following) (?:page|article|guide|section|document|"
    r"chapter|faq)\b|here (?:you|we)\b|(?:on|in) this (?:page|article|guide|section)\b)", re.I)
_QUESTION_WORDS = frozenset("how what why when where which who whom whose can do does is are should".split())
_MD_PREFIX = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+|\d+[.)]\s+|>\s*)+")
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing don down during each few for from further get got had
    has have having he her here hers herself him himself his how i if in into is it its itself just let me
    more most my myself no nor not now of off on once only or other our ours ourselves out over own please
    same she should so some such than that the their theirs them themselves then there these they this
    those through to too under until up very was we were what when where which while who whom why will
    with would you your yours yourself yourselves tell know want need like also one us may might must
    shall thing things way much many""".split()
)


def stem(word: str) -> str:
    """A deliberately light stemmer: enough to match refund/refunds/refunded, charge/charges."""
    for suffix, repl, min_len in (("ies", "y", 5), ("sses", "ss", 6), ("ing", "", 6), ("ed", "", 5),
                                  ("ly", "", 5), ("s", "", 4)):
        if word.endswith(suffix) and len(word) >= min_len and not word.endswith("ss"):
            word = word[: len(word) - len(suffix)] + repl
            if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # resetting -> reset, planned -> plan
            break
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def terms(text: str) -> set[str]:
    """Content terms of a text: lower-cased words minus stopwords, stemmed; emails and URLs are skipped."""
    text = _ADDRESS.sub(" ", text.lower())
    return {stem(w) for w in _WORD.findall(text) if w not in _STOPWORDS and len(w) > 1}


@dataclass(frozen=True, slots=True)
class Sentence:
    """One quotable sentence of an extract, with where it sits."""

    text: str
    block: int  # the paragraph or list item it came from: a pronoun refers back within it
    heading: str | None  # the heading above it inside the extract, if the extract holds one


@dataclass(frozen=True, slots=True)
class Extract:
    """One numbered extract parsed back from the system prompt."""

    n: int
    heading_terms: frozenset[str]
    sentences: tuple[str, ...]
    # Per sentence: the terms of the title and of the heading it sits under, when the extract itself
    # holds a heading (a chunk may span sections: "## Plus … ## Team"); else None (use heading_terms).
    section_terms: tuple[frozenset[str] | None, ...] = ()
    # Per sentence: its block number and the name of the section it sits in ("Plus" for "Plans > Plus").
    blocks: tuple[int, ...] = ()
    subjects: tuple[str, ...] = ()


def parse_extracts(system: str) -> list[Extract]:
    """The numbered extracts of a system prompt built by `gateway.pipeline.prompts`."""
    out = []
    for match in _EXTRACT.finditer(system):
        attrs = {k: html.unescape(v) for k, v in _ATTR.findall(match.group(1))}
        if not attrs.get("n", "").isdigit():
            continue
        title, heading = attrs.get("title", ""), attrs.get("heading", "")
        section = heading.split(" > ")[-1].strip() or title
        units = sentence_units(html.unescape(match.group(2)))
        out.append(Extract(
            int(attrs["n"]), frozenset(terms(f"{title} {heading}")), tuple(u.text for u in units),
            tuple(None if u.heading is None else frozenset(terms(f"{title} {u.heading}")) for u in units),
            tuple(u.block for u in units), tuple(u.heading or section for u in units),
        ))
    return out


def parse_fallback(system: str) -> str:
    """The bot's fallback text, as the rules embed it."""
    match = _FALLBACK.search(system)
    return html.unescape(match.group(1)).strip() if match else DEFAULT_FALLBACK


def split_sentences(text: str) -> list[str]:
    """Whole sentences of an extract, Markdown stripped.

    Lines are joined into their paragraph or list item first (Markdown wraps sentences across
    lines), then split into sentences. Dropped: headings, table rows, code fences, and the
    fragments a chunk boundary leaves: a paragraph that starts mid-sentence (lower-case) loses its
    first piece, and a last piece without closing punctuation is kept only in a list item that
    does not stop on a word that needs a continuation ("per", "the", "with", ...). A sentence that
    introduces a list ("We accept:") takes the list's items along, or is dropped if they are missing.
    """
    return [u.text for u in sentence_units(text)]


def sectioned_sentences(text: str) -> list[tuple[str, str | None]]:
    """`split_sentences` with the in-extract heading each sentence sits under (None before any)."""
    return [(u.text, u.heading) for u in sentence_units(text)]


def sentence_units(text: str) -> list[Sentence]:
    """`split_sentences` as `Sentence` records."""
    cleaned = []
    for block, is_item, heading in _blocks(text):
        block = _MD_LINK.sub(r"\1", _MD_PREFIX.sub("", block)).replace("**", "").replace("`", "").strip()
        pieces = [p.strip() for p in _SENTENCE_END.split(block) if p.strip()]
        if pieces and not is_item and not pieces[0][0].isupper() and not pieces[0][0].isdigit():
            pieces = pieces[1:]  # starts mid-sentence: the chunk began after the sentence did
        if pieces and not _TERMINAL.search(pieces[-1]) and (not is_item or _cut_short(pieces[-1])):
            pieces = pieces[:-1]  # stops mid-sentence: the chunk ended before the sentence did
        cleaned.append((pieces, is_item, heading))
    out: list[Sentence] = []
    absorbed: set[int] = set()
    for b, (pieces, is_item, heading) in enumerate(cleaned):
        if b in absorbed:
            continue
        if pieces and pieces[-1].endswith(":"):
            # "Data is stored in one of two regions:" says nothing without the list that follows.
            items = []
            for k in range(b + 1, len(cleaned)):
                if not cleaned[k][1] or cleaned[k][2] != heading or not cleaned[k][0]:
                    break
                items.append(k)
            listed = "; ".join(" ".join(cleaned[k][0]).rstrip(".;,") for k in items)
            if items and len(pieces[-1]) + len(listed) <= MAX_LIST_CHARS:
                pieces = pieces[:-1] + [f"{pieces[-1]} {listed}."]
                absorbed.update(items)
            else:
                pieces = pieces[:-1]
        out.extend(Sentence(p, b, heading) for p in pieces if len(p.split()) >= 3)
    return out


def _blocks(text: str) -> list[tuple[str, bool, str | None]]:
    """Paragraphs and list items with their wrapped lines joined: (text, is a list item, heading above)."""
    blocks: list[tuple[str, bool, str | None]] = []
    current: list[str] = []
    is_item = False
    in_code = False
    heading: str | None = None

    def flush() -> None:
        nonlocal current, is_item
        if current:
            blocks.append((" ".join(current), is_item, heading))
        current, is_item = [], False

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            in_code = not in_code
            flush()
            continue
        if not in_code and stripped.startswith("#"):
            flush()
            heading = stripped.lstrip("#").strip()
            continue
        if in_code or not stripped or stripped.startswith("|"):
            flush()  # a heading or table row is not a sentence, and it ends the paragraph before it
            continue
        if _ITEM.match(line):
            flush()
            is_item = True
        current.append(stripped)
    flush()
    return blocks


def _cut_short(piece: str) -> bool:
    words = piece.lower().rstrip(",;").split()
    return piece.rstrip().endswith((",", ";", "(", "-", "–")) or (bool(words) and words[-1] in _DANGLING)


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
    wanted = terms(question)
    extracts = parse_extracts(system)
    candidates = [Candidate(e, i, terms(s)) for e in extracts for i, s in enumerate(e.sentences)]
    if not wanted or not candidates:
        return fallback
    # The bot's own instructions name its product and domain ("the assistant of Acme Notes"): every
    # question is about those words, so they are no evidence that a sentence answers this one.
    domain = terms(system.split("\n\nRules:", 1)[0]) if "\n\nRules:" in system else set()
    weight = _weights(wanted, extracts, candidates, domain=domain)
    total = sum(weight.values())
    scored = []
    for c in candidates:
        direct = sum(weight[t] for t in wanted & c.terms)
        if direct < MIN_DIRECT * total:
            continue  # a heading alone is not an answer: the sentence itself must carry some of the question
        # A heading counts twice: its words stand in, at half weight, for ones the sentence lacks,
        # and any match lifts the whole extract, so the section about the question wins ties.
        by_heading = sum(weight[t] for t in (wanted & c.section) - c.terms) * 0.5
        heading_bonus = 1 + 0.25 * sum(weight[t] for t in wanted & c.section) / total
        score = (direct + by_heading) / total * heading_bonus
        if _ABOUT_PAGE.match(c.text):
            score *= ABOUT_PAGE_FACTOR
        scored.append((score, c))
    scored.sort(key=lambda item: -item[0])
    if not scored or scored[0][0] < MIN_COVERAGE:
        return fallback
    return " ".join(_cite(text, n) for n, text in _select(scored, wanted))


@dataclass(frozen=True, slots=True)
class Candidate:
    """A sentence being scored, with the terms of its text and of the section it sits in."""

    extract: Extract
    pos: int
    terms: set[str]

    @property
    def text(self) -> str:
        """The sentence."""
        return self.extract.sentences[self.pos]

    @property
    def section(self) -> frozenset[str]:
        """The terms of its title and heading."""
        e, i = self.extract, self.pos
        own = e.section_terms[i] if i < len(e.section_terms) else None
        return e.heading_terms if own is None else own

    @property
    def key(self) -> tuple[int, int]:
        """Which extract and where in it."""
        return (self.extract.n, self.pos)


def _weights(wanted: set[str], extracts: list[Extract], candidates: list[Candidate], *,
             domain: set[str] = frozenset()) -> dict[str, float]:
    """How much each question term is worth as evidence.

    Rarer words weigh more (an IDF over the sentences given). A word no extract uses weighs like the
    commonest one: it cannot be quoted, and letting it dominate would refuse "how long do refunds
    take?" over "long". A word found in most extracts (the product's name, the topic every hit
    shares) tells the extracts apart no better than a stopword, so it is down-weighted again, as is
    a word of the bot's own instructions (`domain`).
    """
    df: dict[str, int] = {}
    for c in candidates:
        for t in c.terms & wanted:
            df[t] = df.get(t, 0) + 1
    n = len(candidates)
    extract_terms = [set(e.heading_terms).union(*(c.terms for c in candidates if c.extract is e)) for e in extracts]
    out = {}
    for t in wanted:
        w = math.log(1 + n / ((df.get(t) or n) + 0.5))
        spread = sum(t in ts for ts in extract_terms)
        half = len(extracts) / 2
        if len(extracts) >= 3 and spread > half:
            w *= max(UBIQUITOUS_FACTOR, (len(extracts) - spread) / half)
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
        if _PRONOUN.match(text) and (c.extract.n, c.pos - 1) not in chosen:
            if rank and (c.extract.n, _subject(c)) != (scored[0][1].extract.n, _subject(scored[0][1])):
                continue  # "It costs $12" from another section is about something else
            subject = _subject(c)
            before = _previous_in_block(c)
            if subject:
                text = f"{subject}: {text}"
            elif before is not None and not rank:
                chosen[(c.extract.n, c.pos - 1)] = before  # "Refunds go back to … They take 5 days."
                length += len(before)
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
    if not words or len(words) > 4 or name.endswith("?") or words[0].lower() in _QUESTION_WORDS:
        return None
    return name


def _cite(sentence: str, n: int) -> str:
    """Put the marker before the closing punctuation: 'Refunds take 5 days [1].'"""
    if sentence[-1] in ".!?":
        return f"{sentence[:-1].rstrip()} [{n}]{sentence[-1]}"
    return f"{sentence} [{n}]"


def approx_tokens(text: str) -> int:
    """About four characters a token; good enough for budgets of a free model."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def _usage(messages: list[dict[str, Any]], text: str) -> dict[str, int]:
    prompt = sum(approx_tokens(_content(m)) for m in messages)
    completion = approx_tokens(text)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _words(text: str) -> Iterator[str]:
    for i, word in enumerate(text.split(" ")):
        yield word if i == 0 else " " + word


class OfflineExtractiveLLM(CustomLLM):
    """The LiteLLM handler behind `offline/extractive`."""

    def _fill(self, model_response: ModelResponse, messages: list[dict[str, Any]]) -> ModelResponse:
        text = answer(messages)
        model_response.choices[0].message.content = text  # type: ignore[union-attr]
        model_response.choices[0].finish_reason = "stop"
        model_response.model = MODEL
        model_response.created = int(time.time())
        setattr(model_response, "usage", litellm.Usage(**_usage(messages, text)))
        return model_response

    def completion(self, model: str, messages: list, api_base: str, custom_prompt_dict: dict,
                   model_response: ModelResponse, *args: Any, **kwargs: Any) -> ModelResponse:
        """Answer at once."""
        return self._fill(model_response, messages)

    async def acompletion(self, model: str, messages: list, api_base: str, custom_prompt_dict: dict,
                          model_response: ModelResponse, *args: Any, **kwargs: Any) -> ModelResponse:
        """Answer in a worker thread: scoring is CPU work, and the event loop must keep acknowledging webhooks."""
        return await asyncio.to_thread(self._fill, model_response, messages)

    def streaming(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Iterator[GenericStreamingChunk]:
        """Stream the answer word by word, then a final chunk with finish_reason "stop" and usage."""
        text = answer(messages)
        for word in _words(text):
            yield _chunk(word)
        yield _chunk("", finished=True, usage=_usage(messages, text))

    async def astreaming(self, model: str, messages: list, *args: Any,
                         **kwargs: Any) -> AsyncIterator[GenericStreamingChunk]:
        """Async twin of `streaming`; the answer is computed in a worker thread (see `acompletion`)."""
        text = await asyncio.to_thread(answer, messages)
        for word in _words(text):
            yield _chunk(word)
        yield _chunk("", finished=True, usage=_usage(messages, text))


def _chunk(text: str, *, finished: bool = False, usage: dict[str, int] | None = None) -> GenericStreamingChunk:
    return GenericStreamingChunk(
        text=text,
        tool_use=None,
        is_finished=finished,
        finish_reason="stop" if finished else "",
        usage=usage,  # type: ignore[typeddict-item]
        index=0,
    )


def register_offline_provider() -> None:
    """Register the responder with LiteLLM (idempotent). Called from the composition root."""
    if not any(item.get("provider") == PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": OfflineExtractiveLLM()})
    # LiteLLM reads the map into its provider lists lazily; refresh now so the first call routes.
    from litellm.utils import custom_llm_setup

    custom_llm_setup()
