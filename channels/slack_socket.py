"""Slack Socket Mode (for development): a websocket whose events_api envelopes go through `parse_payload`,
and whose interactive ones (the operator channel's buttons) through the adapter's `on_interactive`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import Deliver, WebhookResult
from channels.slack_errors import TOKEN_REFUSED
from gateway.errors import ChannelSendError

if TYPE_CHECKING:
    from channels.slack import SlackAdapter

# Same logger name as the adapter: these events are the Slack channel's, wherever the code lives.
log = structlog.get_logger("channels.slack")


async def open_socket_mode(adapter: SlackAdapter, deliver: Deliver) -> SocketModeClient:
    """Connect Socket Mode with the app token; every events_api envelope goes through `parse_payload`."""

    async def on_request(client: SocketModeClient, request: SocketModeRequest) -> None:
        if request.type == "events_api":
            try:
                result = adapter.parse_payload(request.payload)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, RecursionError) as exc:
                # As the Events API route's 400 that Slack does not retry: unacked, it came again with the same error.
                payload = request.payload if isinstance(request.payload, dict) else {}
                result = WebhookResult(ignored=(f"unreadable payload ({type(exc).__name__}: {str(exc)[:200]})",),
                                       extra={"event_id": payload.get("event_id")})
            for reason in result.ignored:
                log.info("slack.ignored", bot=adapter.bot, reason=reason, event_id=result.extra.get("event_id"))
            # Stored before the ack: if storing fails, Slack redelivers and the inbox deduplicates.
            for message in result.messages:
                await deliver(message)
        elif request.type == "interactive" and adapter.on_interactive is not None:
            # A Claim or Resolve click: taken as the Interactivity URL's route takes it; acted on after the ack.
            await adapter.on_interactive(request.payload)
        else:
            log.info("slack.ignored", bot=adapter.bot, reason=f"socket mode {request.type!r} is not handled")
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    web = AsyncWebClient(base_url=adapter.api_base, session=adapter._http, retry_handlers=[])
    client = SocketModeClient(app_token=adapter.settings.app_token, web_client=web)
    client.socket_mode_request_listeners.append(on_request)
    try:
        # Fetched here, not inside connect(), which would retry a bad app token forever.
        client.wss_uri = await client.issue_new_wss_url()
        await client.connect()
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
    log.info("slack.socket_mode_connected", bot=adapter.bot)
    return client
