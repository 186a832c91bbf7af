"""The English a bot says with no `replies:` of its own (the defaults of `gateway.reply_settings`): what
tests compare replies with."""

from __future__ import annotations

from gateway.reply_settings import RepliesSettings

ENGLISH = RepliesSettings()
DEFAULT_GREETING = ENGLISH.greeting
TEXT_ONLY_REPLY = ENGLISH.text_only
LLM_DOWN_REPLY = ENGLISH.outage("llm_down", escalates=True)
SEARCH_DOWN_REPLY = ENGLISH.outage("search_down", escalates=True)
FAILURE_REPLY = ENGLISH.outage("failure", escalates=True)
BUDGET_REPLY = ENGLISH.outage("budget_spent", escalates=True)
