"""Follow-up rewriting: turn "and on a monthly plan?" into standalone search queries.

The rewrite is used only for retrieval; the answer model sees the customer's own words. It is
skipped without history, and any failure or malformed output falls back to the raw message.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import structlog

from gateway.budget import usage_row
from gateway.settings import OFFLINE_MODEL, BotSettings

log = structlog.get_logger("gateway.rewrite")

MAX_QUERIES = 4
REWRITE_DEADLINE_SECONDS = 10.0
HISTORY_TOKEN_BUDGET = 1500  # about 4 characters a token; bounds what a rewrite call costs
MIN_TURN_TOKENS = 50  # less of a turn says too little to keep: the window ends there
_CUT_MARKER = " [… cut here: the whole was {chars:,} characters …] "
_CUT_MARKER_FOUND = re.compile(r" \[… cut here: the whole was [\d,]+ characters …\] ")
REWRITE_PROMPT = """You rewrite a customer's latest message into standalone search queries for a help-center search.
Use the conversation only to resolve what the latest message refers to. Reply with JSON only:
{"queries": ["...", "..."]} with 1 to 4 short queries. Do not answer the question."""
FRAGMENT_WORDS = 3
_REFERS_BACK = re.compile(r"\b(?:it|its|that|this|these|those|they|them|their|one|ones|same|else)\b", re.I)
_FOLLOW_UP = re.compile(r"^(and|but|what about|how about|also|or|so|then|same|that|this|it|they|those)\b", re.I)


# Structured output: providers that support JSON schemas return exactly this shape; the parser
# below still checks it, because not every provider enforces the schema.
RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "search_queries",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"queries": {"type": "array", "items": {"type": "string"},
                                       "description": "1 to 4 standalone search queries"}},
            "required": ["queries"],
            "additionalProperties": False,
        },
    },
}


class Rewriter:
    """Rewrites follow-ups with the bot's model; the offline model uses a context heuristic."""

    def __init__(self, llm) -> None:
        self._llm = llm

    async def rewrite(self, bot: BotSettings, *, history: list[dict[str, Any]], text: str,
                      usage: list[dict[str, Any]] | None = None) -> list[str]:
        """1–4 standalone queries, or `[text]` when in doubt. The call's accounting is appended to `usage`."""
        turns = bounded_history(history, max_turns=bot.history_turns)
        if not turns:
            return [text]
        if bot.model == OFFLINE_MODEL:
            return _heuristic(turns, text)
        transcript = "\n".join(f"{t['role']}: {t['content']}" for t in turns)
        messages = [
            {"role": "system", "content": REWRITE_PROMPT},
            {"role": "user", "content": f"Conversation:\n{transcript}\n\nLatest message: {text}"},
        ]
        # Offline cannot rewrite (it answers from the knowledge base), and a rewrite only improves the
        # search: one attempt per model within REWRITE_DEADLINE_SECONDS, so a provider outage is paid
        # by the answer call alone, not by both.
        models = bot.language_models()
        try:
            result = await asyncio.wait_for(self._llm.complete(
                model=models[0], fallbacks=models[1:], messages=messages, response_format=RESPONSE_FORMAT,
                metadata={"bot": bot.name, "purpose": "rewrite"}, retries=0,
                on_abandoned=None if usage is None else lambda cut: usage.append(usage_row(cut))),
                REWRITE_DEADLINE_SECONDS)
        except Exception as exc:  # a failed rewrite must never block the answer
            # A deadline's TimeoutError has no text of its own: say which limit it was, and of which models.
            error = (f"no answer within {REWRITE_DEADLINE_SECONDS:g}s" if isinstance(exc, TimeoutError)
                     else f"{type(exc).__name__}: {exc}"[:200])
            log.warning("rewrite.failed", bot=bot.name, models=list(models), error=error,
                        next="searching with the message as written")
            return [text]
        if usage is not None:
            usage.append(usage_row(result))
        queries = parse_queries(result.text)
        if not queries:
            # Its length, not its text: a rewrite restates the customer's message, and logs hold none (docs/data.md).
            log.info("rewrite.malformed", bot=bot.name, chars=len(result.text or ""))
            return [text]
        return queries


def parse_queries(output: str | None) -> list[str]:
    """The `queries` of the model's JSON (code fences tolerated); [] when malformed."""
    if not output:
        return []
    cleaned = output.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        data = json.loads(cleaned)
    except (ValueError, RecursionError):  # RecursionError: nested past what json.loads can read
        return []
    queries = data.get("queries") if isinstance(data, dict) else None
    if not isinstance(queries, list):
        return []
    out = [q.strip()[:300] for q in queries if isinstance(q, str) and q.strip()]
    return list(dict.fromkeys(out))[:MAX_QUERIES]


def bounded_history(history: list[dict[str, Any]], *, max_turns: int,
                    token_budget: int = HISTORY_TOKEN_BUDGET) -> list[dict[str, Any]]:
    """The most recent user/assistant turns that fit in `max_turns` and the token budget; no tool turns.

    A turn takes at most half the budget, and the oldest one kept may take what is left: a longer one is cut
    (`_cut`). A turn that did not fit ended the window, so one long answer emptied it, and its follow-up was
    neither rewritten nor answered with the conversation."""
    kept: list[dict[str, Any]] = []
    used = 0
    for turn in reversed(history):
        if turn.get("role") not in ("user", "assistant") or not turn.get("content"):
            continue
        room = min(token_budget - used, token_budget // 2)
        if len(kept) >= max_turns * 2 or room < MIN_TURN_TOKENS:
            break
        content = _cut(turn["content"], chars=(room - 4) * 4)
        kept.append({"role": turn["role"], "content": content})
        used += len(content) // 4 + 4
    return list(reversed(kept))


def _cut(text: str, *, chars: int) -> str:
    """`text`, or its start and its end in `chars` characters with the middle marked as cut: what a follow-up
    refers to is often at either end ("Team costs $12 …", "… Want the yearly price?")."""
    if len(text) <= chars:
        return text
    marker = _CUT_MARKER.format(chars=len(text))
    keep = max(chars - len(marker), 0)
    return f"{text[:keep - keep // 2]}{marker}{text[len(text) - keep // 2:]}"


def _heuristic(turns: list[dict[str, Any]], text: str) -> list[str]:
    """Offline: a follow-up also searches with the previous question prepended.

    A follow-up starts like one ("and on a yearly plan?"), refers back ("Is it free?"), or is a
    fragment of at most `FRAGMENT_WORDS` words ("Team plan?"). A short question complete in itself
    ("How often does sync run?") is searched alone: with the previous question prepended, that query
    won the fusion and the answer was about the previous question."""
    previous = next((t["content"] for t in reversed(turns) if t["role"] == "user"), None)
    if previous:  # a long one is cut in the window: the marker's words are not the customer's to search for
        previous = _CUT_MARKER_FOUND.sub(" ", previous)
    stripped = text.strip()
    if previous and (len(stripped.split()) <= FRAGMENT_WORDS or _FOLLOW_UP.match(stripped)
                     or _REFERS_BACK.search(stripped)):
        return [text, f"{previous} {text}"]
    return [text]
