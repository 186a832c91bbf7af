"""Slack Socket Mode (for development), on slack-bolt: the channel's bolt AsyncApp behind bolt's
`AsyncSocketModeHandler`. Its events_api envelopes are dispatched by the app to the listeners that run
`parse_payload` (`channels.slack_bolt_app`), and delivered (stored) before the ack; its interactive ones (the
operator channel's buttons) go to the adapter's `on_interactive`, as the Interactivity URL's route takes them."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import aiohttp
import structlog
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import Deliver, WebhookResult
from channels.slack_bolt_app import run
from channels.slack_errors import TOKEN_REFUSED, unreached_cause
from gateway.errors import ChannelSendError

if TYPE_CHECKING:
    from channels.slack import SlackAdapter

# Same logger name as the adapter: these events are the Slack channel's, wherever the code lives.
log = structlog.get_logger("channels.slack")
WSS_CONNECT_TIMEOUT_S = 10.0
"""How long the websocket Slack handed out may take to open: a host that takes the connection and never answers
held the channel's start, and every channel and the server after it, for aiohttp's 5 minutes."""
PING_INTERVAL_S = 5  # how often the socket is pinged: a connection that stops answering is opened again
_SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, RecursionError)


class _SocketLog(logging.LoggerAdapter):
    """slack_sdk's Socket Mode logger, but for its failed websocket connects: connect() logged each as an error with a
    40-line traceback naming neither the channel nor the bot, and tried again every ping interval for ever. The first
    connect's failure ends `open_socket_mode` (the caller opens it again, with backoff); a later one (a reconnect after
    the session dropped) is one `slack.socket_mode_failed` line, as slack_sdk tries again by itself."""

    def __init__(self, bot: str) -> None:
        super().__init__(logging.getLogger("slack_sdk.socket_mode.aiohttp"), {})
        self.bot = bot
        self.first: asyncio.Future | None = None  # set while `open_socket_mode` waits for the first connect
        self.failures = 0
        self.wss = ""  # the websocket URL being opened, for the message
        self.client: SocketModeClient | None = None  # whose URL a failed reconnect drops

    def log(self, level, msg, *args, **kwargs) -> None:  # type: ignore[override]
        if not (isinstance(msg, str) and msg.startswith("Failed to connect")):
            super().log(level, msg, *args, **kwargs)
            return
        wss = (self.client.wss_uri if self.client is not None else None) or self.wss
        error = f"slack socket mode: {wss_failure(wss, sys.exc_info()[1])}"
        if self.first is not None and not self.first.done():
            self.first.set_result(error)
            return
        self.failures += 1
        log.warning("slack.socket_mode_failed", bot=self.bot, error=error[:200], failures=self.failures,
                    next="slack_sdk connects again every few seconds, with a new URL")
        if self.client is not None:
            # Its next try asks Slack for a new URL (connect() does when there is none): it tried the same one every
            # 5 s for ever, and one that expired, or whose host was down, while the network was out never opened.
            self.client.wss_uri = None


def wss_failure(url: str, exc: BaseException | None) -> str:
    """Why the websocket Slack handed out could not be opened, naming its host (never the URL: it holds a ticket)."""
    where = urlsplit(url).netloc or "?"
    return f"cannot open the websocket Slack handed out ({where}): {unreached_cause(exc)}"


class GatewaySocketModeHandler(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler, acking only once the events it carries are delivered (stored): if storing
    fails, Slack sends the envelope again and the inbox deduplicates it."""

    def __init__(self, adapter: SlackAdapter, deliver: Deliver) -> None:
        web = AsyncWebClient(base_url=adapter.api_base, session=adapter._http, retry_handlers=[])
        # slack_sdk's own logger and ping interval (bolt's handler would take the app's logger, and 10 s).
        # Its failed connects said as the channel's (`_SocketLog`).
        said = _SocketLog(adapter.bot)
        super().__init__(adapter.app, app_token=adapter.settings.app_token, web_client=web, logger=said,
                         ping_interval=PING_INTERVAL_S)
        said.client = self.client
        self.adapter, self.deliver = adapter, deliver

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        adapter = self.adapter
        if req.type == "events_api":
            result = await self._dispatch(req)
            for reason in result.ignored:
                log.info("slack.ignored", bot=adapter.bot, reason=reason, event_id=result.extra.get("event_id"))
            for message in result.messages:
                await self.deliver(message)
        elif req.type == "interactive" and adapter.on_interactive is not None:
            # A Claim or Resolve click: taken as the Interactivity URL's route takes it; acted on after the ack.
            await adapter.on_interactive(req.payload)
        else:
            log.info("slack.ignored", bot=adapter.bot, reason=f"socket mode {req.type!r} is not handled")
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    async def _dispatch(self, req: SocketModeRequest) -> WebhookResult:
        try:
            request = AsyncBoltRequest(mode="socket_mode", body=req.payload, headers=build_headers(req))
            result, _ = await run(self.app, request)
            # An envelope no listener takes (not an event_callback), or bolt could not match: parse_payload says why.
            return result if result is not None else self.adapter.parse_payload(req.payload)
        except _SHAPE_ERRORS as exc:
            # As the Events API route's 400 that Slack does not retry: unacked, it came again with the same error.
            payload = req.payload if isinstance(req.payload, dict) else {}
            return WebhookResult(ignored=(f"unreadable payload ({type(exc).__name__}: {str(exc)[:200]})",),
                                 extra={"event_id": payload.get("event_id")})


async def open_socket_mode(adapter: SlackAdapter, deliver: Deliver) -> SocketModeClient:
    """Connect Socket Mode with the app token, through bolt's handler on the channel's AsyncApp."""
    client = GatewaySocketModeHandler(adapter, deliver).client
    try:
        # Fetched here, not inside connect(), which would retry a bad app token forever.
        client.wss_uri = await client.issue_new_wss_url()
        await _connect_once(client)
    except ChannelSendError:  # the websocket Slack handed out could not be opened: the caller tries again
        await client.close()
        raise
    except SlackApiError as exc:
        await client.close()
        passing = exc.response.status_code >= 500 or exc.response.status_code == 429  # Slack's outage, not ours
        error = exc.response.get("error")
        # The channel has two tokens: say it is the app token (xapp-…), not the bot token, that Slack refused.
        said = (f"Slack refused the app_token (xapp-…): {error} from apps.connections.open" if error in TOKEN_REFUSED
                else f"apps.connections.open failed: {error}")
        raise ChannelSendError(f"slack socket mode: {said}", permanent=not passing) from exc
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        # Slack unreachable: the caller tries again. Closed here, or its session and task were left behind.
        await client.close()
        raise ChannelSendError(f"slack socket mode: Slack unreachable ({type(exc).__name__})") from exc
    except BaseException:  # a stop that came while it opened (the background retry cancelled): closed all the same
        await client.close()
        raise
    log.info("slack.socket_mode_connected", bot=adapter.bot)
    return client


async def _connect_once(client: SocketModeClient) -> None:
    """slack_sdk's connect(), ended by its first failure (a ChannelSendError the caller opens again after): by itself
    it tried again every ping interval with the same, perhaps expired, URL, and the channel's start never returned."""
    said: _SocketLog = client.logger  # type: ignore[assignment]
    said.wss, said.first = client.wss_uri or "", asyncio.get_running_loop().create_future()
    connecting = asyncio.ensure_future(client.connect())
    try:
        await asyncio.wait({connecting, said.first}, timeout=WSS_CONNECT_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        first, said.first = said.first, None
        if not connecting.done():
            connecting.cancel()
            await asyncio.gather(connecting, return_exceptions=True)
    if first.done():
        raise ChannelSendError(first.result())
    if connecting.cancelled():  # neither opened nor failed in time
        raise ChannelSendError(f"slack socket mode: {wss_failure(said.wss, asyncio.TimeoutError())}")
    connecting.result()
