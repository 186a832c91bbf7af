"""The pipeline proper. It knows nothing of channels beyond the normalized turn it is given."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from gateway.budget import BUDGET_ESCALATION
from gateway.errors import LLMError, RetrievalError
from gateway.models import ANSWERED_BY_PLATFORM, OPT_IN, OPT_OUT, CallerIdentity, Citation, is_blank
from gateway.observability import otel
from gateway.pipeline.answer import TurnRecord
from gateway.pipeline.human_request import asks_for_human
from gateway.pipeline.small_talk import is_no, is_yes, small_talk, starts_with_yes
from gateway.pipeline.tool_journal import ToolJournal
from gateway.reply_settings import Outage
from gateway.settings import BotSettings

log = structlog.get_logger("gateway.pipeline")

# The web chat refuses longer texts with 413 (`channels.web.max_message_chars`, 4,000 by default);
# chat platforms allow more (Slack 40,000 characters), and a webhook must be acknowledged, so a longer
# message is stored whole and answered with `replies.too_long` instead of being searched: a question is
# never that long. A bot whose web chat allows more gets the same limit on every channel (`_question_limit`).
MAX_QUESTION_CHARS = 4000


@dataclass(slots=True)
class Turn:
    """Everything the pipeline needs to answer one inbound message."""

    bot: BotSettings
    message_id: int
    conversation_id: int
    state: str
    text: str
    identity: CallerIdentity
    history: list[dict[str, Any]] = field(default_factory=list)
    attachments: list[dict[str, Any]] = field(default_factory=list)
    unanswered_turns: int = 0
    command: str | None = None
    greeting: str | None = None
    needs_reply: bool = False
    on_token: Callable[[str], Awaitable[None]] | None = None
    # The tokens streamed so far are void: a round of the tool loop wrote them, and the answer is the next
    # round's. The surfaces drop them (the widget) or write the next tokens over them (chat apps).
    on_reset: Callable[[], Awaitable[None]] | None = None
    # Filled as the turn goes, so a turn that crashes or runs out of time still stores its spend and tool calls.
    record: TurnRecord = field(default_factory=TurnRecord)
    # The tool calls an earlier attempt at this message finished: a retry replays them instead of running them.
    tool_journal: ToolJournal | None = None


@dataclass(slots=True)
class PipelineResult:
    """What to store and send. `reply` is None when the bot must stay quiet (an operator holds the thread)."""

    reply: str | None
    citations: tuple[Citation, ...] = ()
    retrieved: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: list[dict[str, Any]] = field(default_factory=list)
    escalate: str | None = None
    # What opened the escalation, for the log: `escalate` may be the model's words, quoting the customer.
    trigger: str | None = None
    answered: bool = True
    # Whether the turn counts towards `escalation.max_unanswered_turns` (or, answered, resets the count): small
    # talk does neither. An "ok" after each "I don't know…" set it back to 0, and the customer never got a person.
    counts: bool = True
    error: str | None = None
    author: str = "bot"
    queries: list[str] = field(default_factory=list)
    # The confirmation of a bare STOP: the one reply the outbox sends past it (gateway/delivery/window.py).
    confirms_opt_out: bool = False

    def replies(self) -> list[str]:
        """The texts to store as outbound messages, in order."""
        return [self.reply] if self.reply is not None else []


class Pipeline:
    """Answers one turn. Built once in the composition root with its collaborators."""

    def __init__(self, *, search, answerer, rewriter=None, metrics=None, budget=None) -> None:
        self._search = search
        self._answerer = answerer
        self._rewriter = rewriter
        self._metrics = metrics
        self._budget = budget

    async def handle(self, turn: Turn) -> PipelineResult:
        """Run the steps for one message; raises only on bugs (the worker turns those into a handoff)."""
        bound = log.bind(message_id=turn.message_id, conversation_id=turn.conversation_id, bot=turn.bot.name)
        if (keyword := opt_keyword(turn)) is not None:
            bound.info("pipeline.opt_keyword", command=turn.command, **({"confirmed": True} if keyword.reply else {}))
            return keyword
        if turn.state != "bot":
            bound.info("pipeline.operator_holds_thread", state=turn.state, notice=turn.needs_reply)
            if turn.needs_reply:  # the person's reply comes as a message of its own; this ends the pending state
                return PipelineResult(reply=holding_notice(turn.bot, turn.state), author="system")
            return PipelineResult(reply=None, answered=False)
        if turn.command in ("start", "help"):  # Telegram's /start and /help, WhatsApp's HELP
            return PipelineResult(reply=greeting(turn), answered=True)
        text = turn.text.strip()
        if is_blank(text) and small_talk(said := _sticker_emoji(turn.attachments)):
            text = said  # a 👍 sticker says what a 👍 typed does; it got "I can only read text"
        if is_blank(text):
            if turn.attachments:  # a photo, a voice note, a sticker: what we cannot read yet
                return PipelineResult(reply=turn.bot.replies.text_only, answered=False)
            # A bare mention or an empty /ask: the person is there but asked nothing yet.
            return PipelineResult(reply=greeting(turn), answered=True)
        limit = _question_limit(turn.bot)
        wanted = person_asked_for(text, turn.bot)
        if len(text) > limit and not wanted:
            bound.info("pipeline.too_long", chars=len(text))
            return PipelineResult(reply=turn.bot.replies.too_long_reply(chars=len(text), limit=limit), answered=False)
        if wanted:
            return PipelineResult(reply=turn.bot.escalation.acknowledgement, escalate=f"customer asked: {wanted!r}",
                                  trigger="customer_asked", answered=False)
        kind = _small_talk_in_context(text, turn)
        if kind == "accepts_offer":
            return PipelineResult(reply=turn.bot.escalation.acknowledgement,
                                  escalate="customer said yes to the offer of a person", trigger="offer_accepted",
                                  answered=False)
        if kind is not None:
            bound.info("pipeline.small_talk", kind=kind)
            return PipelineResult(reply=turn.bot.thanks_text if kind == "thanks" else greeting(turn),
                                  answered=True, counts=False)

        if await self._budget_spent(turn, bound):
            # Checked before any model call (the rewrite is one): a spent budget means none at all today.
            bound.warning("pipeline.budget_spent")
            return handoff(turn.bot, "budget_spent", reason=BUDGET_ESCALATION, trigger="budget")
        record = turn.record
        queries = [text]
        if self._rewriter is not None and turn.history:
            with otel.span("pipeline.rewrite"):
                queries = await self._rewriter.rewrite(turn.bot, history=turn.history, text=text, usage=record.usage)
        started = time.monotonic()
        try:
            with otel.span("pipeline.retrieve", attributes={"gateway.queries": len(queries)}) as span:
                found = await self._search.search(turn.bot.name, queries, turn.bot.retrieval)
                span.set_attributes({"gateway.hits": len(found.hits), "gateway.gate_refused": found.refused})
        except RetrievalError as exc:
            self._observe("retrieve", started)  # as for the llm stage below: an outage's wait is latency too
            bound.error("retrieval.unavailable", error=str(exc))
            return handoff(turn.bot, "search_down", reason="knowledge base unavailable", trigger="search_down",
                           queries=queries,
                           usage=record.usage)
        self._observe("retrieve", started)
        hits = list(found.hits)
        bound.info("retrieval.done", queries=len(queries), hits=len(hits), refused=found.refused, gate=found.reason)

        started = time.monotonic()
        try:
            with otel.span("pipeline.answer") as span:
                answer = await self._answerer.answer(turn, hits=hits, record=record)
                span.set_attributes({"gateway.answered": answer.answered, "gateway.citations": len(answer.citations),
                                     "gateway.tool_calls": len(answer.tool_calls)})
        except LLMError as exc:
            # The wait counts too: observed only when a model answered, an outage's timeouts and
            # retries left the stage's latency looking healthy.
            self._observe("llm", started)
            bound.error("llm.all_models_failed", error=str(exc))
            return handoff(turn.bot, "llm_down", reason="every model failed", trigger="llm_down", queries=queries,
                           retrieved=_retrieved(hits), usage=record.usage, tool_calls=record.tool_calls)
        self._observe("llm", started)
        escalate, reply = answer.escalate, answer.text
        trigger = "assistant" if escalate else None  # the model's `escalate_to_human`
        if not escalate and not answer.answered and turn.bot.escalation.enabled:
            limit = turn.bot.escalation.max_unanswered_turns
            if limit and turn.unanswered_turns + 1 >= limit:
                escalate = f"{turn.unanswered_turns + 1} consecutive turns without an answer"
                trigger = "unanswered_turns"
                # The escalation's acknowledgement follows this reply: an offer of a person in it
                # ("Would you like me to get a person?") would ask what is already decided.
                reply = _without_closing_question(reply) or turn.bot.escalation.acknowledgement
        return PipelineResult(
            reply=reply, citations=answer.citations, retrieved=_retrieved(hits), tool_calls=answer.tool_calls,
            usage=record.usage, escalate=escalate, trigger=trigger, answered=answer.answered, queries=queries,
        )

    async def _budget_spent(self, turn: Turn, bound: Any) -> bool:
        """True when the bot's daily budget is spent. A spending that cannot be read (a database blip)
        answers as if there were no budget, with an error in the log: the turn's own writes would fail
        too if the database were gone, and a blip is no reason to hand a customer to a person."""
        if self._budget is None:
            return False
        try:
            return await self._budget.exhausted(turn.bot)
        except Exception as exc:
            bound.error("pipeline.budget_unreadable", error=f"{type(exc).__name__}: {exc}"[:300])
            return False

    def _observe(self, stage: str, started: float) -> None:
        if self._metrics:
            self._metrics.observe_stage(stage, time.monotonic() - started)


def _question_limit(bot: BotSettings) -> int:
    """The longest message answered: what the bot's web chat accepts, and at least `MAX_QUESTION_CHARS`."""
    web = bot.channels.web
    return max(MAX_QUESTION_CHARS, web.max_message_chars) if web is not None else MAX_QUESTION_CHARS


def _without_closing_question(text: str) -> str:
    """`text` without its last sentence when that one is a question; "" when it is the only one."""
    sentences = re.split(r"(?<=[.!?])\s+", text.strip())
    return " ".join(sentences[:-1]) if sentences[-1].endswith("?") else text.strip()


def person_asked_for(text: str, bot: BotSettings) -> str | None:
    """The `escalation.phrases` phrase with which `text` asks `bot` for a person, as a turn reads it; None when
    it asks for none or escalation is off. A long complaint asking for a person gets one rather than "too long":
    its first and last question-limit characters are read (a line break apart, no clause spans them), never the
    whole. The hand-back reads a message the bot never began with it too (`taken_over_before`)."""
    if not bot.escalation.enabled:
        return None
    limit = _question_limit(bot)
    return asks_for_human(text if len(text) <= limit else f"{text[:limit]}\n{text[-limit:]}", bot.escalation.phrases)


def accepts_offer(text: str, history: list[dict[str, Any]], bot: BotSettings) -> bool:
    """Whether `text` says yes to a person, offered by the bot's last reply in `history` (its `fallback_text`,
    a question); "Yes, a person would be great" too. False when escalation is off. The hand-back reads a message
    the bot never began with it too (`taken_over_before`): answered after it, it would open an escalation."""
    return (bot.escalation.enabled and (is_yes(text) or starts_with_yes(text))
            and _offers_a_person(_last_reply(history), bot))


def _last_reply(history: list[dict[str, Any]]) -> str:
    """The text of the last assistant message in `history` (the bot's, a person's, a notice), stripped; or ""."""
    return next((str(m.get("content") or "") for m in reversed(history) if m.get("role") == "assistant"), "").strip()


def _offers_a_person(last: str, bot: BotSettings) -> bool:
    fallback = bot.fallback_text.strip()
    return last == fallback and fallback.endswith("?")


def _small_talk_in_context(text: str, turn: Turn) -> Literal["accepts_offer", "thanks", "greeting"] | None:
    """What a message that is only small talk, a "yes" or a "no" calls for; None when the pipeline goes on.

    A bare "yes" or "no" means what the bot's last reply makes it mean (`small_talk` module docstring):
    - right after a fallback text that offers a person ("… Would you like me to get a person from our
      team?"), "yes" accepts it and "no" closes the turn;
    - after another question of the bot's, "yes" (or "ok") and a bare "no" answer it: the model reads them
      with the history; "no thanks" still closes the turn;
    - after a statement or a canned reply (the greeting, `thanks_text`) it only closes the turn, and as
      the first message it gets the greeting."""
    talk = small_talk(text)
    yes = is_yes(text)
    if not yes and not is_no(text) and not starts_with_yes(text):
        return talk
    if accepts_offer(text, turn.history, turn.bot):
        return "accepts_offer"
    last = _last_reply(turn.history)
    offered = _offers_a_person(last, turn.bot)
    if offered and (yes or starts_with_yes(text)):
        return None  # escalation is off: the model reads the "yes"
    if not yes and not is_no(text):
        return talk
    if not last:
        return talk or "greeting"
    if offered:
        return "thanks"  # a "no" to the offer
    canned = {turn.bot.thanks_text.strip(), greeting(turn).strip()}
    # "?" anywhere: "Are you on Android? Then I can give you its steps." asks too.
    if "?" in last and last not in canned:
        return None if yes else talk
    return "thanks"


def _retrieved(hits: list[Any]) -> list[dict[str, Any]]:
    """What was retrieved, stored with the reply so operators can see what the bot saw."""
    return [{
        "chunk_id": str(getattr(h, "chunk_id", "")), "source": getattr(h, "source", ""),
        "title": getattr(h, "title", ""), "heading_path": list(getattr(h, "heading_path", []) or []),
        "url": getattr(h, "url", None), "text": (getattr(h, "text", "") or "")[:1000],
        "dense_score": getattr(h, "dense_score", None), "sparse_score": getattr(h, "sparse_score", None),
    } for h in hits]


def greeting(turn: Turn) -> str:
    """The channel's `greeting`, else the bot's `replies.greeting`."""
    return turn.greeting or turn.bot.replies.greeting


def holding_notice(bot: BotSettings, state: str) -> str:
    """What a message that must be answered gets while a person holds (or is about to take) its thread:
    the bot's own wording for that state, or its `replies.holding` where the bot has none."""
    configured = bot.escalation.claimed_message if state == "operator" else bot.escalation.acknowledgement
    return configured or bot.replies.holding


def opt_keyword(turn: Turn) -> PipelineResult | None:
    """The whole answer to a WhatsApp STOP / START (HELP under Advanced Opt-Out), else None. Also a turn that failed
    or gave up: the opt-out was recorded as the message was stored, and its confirmation, not the failure reply
    (refused by the opt-out) and a person (who cannot reach them), is what the customer is owed."""
    if turn.command in ANSWERED_BY_PLATFORM:
        # Twilio answers it; ours would be a second one.
        return PipelineResult(reply=None, answered=False)
    if turn.command in (OPT_OUT, OPT_IN):
        # A bare STOP / START, which Twilio neither answered nor acted on: the customer learns it was heard,
        # and how to come back. Sent whoever holds the thread; the outbox lets this one through the opt-out.
        replies = turn.bot.replies
        return PipelineResult(reply=replies.opted_out if turn.command == OPT_OUT else replies.opted_in,
                              author="system", answered=False, counts=False, confirms_opt_out=turn.command == OPT_OUT)
    return None


def handoff(bot: BotSettings, outage: Outage, *, reason: str, trigger: str, **fields: Any) -> PipelineResult:
    """The bot's fixed reply to an outage, handing the conversation to a person (`reason` is the
    escalation's, `trigger` its kind for the log: `PipelineResult.trigger`). A bot whose
    `escalation.enabled` is false has no person to hand to: it opens no escalation, and its reply asks to
    try again instead (`RepliesSettings.outage`)."""
    reply = bot.replies.outage(outage, escalates=bot.escalation.enabled)
    if bot.escalation.enabled:
        return PipelineResult(reply=reply, escalate=reason, trigger=trigger, answered=False, **fields)
    return PipelineResult(reply=reply, answered=False, **fields)


def person_promises(bot: BotSettings) -> set[str]:
    """The bot's fixed replies that already say a person is coming (no acknowledgement follows them): none
    when `replies.person_will_help` is "", as the outage sentence alone promises nobody."""
    if not bot.replies.person_will_help.strip():
        return set()
    kinds: tuple[Outage, ...] = ("llm_down", "search_down", "failure", "budget_spent")
    return {bot.replies.outage(kind, escalates=True) for kind in kinds}


def _sticker_emoji(attachments: list[dict[str, Any]]) -> str:
    """The emoji a message of stickers alone shows (Telegram gives each sticker's as its caption), else ""."""
    if not attachments or any(a.get("kind") != "sticker" for a in attachments):
        return ""
    return " ".join(a.get("caption") or "" for a in attachments).strip()
