"""Streaming a reply by message edits (Telegram, Slack, Discord).

While the pipeline runs, `EditStreamer.feed` collects the model's tokens and a background task shows
them: the first flush sends a message, later flushes edit it, at most one platform call per
`min_interval` (the edit rate each platform tolerates; see `INTERVALS`). When the partial text would
pass the message limit, the live message is frozen with what fits (cut on a paragraph, line, sentence
or word boundary by `channels.render.split_text`) and the rest continues in a new message. Frozen
messages and the live one always show disjoint pieces of the text, so nothing is shown twice.

When the pipeline is done, `finish` (called by the outbox in place of `adapter.send`) replaces the
streamed text with the final, gate-2-verified reply: the streamed messages are edited to the final
text's parts, extra parts are sent as new messages, and streamed messages left over (the final is
shorter) are deleted when the adapter can delete, else edited to `SURPLUS_TEXT`. A streamer that never
sent anything (the reply came without tokens, e.g. a greeting) just sends the reply normally.

A process killed mid-stream cannot finish: each streamed message's id is recorded on the question
(`on_sent`), and the next attempt at it removes those messages before answering (`remove_leftovers`).

Failure policy: a streaming flush that fails is never fatal. A rate limit postpones the next flush by
the platform's `retry_after`; any other error stops streaming and the final reply fixes the text. If
`finish` fails, the streamed messages are blanked (best effort) before the error reaches the outbox,
which then retries by sending the reply as new messages.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import structlog

from channels.citations import render_citations
from channels.render import fence_open_at, split_text, text_length
from gateway.errors import ChannelSendError
from gateway.models import SOURCES_HEADING, Citation, ConversationRef, OutboundMessage

log = structlog.get_logger("gateway.streaming")

SURPLUS_TEXT = "—"
"""What a streamed message no longer needed by the final reply is edited to, when it cannot be deleted."""
_WORD = re.compile(r"\w")


def streamer_for(adapter: Any, channel_settings: Any, conversation: ConversationRef, *,
                 reply_to: str | None = None, interaction: Mapping[str, Any] | None = None) -> EditStreamer | None:
    """An EditStreamer when the channel can edit messages and its settings say `stream: true`;
    `interaction`: the stored Discord `/ask` that `reply_to` names (`OutboundMessage.interaction`)."""
    if adapter is None or not getattr(adapter.capabilities, "edits", False) or not hasattr(adapter, "edit"):
        return None
    if not getattr(channel_settings, "stream", False):
        return None
    return EditStreamer(adapter, conversation, reply_to=reply_to, interaction=interaction)


class EditStreamer:
    """Shows one reply as it is generated, by sending a message and editing it."""

    INTERVALS: ClassVar[Mapping[str, float]] = {"telegram": 1.0, "slack": 1.0, "discord": 1.0}
    """Seconds between two platform calls, per channel. Telegram allows about one message a second per
    chat, Slack's chat.update is Tier 3 (about 50 a minute), Discord allows 5 edits per 5 s per channel."""
    GROUP_INTERVALS: ClassVar[Mapping[str, float]] = {"telegram": 3.0}
    """Slower in group chats where the platform says so: Telegram allows 20 messages a minute in a group."""
    DEFAULT_INTERVAL: ClassVar[float] = 1.0
    MAX_FINISH_ATTEMPTS: ClassVar[int] = 3
    MAX_RETRY_WAIT: ClassVar[float] = 10.0

    def __init__(self, adapter: Any, conversation: ConversationRef, *, reply_to: str | None = None,
                 min_interval: float | None = None, interaction: Mapping[str, Any] | None = None,
                 on_sent: Callable[[list[str]], Awaitable[None]] | None = None) -> None:
        self.adapter = adapter
        # Told the ids each time a message is sent, so a process killed mid-stream leaves a record of
        # what it showed: the next attempt removes it before answering (`remove_leftovers`).
        self.on_sent = on_sent
        self.conversation = conversation
        self.reply_to = reply_to
        self.interaction = interaction  # a Discord `/ask`'s, stored with `reply_to` (a credential: never logged)
        if min_interval is None:
            min_interval = self.INTERVALS.get(adapter.name, self.DEFAULT_INTERVAL)
            if adapter.name == "telegram" and conversation.chat.startswith("-"):  # groups have negative ids
                min_interval = max(min_interval, self.GROUP_INTERVALS["telegram"])
        self.min_interval = min_interval
        caps = adapter.capabilities
        self.unit = caps.length_unit
        # Rendering (escaping, list bullets) can lengthen the Markdown a little: keep headroom.
        self.budget = caps.max_length - max(32, caps.max_length // 20)
        self._text = ""  # every token so far
        self._start = 0  # where the live message begins in _text
        self._carry = ""  # a code fence opener reopened at the top of the live message
        self._restarts = 0  # `restart` calls: a rollover under way must not move the new text's start
        self._messages: list[tuple[str, str]] = []  # (provider id, shown Markdown); the last may be live
        self._live = False  # whether the last of _messages is still being edited
        self._surplus: list[str] = []  # ids an adapter sent beyond what we asked for (never shown by design)
        self._last_call = float("-inf")
        self._not_before = 0.0
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._disabled = False
        self.finished = False

    @property
    def started(self) -> bool:
        """Whether any message was sent while streaming."""
        return bool(self._messages or self._surplus)

    @property
    def provider_ids(self) -> list[str]:
        """The platform ids of the messages streamed so far, in order."""
        return [pid for pid, _ in self._messages]

    async def feed(self, token: str) -> None:
        """Add a token. Never blocks on the platform and never raises (the model stream must go on)."""
        if self._disabled or self._stop.is_set() or not token:
            return
        self._text += token
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"stream-{self.conversation.chat}")

    def restart(self) -> None:
        """The text fed so far is void (a tool round's preamble): the next tokens are shown in its place,
        by editing the live message, which keeps the void text until they come (a blank in between would
        be one more edit, and a flash). The final reply replaces every message anyway."""
        self._text, self._start, self._carry = "", 0, ""
        self._restarts += 1

    async def close(self) -> None:
        """Stop flushing; waits for a platform call in flight so no sent message goes unrecorded."""
        self._stop.set()
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while not self._stop.is_set():
            await self._wake.wait()
            wait = max(self._last_call + self.min_interval, self._not_before) - time.monotonic()
            if wait > 0:
                try:  # the pause ends early only to stop; the final reply takes over from here
                    await asyncio.wait_for(self._stop.wait(), timeout=wait)
                except asyncio.TimeoutError:
                    pass
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                if await self._step():
                    self._wake.set()  # a rollover needs another call
            except ChannelSendError as exc:
                if exc.retry_after is not None and not exc.permanent:
                    self._not_before = time.monotonic() + exc.retry_after
                    self._wake.set()
                    log.warning("stream.rate_limited", chat=self.conversation.chat, retry_after=exc.retry_after)
                    continue
                self._give_up(exc)
                return
            except Exception as exc:  # streaming is a nicety: the final reply still goes out
                self._give_up(exc)
                return

    def _give_up(self, exc: Exception) -> None:
        self._disabled = True
        log.warning("stream.stopped", chat=self.conversation.chat, error=f"{type(exc).__name__}: {exc}"[:300])

    def _display(self) -> str:
        return self._carry + self._text[self._start:]

    async def _step(self) -> bool:
        """One platform call at most. Returns True when more calls are due now (a rollover)."""
        display = self._display()
        if not _WORD.search(display):
            return False
        if text_length(display, unit=self.unit) <= self.budget:
            if self._live and self._messages[-1][1] == display:
                return False
            await self._show(display)
            return False
        parts = split_text(display, limit=self.budget, unit=self.unit)
        head = parts[0]
        restarts = self._restarts
        if not await self._show(head):
            return False
        self._live = False  # frozen: this message keeps `head` until the final reply
        if restarts != self._restarts:  # the text was voided meanwhile: what comes now starts a new message
            return True
        consumed = _consumed(display, head)
        if consumed <= len(self._carry):  # no progress: never loop sending the same part
            raise RuntimeError("rollover made no progress")
        # Cut inside a code block: the next message reopens it. Read from the text, not from the next
        # part: when the cut falls at the very end of what has arrived, there is no next part yet.
        fence = fence_open_at(display, consumed)
        rest = display[consumed:]
        remaining = rest.lstrip("\n") if fence else rest.lstrip()  # code keeps its indentation
        self._start += consumed - len(self._carry) + len(rest) - len(remaining)
        self._carry = f"{fence}\n" if fence else ""
        return True

    async def _show(self, text: str) -> bool:
        """Put `text` in the live message: send it if there is none, else edit it."""
        if self._live:
            provider_id, shown = self._messages[-1]
            if shown == text:
                return True
            await self._call(self.adapter.edit(self.conversation, provider_id, text))
            self._messages[-1] = (provider_id, text)
            return True
        reply_to = self.reply_to if not self._messages else None
        ids = await self._call(self.adapter.send(OutboundMessage(
            conversation=self.conversation, text=text, reply_to=reply_to,
            interaction=self.interaction if reply_to is not None else None)))
        if not ids:  # rendered to nothing visible yet (e.g. only markup); try again with more text
            return False
        self._messages.append((str(ids[0]), text))
        self._live = True
        if len(ids) > 1:
            # The rendering outgrew one message despite the headroom: stop streaming, clean up at the end.
            self._surplus.extend(str(i) for i in ids[1:])
            self._disabled = True
            self._stop.set()
            log.warning("stream.render_overflow", chat=self.conversation.chat, parts=len(ids))
        if self.on_sent is not None:
            try:
                await self.on_sent(self.provider_ids + self._surplus)
            except Exception as exc:  # the record is a safety net; the stream goes on without it
                log.warning("stream.record_failed", chat=self.conversation.chat, error=f"{type(exc).__name__}")
        return True

    async def _call(self, call: Any) -> Any:
        try:
            return await call
        finally:
            self._last_call = time.monotonic()

    async def _pace(self) -> None:
        wait = max(self._last_call + self.min_interval, self._not_before) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    async def _paced(self, make_call: Any) -> Any:
        """One call of the final replacement, paced, retried in place on a short rate limit."""
        for attempt in range(1, self.MAX_FINISH_ATTEMPTS + 1):
            await self._pace()
            try:
                return await self._call(make_call())
            except ChannelSendError as exc:
                wait = exc.retry_after
                if exc.permanent or wait is None or wait > self.MAX_RETRY_WAIT or attempt == self.MAX_FINISH_ATTEMPTS:
                    raise
                self._not_before = time.monotonic() + wait
        raise AssertionError("unreachable")

    async def finish(self, outbound: OutboundMessage) -> list[str]:
        """Replace the streamed text with the final reply; return the ids of the messages that show it.

        Used by the outbox in place of `adapter.send`. Without anything streamed, it is `adapter.send`.
        """
        await self.close()
        self.finished = True
        if not self.started:
            return list(await self.adapter.send(outbound))
        try:
            return await self._replace(outbound)
        except Exception:
            # The outbox will resend the reply as new messages: blank the partial so no text shows twice.
            await self.discard()
            raise

    async def _replace(self, outbound: OutboundMessage) -> list[str]:
        final = compose(outbound.text, outbound.citations, sources_heading=outbound.sources_heading)
        parts = split_text(final, limit=self.budget, unit=self.unit)
        ids: list[str] = []
        for index, part in enumerate(parts):
            if index < len(self._messages):
                provider_id, shown = self._messages[index]
                if shown != part:
                    await self._paced(lambda pid=provider_id, p=part: self.adapter.edit(self.conversation, pid, p))
                    self._messages[index] = (provider_id, part)
                ids.append(provider_id)
            else:
                sent = await self._paced(lambda p=part: self.adapter.send(
                    OutboundMessage(conversation=self.conversation, text=p)))
                ids.extend(str(i) for i in sent)
        leftover = [pid for pid, _ in self._messages[len(parts):]] + self._surplus
        await self._remove(leftover)
        log.info("stream.finished", chat=self.conversation.chat, parts=len(parts), streamed=len(self._messages),
                 blanked=len(leftover))
        return ids

    async def discard(self) -> None:
        """Remove every streamed message (best effort): the reply is not coming, or comes another way."""
        await self.close()
        self.finished = True
        try:
            await self._remove([pid for pid, _ in self._messages] + self._surplus)
        except Exception as exc:  # already on a failure path; the log says what stayed visible
            log.warning("stream.discard_failed", chat=self.conversation.chat, error=str(exc)[:300])

    async def _remove(self, provider_ids: list[str]) -> None:
        for provider_id in provider_ids:
            await self._paced(lambda pid=provider_id: remove_message(self.adapter, self.conversation, pid))


async def remove_leftovers(adapter: Any, conversation: ConversationRef, provider_ids: list[str], *,
                           interaction: Mapping[str, Any] | None = None) -> None:
    """Remove messages an earlier, interrupted attempt streamed (deleted, or edited to `SURPLUS_TEXT`
    where the platform cannot delete), best effort: the answer is about to be sent again in full.

    `interaction`: the Discord `/ask` they answered (`meta.interaction`). They are its follow-ups, edited
    through its token: the process that posted them is gone, and the channel's own endpoint needs the bot
    to see the channel, which an app added for its commands alone does not."""
    if interaction and hasattr(adapter, "adopt_followups"):
        adapter.adopt_followups(provider_ids, dict(interaction), conversation)
    for provider_id in provider_ids:
        try:
            await remove_message(adapter, conversation, provider_id)
        except Exception as exc:  # gone already, or too old to edit: nothing more to do
            log.warning("stream.leftover_kept", chat=conversation.chat, provider_id=provider_id,
                        error=f"{type(exc).__name__}: {exc}"[:200])


async def remove_message(adapter: Any, conversation: ConversationRef, provider_id: str) -> None:
    """Delete one sent message, or edit it to `SURPLUS_TEXT` where the platform cannot delete it
    (no deletion at all, or a refusal: Telegram's, past 48 hours)."""
    delete = getattr(adapter, "delete", None)
    if delete is not None:
        try:
            await delete(conversation, provider_id)
            return
        except ChannelSendError as exc:
            if exc.rate_limited:
                raise  # the streamer waits it out and tries again
            log.info("stream.delete_refused", chat=conversation.chat, provider_id=provider_id, error=str(exc)[:200])
    await adapter.edit(conversation, provider_id, SURPLUS_TEXT)


def compose(text: str, citations: tuple[Citation, ...] = (), *, sources_heading: str = SOURCES_HEADING) -> str:
    """The final reply as Markdown with its sources footer, the form every editable channel renders."""
    footer = render_citations(citations, style="markdown", heading=sources_heading)
    return f"{text}\n\n{footer}" if text.strip() and footer else text if text.strip() else footer


def _consumed(display: str, head: str) -> int:
    """How much of `display` the first split part covers (the splitter may append a fence closer)."""
    if display.startswith(head):
        return len(head)
    body = head[: head.rfind("\n")] if "\n" in head else head
    if display.startswith(body):
        return len(body)
    common = 0
    for a, b in zip(display, head):
        if a != b:
            break
        common += 1
    return common


