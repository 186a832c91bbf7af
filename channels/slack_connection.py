"""The Slack channel's long-lived side: auth.test at start (the bot's identity), Socket Mode opened and
opened again after Slack was unreachable, what `/readyz` says of them, and the stop. A mixin of `SlackAdapter`,
whose attributes it uses (`channels.slack`)."""

from __future__ import annotations

import asyncio

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError

from channels.base import Deliver
from channels.slack_errors import TOKEN_REFUSED, auth_test_error, token_refused
from channels.slack_install import missing_scopes
from channels.slack_socket import open_socket_mode as _open_socket_mode
from gateway.background import cancel
from gateway.backoff import doubling
from gateway.errors import ChannelSendError

# Same logger name as the adapter: these events are the Slack channel's, wherever the code lives.
log = structlog.get_logger("channels.slack")
AUTH_TEST_TIMEOUT_S = 10.0  # slack_sdk's own is 30 s, which held up every channel started after this one
IDENTITY_RETRY_S = 5.0  # the first wait before asking auth.test again after a failure; doubles up to the cap
IDENTITY_RETRY_CAP_S = 300.0


class SlackConnection:
    """`SlackAdapter.start`, `stop` and `connection_status`."""

    # ---- long-lived connection ---------------------------------------------------------------

    async def start(self, deliver: Deliver) -> None:
        """Learn the bot's user id and workspace (auth.test); with an app token, also open Socket Mode and deliver
        its events. A refused bot token fails the start; Slack failing or unreachable does not: auth.test is asked
        again in the background with backoff, as Telegram's getMe and Discord's login are."""
        if self.bot_user_id is None and not await self._learn_identity(failures=0):
            self._identity_task = asyncio.create_task(self._learn_identity_later(), name=f"slack-auth-test:{self.bot}")
        if not self.settings.app_token:
            return
        try:
            self._socket = await _open_socket_mode(self, deliver)
        except BaseException as exc:
            if not isinstance(exc, ChannelSendError) or exc.permanent:  # a rejected app token: no retry fixes it
                # A channel that did not start asks auth.test no more: left running, its retry went on for the
                # process's life (`channel.start_failed` lists the channel as not started).
                await self._stop_learning_identity()
                raise
            # Slack unreachable at start: opened again in the background, as Discord's login is, so a blip
            # at boot does not leave the channel deaf until a restart (/readyz's `connections` says so meanwhile).
            self._socket_failed(exc, failures=1)
            self._socket_task = asyncio.create_task(self._reopen_socket(deliver), name=f"slack-socket:{self.bot}")
        else:
            self._unreached = None  # Socket Mode opened: Slack is reachable

    async def _learn_identity(self, *, failures: int) -> bool:
        """auth.test: the bot's user id (its own posts, its mentions) and workspace (events of others filtered out),
        bounded so a Slack that does not answer cannot hold up the other channels' start. False: asked again later."""
        try:
            identity = await asyncio.wait_for(self.client.auth_test(), AUTH_TEST_TIMEOUT_S)
        except (SlackApiError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
            error = auth_test_error(exc, self.api_base)
            refused = isinstance(exc, SlackApiError) and exc.response.get("error") in TOKEN_REFUSED
            if refused and not failures:  # at start: no retry fixes it (`channel.start_failed`, `failed_channels`)
                raise ChannelSendError(error, permanent=True) from exc
            log.warning("slack.auth_test_failed", bot=self.bot, error=error, failures=failures + 1,
                        **({} if refused else {"next": "asked again in the background"}))
            if refused:  # after Slack came back: the channel runs, and /readyz says no reply can be posted
                self._uninstalled = token_refused("auth.test", exc.response.get("error"))
                return True
            if not isinstance(exc, SlackApiError):  # a wrong api_base, no network: in /readyz too, not healthy
                self._unreached = error[:200]
            return False
        self.bot_user_id = identity.get("user_id")
        self.team_id = identity.get("team_id")
        self._enterprise = (identity.get("enterprise_id"), bool(identity.get("is_enterprise_install")))
        self._unreached = None  # Slack answered
        if failures:
            log.info("slack.identity_learned", bot=self.bot, bot_user_id=self.bot_user_id, team=self.team_id,
                     failures=failures)
        for scope, effect in missing_scopes(identity.headers, operators=bool(self.settings.operator_channel)).items():
            log.warning("slack.missing_scope", bot=self.bot, scope=scope, effect=effect)
        return True

    async def _learn_identity_later(self) -> None:
        failures = 1
        while True:
            await self._sleep(doubling(failures, first=IDENTITY_RETRY_S, cap=IDENTITY_RETRY_CAP_S))
            if await self._learn_identity(failures=failures):
                return
            failures += 1

    def _socket_failed(self, exc: ChannelSendError, *, failures: int) -> None:
        self._socket_problem = f"connecting again after {exc}"[:200]
        log.warning("slack.socket_mode_failed", bot=self.bot, error=str(exc)[:200], failures=failures)

    async def _reopen_socket(self, deliver: Deliver) -> None:
        failures = 1
        while True:
            await self._sleep(doubling(failures, first=2.0, cap=60.0))
            try:
                self._socket = await _open_socket_mode(self, deliver)
            except ChannelSendError as exc:
                if exc.permanent:
                    self._socket_problem = f"stopped: {exc}"[:200]
                    log.error("slack.socket_mode_stopped", bot=self.bot, error=self._socket_problem)
                    return
                failures += 1
                self._socket_failed(exc, failures=failures)
            else:
                self._socket_problem = self._unreached = None
                return

    @property
    def connection_status(self) -> str | None:
        """Socket Mode, for `/readyz` (None without an app token: the Events API holds no connection)."""
        if self._uninstalled is not None:
            return self._uninstalled
        if self.settings.app_token and self._socket_problem is not None:
            return self._socket_problem
        if self._unreached is not None:  # auth.test at start; Events API too
            return self._unreached
        if not self.settings.app_token:
            return None
        return "connected" if self._socket is not None else "not started"

    async def _stop_learning_identity(self) -> None:
        if self._identity_task is not None:
            await cancel([self._identity_task])
            self._identity_task = None

    async def stop(self) -> None:
        """Stop asking auth.test again; close Socket Mode, if open."""
        await self._stop_learning_identity()
        if self._socket_task is not None:
            await cancel([self._socket_task])
            self._socket_task = None
        if self._socket is not None:
            await self._socket.close()
            self._socket = None

