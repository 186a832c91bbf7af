"""Reading a streamed model answer: its text and tool calls gathered chunk by chunk as they come.

`LLMRouter` (gateway/llm.py) decides what a broken stream leads to (a retry, the fallback); this module
reads one stream and says how it ended: whole, broken (`StreamFailed`), or cut by the caller's own
`on_token` failing (`CallbackError`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import openai
import structlog

from gateway.llm_retry import STOPPED_EMPTY, causes, client_fault, failure_kind, out_of_credit, short

log = structlog.get_logger("gateway.llm")

TokenCallback = Callable[[str], Awaitable[None]]


class StreamFailed(Exception):
    """A stream broke or ended without a finish_reason; `emitted` tells whether tokens were shown."""

    def __init__(self, message: str, *, emitted: bool) -> None:
        super().__init__(message)
        self.emitted = emitted


def stream_cause(failed: StreamFailed) -> BaseException | None:
    """The provider's reason under a stream that failed, when it gave one (a rate limit or a status in its
    error event, a timeout, no key, no credit): that failure, to be classified, retried and named as it is
    unstreamed. None for a dropped connection or a failure of no kind: "stream broken"."""
    cause = failed.__cause__
    if cause is None or client_fault(cause):
        return None
    kind = failure_kind(cause)
    return None if kind == "connection failed" or kind.startswith("other: ") else cause


# What an error event says, by its type, code or text, the first match winning: OpenAI names an overload a
# `server_error` and says so only in its message; Anthropic's type is lost on the way (LiteLLM keeps its message),
# and Gemini's status comes in its message ("INTERNAL - An internal error has occurred.").
_SAID = (("overloaded", ("overloaded",)),
         ("rate limited", ("rate_limit", "rate limit", "resource_exhausted", "too many requests")),
         ("server error", ("server_error", "api_error", "internal_error", "internal server error", "internal error",
                           "server had an error")))

# An event refusing the model's key, or the request itself, by its type or code alone (a message may say
# anything): asked again, either fails the same way. OpenAI's bad key is an `invalid_request_error` whose code
# is `invalid_api_key`, so the key is looked for first. (Gemini's come out of LiteLLM with their status.)
_REFUSED = (("auth", ("authentication_error", "permission_error", "invalid_api_key")),
            ("bad request", ("invalid_request_error", "request_too_large")))

REFUSED_IN_STREAM = ("auth", "bad request")
"""What `said_in_stream` names a refusal: not retried (as a 401 or a 400 unstreamed); "auth" is also the
model's setup refused (`llm.setup_refused`), "bad request" only this request (to the fallback)."""


def said_in_stream(failed: StreamFailed) -> str | None:
    """What the error event that ended a stream said, when it said one of these: "auth" (the key refused),
    "bad request", "rate limited", "overloaded" or "server error"; None otherwise (a dropped connection, no
    credit, an event of another kind). LiteLLM raises most error events (OpenAI's `data: {"error": …}`,
    Anthropic's `event: error`) as a broken connection or a made-up 500, which were logged as "stream broken"
    and retried whatever the provider said. Named without a status, as the stream had answered 200."""
    chain = causes(failed)
    if any(out_of_credit(e) for e in chain):
        return None
    for error in reversed(chain):  # the provider's own exception is the innermost
        said = _event(error)
        if said is None:
            continue
        kinds, message = said
        for kind, markers in _REFUSED:
            if any(marker in kinds for marker in markers):
                return kind
        for kind, markers in _SAID:
            if any(marker in f"{' '.join(kinds)} {message}" for marker in markers):
                return kind
    return None


def _event(error: BaseException) -> tuple[tuple[str, ...], str] | None:
    """(the type and code, the message) of an error event as the client library raised it, lower-cased: the
    OpenAI SDK's `APIError` with the event's `error` as its body (no HTTP status: it came in a 200), or a
    LiteLLM provider exception (Anthropic's, with the event's message, its type read from the event)."""
    if isinstance(error, openai.APIError) and not isinstance(error, (openai.APIStatusError, openai.APIConnectionError)) \
            and type(error).__module__.startswith("openai") and isinstance(error.body, dict):
        kinds = tuple(str(error.body.get(key) or "").lower() for key in ("type", "code"))
        return kinds, str(error.body.get("message") or "").lower()
    if type(error).__module__.startswith("litellm.llms.") and isinstance(getattr(error, "message", None), str):
        return _anthropic_event_type(error), error.message.lower()
    return None


def _anthropic_event_type(error: BaseException) -> tuple[str, ...]:
    """The `error.type` of the Anthropic `event: error` that `error` was raised for, else (). LiteLLM raises it
    with the message alone, as a 500: "invalid x-api-key" said nothing of a refused key. The event it parsed is
    still in the frame that raised it (`{"type": "error", "error": {"type": …}}`); a LiteLLM that no longer
    keeps it there only loses the name (tests/llm/test_router_stream_refusals.py runs the real one)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    for value in (tb.tb_frame.f_locals.values() if tb is not None else ()):
        if isinstance(value, dict) and value.get("type") == "error" and isinstance(value.get("error"), dict):
            return (str(value["error"].get("type") or "").lower(),)
    return ()


class CallbackError(Exception):
    """The caller's on_token failed (e.g. the client went away): not the model's fault, never retried."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


@dataclass
class Accumulator:
    """What a stream carried so far: kept by the caller, which reports what a stream cut short spent."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)  # in the order the calls began
    open_calls: dict[int, int] = field(default_factory=dict)  # the stream's index -> the call it fills now
    finish_reason: str | None = None
    usage: Any = None
    emitted: bool = False


async def read_stream(name: str, stream: Any, on_token: TokenCallback, acc: Accumulator) -> None:
    """Read `stream` of model `name` into `acc`, each piece of text to `on_token` as it comes. Raises
    `StreamFailed` for a stream that broke or carried no answer, `CallbackError` when `on_token` failed."""
    iterator = stream.__aiter__()
    while True:
        try:
            chunk = await iterator.__anext__()
        except StopAsyncIteration:
            break
        except Exception as exc:
            raise StreamFailed(f"{type(exc).__name__}: {short(exc)}", emitted=acc.emitted) from exc
        if getattr(chunk, "usage", None):
            acc.usage = chunk.usage
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        if delta is not None and delta.content:
            acc.text.append(delta.content)
            acc.emitted = True
            try:
                await on_token(delta.content)
            except Exception as exc:
                raise CallbackError(exc) from exc
        for call in (getattr(delta, "tool_calls", None) or []) if delta is not None else []:
            slot = acc.calls.get(acc.open_calls.get(call.index or 0, -1))
            if slot is None or (call.id and slot["id"] and call.id != slot["id"]):
                # A new id under an index in use is a new call: Ollama streams every call of a
                # parallel batch under index 0, and two lookups were merged into one unknown tool.
                acc.open_calls[call.index or 0] = len(acc.calls)
                slot = acc.calls[len(acc.calls)] = {"id": "", "name": "", "arguments": ""}
            slot["id"] = call.id or slot["id"]
            if call.function is not None:
                slot["name"] += call.function.name or ""
                slot["arguments"] += call.function.arguments or ""
        if choice.finish_reason:
            acc.finish_reason = choice.finish_reason
    if not acc.finish_reason:
        raise StreamFailed("the stream ended without a finish_reason", emitted=acc.emitted)
    if not acc.text and not acc.calls and acc.finish_reason in STOPPED_EMPTY:
        # The provider's filter refused this request, or a reasoning model spent `max_tokens` before any
        # text: an answer (gate 2 makes it the fallback), not an outage to retry (the same request stops
        # the same way), fall back from and cool down for every bot over one customer's words.
        log.warning("llm.content_filtered" if acc.finish_reason == "content_filter" else "llm.stopped_empty",
                    model=name)
    elif not acc.text and not acc.calls:
        # A 200 whose body is no stream (an HTML error page, an empty body) comes out of LiteLLM as
        # an empty answer with a finish_reason it made up; it was taken as the model's answer.
        raise StreamFailed("the stream carried no text and no tool call", emitted=False)
