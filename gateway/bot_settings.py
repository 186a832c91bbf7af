"""One bot's settings: its prompt and models, knowledge sources, retrieval, tools, escalation and
rate limits (its channels are in `gateway.channel_settings`). Re-exported by `gateway.settings`."""

from __future__ import annotations

import os
import re
import string
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gateway.channel_settings import ChannelsSettings, _Strict
from gateway.reply_settings import RepliesSettings

OFFLINE_MODEL = "offline"
"""The built-in extractive responder: needs no key, registered as a LiteLLM custom provider."""


class RetrievalSettings(_Strict):
    """Hybrid search knobs. `min_dense_score` and `lexical_credit` are gate 1 (README, Knowledge base)."""

    k: int = Field(default=5, ge=1, le=50)
    prefetch: int = Field(default=40, ge=1, le=500)
    # RRF's constant for fusing the dense and BM25 arms: 1 / (rank + rrf_k - 1) per arm. 2 is Qdrant's
    # own and ranked best on the four tuning sets with the priors on; 60 is the common recipe (bench/README.md).
    rrf_k: int = Field(default=2, ge=1, le=1000)
    # Gate 1: refuse when best dense cosine + lexical_credit x lexical coverage < min_dense_score.
    # Calibrated on two unrelated corpora (rag/gate.py, README).
    min_dense_score: float = Field(default=0.46, ge=-1.0, le=1.0)
    lexical_credit: float = Field(default=0.20, ge=0.0, le=1.0)
    keyword_override_score: float = Field(default=0.0, ge=0.0)


def home_expanded(value: str | None) -> str | None:
    """A path as a shell would read its `~`: `~/docs` was a folder named "~" in the working directory."""
    return os.path.expanduser(value) if value and value.startswith("~") else value


class SourceSettings(_Strict):
    """A knowledge source, re-ingested on its own cron `schedule`."""

    # Unique within its bot: the store keys documents by (bot, source, doc_id). 128 is the column's size.
    name: str = Field(min_length=1, max_length=128)
    type: Literal["directory", "urls", "sitemap"]
    path: str | None = None
    urls: list[str] = Field(default_factory=list)
    url: str | None = None
    schedule: str = "0 * * * *"
    # A directory's symlinks out of its folder are not read unless this says so: anyone who can write to the
    # folder could otherwise make the bot serve any file the server can read (`/etc/passwd`, an env file).
    follow_symlinks_outside: bool = False

    @field_validator("path")
    @classmethod
    def _home(cls, value: str | None) -> str | None:
        return home_expanded(value)

    @field_validator("schedule")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        from gateway.cron import checked_cron

        return checked_cron(value)

    @model_validator(mode="after")
    def _has_location(self) -> "SourceSettings":
        # A location of another type's key, or a URL that cannot be fetched, was ignored or failed on
        # every run while `serve` started as if all was well.
        if self.type == "directory" and not self.path:
            raise ValueError("a directory source needs `path`")
        if self.type == "urls" and not self.urls:
            raise ValueError("a urls source needs `urls`")
        if self.type == "sitemap" and not (self.url or self.urls):
            raise ValueError("a sitemap source needs `url`")
        unused = {"path": self.path if self.type != "directory" else None,
                  "urls": self.urls if self.type == "directory" else None,
                  "url": self.url if self.type != "sitemap" else None,
                  "follow_symlinks_outside": self.follow_symlinks_outside if self.type != "directory" else None}
        for key, value in unused.items():
            if value:
                raise ValueError(f"`{key}` is not read by a {self.type} source")
        for url in [*self.urls, *([self.url] if self.url else [])]:
            if not _fetchable(url):
                raise ValueError(f"{url!r} is not an http(s) URL with a host")
        return self


def _fetchable(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


ESCALATE_TOOL = "escalate_to_human"
BUILTIN_TOOLS = (ESCALATE_TOOL,)
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


class ToolSettings(_Strict):
    """A tool the bot's model may call: built-in, a Python callable, or an HTTP endpoint.

    Checked when the file is read, so `db upgrade` and `ingest` say it too (whether a python tool's
    module imports is found when `serve` loads the tools): each of these loaded, was offered to the
    model, and failed with a traceback on every call."""

    name: str
    type: Literal["builtin", "python", "http"] = "python"
    description: str = ""
    import_path: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    method: str = "GET"
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(default=10.0, gt=0.0)
    # Of one call's result, as JSON: what the model and the stored turn get (a 3 MB answer overflowed
    # the model's context, and the customer was told the assistant is down).
    max_result_chars: int = Field(default=16_000, ge=500, le=1_000_000)

    @field_validator("name")
    @classmethod
    def _function_name(cls, name: str) -> str:
        # The providers' rule for a function's name: anything else and they refuse every request with tools.
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ValueError(f"{name!r} is not a tool name: use 1-64 letters, digits, '_' or '-'")
        return name

    @field_validator("method")
    @classmethod
    def _known_method(cls, method: str) -> str:
        if method.strip().upper() not in HTTP_METHODS:
            raise ValueError(f"unknown HTTP method {method!r}; use one of {', '.join(HTTP_METHODS)}")
        return method.strip().upper()

    @model_validator(mode="after")
    def _complete_for_its_type(self) -> "ToolSettings":
        if self.type == "builtin" and self.name not in BUILTIN_TOOLS:
            raise ValueError(f"there is no built-in tool {self.name!r}; the built-in tools are "
                             f"{', '.join(BUILTIN_TOOLS)} (a tool of your own is a python or an http tool)")
        if self.type == "python" and (not self.import_path or ":" not in self.import_path.strip(":")):
            raise ValueError("a python tool needs `import_path` written as 'package.module:function'")
        if self.type == "http":
            if not self.url:
                raise ValueError("an http tool needs `url`, the endpoint (a template such as "
                                 "https://api.example.com/orders/{order_id})")
            declared = self.parameters.get("properties")
            for field in _check_url_template(self.url):
                # A call may pass only the declared parameters, so this field could never be filled.
                if not isinstance(declared, dict) or field not in declared:
                    raise ValueError(f"`url` field {{{field}}} is not declared in `parameters` (its `properties`), "
                                     "so no call could fill it")
        for key, value in (("import_path", self.type != "python" and self.import_path),
                           ("url", self.type != "http" and self.url)):
            if value:
                raise ValueError(f"`{key}` is not read by {'an' if self.type == 'http' else 'a'} {self.type} tool")
        return self


def url_fields(url: str) -> list[str]:
    """The names of an http tool's URL template fields (`{city}` -> city)."""
    return [field for _, field, _, _ in string.Formatter().parse(url) if field is not None]


def path_fields(url: str) -> list[str]:
    """The fields of an http tool's URL template in its path (before its query or fragment): each is a whole
    segment, which an empty value would drop."""
    fields, literal = [], ""
    for text, field, _, _ in string.Formatter().parse(url):
        literal += text
        if field is not None and not any(mark in literal for mark in "?#"):
            fields.append(field)
    return fields


def url_origin(url: str) -> str:
    """The literal start of an http tool's URL template, up to its first field: where the scheme, host and
    port must be whole (`_check_url_template`), so that no argument can choose where a call goes."""
    literal = ""
    for text, field, _, _ in string.Formatter().parse(url):
        literal += text
        if field is not None:
            break
    return literal


def _check_url_template(url: str) -> list[str]:
    try:
        fields = url_fields(url)
    except ValueError as exc:  # a lone `{` or `}`
        raise ValueError(f"`url` is not a valid template ({exc}); write a literal brace as {{{{ or }}}}") from None
    if bad := [f for f in fields if not f.isidentifier()]:
        raise ValueError(f"`url` field {{{bad[0]}}} is not a parameter name; write one as {{name}}")
    # `https://api.example.com{x}/v1` with x=".evil.com" went to api.example.com.evil.com: a field must come
    # after the host's `/` (or `?`, `#`), where an argument fills a path segment or a query value.
    _, scheme_mark, authority = url_origin(url).partition("://")
    if fields and scheme_mark and not any(mark in authority for mark in "/?#"):
        raise ValueError(f"`url` field {{{fields[0]}}} is in the scheme, host or port of {url!r}, so a call "
                         "could choose which server it goes to; put fields only in the path or the query")
    if not _fetchable(url.format(**{f: "x" for f in fields})):
        raise ValueError(f"`url` {url!r} is not an http(s) URL with a host")
    return fields


class EscalationSettings(_Strict):
    """When and how a conversation is handed to a person."""

    enabled: bool = True
    phrases: list[str] = Field(default_factory=lambda: [
        "talk to a human", "speak to a human", "human agent", "real person", "talk to someone",
        "speak to someone", "talk to an agent", "speak to an agent", "live agent", "talk to a person",
        "speak to a person", "real human", "want a human", "human please", "talk to a representative",
        "speak to a representative", "need a human", "need a person", "get a human", "talk to an operator",
        "speak to an operator",
        # "with" as often as "to": "Can I speak with a human?" went to the model.
        "speak with a human", "talk with a human", "chat with a human", "speak with a person", "talk with a person",
        "chat with a person", "speak with someone", "talk with someone", "speak with an agent", "talk with an agent",
        "speak with a representative", "talk with a representative", "speak with an operator", "actual person",
        "actual human",
    ])
    max_unanswered_turns: int = Field(default=3, ge=0)  # 0: never escalate by count (it acted as 1)
    acknowledgement: str = "I've asked a person from our team to take over. They'll reply here shortly."
    # Unclaimed for this long: the customer is told honestly and operators are pinged again.
    claim_timeout_seconds: float = Field(default=900.0, gt=0.0)
    # Also sent when a released claim waits again, after the customer heard "a person has joined": so it
    # must not say that nobody ever picked the conversation up.
    unclaimed_message: str = ("Sorry, everyone on our team is busy right now. Your conversation is still "
                              "in the queue, and a person will reply here.")
    claimed_message: str = "A person from our team has joined this conversation and will reply here."
    """Told to the customer when an operator claims the thread ("" says nothing)."""
    resolved_message: str = "Our team has handed this conversation back to the assistant. Ask me anything."
    # Resolved before anyone ever claimed it: no person joined (the customer never heard `claimed_message`),
    # so "handed back" would not be true. "" says nothing. (A claim released before the hand-back: `resolved_message`.)
    resolved_unclaimed_message: str = ("Our team closed your request for a person without joining the conversation. "
                                       "The assistant is answering here again: ask me anything, or ask for a person "
                                       "if you still need one.")
    business_hours: BusinessHours | None = None


class BusinessHours(_Strict):
    """When operators work. Outside these hours the acknowledgement says when to expect a reply."""

    timezone: str = "UTC"
    days: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4])  # Monday = 0
    start: str = "09:00"
    end: str = "17:00"

    @field_validator("days")
    @classmethod
    def _weekdays(cls, value: list[int]) -> list[int]:
        # A crontab habit (7 or 0 for Sunday, 1-5 for Monday-Friday) must not silently shift the week.
        if bad := [day for day in value if not 0 <= day <= 6]:
            raise ValueError(f"{bad[0]} is not a weekday: Monday is 0 and Sunday 6")
        return value

    @field_validator("start", "end")
    @classmethod
    def _time_of_day(cls, value: str) -> str:
        # "24:00" matched the pattern and then failed every handoff; 09:00-00:00 already ends at midnight.
        if not re.fullmatch(r"\d{2}:\d{2}", value):
            raise ValueError(f"{value!r} is not a time of day written HH:MM, such as \"09:00\"")
        hours, minutes = value.split(":")
        if int(hours) > 23 or int(minutes) > 59:
            raise ValueError(f"{value!r} is not a time of day (00:00-23:59); a day that ends at midnight ends at "
                             "\"00:00\"")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(value)
        except Exception:
            raise ValueError(f"unknown time zone {value!r}") from None
        return value


class RateLimitSettings(_Strict):
    """Messages per minute a bot answers: per contact and for the whole bot. None means unlimited.

    Over the limit the message is still stored, no model is called, and the contact gets `notice`
    once per window.
    """

    per_contact_per_minute: int | None = Field(default=None, ge=1)
    per_bot_per_minute: int | None = Field(default=None, ge=1)
    notice: str = "You're sending messages faster than I can answer. Please wait a minute and try again."


class BotSettings(_Strict):
    """One bot: its prompt, models, knowledge, tools and channels."""

    name: str
    system_prompt: str = "You are a helpful support assistant."
    fallback_text: str = "I don't know the answer to that from our help center."
    # The reply to a message that is only thanks or goodbye ("thanks!", "ok bye"); a greeting alone
    # gets the channel's `greeting` (`gateway.pipeline.small_talk`).
    thanks_text: str = "You're welcome! Ask me any time if you have another question."
    model: str = OFFLINE_MODEL
    fallbacks: list[str] = Field(default_factory=list)
    max_tool_rounds: int = Field(default=6, ge=0, le=20)
    daily_budget_usd: float | None = Field(default=None, ge=0)
    # Below 0 it loaded, and PostgreSQL refused every turn's history query ("LIMIT must not be negative").
    history_turns: int = Field(default=6, ge=0)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    tools: list[ToolSettings] = Field(default_factory=list)
    sources: list[SourceSettings] = Field(default_factory=list)
    channels: ChannelsSettings = Field(default_factory=ChannelsSettings)
    escalation: EscalationSettings = Field(default_factory=EscalationSettings)
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    # The fixed texts the gateway says itself (too long, text only, outages, the sources heading).
    replies: RepliesSettings = Field(default_factory=RepliesSettings)
    # Conversations with no message for this many days are deleted on the retention schedule.
    retention_days: int | None = Field(default=None, ge=1)

    @field_validator("name")
    @classmethod
    def _url_name(cls, value: str) -> str:
        # It is a segment of /v1/bots/{name}/… and /webhooks/{name}/…; the pattern alone was the message.
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,62}", value):
            raise ValueError(f"{value!r} is not a bot name: 1-63 lower-case letters, digits, _ or -, starting with "
                             "a letter or digit (it is part of the bot's URLs)")
        return value

    @field_validator("sources")
    @classmethod
    def _unique_source_names(cls, sources: list[SourceSettings], info: ValidationInfo) -> list[SourceSettings]:
        # Two sources of one name would share their documents: each run would delete the other's.
        return _unique_names(sources, "sources", bot=info.data.get("name", "?"))

    @field_validator("tools")
    @classmethod
    def _unique_tool_names(cls, tools: list[ToolSettings], info: ValidationInfo) -> list[ToolSettings]:
        # The model calls a tool by its name: the second of two silently replaced the first.
        return _unique_names(tools, "tools", bot=info.data.get("name", "?"))

    def language_models(self) -> list[str]:
        """`model` and `fallbacks` without `offline`: for calls only a language model can make (a
        rewrite, a summary), where the offline responder would answer "I don't know …"."""
        return [name for name in dict.fromkeys((self.model, *self.fallbacks)) if name != OFFLINE_MODEL]


def _unique_names(items: list, key: str, *, bot: str) -> list:
    """`items` as they are; a ValueError naming both places when two share a `name`."""
    first: dict[str, int] = {}
    for j, item in enumerate(items):
        if item.name in first:
            raise ValueError(f"bot {bot!r} has two {key} named {item.name!r} ({key}[{first[item.name]}] and "
                             f"{key}[{j}]); {key[:-1]} names must be unique")
        first[item.name] = j
    return items
