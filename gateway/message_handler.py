"""Handling one inbound message: run the pipeline on it, store the reply, and send it.

Exactly-once answering: the reply is stored and the inbound message marked done in one
transaction; the reply is then sent and marked sent or failed. A crash before that transaction
leaves the message pending (answered after restart); a crash after it leaves the reply pending
(sent after restart).

While the pipeline runs, channels with a typing indicator show it, refreshed every few seconds.

Channels with `stream: true` that can edit messages (gateway/delivery/streaming.py) show the reply while it is
generated, by sending a message and editing it; the outbox then edits the streamed messages into the
final reply instead of sending it again, and records their ids as the reply's deliveries. The ids of
streamed messages are also recorded on the question as they are sent (`meta.streamed`): after a
crash mid-stream the next attempt deletes that partial (or edits it to "—") before it answers, and a
reply the outbox sends whole after a crash (stored, but not yet edited into place) does the same, so
the customer is not left with a cut-off message beside the answer. Streamed messages of an answer that is
not sent (another worker answered, no reply) are edited to "—".

The worker (gateway/worker.py) calls `MessageHandler.handle` for each inbound message of a
conversation it holds the lease of, in order.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping

import structlog
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.background import cancel
from gateway.budget import store_usage
from gateway.burst import NO_BURST, Burst, burst_followers, in_sent_order
from gateway.delivery.outbox import RETRYING, Outbox
from gateway.delivery.streaming import EditStreamer, remove_leftovers, streamer_for
from gateway.delivery.typing_indicator import TYPING_REFRESH_S, WaitingIndicator, start_typing
from gateway.delivery.window import CONFIRMS_OPT_OUT
from gateway.edits_meanwhile import queue_edits_made_meanwhile, taken_back
from gateway.escalation.handback import DRAFT_DROPPED, taken_over_before
from gateway.events import EventBus, conversation_topic, message_topic
from gateway.models import OPT_COMMANDS, CallerIdentity, ConversationRef, as_utc, utcnow
from gateway.observability.logs import redact
from gateway.pipeline import Pipeline, PipelineResult, Turn
from gateway.pipeline.core import handoff, opt_keyword
from gateway.pipeline.tool_journal import META_KEY as TOOL_RUNS
from gateway.pipeline.tool_journal import ToolJournal
from gateway.settings import Settings
from storage import message_meta
from storage import repositories as repo
from storage.meta_keys import set_meta_key
from storage.models import Conversation, Message
from storage.text import storable_text

MAX_TURN_ATTEMPTS = 5
"""Attempts at one message before it is given up (the failure reply and a person)."""

log = structlog.get_logger("gateway.message_handler")
OPTED_OUT = "not answered: the contact opted out (STOP); nothing can be sent to them until they send START"


class MessageHandler:
    """Answers one inbound message at a time; the caller holds its conversation's lease."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], settings: Settings, *, pipeline: Pipeline,
                 outbox: Outbox, bus: EventBus, metrics=None, adapters: Mapping | None = None,
                 typing_refresh_s: float = TYPING_REFRESH_S, intercept: Callable | None = None,
                 on_handoff_message: Callable | None = None, on_escalate: Callable | None = None,
                 rate_limiter=None) -> None:
        self._sessions = sessions
        self._settings = settings
        self._pipeline = pipeline
        self._outbox = outbox
        self._bus = bus
        self._metrics = metrics
        self._adapters = adapters or {}
        self.typing_refresh_s = typing_refresh_s
        self._waiting = WaitingIndicator(refresh_s=typing_refresh_s)
        # Relay hooks (gateway/operators): an operator's Slack thread reply is taken before the pipeline,
        # and a customer's message while a person holds the thread goes to the operator surfaces.
        self._intercept = intercept
        self._on_handoff_message = on_handoff_message
        self._on_escalate = on_escalate
        self.rate_limiter = rate_limiter  # gateway.ratelimit.RateLimiter, set by the composition root
        self._meta_lock = asyncio.Lock()

    async def handle(self, inbound: Message) -> Burst | None:
        """Run the pipeline on `inbound` (or relay it, or refuse it over a rate limit), store the
        reply with the message marked done, and send it. On a chat platform it first waits for the
        customer to pause (`gateway.burst`): the messages of their burst are answered with it, and marked
        done with it (`meta.answered_with`). While the customer may still be typing, nothing is answered:
        the burst waited for is returned, with the time to take `inbound` up again (the worker parks the
        conversation till then), and the typing indicator shows meanwhile."""
        bound = log.bind(message_id=inbound.id, conversation_id=inbound.conversation_id, bot=inbound.bot,
                         channel=inbound.channel)
        started = time.monotonic()
        async with self._sessions() as session:
            conversation, contact, opted_out_at = await repo.conversation_and_sender(session, inbound)
            if conversation is None:  # erased since the worker read the message (`gateway forget`)
                return _forgotten(inbound)
            past = await repo.history(session, conversation_id=conversation.id, before_id=inbound.id,
                                      limit=self._settings.bot(inbound.bot).history_turns * 2
                                      if self._has_bot(inbound.bot) else 0)
        if not self._has_bot(inbound.bot):
            await self._finish(inbound, None, status="ignored", error="bot no longer configured")
            return None
        if self._intercept is not None and await self._intercept(inbound, conversation):
            await self._finish(inbound, None, status="done", relayed=True,  # an edit landing meanwhile is passed on
                               answered=((inbound.id, inbound.text, message_meta.said(inbound.meta)),))
            return None
        if opted_out_at is not None and (inbound.meta or {}).get("command") not in OPT_COMMANDS:
            # After WhatsApp's STOP to this bot nothing reaches them from it until START: no search, no model
            # call paid for, no unanswered turn counted toward a person who could not reach them either.
            bound.info("inbound.opted_out", since=str(opted_out_at))
            await self._finish(inbound, None, status="ignored", error=OPTED_OUT)
            return None
        bot = self._settings.bot(inbound.bot)
        adapter = self._adapters.get((inbound.bot, inbound.channel))
        # A burst's later pieces are answered with this one (gateway/burst.py); marked done by `_finish`.
        burst = await burst_followers(self._sessions, inbound, window_s=self._settings.worker.burst_seconds) \
            if conversation.state == "bot" else NO_BURST
        if burst.not_before is not None:
            # The customer is waiting for the answer from now: shown so, not only once the model starts.
            self._waiting.show(adapter, conversation)
            bound.info("burst.waiting", pieces=1 + len(burst.followers), until=str(burst.not_before))
            return burst
        self._waiting.forget(conversation.id)
        followers = burst.followers
        pieces = in_sent_order([inbound, *followers])
        # The reply quotes (threads on) the piece sent first, which may have been stored after the others.
        # What each piece said as it was read: an edit landing while the model writes is answered after.
        finish = functools.partial(self._finish, followers=tuple(m.id for m in followers), reply_to=pieces[0],
                                   answered=tuple((m.id, m.text, message_meta.said(m.meta))
                                                  for m in [inbound, *followers]))
        topic = message_topic(inbound.id)
        ref = ConversationRef(channel=conversation.channel, workspace=conversation.workspace, chat=conversation.chat,
                              thread=conversation.thread)
        await self._remove_interrupted_stream(inbound, adapter, ref)
        streamer = streamer_for(
            adapter, getattr(bot.channels, inbound.channel, None), ref,
            reply_to=(pieces[0].meta or {}).get("platform_message_id"),
            interaction=(pieces[0].meta or {}).get("interaction")) if conversation.state == "bot" else None
        if streamer is not None:
            streamer.on_sent = functools.partial(self._record_streamed, inbound)

        async def on_token(text: str) -> None:
            # Only a web chat request waits on a message's topic, maybe in another process.
            self._bus.publish(topic, {"type": "token", "text": text}, forward=inbound.channel == "web")
            if streamer is not None:
                await streamer.feed(text)

        async def on_reset() -> None:
            self._bus.publish(topic, {"type": "reset"}, forward=inbound.channel == "web")
            if streamer is not None:
                streamer.restart()

        turn = Turn(
            bot=bot, message_id=inbound.id, conversation_id=conversation.id, state=conversation.state,
            text="\n".join(m.text for m in pieces if m.text.strip()) if followers else inbound.text,
            attachments=[a for m in pieces for a in m.attachments or []],
            history=[{"role": "user" if m.direction == "in" else "assistant", "content": m.text,
                      "author": m.author} for m in past if m.text],
            identity=CallerIdentity(bot=bot.name, channel=inbound.channel,
                                    contact_external_id=contact.external_id if contact else "",
                                    contact_id=contact.id if contact else None, conversation_id=conversation.id),
            unanswered_turns=conversation.unanswered_turns, on_token=on_token, on_reset=on_reset,
            command=(inbound.meta or {}).get("command"),
            needs_reply=bool((inbound.meta or {}).get("needs_reply")),
            greeting=getattr(getattr(bot.channels, inbound.channel, None), "greeting", None),
            tool_journal=ToolJournal((inbound.meta or {}).get(TOOL_RUNS),
                                     save=functools.partial(self._record_meta, inbound, TOOL_RUNS),
                                     seed=f"{inbound.id}:{as_utc(inbound.created_at).isoformat()}:{inbound.external_id}"),
        )
        attempt = await self._count_attempt(inbound)
        if attempt is None:  # erased meanwhile: nothing was shown yet (no stream, no typing)
            return _forgotten(inbound)
        if attempt > MAX_TURN_ATTEMPTS:
            # Every attempt died before its turn was stored (a process killed each time, a store that
            # refuses it): no more paid model calls; the customer gets the failure reply and a person.
            bound.error("pipeline.gave_up", attempts=attempt - 1)
            error = f"gave up after {attempt - 1} attempts that did not finish"
            result = opt_keyword(turn) or handoff(bot, "failure", reason=error, trigger="gave_up", error=error)
            await finish(inbound, result, status="failed", error=error)
            return None
        # Counted on its first attempt only: a message taken again after a crash is still one message. Nor
        # is an edit answered after its message (`meta.edit_of`) a new one: the customer fixed a typo.
        if turn.state == "bot" and attempt == 1 and not (inbound.meta or {}).get("edit_of") \
                and turn.command not in OPT_COMMANDS and await self._rate_limited(inbound, turn, finish):
            return None
        if attempt > 1:
            # A stream of the dead attempt's tokens may be open (web chat, another process): they are void.
            self._bus.publish(topic, {"type": "reset"}, forward=inbound.channel == "web")
        bound.info("pipeline.start", **({"attempt": attempt} if attempt > 1 else {}))
        typing = start_typing(adapter, conversation, refresh_s=self.typing_refresh_s)
        turn_timeout = self._settings.worker.turn_timeout
        # One bound on the whole turn: each model call has its own timeout, but retries, fallbacks and
        # tool rounds multiply them, and a customer should not watch "typing…" for many minutes.
        deadline = asyncio.timeout(turn_timeout)
        try:
            async with deadline:
                result = await self._pipeline.handle(turn)
        except Exception as exc:  # the one broad catch: a crash becomes a logged failure and a handoff
            if isinstance(exc, TimeoutError) and deadline.expired():
                bound.warning("pipeline.timed_out", turn_timeout_s=turn_timeout)
                reason = error = f"turn timed out after {turn_timeout:g}s (worker.turn_timeout)"
                trigger = "timed_out"
            else:
                bound.exception("pipeline.failed")
                reason, error = f"pipeline error: {type(exc).__name__}", str(exc)[:500]
                trigger = "pipeline_error"
            # What the turn spent and did until then is stored with the failure reply.
            result = opt_keyword(turn) or handoff(turn.bot, "failure", reason=reason, trigger=trigger, error=error,
                                                  usage=turn.record.usage, tool_calls=turn.record.tool_calls)
        finally:
            if typing is not None:
                await cancel([typing])
            if streamer is not None:
                await streamer.close()  # no flush may race the final reply's edits
        try:
            taken_over = await finish(inbound, result, status="failed" if result.error else "done",
                                      error=result.error, streamer=streamer, held=turn.state != "bot")
        finally:
            # The final reply did not replace the streamed text (not stored, or no reply): blank it.
            if streamer is not None and streamer.started and not streamer.finished:
                await streamer.discard()
                try:  # blanked already: no later send needs to blank them again
                    await self._record_streamed(inbound, [])
                except Exception:  # only a repeat edit to "—" is at stake
                    bound.warning("stream.record_failed")
        # Also when a person took the thread while the model was answering: the draft was dropped, so
        # the question is theirs to see.
        if (turn.state != "bot" or taken_over) and self._on_handoff_message is not None:
            for piece in pieces:
                await self._on_handoff_message(piece.id)
        if self._metrics:
            self._metrics.observe_stage("pipeline", time.monotonic() - started)
            self._metrics.record_usage(inbound.bot, result.usage)
        bound.info("pipeline.done", replied=result.reply is not None,
                   escalate=(result.trigger or "other") if result.escalate else None,
                   duration_ms=round((time.monotonic() - started) * 1000))
        return None

    async def close(self) -> None:
        """End what outlives a turn: typing indicators still waiting for their platform."""
        await self._waiting.close()

    async def _count_attempt(self, inbound: Message) -> int | None:
        """This attempt's number at the message, 1 for its first: kept in the store, so a turn taken
        again after a crash, by any replica, is known as one. None when the message is gone."""
        async with self._sessions() as session, session.begin():
            return (await session.execute(update(Message).where(Message.id == inbound.id).values(
                attempts=Message.attempts + 1).returning(Message.attempts))).scalar_one_or_none()

    async def _record_streamed(self, inbound: Message, provider_ids: list[str]) -> None:
        """Keep the ids of the messages streamed for `inbound` on it, for `_remove_interrupted_stream`."""
        await self._record_meta(inbound, "streamed", provider_ids)

    async def _record_meta(self, inbound: Message, key: str, value: object) -> None:
        """Set one key of `inbound.meta`, in the database too: what a later attempt at it must know.

        One write at a time: a key written twice (the stream's ids) must not have the older value commit last."""
        async with self._meta_lock, self._sessions() as session, session.begin():
            # Merged into the row as stored, by the UPDATE itself (one statement; it was a locked read, then
            # the write): an edit applied meanwhile changed its command (`Inbox._revise`), which the turn's
            # copy would undo. A tool's result may hold NUL.
            meta = await set_meta_key(session, message_id=inbound.id, key=key, value=value)
        if meta is not None:  # else erased meanwhile (`gateway forget`): the turn ends unanswered where it reads it
            inbound.meta = meta

    async def _remove_interrupted_stream(self, inbound: Message, adapter, ref: ConversationRef) -> None:
        """An earlier attempt at `inbound` streamed messages and never finished (the process died):
        remove them before answering again, and forget them."""
        leftover = (inbound.meta or {}).get("streamed")
        if not leftover or adapter is None:
            return
        log.warning("stream.interrupted_attempt", message_id=inbound.id, provider_ids=leftover)
        await remove_leftovers(adapter, ref, [str(i) for i in leftover], interaction=inbound.meta.get("interaction"))
        await self._record_streamed(inbound, [])

    async def _rate_limited(self, inbound: Message, turn: Turn, finish: Callable) -> bool:
        """Over a limit: store the message as done with (once per window) the notice, and skip the model."""
        limiter = self.rate_limiter
        if limiter is None or not limiter.enabled_for(inbound.bot):
            return False
        try:
            decision = await limiter.check(bot=inbound.bot, channel=inbound.channel,
                                           contact=turn.identity.contact_external_id or str(turn.conversation_id))
        except Exception:  # the limiter's store being down must not stop answering: fail open
            log.exception("ratelimit.check_failed", bot=inbound.bot)
            return False
        if decision.allowed:
            return False
        if self._metrics:
            self._metrics.rate_limited.labels(bot=inbound.bot, scope=decision.scope).inc()
        # A Discord /ask shows "thinking…" until it is answered: it gets the notice every time, not once a window.
        notify = decision.notify or bool((inbound.meta or {}).get("needs_reply"))
        result = PipelineResult(reply=limiter.notice(inbound.bot) if notify else None, author="system")
        await finish(inbound, result, status="done", error=f"rate limited ({decision.scope})")
        return True

    def _has_bot(self, name: str) -> bool:
        return any(b.name == name for b in self._settings.bots)

    async def _finish(self, inbound: Message, result: PipelineResult | None, *, status: str,
                      error: str | None = None, streamer: EditStreamer | None = None,
                      followers: tuple[int, ...] = (), answered: tuple[tuple[int, str, dict], ...] = (),
                      reply_to: Message | None = None, relayed: bool = False, held: bool = False) -> bool:
        """Store the reply and mark the inbound message in one transaction, then deliver. True when
        the bot's reply was dropped because an operator took the thread meanwhile. `followers`, the rest
        of its burst, are marked with it; the reply answers `reply_to` (the piece sent first), else `inbound`.
        `answered` is each piece's text, command and shared values as the turn read them: a piece edited since
        (`Inbox._revise`) keeps them, and its edit is stored as a message to answer next. `relayed`: `inbound` went
        on as it is (`intercept`), so its deletion meanwhile is passed on after it, not taken for a dropped answer.
        `held`: the turn read the thread as a person's (`inbound` went to them, not to the model)."""
        outbound_ids: list[int] = []
        taken_over = False
        marks: dict[str, object] = {}  # `meta.draft_dropped` (escalation/handback.py), `meta.relay` (slack_backlog.py)
        async with self._sessions() as session, session.begin():
            # The conversation's row locked first (its state is read below): an operator's claim or take-over
            # committing between that read and this commit let the bot's reply out after the person joined.
            # NO KEY UPDATE: the inbox's foreign-key checks on it go on meanwhile. Conversation, then message,
            # as a resolve takes them.
            conversation = await session.get(Conversation, inbound.conversation_id,
                                             with_for_update={"key_share": True})
            # Row lock (on SQLite, the write lock): a worker that lost its lease and this one cannot both see `pending`.
            message = await session.get(Message, inbound.id, with_for_update=True)
            if conversation is None or message is None:
                # Erased while the model wrote (`gateway forget`): nothing is stored or sent to that person.
                _forgotten(inbound)
                return False
            deleted = (inbound.id,) if relayed and taken_back(message) else ()
            if message.status != "pending" and not deleted:  # another worker finished it (lease lost): do not answer twice
                log.warning("inbound.already_finished", message_id=inbound.id, status=message.status)
                return False
            if result is not None and result.author == "bot" and result.reply is not None \
                    and conversation.state != "bot":
                # An operator took the thread while the model was answering: the bot must not talk over them.
                log.info("reply.dropped_operator_took_over", message_id=inbound.id,
                         conversation_id=conversation.id, state=conversation.state)
                # A question, not a request for a person: the bot answers it if they hand back without a reply.
                marks = {} if result.escalate else {DRAFT_DROPPED: True}
                result.reply = None
                result.escalate = None
                taken_over = True
            elif result is not None and result.reply is None and not result.escalate \
                    and (conversation.state != "bot" or held):
                # Taken before the bot began: the same (not a request for a person). Also when handed back meanwhile.
                marks = await taken_over_before(session, message, self._settings.bot(inbound.bot),
                                                burst_seconds=self._settings.worker.burst_seconds)
            if result is not None:
                for text in result.replies():
                    out = await repo.add_outbound(
                        session, conversation=conversation, text=text, reply_to_id=(reply_to or inbound).id,
                        author=result.author, citations=[c.as_dict() for c in result.citations],
                        tool_calls=result.tool_calls, retrieved=result.retrieved)
                    if result.confirms_opt_out:  # marked as the one message the outbox sends past the STOP
                        out.meta = {**(out.meta or {}), CONFIRMS_OPT_OUT: True}
                    outbound_ids.append(out.id)
                if result.reply is not None and result.counts:
                    conversation.unanswered_turns = 0 if result.answered else conversation.unanswered_turns + 1
                await store_usage(session, inbound.bot, result.usage, conversation_id=conversation.id,
                                  message_id=inbound.id)
                if result.escalate and self._on_escalate is not None:
                    await self._on_escalate(session, conversation=conversation, reason=result.escalate,
                                           trigger=result.trigger or "other")
            message.status = status
            message.error = storable_text(redact(error)) if error else error  # an exception's words may quote a key
            message.updated_at = utcnow()
            marks = {**marks, "relay": "owed"} if held or taken_over else marks  # held: a crash must not lose its relay
            if TOOL_RUNS in (message.meta or {}) or marks:
                # Finished, so never attempted again: its calls are stored with the reply, not twice.
                message.meta = inbound.meta = {**{k: v for k, v in (message.meta or {}).items() if k != TOOL_RUNS},
                                               **marks}
            for follower_id in followers:
                piece = await session.get(Message, follower_id, with_for_update=True)
                if piece is not None and piece.status == "pending":
                    piece.status, piece.updated_at = status, message.updated_at
                    piece.meta = {**(piece.meta or {}), "answered_with": inbound.id, **marks}
            edits = await queue_edits_made_meanwhile(session, answered, status=status, deleted=deleted)
        for piece_id, edit_id, change in edits:
            log.info("inbound.edit_queued", message_id=piece_id, edit_message_id=edit_id, change=change,
                     reason="relayed as it was when deleted: the deletion is passed on next" if change == "deletion"
                     else "edited while its answer was written: the edit is answered next")
        for message_id in (inbound.id, *followers):
            self._bus.publish(message_topic(message_id), {"type": "done", "status": status})
        self._bus.publish(conversation_topic(inbound.conversation_id), {"type": "message"})
        for index, out_id in enumerate(outbound_ids):
            # The first reply is the streamed one: the streamer edits it into place instead of a new send.
            via = streamer.finish if streamer is not None and streamer.started and index == 0 else None
            if await self._outbox.deliver(out_id, via=via) in RETRYING:
                break  # the drain loop parks the conversation; the rest wait their turn
        return taken_over


def _forgotten(inbound: Message) -> None:
    """Log that `inbound`'s conversation was erased (`gateway forget`) under its turn: it ends there, unanswered."""
    log.info("inbound.forgotten", message_id=inbound.id, conversation_id=inbound.conversation_id)

