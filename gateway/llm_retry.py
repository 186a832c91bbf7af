"""Which failed model calls are worth another try, and how long to wait before it.

`LLMRouter` (gateway/llm.py) runs the retry and fallback loop; this module holds the policy it
follows: what counts as a passing failure (429, 5xx, timeouts, broken connections, faults inside
the client libraries) rather than the provider saying no, the backoff between attempts, and the
short one-line form in which a failure is logged and reported, with its kind (`failure_kind`).
"""

from __future__ import annotations

import os
import random
import re
import socket
from dataclasses import dataclass

# LiteLLM fetches its price map from the network on import unless told otherwise; we run offline.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import aiohttp  # noqa: E402
import httpx  # noqa: E402
import litellm  # noqa: E402
import openai  # noqa: E402
from litellm.llms.base_llm.chat.transformation import BaseLLMException  # noqa: E402

from gateway.backoff import doubling
from gateway.observability.logs import redact


class MalformedAnswer(Exception):
    """The provider answered 200 with nothing to read (`"choices": []`, or no text and no tool call, as a
    stream that carried none is): its failure, worth another try and then the fallback, not a bug of ours
    (it was logged as `llm.client_fault`, with a traceback)."""


STOPPED_EMPTY = ("content_filter", "length")
"""Finish reasons of an empty answer that is still an answer: the provider's filter refused the request, or a
reasoning model spent `max_tokens` before any text. Asked again, the same request stops the same way."""

RETRYABLE = (
    MalformedAnswer,
    litellm.RateLimitError,
    litellm.Timeout,
    litellm.InternalServerError,
    litellm.ServiceUnavailableError,
    litellm.BadGatewayError,
    litellm.APIConnectionError,
)


def passing(error: BaseException) -> bool:
    """Whether `error` is a failure another try may not meet: one of `RETRYABLE`, or any 5xx. LiteLLM raises
    an OpenAI-compatible endpoint's 5xx it has no class for (529 "overloaded", a proxy's 520–524) as a bare
    `APIError`, which went to the fallback untried and never cooled the model down, on every message."""
    if out_of_credit(error) or url_refused(error):
        return False
    status = getattr(error, "status_code", None)
    # 429 too: a provider's own exception LiteLLM leaves unmapped (a `gemini/` stream's) is no RateLimitError.
    return isinstance(error, RETRYABLE) or (isinstance(status, int) and (500 <= status <= 599 or status == 429))


def worth_another_try(error: BaseException) -> bool:
    """Whether the provider's failure `error` is retried: a passing one, with a key to send."""
    return passing(error) and not missing_credentials(error)


_SETUP_REFUSED = (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError)
_NO_CREDIT = ("insufficient_quota", "exceeded your current quota", "credit balance is too low")


def out_of_credit(error: BaseException) -> bool:
    """The provider's account has no credit left: OpenAI says so with a 429 (`insufficient_quota`), which
    was retried and cooled down for as a rate limit, Anthropic with a 400. Gemini says OpenAI's words ("You
    exceeded your current quota…") of a per-minute quota too, but with when to retry (its `RetryInfo`): that
    one is a rate limit, its daily quota (no `retryDelay`) no credit."""
    return any(marker in str(error) for marker in _NO_CREDIT) and _retry_delay(causes(error)) is None


def setup_refused(error: BaseException) -> bool:
    """The provider refused the model's `models:` entry itself (its key, its model name, its account's
    credit), not one request: every message fails so until an operator fixes it. A 401 or 403 by its status:
    LiteLLM raises an OpenAI-compatible endpoint's 403 as a bare `APIError`, which was named nowhere."""
    return (isinstance(error, _SETUP_REFUSED) or out_of_credit(error) or url_refused(error)
            or _http_status(causes(error)) in (401, 403))


_URL_CREDENTIALS = "credentials encoded in URL"


def url_refused(error: BaseException) -> bool:
    """The HTTP client refused the model's `api_base` before sending anything: httpx takes a URL's
    `user:password@` for a credential of its own, which it refuses beside the key's Authorization header.
    LiteLLM raised it as a 500, retried and cooled down for as an outage; the same URL is refused again."""
    return any(isinstance(e, ValueError) and _URL_CREDENTIALS in str(e) for e in causes(error))
_NO_KEY = ("Missing credentials", "api_key client option must be set")


def missing_credentials(exc: BaseException) -> bool:
    """The provider's client had no key to send (LiteLLM raises it as an InternalServerError): no retry
    can help, so the next model answers at once (`llm.key_missing` at start names the model)."""
    return any(marker in str(exc) for marker in _NO_KEY)


# Where a provider's answer (or a failure to reach it) is turned into an exception. Anything raised from
# elsewhere is a fault inside the client libraries, not the provider's verdict.
_API_ERROR_MODULES = ("litellm.exceptions", "openai")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Per-model retries: `1 + num_retries` attempts, exponential backoff with jitter, capped."""

    num_retries: int = 2
    backoff_base: float = 0.5
    backoff_max: float = 8.0

    def delay(self, attempt: int, error: BaseException) -> float:
        """Seconds to wait before attempt `attempt + 1`; a Retry-After header wins when sooner than the cap."""
        retry_after = _retry_after(error)
        if retry_after is not None:
            return min(retry_after, self.backoff_max)
        return doubling(attempt + 1, first=self.backoff_base, cap=self.backoff_max) * random.uniform(0.5, 1.0)


    def waits_too_long(self, error: BaseException) -> bool:
        """Whether the provider asked to wait (Retry-After) longer than the backoff cap: a retry at the cap
        was refused again, and the customer waited twice the cap before the fallback was asked."""
        retry_after = _retry_after(error)
        return retry_after is not None and retry_after > self.backoff_max


def _retry_after(error: BaseException) -> float | None:
    """The seconds the provider asked to wait, None when it did not say: a `Retry-After` header, else the
    `retryDelay` of Google's `RetryInfo` in its error body (`"retryDelay": "7s"`). Looked for along the whole
    chain: LiteLLM raises a `gemini/` refusal as its own `VertexAIError` (under its RateLimitError when not
    streamed), with the answer's headers in `.headers` and a `.response` of its making, without them."""
    chain = causes(error)
    for e in chain:
        for headers in (getattr(e, "headers", None), getattr(getattr(e, "response", None), "headers", None)):
            items = headers.items() if hasattr(headers, "items") else ()  # httpx's, or a plain dict of any case
            seconds = _seconds(next((value for key, value in items if str(key).lower() == "retry-after"), None))
            if seconds is not None:
                return seconds
    return _retry_delay(chain)


def _retry_delay(chain: list[BaseException]) -> float | None:
    """The `retryDelay` of a Google `RetryInfo` that an error of `chain` quotes from the error's body."""
    for e in chain:
        if (found := _RETRY_DELAY.search(str(e))) is not None:
            return float(found.group(1))
    return None


_RETRY_DELAY = re.compile(r'"retryDelay"\s*:\s*"(\d+(?:\.\d+)?)s"')


def _seconds(value: object) -> float | None:
    """A Retry-After header's seconds (an HTTP date is not read: no provider sends one), 0 included."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def client_fault(error: Exception) -> bool:
    """Whether `error` came from inside the client libraries rather than from the provider (retried).

    LiteLLM 1.110 can raise a bare `LookupError` from its own context-variable bookkeeping, now and
    then, on a call that would have worked. A provider's exception LiteLLM leaves unmapped (a `gemini/` stream
    refused with a 429 comes out as its `VertexAIError`) is the provider's answer when it carries the status
    the provider answered with, not one LiteLLM made up: classified by that status, as the mapped one is. A
    500 counts only with the answer's headers: LiteLLM gives its own parsing faults that status.
    """
    if isinstance(error, BaseLLMException) and isinstance(error.status_code, int) \
            and not getattr(error, "status_code_is_synthesized", False) and (error.status_code != 500 or error.headers):
        return False
    return not isinstance(error, MalformedAnswer) and not type(error).__module__.startswith(_API_ERROR_MODULES)


_ROUTER_NOTE = "\n\nLiteLLM: model group '"


def short(error: BaseException, limit: int = 200) -> str:
    """`error`'s text on one line, at most `limit` characters, redacted before it is cut: a credential a
    provider's error quotes across the cut kept its first part, which no longer matched it."""
    # The Router's own note on its fallbacks ("… No fallback was attempted.") is not ours: the gateway runs
    # its chain itself, and a reader of that note took their `fallbacks` for never tried.
    text = " ".join(redact(str(error).split(_ROUTER_NOTE, 1)[0]).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_TIMEOUTS = (litellm.Timeout, openai.APITimeoutError, httpx.TimeoutException, TimeoutError)
_UNREACHABLE = (openai.APIConnectionError, httpx.TransportError, aiohttp.ClientConnectionError, ConnectionError)


def failure_kind(error: BaseException) -> str:
    """What kind of failure `error` is, for an operator: "connection refused", "host not found",
    "connection failed", "timeout", "HTTP 503", "auth (HTTP 401)", "auth (no api_key)", "bad api_base
    (credentials in URL)", "no credit (HTTP 429)" ("no credit" when a stream's error event said it),
    "malformed answer", else "other: <the innermost exception's type>". Read from the exceptions
    under it: LiteLLM raises a connection refused as an InternalServerError with status 500, which said
    "OpenAIException - Connection error." and nothing of which endpoint, or why."""
    chain = causes(error)
    if isinstance(error, MalformedAnswer):
        return "malformed answer"
    if out_of_credit(error):  # said in a stream's error event too, which LiteLLM raises as a connection error
        status = _http_status(chain)
        return f"no credit (HTTP {status})" if status else "no credit"
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection refused"
    if any(isinstance(e, _TIMEOUTS) for e in chain):
        return "timeout"
    if any(isinstance(e, socket.gaierror) for e in chain):
        return "host not found"
    if any(isinstance(e, _UNREACHABLE) for e in chain):
        return "connection failed"
    if missing_credentials(error):
        return "auth (no api_key)"
    if url_refused(error):
        return "bad api_base (credentials in URL)"
    status = _http_status(chain)
    if status is None:
        return f"other: {type(chain[-1]).__name__}"
    return f"auth (HTTP {status})" if status in (401, 403) else f"HTTP {status}"


def causes(error: BaseException) -> list[BaseException]:
    """`error` and the exceptions it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    while error is not None and error not in chain and len(chain) < 16:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _http_status(chain: list[BaseException]) -> int | None:
    """The status an endpoint answered with, None when none answered: LiteLLM gives a failure without an
    answer (a client error, a bad URL) status 500 too, which only an HTTP error under it confirms."""
    for e in chain:
        if isinstance(e, openai.APIStatusError) and type(e).__module__.startswith("openai"):  # LiteLLM's subclass it
            return e.status_code
        if isinstance(e, httpx.HTTPStatusError):
            return e.response.status_code
    status = getattr(chain[0], "status_code", None)
    return status if isinstance(status, int) and status != 500 else None
