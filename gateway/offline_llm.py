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
_MD_PREFIX = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+|\d+[.)]\s+|>\s*)+")
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing don down during each few for from further get got had
    has have having he her here hers herself him himself his how i if in into is it its itself just let me
    more most my myself no nor not now of off on once only or other our ours ourselves out over own please
    same she should so some such than that the their theirs them themselves then there these they this
    those through to too under until up very was we were what when where which while who whom why will
    with would you your yours yourself yourselves tell know want need like also one us may might must
    shall thing things way""".split()
)


def stem(word: str) -> str:
    """A deliberately light stemmer: enough to match refund/refunds/refunded, charge/charges."""
    for suffix, repl, min_len in (("ies", "y", 5), ("sses", "ss", 6), ("ing", "", 6), ("ed", "", 5),
                                  ("ly", "", 5), ("s", "", 4)):
        if word.endswith(suffix) and len(word) >= min_len and not word.endswith("ss"):
            word = word[: len(word) - len(suffix)] + repl
            break
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def terms(text: str) -> set[str]:
    """Content terms of a text: lower-cased words minus stopwords, stemmed."""
    return {stem(w) for w in _WORD.findall(text.lower()) if w not in _STOPWORDS and len(w) > 1}


@dataclass(frozen=True, slots=True)
class Extract:
    """One numbered extract parsed back from the system prompt."""

    n: int
    heading_terms: frozenset[str]
    sentences: tuple[str, ...]
    # Per sentence: the terms of the title and of the heading it sits under, when the extract itself
    # holds a heading (a chunk may span sections: "## Plus … ## Team"); else None (use heading_terms).
    section_terms: tuple[frozenset[str] | None, ...] = ()


def parse_extracts(system: str) -> list[Extract]:
    """The numbered extracts of a system prompt built by `gateway.pipeline.prompts`."""
    out = []
    for match in _EXTRACT.finditer(system):
        attrs = {k: html.unescape(v) for k, v in _ATTR.findall(match.group(1))}
        if not attrs.get("n", "").isdigit():
            continue
        body = html.unescape(match.group(2))
        pairs = sectioned_sentences(body)
        out.append(Extract(int(attrs["n"]), frozenset(terms(f"{attrs.get('title', '')} {attrs.get('heading', '')}")),
                           tuple(p for p, _ in pairs),
                           tuple(None if h is None else frozenset(terms(f"{attrs.get('title', '')} {h}"))
                                 for _, h in pairs)))
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
    does not stop on a word that needs a continuation ("per", "the", "with", ...).
    """
    return [sentence for sentence, _ in sectioned_sentences(text)]


def sectioned_sentences(text: str) -> list[tuple[str, str | None]]:
    """`split_sentences` with the in-extract heading each sentence sits under (None before any)."""
    out: list[tuple[str, str | None]] = []
    for block, is_item, heading in _blocks(text):
        block = _MD_LINK.sub(r"\1", _MD_PREFIX.sub("", block)).replace("**", "").replace("`", "").strip()
        pieces = [p.strip() for p in _SENTENCE_END.split(block) if p.strip()]
        if pieces and not is_item and not pieces[0][0].isupper() and not pieces[0][0].isdigit():
            pieces = pieces[1:]  # starts mid-sentence: the chunk began after the sentence did
        if pieces and not _TERMINAL.search(pieces[-1]) and (not is_item or _cut_short(pieces[-1])):
            pieces = pieces[:-1]  # stops mid-sentence: the chunk ended before the sentence did
        out.extend((p, heading) for p in pieces if len(p.split()) >= 3)
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
    if not wanted or not extracts:
        return fallback
    sentences = [(e, i, s, terms(s)) for e in extracts for i, s in enumerate(e.sentences)]
    section = {(e.n, i): (e.section_terms[i] if i < len(e.section_terms) and e.section_terms[i] is not None
                          else e.heading_terms) for e, i, _, _ in sentences}
    if not sentences:
        return fallback
    df: dict[str, int] = {}
    for _, _, _, words in sentences:
        for w in words:
            df[w] = df.get(w, 0) + 1
    n = len(sentences)
    # Rarer words weigh more. A word no extract uses weighs like the commonest one: it cannot be
    # quoted, and letting it dominate would refuse "how long do refunds take?" over "long".
    weight = {t: math.log(1 + n / ((df.get(t) or n) + 0.5)) for t in wanted}
    total = sum(weight.values())
    scored = []
    for extract, pos, sentence, words in sentences:
        direct = sum(weight[t] for t in wanted & words)
        if not direct:
            continue  # a heading alone is not an answer: the sentence itself must match
        # A heading counts twice: its words stand in, at half weight, for ones the sentence lacks,
        # and any match lifts the whole extract, so the section about the question wins ties.
        heading_terms = section[(extract.n, pos)]
        by_heading = sum(weight[t] for t in (wanted & heading_terms) - words) * 0.5
        heading_bonus = 1 + 0.25 * sum(weight[t] for t in wanted & heading_terms) / total
        scored.append(((direct + by_heading) / total * heading_bonus, extract.n, pos, sentence))
    scored.sort(key=lambda item: -item[0])
    if not scored or scored[0][0] < MIN_COVERAGE:
        return fallback
    best = scored[0][0]
    best_section = (scored[0][1], section[(scored[0][1], scored[0][2])])
    chosen, seen, length = [], set(), 0
    for score, n, pos, sentence in scored:
        key = sentence.lower()
        if score < max(MIN_COVERAGE, 0.6 * best) or key in seen or length + len(sentence) > MAX_ANSWER_CHARS:
            continue
        if _PRONOUN.match(sentence) and (n, section[(n, pos)]) != best_section:
            continue  # "It costs $12" quoted from another section would be about something else
        chosen.append((n, pos, sentence))
        seen.add(key)
        length += len(sentence)
        if len(chosen) == MAX_SENTENCES:
            break
    # Best extract first; within an extract, keep the text's own order so it reads naturally.
    rank = {n: i for i, n in enumerate(dict.fromkeys(n for n, _, _ in chosen))}
    chosen.sort(key=lambda item: (rank[item[0]], item[1]))
    return " ".join(_cite(sentence, n) for n, _, sentence in chosen)


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
