"""The LLM router: every model call goes through here, and through LiteLLM.

`LLMRouter` wraps a LiteLLM `Router` built from the top-level `models:` (the offline extractive
responder is always there as `offline`), which picks a deployment within a model group; this module
owns the policy around it, as streaming needs one LiteLLM cannot express (after a stream broke).

    for model in [model, *fallbacks]:
        up to 1 + num_retries attempts, backing off exponentially (or as Retry-After says)
        on 429, 5xx, timeouts, broken connections and faults inside the client libraries;
        a timeout with a model left to try, a Retry-After past backoff_max, and the provider saying
        no (bad key, no credit, bad request) skip to the next model
    every model failed → LLMError

With `on_token`, the reply is streamed. A stream that breaks, or ends without a finish_reason, is a
failure retried like any other, without `on_token` once tokens were shown: every surface replaces the
streamed text with the final reply (the widget on `done`, chat apps by editing their message).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# LiteLLM fetches its price map from the network on import unless told otherwise; we run offline.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm  # noqa: E402
import structlog

from gateway.errors import ConfigError, LLMError
from gateway.llm_health import ModelCalls, called_endpoint, endpoint
from gateway.llm_pricing import Pricing, Usage
from gateway.llm_retry import (
    STOPPED_EMPTY,
    MalformedAnswer,
    RetryPolicy,
    client_fault,
    failure_kind,
    setup_refused,
    short,
    url_refused,
    worth_another_try,
)
from gateway.llm_stream import (
    REFUSED_IN_STREAM,
    Accumulator,
    CallbackError,
    StreamFailed,
    TokenCallback,
    read_stream,
    said_in_stream,
    stream_cause,
)
from gateway.observability.logs import adopt_litellm_loggers
from gateway.offline.provider import MODEL as OFFLINE_LITELLM_MODEL
from gateway.offline.provider import register_offline_provider
from gateway.settings import OFFLINE_MODEL, Settings

adopt_litellm_loggers()  # LiteLLM just attached its own text handlers; ours render its records

log = structlog.get_logger("gateway.llm")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for. `arguments` is the raw JSON string from the model."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class LLMResult:
    """The outcome of `LLMRouter.complete`."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    model_used: str
    usage: Usage
    finish_reason: str


def model_list_from_settings(settings: Settings) -> list[dict[str, Any]]:
    """The configured LiteLLM Router `model_list` (`LLMRouter` adds the offline responder)."""
    return [entry.model_dump() for entry in settings.models]


def _refused(exc: Exception, model_list: list[dict[str, Any]]) -> ConfigError:
    """The config error for a model list the Router refused. A model of no provider LiteLLM knows (a typo,
    `gpt-4o-mni`) is named by its entry, with the form a model is written in: LiteLLM's own text spoke of
    Hugging Face endpoints and `completion(…)`."""
    model = getattr(exc, "model", None)
    index = next((i for i, m in enumerate(model_list) if m["litellm_params"].get("model") == model), None)
    if "LLM Provider NOT provided" in str(exc) and index is not None:
        return ConfigError(f"models[{index}].litellm_params.model",
                           f"{model!r} names no provider LiteLLM knows: write it as <provider>/<model>, as "
                           "openai/gpt-4o-mini, anthropic/claude-3-5-haiku-latest or ollama/llama3 (the providers: "
                           "https://docs.litellm.ai/docs/providers)")
    return ConfigError("models", f"LiteLLM refused the model list: {type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:300]}")


class LLMRouter:
    """Calls models by name with retries, fallbacks, streaming and usage accounting."""

    def __init__(
        self,
        model_list: Sequence[dict[str, Any]],
        *,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        cooldown: float = 0.0,
        metrics=None,
    ) -> None:
        register_offline_provider()
        self._metrics = metrics  # gateway.observability.metrics.Metrics: failed calls, for an alert on an outage
        # LiteLLM prints a "Give Feedback" banner on every error; our logs carry the story instead.
        litellm.suppress_debug_info = True
        self._timeout = timeout
        self._retry = retry or RetryPolicy()
        self._cooldown = cooldown
        self._cooling_until: dict[str, float] = {}  # model -> monotonic time it may be tried first again
        self.refused: dict[str, str] = {}  # model -> why the provider refused its key, name or credit, until it answers
        self.calls = ModelCalls()  # each model's last answer and last failure, for /readyz
        model_list = list(model_list)
        if not any(m["model_name"] == OFFLINE_MODEL for m in model_list):
            # The keyless default is always there, so any chain can end on it.
            model_list.append({"model_name": OFFLINE_MODEL, "litellm_params": {"model": OFFLINE_LITELLM_MODEL}})
        self._names = {m["model_name"] for m in model_list}
        self._deployments = {m["model_name"]: m["litellm_params"] for m in model_list}
        # Where each model is called, as the log may show it (a group of deployments names each of its own).
        self._endpoints = {name: ", ".join(dict.fromkeys(endpoint(m["litellm_params"]) for m in model_list
                                                         if m["model_name"] == name)) for name in self._names}
        self._pricing = Pricing(self._deployments, free_model=OFFLINE_LITELLM_MODEL)
        # Retries, fallbacks and cooldowns are ours (see the module docstring), so the Router does none:
        # its own cooldown, after one 401 or 404, refused the next conversations a provider that was
        # healthy again ("No deployments available"), whatever `llm.cooldown_seconds` said.
        try:
            self._router = litellm.Router(model_list=model_list, num_retries=0, timeout=timeout, disable_cooldowns=True)
        except Exception as exc:  # a `litellm_params` LiteLLM refuses: one config line, not its traceback
            raise _refused(exc, model_list) from None

    async def warm_up(self) -> None:
        """One streamed and one whole answer from the built-in offline model (no key, no network, not
        counted). Why: LiteLLM loads what a call needs on the first one (about 150 modules and the
        tokenizer's encoding), about 2 s on the event loop that held up every request and check of the
        process, so the first turns after a restart timed out Redis' rate limit checks. A failure is
        logged: the first real call loads it then."""
        messages = [{"role": "user", "content": "warm-up"}]
        try:
            stream = await self._router.acompletion(model=OFFLINE_MODEL, messages=messages, stream=True,
                                                    stream_options={"include_usage": True})
            async for _ in stream:
                pass
            await self._router.acompletion(model=OFFLINE_MODEL, messages=messages)
        except Exception as exc:
            log.warning("llm.warm_up_failed", error=f"{type(exc).__name__}: {short(exc)}")

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> "LLMRouter":
        """Build from the top-level `models:` (see `model_list_from_settings`)."""
        return cls(model_list_from_settings(settings), **kwargs)

    @property
    def model_names(self) -> frozenset[str]:
        """Names a bot may use as `model` or in `fallbacks`."""
        return frozenset(self._names)

    async def complete(
        self,
        *,
        model: str,
        fallbacks: Sequence[str] = (),
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        on_token: TokenCallback | None = None,
        metadata: dict[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
        retries: int | None = None,
        on_abandoned: Callable[[LLMResult], None] | None = None,
    ) -> LLMResult:
        """One answer from the first model in `[model, *fallbacks]` that works. Raises `LLMError`.
        `retries` overrides the retry policy's count for this call (0: one attempt per model).

        `on_abandoned` is told what each attempt that did not finish but was billed spent (an
        estimate, `gateway.llm_pricing`): one cut off by the caller (the turn's deadline, a timeout
        around this call), one that timed out, or a stream that broke after the model had written.

        `metadata` goes to LiteLLM's callbacks and logs, never to the provider. `response_format`
        (e.g. a JSON schema for structured output) is passed through; models without it ignore it.
        """
        chain = list(dict.fromkeys([model, *fallbacks]))
        unknown = [name for name in chain if name not in self._names]
        if unknown:
            raise LLMError(f"unknown model(s): {', '.join(unknown)}")
        errors: list[str] = []
        order = self._order(chain)
        for name in order:
            attempts = (self._retry.num_retries if retries is None else retries) + 1
            for attempt in range(attempts):
                acc = Accumulator()
                try:
                    started = time.monotonic()
                    result = await self._call(name, messages, tools, tool_choice, on_token, metadata,
                                              response_format, acc)
                    self._cooling_until.pop(name, None)
                    self.refused.pop(name, None)
                    self.calls.answered(name)
                    # Which model answered, how fast and for how much: after `llm.call_failed` lines, the
                    # one thing an operator following a message wants to see next.
                    log.info("llm.answered", model=name, attempt=attempt + 1, fallback=name != chain[0],
                             latency_ms=round((time.monotonic() - started) * 1000), finish=result.finish_reason,
                             prompt_tokens=result.usage.prompt_tokens, completion_tokens=result.usage.completion_tokens,
                             tool_calls=len(result.tool_calls), **_log_ids(metadata))
                    return result
                except asyncio.CancelledError:
                    if on_abandoned is not None:
                        await self._abandoned(on_abandoned, name, messages, tools, acc, metadata)
                    raise
                except CallbackError as exc:
                    raise exc.original from None
                except StreamFailed as exc:
                    if exc.emitted and on_token is not None:
                        # Every surface replaces the streamed text with the final reply (the widget on
                        # `done`, chat apps by editing), so a retry or a fallback may still answer. It
                        # runs unstreamed: its tokens would otherwise follow the broken ones.
                        log.warning("llm.stream_failed_after_tokens", model=name, error=str(exc))
                        on_token = None
                    error: BaseException = exc
                    retryable, said = True, said_in_stream(exc)
                    if (cause := stream_cause(exc)) is not None:  # the provider said why: as it is unstreamed
                        error, retryable = cause, worth_another_try(cause)
                    retryable = retryable and said not in REFUSED_IN_STREAM  # refused again if asked again
                except LLMError:
                    raise
                except Exception as exc:  # any provider failure: classify, then retry or fall back
                    said = None
                    fault = client_fault(exc)
                    if fault:  # a bug to report, with its traceback, not a provider outage
                        log.error("llm.client_fault", model=name, error=f"{type(exc).__name__}: {short(exc)}", exc_info=exc)
                    error, retryable = exc, fault or worth_another_try(exc)
                errors.append(f"{name}: {type(error).__name__}: {short(error)}")
                if setup_refused(error) or said == "auth":  # a revoked key was one warning as every message fell back
                    self.refused[name] = f"error: {type(error).__name__}: {short(error, 160)}"
                    log.error("llm.setup_refused", model=name, error=errors[-1],
                              hint="check its api_base" if url_refused(error) else "check its api_key and model")
                # A stream that went silent past the timeout (a reasoning model thinking) timed out too.
                timed_out = isinstance(error.__cause__ if isinstance(error, StreamFailed) else error, litellm.Timeout)
                if on_abandoned is not None and (timed_out or acc.text or acc.calls):
                    await self._abandoned(on_abandoned, name, messages, tools, acc, metadata)
                if self._metrics is not None:
                    self._metrics.llm_failures.labels(model=name, retryable=str(retryable).lower()).inc()
                # The endpoint and the kind of failure: a refused connection said only "Connection error.".
                failure = "timeout" if timed_out else said or (failure_kind(error) if not isinstance(error, StreamFailed)
                                                               else "stream broken" if error.__cause__ is not None
                                                               else "stream incomplete")
                # The origin the failed request went to, else (no request made) the one its config names.
                where = called_endpoint(error) or self._endpoints[name]
                self.calls.failed(name, failure, where)
                log.warning("llm.call_failed", model=name, endpoint=where, failure=failure,
                            attempt=attempt + 1, retryable=retryable, error=errors[-1], **_log_ids(metadata))
                # A timeout took the model's whole `timeout` (its retries used up the turn's deadline), and a
                # Retry-After past the backoff cap is refused again when retried sooner: the fallback, at once.
                hanging = (timed_out or self._retry.waits_too_long(error)) and name != order[-1]
                if not retryable or attempt == attempts - 1 or hanging:
                    # The provider is failing, not this request. Only after the policy's full retries:
                    # one 503 to a single-attempt call (the rewrite) is no outage.
                    if retryable and self._cooldown > 0 and retries is None:
                        self._cooling_until[name] = time.monotonic() + self._cooldown
                        log.warning("llm.cooling_down", model=name, seconds=self._cooldown)
                    break
                await asyncio.sleep(self._retry.delay(attempt, error))
        raise LLMError("every model failed: " + "; ".join(errors))

    def _order(self, chain: list[str]) -> list[str]:
        """The chain with models that are cooling down after a failure moved to its end: tried only
        when every other model failed too, so an outage is not waited out on every message."""
        now = time.monotonic()
        cooling = [name for name in chain if self._cooling_until.get(name, 0.0) > now]
        if cooling:
            log.info("llm.skipping_cooling_models", models=cooling)
        return [name for name in chain if name not in cooling] + cooling

    async def _call(
        self,
        name: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: str | dict[str, Any] | None,
        on_token: TokenCallback | None,
        metadata: dict[str, Any] | None,
        response_format: dict[str, Any] | None,
        acc: Accumulator,
    ) -> LLMResult:
        # A deployment's own `timeout` in litellm_params wins over the router-wide default.
        timeout = self._deployments.get(name, {}).get("timeout", self._timeout)
        # max_retries=0: the OpenAI SDK would otherwise retry on its own, under our retry loop.
        kwargs: dict[str, Any] = {"model": name, "messages": messages, "timeout": timeout, "max_retries": 0}
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        if metadata:
            kwargs["metadata"] = dict(metadata)
        if response_format is not None:
            kwargs["response_format"] = response_format
        if on_token is None:
            response = await self._router.acompletion(**kwargs)
            return self._result(name, response)
        return await self._stream(name, kwargs, on_token, acc)

    def _result(self, name: str, response: Any) -> LLMResult:
        choice = response.choices[0] if getattr(response, "choices", None) else None
        message = choice.message if choice is not None else None  # empty, as a stream with nothing: a failure
        if message is None or not (message.content or message.tool_calls or choice.finish_reason in STOPPED_EMPTY):
            raise MalformedAnswer(f"{name} answered with {'no text and no tool call' if choice else 'no choices'}")
        calls = tuple(
            ToolCall(id=c.id or f"call_{i}", name=c.function.name or "", arguments=c.function.arguments or "{}")
            for i, c in enumerate(message.tool_calls or [])
        )
        return LLMResult(
            text=message.content or "",
            tool_calls=calls,
            model_used=name,
            usage=self._pricing.usage(name, getattr(response, "usage", None)),
            finish_reason=choice.finish_reason or ("tool_calls" if calls else "stop"),
        )

    async def _stream(self, name: str, kwargs: dict[str, Any], on_token: TokenCallback, acc: Accumulator) -> LLMResult:
        stream = await self._router.acompletion(**kwargs, stream=True, stream_options={"include_usage": True})
        await read_stream(name, stream, on_token, acc)
        calls = tuple(
            ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"] or "{}")
            for i, c in sorted(acc.calls.items())
        )
        return LLMResult(
            text="".join(acc.text),
            tool_calls=calls,
            model_used=name,
            usage=self._pricing.usage(name, acc.usage),
            finish_reason=acc.finish_reason,
        )

    async def _abandoned(self, report: Callable[[LLMResult], None], name: str, messages: list[dict[str, Any]],
                         tools: list[dict[str, Any]] | None, acc: Accumulator, metadata: dict[str, Any] | None) -> None:
        """Tell `report` what an attempt that did not finish spent. The offline responder bills nobody."""
        if self._pricing.is_free(name):
            return
        written = "".join(acc.text) + "".join(c["name"] + c["arguments"] for c in acc.calls.values())
        try:
            # In a thread: the first count loads the tokenizer (about a second), which must not stall the loop.
            usage = await asyncio.to_thread(self._pricing.estimate, name, messages, tools, written)
        except Exception:  # e.g. the executor already shut down: the record is lost, not the call's own outcome
            log.exception("llm.abandoned_usage_failed", model=name)
            return
        log.info("llm.abandoned_usage", model=name, prompt_tokens=usage.prompt_tokens,
                 completion_tokens=usage.completion_tokens, cost_usd=usage.cost_usd,
                 **{k: v for k, v in (metadata or {}).items() if k in ("message_id", "bot")})
        report(LLMResult(text="".join(acc.text), tool_calls=(), model_used=name, usage=usage, finish_reason="abandoned"))


def _log_ids(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """What of a call's metadata its log lines carry: the ids, and which call of the turn it is (`purpose`:
    the rewrite, the answer, an operator summary), as a turn's calls were otherwise alike in the log."""
    return {k: v for k, v in (metadata or {}).items() if k in ("message_id", "bot", "purpose")}
