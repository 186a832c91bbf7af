"""A bot's fixed replies (`replies:` under a bot): every text the gateway itself says to a customer, so a
bot can speak its customers' language. Each default is the English the gateway has always said.

The escalation's texts are under `escalation:`, `fallback_text` and `thanks_text` on the bot, and the
rate-limit `notice` under `rate_limit:`, as before. Re-exported by `gateway.settings`."""

from __future__ import annotations

import re
import string
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from gateway.channel_settings import _Strict
from gateway.models import SOURCES_HEADING, USE_ASK

Outage = Literal["llm_down", "search_down", "failure", "budget_spent"]
"""The troubles a turn is answered with a fixed reply for (`RepliesSettings.outage`)."""
PLACEHOLDERS = {"too_long": ("chars", "limit"), "after_hours": ("start", "end", "timezone", "day", "time"),
                "web_too_long": ("chars", "limit"), "web_rate_limited": ("per_minute",)}
"""The fields each template key is filled with."""
# A well-formed BCP 47 language tag (RFC 5646 `langtag`, or a private use tag): "es", "pt-BR", "zh-Hant-TW".
_LANGUAGE_TAG = re.compile(
    r"(?:[a-z]{2,3}(?:-[a-z]{3}){0,3}|[a-z]{4}|[a-z]{5,8})"  # language (with extended language subtags)
    r"(?:-[a-z]{4})?"  # script
    r"(?:-(?:[a-z]{2}|[0-9]{3}))?"  # region
    r"(?:-(?:[a-z0-9]{5,8}|[0-9][a-z0-9]{3}))*"  # variants
    r"(?:-[0-9a-wy-z](?:-[a-z0-9]{2,8})+)*"  # extensions
    r"(?:-x(?:-[a-z0-9]{1,8})+)?"  # private use
    r"|x(?:-[a-z0-9]{1,8})+", re.IGNORECASE)
_SAMPLES = {"chars": 5000, "limit": 4000, "start": "09:00", "end": "17:00", "timezone": "Europe/Madrid",
            "day": "Monday", "time": "09:00", "per_minute": 60}
DISCORD_MAX_CHARS = 2000  # a message's content (`channels.discord_render.MAX_LENGTH`)


class WidgetTexts(_Strict):
    """The web chat widget's own words (`replies.widget`), given to it by `GET /v1/bots`: its labels,
    buttons and notices. Texts shown before it knows the bot (the server cannot be reached) stay English."""

    title: str = "Help chat"
    subtitle: str = "Answers from our help center, with sources."
    you: str = "You"
    assistant: str = "Assistant"
    support_team: str = "Support team"
    placeholder: str = "Ask a question…"
    send: str = "Send"
    hint: str = "Enter to send, Shift+Enter for a new line."
    waiting: str = "A person from our team will reply here. You can keep this page open or come back later."
    operator_joined: str = "A person from our team has joined the conversation and will reply here."
    slow: str = "This is taking longer than usual; the answer will appear here."
    interrupted: str = "The connection was interrupted; the answer will appear here shortly."
    unreachable: str = "Could not reach the server, so your message was not sent. Please try again."
    failed: str = "Something went wrong. Please try again."
    not_sent: str = "Not sent"
    retry: str = "Retry"
    empty: str = "Please type a message first."
    # {chars}: the message's length, {limit}: the web chat's `max_message_chars`.
    too_long: str = "Your message is too long: {chars} characters, and the limit is {limit}. Please shorten it."

    @field_validator("too_long")
    @classmethod
    def _known_placeholders(cls, value: str) -> str:
        # The widget fills only these two, by name, as written: "{chars:,}" would be shown as it is.
        if unknown := [name for name in re.findall(r"\{([^{}]*)\}", value) if name not in ("chars", "limit")]:
            raise ValueError(f"unknown placeholder {{{unknown[0]}}}; the placeholders are {{chars}}, {{limit}}")
        return value


class RepliesSettings(_Strict):
    """What the bot says when it does not answer from its knowledge. Plain text, sent as written."""

    # The language these texts are in, a BCP 47 tag: the web chat page's `<html lang>`, so a screen reader
    # reads the widget's Spanish with a Spanish voice, and the browser offers no translation of it.
    lang: str = "en"

    # Where a channel sets no `greeting`: for /start, /help, a bare mention, and "hi".
    greeting: str = "Hi! Ask me anything about our product and I'll answer from our help center."
    # A message with no text: a photo, a voice note, a sticker.
    text_only: str = "I can only read text messages for now. Could you type your question?"
    # {chars}: the message's length, {limit}: the longest question answered (a format spec such as
    # {chars:,} may follow the name).
    too_long: str = ("That message is too long for me to read ({chars:,} characters). Could you ask your question "
                     "in fewer than {limit:,} characters?")
    # The outages: each is said with `person_will_help` when the bot escalates, else with `try_again`
    # (`ask_tomorrow` for a spent budget).
    llm_down: str = "Sorry, I can't answer right now because our assistant is unavailable."
    search_down: str = "Sorry, I can't look that up right now."
    failure: str = "Sorry, something went wrong on our side while answering."
    budget_spent: str = "Sorry, I can't answer more questions today."
    person_will_help: str = "I've asked a person from our team to help you."
    try_again: str = "Please try again in a little while."
    ask_tomorrow: str = "Please ask again tomorrow."
    # WhatsApp's confirmations of a STOP and a START that Twilio did not answer itself (no Advanced Opt-Out).
    opted_out: str = "You won't get any more messages from us here. Send START to hear from us again."
    opted_in: str = "You'll get our messages here again. Send STOP at any time to stop them."
    # What a message gets while a person holds its thread, where `escalation.claimed_message` (or,
    # before a claim, `escalation.acknowledgement`) is "".
    holding: str = "A person from our team has this conversation and will reply here."
    # The heading of the numbered sources under an answer (bold on Telegram, Slack, Discord and the widget;
    # WhatsApp's footer is plain).
    sources_heading: str = SOURCES_HEADING
    # Sent after the acknowledgement outside `escalation.business_hours`: the hours ({start}, {end},
    # {timezone}) and when a person is back, {day} (`today`, `tomorrow` or one of `day_names`) at {time}.
    after_hours: str = ("Our team is offline right now (we work {start}–{end}, {timezone}). "
                        "Expect a reply from a person {day} at {time} ({timezone}).")
    today: str = "today"
    tomorrow: str = "tomorrow"
    day_names: list[str] = Field(default_factory=lambda: [
        "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"])
    # Discord's answer to a slash command of the app other than /ask (only the member who used it sees it).
    use_ask: str = USE_ASK
    # The web chat's refusals (the `error` of a 413 and of a 429, which the widget shows): {chars} and
    # {limit} as in `too_long`, {per_minute}: the bot's `channels.web.per_address_per_minute`.
    web_too_long: str = "text is {chars} characters; the limit is {limit}"
    web_rate_limited: str = "more than {per_minute} messages a minute from this address; wait a minute"
    widget: WidgetTexts = Field(default_factory=WidgetTexts)

    @field_validator("greeting", "text_only", "too_long", "llm_down", "search_down", "failure", "budget_spent",
                     "holding", "opted_out", "opted_in", "sources_heading", "after_hours", "today", "tomorrow",
                     "use_ask", "web_too_long", "web_rate_limited")
    @classmethod
    def _said(cls, value: str) -> str:
        # Sent as it is: an empty text is refused by every platform, and the reply was never delivered.
        # (`person_will_help`, `try_again` and `ask_tomorrow` may be "": the outage's sentence stands alone.)
        if not value.strip():
            raise ValueError("is empty: the customer would be sent an empty message; write the text to send")
        return value

    @field_validator("too_long", "after_hours", "web_too_long", "web_rate_limited")
    @classmethod
    def _known_placeholders(cls, value: str, info: ValidationInfo) -> str:
        # Filled when sent: an unknown field raised there, and the customer got nothing.
        allowed = PLACEHOLDERS[info.field_name]
        try:
            fields = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
        except ValueError as exc:  # a lone `{` or `}`
            raise ValueError(f"not a valid template ({exc}); write a literal brace as {{{{ or }}}}") from None
        if unknown := [name for name in fields if name not in allowed]:
            raise ValueError(f"unknown placeholder {{{unknown[0]}}}; the placeholders are "
                             f"{', '.join('{' + name + '}' for name in allowed)}")
        try:
            value.format(**{name: _SAMPLES[name] for name in allowed})
        except (ValueError, IndexError) as exc:  # a format spec that does not suit the value: {chars:x.y}
            raise ValueError(f"not a valid template ({exc})") from None
        return value

    @field_validator("use_ask")
    @classmethod
    def _fits_discord(cls, value: str) -> str:
        # An interaction's answer, sent unsplit: Discord refuses one over its limit, and the member saw
        # "The application did not respond".
        if len(value) > DISCORD_MAX_CHARS:
            raise ValueError(f"is {len(value)} characters; Discord takes at most {DISCORD_MAX_CHARS} in one message")
        return value

    @field_validator("lang")
    @classmethod
    def _language_tag(cls, value: str) -> str:
        if not _LANGUAGE_TAG.fullmatch(value):
            raise ValueError(f"{value!r} is not a BCP 47 language tag; write one such as en, es, pt-BR or zh-Hant")
        return value

    @field_validator("day_names")
    @classmethod
    def _a_week(cls, value: list[str]) -> list[str]:
        if len(value) != 7 or not all(name.strip() for name in value):
            raise ValueError(f"needs 7 names, Monday first; it has {len([n for n in value if n.strip()])}")
        return value

    def outage(self, kind: Outage, *, escalates: bool) -> str:
        """The reply to an outage of `kind`: what went wrong, then what happens next."""
        then = self.person_will_help if escalates else self.ask_tomorrow if kind == "budget_spent" else self.try_again
        return " ".join(part for part in (getattr(self, kind).strip(), then.strip()) if part)

    def too_long_reply(self, *, chars: int, limit: int) -> str:
        return self.too_long.format(chars=chars, limit=limit)
