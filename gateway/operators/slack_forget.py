"""`gateway forget` in the Slack operator channels: the copies the gateway posted there go too.

An escalation's thread in its bot's operator channel (`channels.slack.operator_channel`) holds what the gateway
posted with the bot's token: the header (its reason may quote the customer), the summary, the customer's
messages relayed, the console's replies and the notices. Each of the app's posts in the thread is deleted
(chat.delete), then the header. The operators' own replies there were posted with their own Slack accounts: a
bot token cannot delete them, so they stay, under "This message was deleted." where the header was.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from gateway.observability.logs import redact
from gateway.settings import Settings

log = structlog.get_logger("gateway.retention")

_GONE = {"message_not_found", "thread_not_found"}  # deleted already (by hand, or by a forget run before)
_UNREACHABLE = (SlackApiError, aiohttp.ClientError, asyncio.TimeoutError, OSError)


@dataclass(frozen=True, slots=True)
class OperatorThread:
    """An escalation's thread in a bot's Slack operator channel (`escalations.slack_channel`, `slack_ts`)."""

    bot: str
    channel: str | None  # None: stored before the channel was; the bot's operator channel
    ts: str


async def erase_operator_threads(settings: Settings, threads: list[OperatorThread]) -> list[tuple[OperatorThread, str]]:
    """Delete the app's posts in each of `threads`; the threads left, each with why (their bot has no Slack in
    the config now, Slack refused or could not be reached), for the caller to name."""
    left: list[tuple[OperatorThread, str]] = []
    for bot in sorted({thread.bot for thread in threads}):
        theirs = [thread for thread in threads if thread.bot == bot]
        try:
            slack = settings.bot(bot).channels.slack
        except KeyError:
            slack = None
        if why := _no_token(settings, bot, slack):  # no token, or a placeholder: nothing sent to Slack
            left += [(thread, why) for thread in theirs]
            continue
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.web_api_base,
                                retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=3)])
        try:
            me = await client.auth_test()
        except _UNREACHABLE as exc:
            left += [(thread, _why(exc)) for thread in theirs]
            continue
        for thread in theirs:
            channel = thread.channel or slack.operator_channel
            try:
                if not channel:
                    raise ValueError("no operator channel is known for it")
                await _erase(client, channel, thread.ts, me)
            except (*_UNREACHABLE, ValueError) as exc:
                left.append((thread, _why(exc)))
    if threads:
        log.info("retention.operator_threads_deleted", deleted=len(threads) - len(left), left=len(left))
    return left


async def _erase(client: AsyncWebClient, channel: str, ts: str, me: Any) -> None:
    """The app's replies in the thread `ts` of `channel`, then its header."""
    own: list[str] = []
    cursor = None
    # A post is the app's by its bot id or its user id; one auth.test left out never matches (None would
    # match every operator's reply, which the app cannot delete, and stop at the first).
    bot_id, user_id = me.get("bot_id") or object(), me.get("user_id") or object()
    try:
        while True:
            page = await client.conversations_replies(channel=channel, ts=ts, cursor=cursor, limit=200)
            own += [str(m["ts"]) for m in page.get("messages") or [] if m.get("ts") and m["ts"] != ts
                    and (m.get("bot_id") == bot_id or m.get("user") == user_id)]
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
    except SlackApiError as exc:
        if exc.response.get("error") not in _GONE:
            raise
    for message in [*own, ts]:
        try:
            await client.chat_delete(channel=channel, ts=message)
        except SlackApiError as exc:
            if exc.response.get("error") not in _GONE:
                raise


def _no_token(settings: Settings, bot: str, slack: Any) -> str | None:
    """Why a thread is left for want of a token (None: the bot has one), naming the secret: `forget` and
    `db upgrade` load the config without the channels' secrets (empty, or a placeholder in production), and this
    is the one part of `forget` that needs one."""
    if slack is None:
        return "the bot has no Slack token in the config"
    index = next(i for i, each in enumerate(settings.bots) if each.name == bot)
    reason = settings.unusable_secret_reason(f"bots[{index}].channels.slack.bot_token", slack.bot_token)
    if reason is None:
        return None
    return (f"deleting the gateway's posts in the Slack operator channel needs bot {bot}'s slack.bot_token, "
            f"and {reason}")


def _why(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError):
        return f"Slack answered {exc.response.get('error') or exc.response.status_code}"
    return redact(str(exc)) or type(exc).__name__  # stored and printed: a URL's token quoted stays out
