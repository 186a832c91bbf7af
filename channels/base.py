"""The adapter contract shared by every channel, and the framework-free request type.

An adapter verifies, parses, sends and starts or stops its long-lived connection. It never
calls the pipeline or the database: the gateway hands it a `deliver` callback instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from gateway.models import InboundMessage, OutboundMessage


@dataclass(frozen=True, slots=True)
class RawRequest:
    """An inbound HTTP request, stripped of any web framework. Header names are lower-case."""

    url: str
    headers: Mapping[str, str]
    query: Mapping[str, str]
    body: bytes

    def header(self, name: str, default: str = "") -> str:
        """Case-insensitive header lookup."""
        return self.headers.get(name.lower(), default)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a platform can do, as the gateway outside `channels/` sees it (the streamer reads `edits`,
    `max_length` and `length_unit`; the outbox `delivery_receipts`; the typing indicator `typing`).
    `markdown` and `threads` describe the platform for readers and tests: each adapter's own renderer
    applies its dialect and limit."""

    max_length: int
    markdown: Literal["html", "markdownv2", "mrkdwn", "discord", "plain", "markdown"]
    length_unit: Literal["chars", "utf16"] = "chars"
    threads: bool = False
    edits: bool = False  # with `edit`, and `render` (the parts `send` posts): an edit of a sent reply takes them
    typing: bool = False
    delivery_receipts: bool = False  # the platform calls back with sent/delivered/read per message


@dataclass(frozen=True, slots=True)
class ImmediateResponse:
    """A body the platform expects synchronously (Slack url_verification, Discord PING)."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """A delivery receipt for an outbound message (Twilio status callbacks)."""

    provider_message_id: str
    status: Literal["sent", "delivered", "read", "failed"]
    error_code: str | None = None


@dataclass(frozen=True, slots=True)
class WebhookResult:
    """What one webhook delivery contained, after parsing."""

    messages: tuple[InboundMessage, ...] = ()
    ignored: tuple[str, ...] = ()  # the logged reasons for payloads we skip on purpose
    status_updates: tuple[StatusUpdate, ...] = ()
    response: ImmediateResponse | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The platform gives up on `response` after a few seconds and never sends the request again (a Discord
    # interaction: 3 s): storing the messages is waited for this long at most, then goes on in the background.
    respond_within: float | None = None
    # Said to the sender when that background store fails (the question was not kept): the `/ask` whose
    # "thinking…" would otherwise show until its token expires.
    if_not_stored: Callable[[], Awaitable[None]] | None = None


Deliver = Callable[[InboundMessage], Awaitable[None]]


@runtime_checkable
class ChannelAdapter(Protocol):
    """One messaging platform, as the gateway sees it."""

    name: str
    capabilities: Capabilities

    def verify(self, request: RawRequest) -> None:
        """Raise `SignatureInvalid` unless the request is authentic. Constant-time compare."""

    def parse(self, request: RawRequest) -> WebhookResult:
        """Turn a verified webhook body into normalized messages. Raise `BadRequest` on garbage."""

    async def send(self, message: OutboundMessage) -> list[str]:
        """Render and deliver a reply; return the platform's message ids."""

    async def start(self, deliver: Deliver) -> None:
        """Open a long-lived connection (polling, socket, gateway), if the channel uses one."""

    async def stop(self) -> None:
        """Close whatever `start` opened."""


@runtime_checkable
class DispatchingAdapter(Protocol):
    """A channel adapter whose platform SDK runs its own dispatcher (Slack: a bolt AsyncApp): the webhook route
    hands it a verified request through `dispatch`, in place of `ChannelAdapter.parse`."""

    async def dispatch(self, request: RawRequest) -> WebhookResult:
        """What `parse` gives for a verified webhook body, through the SDK's dispatcher. Raise `BadRequest` on garbage."""
