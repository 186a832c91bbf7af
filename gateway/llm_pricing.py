"""What a model call cost: its tokens priced from the deployment's own prices or LiteLLM's price map,
and an estimate for a call that never reported its usage.

A call that did not finish still costs money: cut off by the turn's deadline or a caller's timeout, or
timed out, the provider had already read the prompt (and maybe written part of an answer) and bills for
it, but no usage ever arrives. `Pricing.estimate` counts those tokens with LiteLLM's tokenizer (the
bundled `cl100k_base` for models it has no tokenizer for; no download), so the daily budget and the
token metrics see them. The estimate is stored `partial`: it is not the provider's bill.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import litellm
import structlog

log = structlog.get_logger("gateway.llm")

CHARS_PER_TOKEN = 4  # the fallback when even the bundled tokenizer fails: a common rule of thumb for English


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and cost of one call. `partial` when a count or the price was unknown, or estimated."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    partial: bool = False


class Pricing:
    """Prices the calls of the deployments of one router (`model_name` → `litellm_params`)."""

    def __init__(self, deployments: Mapping[str, Mapping[str, Any]], *, free_model: str) -> None:
        self._deployments = deployments
        self._free_model = free_model  # the LiteLLM model of the offline responder: it runs here

    def is_free(self, name: str) -> bool:
        """True for a model that runs in this process and bills nobody."""
        return self._deployments.get(name, {}).get("model") == self._free_model

    def usage(self, name: str, reported: Any) -> Usage:
        """The call's usage from what the provider reported (an OpenAI-style `usage`, or None)."""
        prompt = getattr(reported, "prompt_tokens", None) if reported is not None else None
        completion = getattr(reported, "completion_tokens", None) if reported is not None else None
        if prompt is None or completion is None:
            return Usage(prompt_tokens=prompt or 0, completion_tokens=completion or 0, cost_usd=None, partial=True)
        cost = self.cost(name, prompt, completion)
        return Usage(prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost, partial=cost is None)

    def estimate(self, name: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 written: str) -> Usage:
        """What a call that did not finish spent: the prompt it sent (with its tools) and the `written`
        part of the answer that had arrived. Always `partial`."""
        model = str(self._deployments.get(name, {}).get("model", name))
        try:
            prompt = litellm.token_counter(model=model, messages=messages, tools=tools or None)
            completion = litellm.token_counter(model=model, text=written) if written else 0
        except Exception as exc:  # a message shape the counter cannot read: count characters instead
            log.warning("llm.token_count_failed", model=name, error=f"{type(exc).__name__}: {exc}"[:200])
            sent = json.dumps(messages, ensure_ascii=False) + (json.dumps(tools) if tools else "")
            prompt, completion = -(-len(sent) // CHARS_PER_TOKEN), -(-len(written) // CHARS_PER_TOKEN)
        cost = self.cost(name, prompt, completion)
        return Usage(prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost, partial=True)

    def cost(self, name: str, prompt: int, completion: int) -> float | None:
        """US dollars for these tokens, or None when no price is known for the model."""
        params = self._deployments.get(name, {})
        if self.is_free(name):
            return 0.0
        if "input_cost_per_token" in params or "output_cost_per_token" in params:
            return prompt * float(params.get("input_cost_per_token", 0.0)) + completion * float(
                params.get("output_cost_per_token", 0.0)
            )
        try:
            # The Router registers every deployment with empty prices, and LiteLLM then reports 0.0:
            # ask for a real price first, so an unknown cost stays unknown (and the usage partial).
            info = litellm.get_model_info(params.get("model", name))
            if not (info.get("input_cost_per_token") or info.get("output_cost_per_token")):
                return None
            in_cost, out_cost = litellm.cost_per_token(
                model=params.get("model", name), prompt_tokens=prompt, completion_tokens=completion
            )
            return float(in_cost + out_cost)
        except Exception:  # no price for this model: the tokens stay, the usage is marked partial
            return None
