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
import math
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import litellm
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import GenericStreamingChunk, ModelResponse

from gateway.offline.extractive import (
    ABOUT_PAGE_FACTOR,
    FOLLOW_RATIO,
    MAX_ANSWER_CHARS,
    MAX_SENTENCES,
    MIN_COVERAGE,
    MIN_DIRECT,
    UBIQUITOUS_FACTOR,
    Candidate,
    _content,
    answer,
)
from gateway.offline.extracts import (
    DEFAULT_FALLBACK,
    MAX_LIST_CHARS,
    Extract,
    Sentence,
    parse_extracts,
    parse_fallback,
    sentence_units,
    split_sentences,
    stem,
    terms,
)

PROVIDER = "offline"
MODEL = "offline/extractive"
"""The LiteLLM model string; `gateway.settings.OFFLINE_MODEL` is the name bots use for it."""

__all__ = [
    "ABOUT_PAGE_FACTOR",
    "DEFAULT_FALLBACK",
    "FOLLOW_RATIO",
    "MAX_ANSWER_CHARS",
    "MAX_LIST_CHARS",
    "MAX_SENTENCES",
    "MIN_COVERAGE",
    "MIN_DIRECT",
    "MODEL",
    "PROVIDER",
    "UBIQUITOUS_FACTOR",
    "Candidate",
    "Extract",
    "OfflineExtractiveLLM",
    "Sentence",
    "answer",
    "approx_tokens",
    "parse_extracts",
    "parse_fallback",
    "register_offline_provider",
    "sentence_units",
    "split_sentences",
    "stem",
    "terms",
]


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
