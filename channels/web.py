"""The built-in web chat. Its transcript lives in the store, so sending only records delivery."""

from __future__ import annotations

from channels.base import Capabilities, Deliver, RawRequest, WebhookResult
from gateway.errors import BadRequest
from gateway.models import OutboundMessage
from gateway.settings import WebChannel


class WebAdapter:
    """The web chat adapter: messages arrive through the JSON API, replies are read back from the store."""

    name = "web"

    def __init__(self, bot: str, settings: WebChannel | None = None) -> None:
        self.bot = bot
        self.settings = settings or WebChannel()
        self.capabilities = Capabilities(max_length=self.settings.max_message_chars, markdown="markdown")

    def verify(self, request: RawRequest) -> None:
        """The web chat has no webhook; its API validates input instead."""

    def parse(self, request: RawRequest) -> WebhookResult:
        """Not used: the web chat posts JSON to /v1/bots/{bot}/chat."""
        raise BadRequest("the web channel has no webhook; use POST /v1/bots/{bot}/chat")

    async def send(self, message: OutboundMessage) -> list[str]:
        """Nothing to push: the widget reads the reply from the store (and the event stream)."""
        return []

    async def start(self, deliver: Deliver) -> None:
        """No long-lived connection."""

    async def stop(self) -> None:
        """No long-lived connection."""
