"""The bodies of the operator API's POST routes (`gateway/operators/api.py`): what each accepts, and how its
operator text is made storable before it is checked."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from storage.text import storable_text


class OperatorBody(BaseModel):
    """A body of operator text. In `text` and `reason`, a lone surrogate ("\\ud800", valid JSON: half an
    emoji) becomes U+FFFD before the length is checked, as the web chat stores it; the check refused it
    with "unable to parse raw data as a unicode string". (A `message_id` is checked as it came.)"""

    @field_validator("text", "reason", mode="before", check_fields=False)
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return storable_text(value) if isinstance(value, str) else value


class TextBody(OperatorBody):
    """A reply or a note."""

    text: str = Field(min_length=1, max_length=4000)


class ReplyBody(TextBody):
    """A reply to the customer. `message_id` (chosen by the client, as in the web chat) makes a retried
    POST idempotent: a repeated id is stored and sent once."""

    message_id: str | None = None


class ResolveBody(OperatorBody):
    """Why the thread is handed back or released (optional)."""

    reason: str = Field(default="", max_length=1000)


class NoBody(BaseModel):
    """A route that takes no fields: an empty object, or no body at all. Anything else is refused
    (400, 415, 422) like every JSON route's body, rather than ignored while the action runs."""

    model_config = ConfigDict(extra="forbid")


class ClaimBody(OperatorBody):
    """`take_over`: take a claim another operator holds (without it, that is a 409 naming the holder)."""

    # Strict: pydantic reads "yes", "on" or 1 as true, and taking a colleague's claim is no default to guess.
    take_over: StrictBool = False
    reason: str = Field(default="", max_length=1000)
